//! The built-in model zoo: real ONNX models with seeded random weights, written from Rust
//! so that a first run needs nothing downloaded.
//!
//! Three shapes of network that stress a CPU differently: `mlp` (dense layers, memory
//! bound), `cnn` (a small convolutional classifier) and `resnet` (residual blocks with
//! batch normalisation, a downsampling stage and global pooling, after ResNet). Each
//! takes `input` and gives `output` (10 class scores). Two more form a pipeline
//! (`zoo/pipeline.rs`): `detector` (regions' `scores` and `crops`) and `classifier` (`probs`
//! of one crop). Every model has a symbolic batch dimension `N`, unless built with a
//! fixed batch of 1 (which then serves batch 1 only).

use std::path::Path;

mod pipeline;

use super::onnx_builder::{Attr, Dim, GraphBuilder};
use super::RepositoryError;

pub use pipeline::{
    pipeline_text, region_corner, write_pipelines, CROP_MIN_SCORE, PIPELINES, REGIONS,
};

/// Names of the zoo's models.
pub const MODELS: &[&str] = &["mlp", "cnn", "resnet", "detector", "classifier"];

/// Seed of the zoo's weights: the same everywhere, so outputs are comparable across runs.
pub const SEED: u64 = 2020;

/// How the batch dimension of a generated model is declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batch {
    /// Symbolic (`N`): plans are built for every allowed batch size.
    Dynamic,
    /// Fixed to 1 in the graph: the model serves batch size 1 only.
    FixedOne,
}

impl Batch {
    fn dim(self) -> Dim {
        match self {
            Batch::Dynamic => Dim::Param("N"),
            Batch::FixedOne => Dim::Fixed(1),
        }
    }
}

/// The ONNX bytes of zoo model `name`, or `None` if there is no such model.
pub fn build(name: &str, batch: Batch, seed: u64) -> Option<Vec<u8>> {
    match name {
        "mlp" => Some(mlp(batch, seed)),
        "cnn" => Some(cnn(batch, seed)),
        "resnet" => Some(resnet(batch, seed)),
        _ => pipeline::build(name, batch, seed),
    }
}

/// The per-model configuration the zoo writes beside each model.
pub fn config_text(name: &str) -> &'static str {
    if let Some(text) = pipeline::config_text(name) {
        return text;
    }
    match name {
        "mlp" => "# Built-in zoo: 3 dense layers, 256 -> 512 -> 512 -> 10.\nmax_batch_size = 16\nslo = \"50ms\"\n",
        "cnn" => "# Built-in zoo: 2 conv + pool stages and 2 dense layers on 3x32x32 images.\nmax_batch_size = 16\nslo = \"100ms\"\n",
        _ => "# Built-in zoo: ResNet-style, 4 residual blocks in 2 stages on 3x64x64 images.\nmax_batch_size = 8\nslo = \"200ms\"\n",
    }
}

/// Writes every zoo model missing from the repository at `root` (as version 1 with its
/// configuration); existing models are left alone. Returns the names written.
pub fn write_missing(root: &Path) -> Result<Vec<String>, RepositoryError> {
    let mut written = Vec::new();
    for &name in MODELS {
        let dir = root.join(name);
        if dir.exists() {
            continue;
        }
        write(root, name, Batch::Dynamic, SEED)?;
        written.push(name.to_owned());
    }
    Ok(written)
}

/// Writes zoo model `name` into `root/<name>/1/model.onnx` with its `config.toml`,
/// replacing what is there.
pub fn write(root: &Path, name: &str, batch: Batch, seed: u64) -> Result<(), RepositoryError> {
    let bytes = build(name, batch, seed).ok_or_else(|| RepositoryError::UnknownZooModel {
        name: name.to_owned(),
    })?;
    let dir = root.join(name);
    let version = dir.join("1");
    let io = |path: &Path, source| RepositoryError::Io {
        path: path.display().to_string(),
        source,
    };
    std::fs::create_dir_all(&version).map_err(|e| io(&version, e))?;
    let model = version.join("model.onnx");
    std::fs::write(&model, bytes).map_err(|e| io(&model, e))?;
    let config = dir.join("config.toml");
    let mut text = config_text(name).to_owned();
    if batch == Batch::FixedOne {
        text = text.replace("max_batch_size = 16", "max_batch_size = 1");
        text = text.replace("max_batch_size = 8", "max_batch_size = 1");
    }
    std::fs::write(&config, text).map_err(|e| io(&config, e))?;
    Ok(())
}

/// He initialisation: keeps activations of ReLU networks at a stable scale.
fn he(fan_in: i64) -> f32 {
    (2.0 / fan_in as f32).sqrt()
}

/// `x W^T + b` for a `[batch, inputs]` activation.
fn dense(g: &mut GraphBuilder, x: &str, inputs: i64, outputs: i64) -> String {
    let w = g.random("dense_w", &[outputs, inputs], he(inputs));
    let b = g.random("dense_b", &[outputs], 0.01);
    g.node("Gemm", &[x, &w, &b], &[("transB", Attr::Int(1))])
}

fn relu(g: &mut GraphBuilder, x: &str) -> String {
    g.node("Relu", &[x], &[])
}

/// A square convolution with bias and "same" padding for odd kernels.
fn conv(g: &mut GraphBuilder, x: &str, channels: (i64, i64), kernel: i64, stride: i64) -> String {
    let (cin, cout) = channels;
    let w = g.random(
        "conv_w",
        &[cout, cin, kernel, kernel],
        he(cin * kernel * kernel),
    );
    let b = g.random("conv_b", &[cout], 0.01);
    let pad = kernel / 2;
    let attrs = [
        ("kernel_shape", Attr::Ints(vec![kernel, kernel])),
        ("strides", Attr::Ints(vec![stride, stride])),
        ("pads", Attr::Ints(vec![pad, pad, pad, pad])),
    ];
    g.node("Conv", &[x, &w, &b], &attrs)
}

/// Batch normalisation with random but plausible statistics (tract folds it into the
/// convolution before it, as a real deployment would).
fn batch_norm(g: &mut GraphBuilder, x: &str, channels: i64) -> String {
    let c = channels as usize;
    let scale = g.constant("bn_scale", &[channels], &vec![1.0; c]);
    let bias = g.random("bn_bias", &[channels], 0.05);
    let mean = g.random("bn_mean", &[channels], 0.05);
    let var = g.constant("bn_var", &[channels], &vec![1.0; c]);
    let attrs = [("epsilon", Attr::Float(1e-5))];
    g.node(
        "BatchNormalization",
        &[x, &scale, &bias, &mean, &var],
        &attrs,
    )
}

fn max_pool(g: &mut GraphBuilder, x: &str) -> String {
    let attrs = [
        ("kernel_shape", Attr::Ints(vec![2, 2])),
        ("strides", Attr::Ints(vec![2, 2])),
    ];
    g.node("MaxPool", &[x], &attrs)
}

fn flatten(g: &mut GraphBuilder, x: &str) -> String {
    g.node("Flatten", &[x], &[("axis", Attr::Int(1))])
}

fn mlp(batch: Batch, seed: u64) -> Vec<u8> {
    let mut g = GraphBuilder::new("mlp", seed);
    let x = g.input("input", &[batch.dim(), Dim::Fixed(256)]);
    let h = dense(&mut g, &x, 256, 512);
    let h = relu(&mut g, &h);
    let h = dense(&mut g, &h, 512, 512);
    let h = relu(&mut g, &h);
    let y = dense(&mut g, &h, 512, 10);
    g.output(&y, "output", &[batch.dim(), Dim::Fixed(10)]);
    g.finish("clockwork-zoo")
}

fn cnn(batch: Batch, seed: u64) -> Vec<u8> {
    let mut g = GraphBuilder::new("cnn", seed);
    let dims = [batch.dim(), Dim::Fixed(3), Dim::Fixed(32), Dim::Fixed(32)];
    let x = g.input("input", &dims);
    let h = conv(&mut g, &x, (3, 16), 3, 1);
    let h = relu(&mut g, &h);
    let h = max_pool(&mut g, &h); // 16 x 16 x 16
    let h = conv(&mut g, &h, (16, 32), 3, 1);
    let h = relu(&mut g, &h);
    let h = max_pool(&mut g, &h); // 32 x 8 x 8
    let h = flatten(&mut g, &h);
    let h = dense(&mut g, &h, 32 * 8 * 8, 128);
    let h = relu(&mut g, &h);
    let logits = dense(&mut g, &h, 128, 10);
    let y = g.node("Softmax", &[&logits], &[("axis", Attr::Int(1))]);
    g.output(&y, "output", &[batch.dim(), Dim::Fixed(10)]);
    g.finish("clockwork-zoo")
}

/// conv-bn-relu-conv-bn (+ shortcut) - relu; a 1x1 projection on the shortcut when the
/// block changes the width or the resolution.
fn residual(g: &mut GraphBuilder, x: &str, channels: (i64, i64), stride: i64) -> String {
    let (cin, cout) = channels;
    let h = conv(g, x, (cin, cout), 3, stride);
    let h = batch_norm(g, &h, cout);
    let h = relu(g, &h);
    let h = conv(g, &h, (cout, cout), 3, 1);
    let h = batch_norm(g, &h, cout);
    let shortcut = if cin != cout || stride != 1 {
        let s = conv(g, x, (cin, cout), 1, stride);
        batch_norm(g, &s, cout)
    } else {
        x.to_owned()
    };
    let sum = g.node("Add", &[&h, &shortcut], &[]);
    relu(g, &sum)
}

fn resnet(batch: Batch, seed: u64) -> Vec<u8> {
    let mut g = GraphBuilder::new("resnet", seed);
    let dims = [batch.dim(), Dim::Fixed(3), Dim::Fixed(64), Dim::Fixed(64)];
    let x = g.input("input", &dims);
    let h = conv(&mut g, &x, (3, 32), 3, 2); // 32 x 32 x 32
    let h = batch_norm(&mut g, &h, 32);
    let h = relu(&mut g, &h);
    let h = residual(&mut g, &h, (32, 32), 1);
    let h = residual(&mut g, &h, (32, 32), 1);
    let h = residual(&mut g, &h, (32, 64), 2); // 64 x 16 x 16
    let h = residual(&mut g, &h, (64, 64), 1);
    let h = g.node("GlobalAveragePool", &[&h], &[]);
    let h = flatten(&mut g, &h);
    let y = dense(&mut g, &h, 64, 10);
    g.output(&y, "output", &[batch.dim(), Dim::Fixed(10)]);
    g.finish("clockwork-zoo")
}
