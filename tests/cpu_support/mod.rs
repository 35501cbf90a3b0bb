//! Shared by the tests of the cpu backend: temporary repositories, runtimes with cpu
//! devices in real time, and tract run directly as the reference.

#![allow(dead_code)] // each test file uses its own part

pub mod pipeline_ref;
pub mod reference;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clockwork::actors::messages::{Infer, Inferred};
use clockwork::actors::{Placement, Runtime, RuntimeBuilder};
use clockwork::config::Config;
use clockwork::model::DataType;
use clockwork::tensor::Tensor;
use clockwork::time::Clock;
use tract_onnx::prelude::*;

/// A fresh directory under the system's temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let name = format!("clockwork-{tag}-{}", std::process::id());
        let path = std::env::temp_dir().join(name);
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temporary directory");
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Puts a model directory `name` whose graph is not ONNX at all into the repository.
pub fn write_broken(root: &Path, name: &str) {
    let version = root.join(name).join("1");
    std::fs::create_dir_all(&version).expect("create the version directory");
    std::fs::write(version.join("model.onnx"), b"\x0a\x03not a model").expect("write");
}

/// A configuration with `devices` cpu devices of `pages` pages of `page_bytes`, serving
/// the repository at `root` (profiled briefly: these tests check outputs, not timing).
pub fn config(root: &Path, devices: u32, pages: u32, page_bytes: u64) -> String {
    format!(
        r#"
[runtime]
page_bytes = {page_bytes}
default_slo = "10s"

[[devices]]
backend = "cpu"
count = {devices}
pages = {pages}

[repository]
path = "{}"
profile_runs = 2
profile_warmup = 1
"#,
        root.display()
    )
}

/// Starts the runtime of `config` on threads of its own (real time: real devices).
pub fn start(config: &str) -> Runtime {
    let config = Config::parse(config).expect("test configuration");
    RuntimeBuilder::from_config(Clock::start(), &config)
        .expect("runtime")
        .placement(Placement::Threads)
        .start()
        .expect("start")
}

/// A latency objective no shared test machine misses: these tests check what is
/// computed, the benchmarks and the policy tests check timing.
pub const SLACK_SLO_MS: u64 = 10_000;

/// One request through the controller, which must succeed.
pub async fn infer(runtime: &Runtime, model: &str, inputs: Vec<Tensor>) -> Inferred {
    infer_items(runtime, model, inputs, 1).await
}

/// One request of `items` items (each input holds them back to back), which must succeed.
pub async fn infer_items(
    runtime: &Runtime,
    model: &str,
    inputs: Vec<Tensor>,
    items: u32,
) -> Inferred {
    let infer = Infer {
        model: model.into(),
        inputs,
        items,
        slo: Some(SLACK_SLO_MS * 1_000_000),
        edge: None,
        root: None,
    };
    match runtime.controller.send(infer).await.expect("controller") {
        Ok(inferred) => inferred,
        Err(error) => panic!("{model}: {error}"),
    }
}

/// A tensor of our kind from a tract tensor (raw little-endian bytes).
pub fn from_tract(name: &str, tensor: &tract_onnx::prelude::Tensor) -> Tensor {
    let datatype = clockwork::gpu::cpu::plan::data_type(tensor.datum_type())
        .unwrap_or_else(|| panic!("{name}: type {:?}", tensor.datum_type()));
    Tensor {
        name: name.into(),
        datatype,
        shape: tensor.shape().to_vec(),
        data: tensor.as_bytes().to_vec().into(),
    }
}

/// Runs `model.onnx` with tract directly, outside the runtime: the reference.
pub fn tract_direct(
    model: &Path,
    inputs: &[&tract_onnx::prelude::Tensor],
) -> Vec<Arc<tract_onnx::prelude::Tensor>> {
    let mut graph = tract_onnx::onnx()
        .model_for_path(model)
        .expect("tract reads the model");
    for (i, input) in inputs.iter().enumerate() {
        let fact = InferenceFact::dt_shape(input.datum_type(), input.shape());
        graph = graph.with_input_fact(i, fact).expect("input fact");
    }
    let plan = graph
        .into_optimized()
        .expect("optimise")
        .into_runnable()
        .expect("plan");
    let values = inputs.iter().map(|t| (*t).clone().into_tvalue()).collect();
    let outputs = plan.run(values).expect("tract runs the model");
    outputs.into_iter().map(|v| v.into_arc_tensor()).collect()
}

/// Element-wise `|got - want| <= atol + rtol * |want|` over f32 data; a NaN on either
/// side fails (it compares false with everything, so it is never within tolerance).
pub fn assert_close(what: &str, got: &Tensor, want: &Tensor, rtol: f32, atol: f32) {
    assert_eq!(got.datatype, want.datatype, "{what}: datatype");
    assert_eq!(got.elements(), want.elements(), "{what}: elements");
    if got.datatype != DataType::Fp32 {
        assert_eq!(got.data, want.data, "{what}: data");
        return;
    }
    let (got, want) = (got.to_f32().unwrap(), want.to_f32().unwrap());
    if let Some(i) = first_mismatch(&got, &want, rtol, atol) {
        panic!(
            "{what}: element {i} is {} where {} was wanted, beyond tolerance (first values \
             {:?} vs {:?})",
            got[i],
            want[i],
            &got[..got.len().min(4)],
            &want[..want.len().min(4)]
        );
    }
}

/// The first index where `got` is not within tolerance of `want`. Written as "not within"
/// so that NaN, for which every comparison is false, counts as a mismatch.
fn first_mismatch(got: &[f32], want: &[f32], rtol: f32, atol: f32) -> Option<usize> {
    got.iter().zip(want).position(|(g, w)| {
        let within = (g - w).abs() <= atol + rtol * w.abs();
        !within
    })
}

/// Deterministic pseudo-random f32 values in [-1, 1).
pub fn values(count: usize, seed: u64) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_on_either_side_is_a_mismatch() {
        let close = [1.0, 2.0, 3.0];
        assert_eq!(
            first_mismatch(&close, &[1.0, 2.0, 3.000001], 1e-4, 1e-5),
            None
        );
        assert_eq!(
            first_mismatch(&close, &[1.0, 2.5, 3.0], 1e-4, 1e-5),
            Some(1)
        );
        assert_eq!(
            first_mismatch(&[1.0, f32::NAN, 3.0], &close, 1e-4, 1e-5),
            Some(1)
        );
        assert_eq!(
            first_mismatch(&close, &[1.0, 2.0, f32::NAN], 1e-4, 1e-5),
            Some(2)
        );
        assert_eq!(
            first_mismatch(&[f32::NAN], &[f32::NAN], 1e-4, 1e-5),
            Some(0)
        );
    }

    #[test]
    #[should_panic(expected = "element 0 is NaN")]
    fn assert_close_fails_on_nan() {
        let want = Tensor::from_f32("y", vec![2], &[0.5, 1.0]);
        let got = Tensor::from_f32("y", vec![2], &[f32::NAN, 1.0]);
        assert_close("nan", &got, &want, 1e-4, 1e-5);
    }
}
