//! The zoo's pipeline: two real ONNX models that form a detect-then-classify cascade, and
//! the pipeline declaration that serves them, so that a first run has a real pipeline to
//! call with one curl.
//!
//! - `detector`: an image `input` [3, 32, 32] in; out come `scores` [K] (a sigmoid
//!   "objectness" per candidate region, in 0..1) and `crops` [K, 3, 16, 16] (the pixels of
//!   each region). The K = 9 regions are fixed: 16x16 windows at a stride of 8. A region's
//!   score is one learned 16x16 filter over that region plus one learned term over the
//!   whole image: the regional terms make the regions differ, the shared term makes them
//!   agree, so over ordinary random images the number of regions scoring at least
//!   [`CROP_MIN_SCORE`] ranges from 0 to K (the distribution is checked in
//!   `tests/zoo_pipeline.rs`).
//! - `classifier`: a crop `input` [3, 16, 16] in, `probs` [10] (softmax) out.
//!
//! Both have a symbolic batch dimension and take well under a millisecond per batch-1 run
//! on tract, so they add little to the start-up profiling.

use std::path::Path;

use super::{conv, dense, flatten, max_pool, relu, Batch};
use crate::repository::onnx_builder::{Attr, Dim, GraphBuilder};
use crate::repository::{RepositoryError, CONFIG_FILE};

/// Names of the zoo's pipelines (directories holding only a `config.toml`).
pub const PIPELINES: &[&str] = &["detect_classify"];

/// Candidate regions per image (the rows of `scores` and `crops`).
pub const REGIONS: usize = 9;

/// The score a region needs for `detect_classify` to classify its crop.
pub const CROP_MIN_SCORE: f32 = 0.5;

/// Side of the detector's square input image.
const IMAGE: i64 = 32;
/// Side of a region, and of the classifier's input.
const CROP: i64 = 16;
/// Distance between the top-left corners of neighbouring regions.
const STRIDE: i64 = 8;
/// Standard deviation of each score's logit over images of uniform [-1, 1) pixels, for
/// each of its two terms: about 1.5 makes scores spread over 0..1 rather than pile up at
/// 0.5 (too small) or at 0 and 1 (too large).
const LOGIT_STD: f32 = 1.5;

/// The per-model configuration of the pipeline's models.
pub(super) fn config_text(name: &str) -> Option<&'static str> {
    match name {
        "detector" => Some(
            "# Built-in zoo: scores 9 fixed 16x16 regions of a 3x32x32 image and crops them\n\
             # (the first stage of the detect_classify pipeline).\n\
             max_batch_size = 16\nslo = \"50ms\"\n",
        ),
        "classifier" => Some(
            "# Built-in zoo: 2 conv + pool stages and a dense layer on 3x16x16 crops\n\
             # (the second stage of the detect_classify pipeline).\n\
             max_batch_size = 16\nslo = \"50ms\"\n",
        ),
        _ => None,
    }
}

/// The ONNX bytes of the pipeline's model `name`, or `None` if it is not one of them.
pub(super) fn build(name: &str, batch: Batch, seed: u64) -> Option<Vec<u8>> {
    match name {
        "detector" => Some(detector(batch, seed)),
        "classifier" => Some(classifier(batch, seed)),
        _ => None,
    }
}

/// The declaration of zoo pipeline `name`, or `None` if the zoo has no such pipeline.
pub fn pipeline_text(name: &str) -> Option<String> {
    (name == "detect_classify").then(|| {
        format!(
            r#"# Built-in zoo pipeline: `detector` scores 9 fixed regions of a 3x32x32 image and
# crops them; `classifier` runs once per crop whose score is at least {min:?}. The answer
# holds every region's score and one row of class probabilities per selected crop
# (zero rows when no region passes).
[pipeline]
slo = "250ms"
partial_results = false
inputs = [{{ name = "image", datatype = "FP32", shape = [3, 32, 32] }}]
outputs = ["scores", "labels"]

[[pipeline.stages]]
name = "detect"
model = "detector"
input_map = {{ input = "image" }}
output_map = {{ scores = "scores", crops = "crops" }}

[[pipeline.stages]]
name = "classify"
model = "classifier"
after = "detect"
fan_out = {{ rows = "crops", score = "scores", min = {min:?} }}
input_map = {{ input = "crops" }}
output_map = {{ probs = "labels" }}
"#,
            min = CROP_MIN_SCORE
        )
    })
}

/// Writes every zoo pipeline missing from the repository at `root` as
/// `root/<name>/config.toml` (no version directory); existing ones are left alone.
/// Returns the names written. Kept apart from `zoo::write_missing` because only a server
/// that reads pipeline declarations may find these directories in its repository.
pub fn write_pipelines(root: &Path) -> Result<Vec<String>, RepositoryError> {
    let mut written = Vec::new();
    for &name in PIPELINES {
        let dir = root.join(name);
        if dir.exists() {
            continue;
        }
        let text = pipeline_text(name).ok_or_else(|| RepositoryError::UnknownZooModel {
            name: name.to_owned(),
        })?;
        std::fs::create_dir_all(&dir).map_err(|e| RepositoryError::io(&dir, e))?;
        let config = dir.join(CONFIG_FILE);
        std::fs::write(&config, text).map_err(|e| RepositoryError::io(&config, e))?;
        written.push(name.to_owned());
    }
    Ok(written)
}

/// The top-left corner (row, column) of region `k`, in row-major order of the corners:
/// the order of the rows of `scores` and `crops`.
pub fn region_corner(k: usize) -> (usize, usize) {
    let per_side = ((IMAGE - CROP) / STRIDE + 1) as usize;
    let step = STRIDE as usize;
    (step * (k / per_side), step * (k % per_side))
}

fn detector(batch: Batch, seed: u64) -> Vec<u8> {
    let mut g = GraphBuilder::new("detector", seed);
    let n = batch.dim();
    let dims = [
        n.clone(),
        Dim::Fixed(3),
        Dim::Fixed(IMAGE),
        Dim::Fixed(IMAGE),
    ];
    let x = g.input("input", &dims);
    let logits = region_logits(&mut g, &x);
    let scores = g.node("Sigmoid", &[&logits], &[]);
    g.output(&scores, "scores", &[n.clone(), Dim::Fixed(REGIONS as i64)]);
    let crops = crops(&mut g, &x);
    let crop_dims = [
        n,
        Dim::Fixed(REGIONS as i64),
        Dim::Fixed(3),
        Dim::Fixed(CROP),
        Dim::Fixed(CROP),
    ];
    g.output(&crops, "crops", &crop_dims);
    g.finish("clockwork-zoo")
}

/// `[N, K]` logits: a 16x16 filter at a stride of 8 (one value per region, row-major),
/// plus one whole-image term broadcast to every region.
fn region_logits(g: &mut GraphBuilder, x: &str) -> String {
    // Pixels of uniform [-1, 1) have variance 1/3: a sum of `count` of them weighted with
    // standard deviation s has standard deviation s * sqrt(count / 3).
    let std_for = |count: i64| LOGIT_STD / (count as f32 / 3.0).sqrt();
    let w = g.random("region_w", &[1, 3, CROP, CROP], std_for(3 * CROP * CROP));
    let b = g.constant("region_b", &[1], &[0.0]);
    let attrs = [
        ("kernel_shape", Attr::Ints(vec![CROP, CROP])),
        ("strides", Attr::Ints(vec![STRIDE, STRIDE])),
    ];
    let regional = g.node("Conv", &[x, &w, &b], &attrs); // [N, 1, 3, 3]
    let regional = flatten(g, &regional); // [N, 9]
    let whole = flatten(g, x); // [N, 3072]
    let pixels = 3 * IMAGE * IMAGE;
    let w = g.random("image_w", &[1, pixels], std_for(pixels));
    let b = g.constant("image_b", &[1], &[0.0]);
    let shared = g.node("Gemm", &[&whole, &w, &b], &[("transB", Attr::Int(1))]); // [N, 1]
    g.node("Add", &[&regional, &shared], &[])
}

/// `[N, K, 3, 16, 16]`: each region sliced out of the image, stacked along a new axis 1.
fn crops(g: &mut GraphBuilder, x: &str) -> String {
    let axes = g.constant_i64("crop_axes", &[2, 3]);
    let new_axis = g.constant_i64("crop_new_axis", &[1]);
    let stacked: Vec<String> = (0..REGIONS)
        .map(|k| {
            let (top, left) = region_corner(k);
            let (top, left) = (top as i64, left as i64);
            let starts = g.constant_i64("crop_starts", &[top, left]);
            let ends = g.constant_i64("crop_ends", &[top + CROP, left + CROP]);
            let crop = g.node("Slice", &[x, &starts, &ends, &axes], &[]);
            g.node("Unsqueeze", &[&crop, &new_axis], &[])
        })
        .collect();
    let parts: Vec<&str> = stacked.iter().map(String::as_str).collect();
    g.node("Concat", &parts, &[("axis", Attr::Int(1))])
}

fn classifier(batch: Batch, seed: u64) -> Vec<u8> {
    let mut g = GraphBuilder::new("classifier", seed);
    let n = batch.dim();
    let dims = [n.clone(), Dim::Fixed(3), Dim::Fixed(CROP), Dim::Fixed(CROP)];
    let x = g.input("input", &dims);
    let h = conv(&mut g, &x, (3, 16), 3, 1);
    let h = relu(&mut g, &h);
    let h = max_pool(&mut g, &h); // 16 x 8 x 8
    let h = conv(&mut g, &h, (16, 32), 3, 1);
    let h = relu(&mut g, &h);
    let h = max_pool(&mut g, &h); // 32 x 4 x 4
    let h = flatten(&mut g, &h);
    let logits = dense(&mut g, &h, 32 * 4 * 4, 10);
    let y = g.node("Softmax", &[&logits], &[("axis", Attr::Int(1))]);
    g.output(&y, "probs", &[n, Dim::Fixed(10)]);
    g.finish("clockwork-zoo")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::cpu::graph::Signature;

    /// The graph signature of zoo model `name`.
    fn signature(name: &str) -> Signature {
        let bytes = build(name, Batch::Dynamic, super::super::SEED).expect("a zoo model");
        Signature::read(&bytes).expect("a readable graph")
    }

    /// The keys of a TOML table, sorted.
    fn names(table: &toml::Value) -> Vec<String> {
        let table = table.as_table().expect("a table");
        sorted(table.keys())
    }

    fn sorted<'a>(names: impl IntoIterator<Item = &'a String>) -> Vec<String> {
        let mut names: Vec<String> = names.into_iter().cloned().collect();
        names.sort();
        names
    }

    /// The declaration names what the zoo's graphs have: the stage models, their input
    /// and output names, the image shape, and tensors produced where they are used. (The
    /// pipeline parser checks declarations in full; this keeps the zoo's own in step with
    /// its models.)
    #[test]
    fn the_declaration_matches_the_zoo_models() {
        let text = pipeline_text("detect_classify").expect("the zoo's pipeline");
        let value: toml::Value = toml::from_str(&text).expect("valid TOML");
        let pipeline = &value["pipeline"];
        let stages = pipeline["stages"].as_array().expect("stages");
        let (detect, classify) = (&stages[0], &stages[1]);
        assert_eq!(detect["model"].as_str(), Some("detector"));
        assert_eq!(classify["model"].as_str(), Some("classifier"));
        assert_eq!(classify["after"].as_str(), Some("detect"));
        let detector = signature("detector");
        let image = &detector.inputs[0];
        let dims: Vec<i64> = pipeline["inputs"][0]["shape"]
            .as_array()
            .expect("a shape")
            .iter()
            .filter_map(toml::Value::as_integer)
            .collect();
        let graph_dims: Vec<i64> = image.dims[1..].iter().map(|d| d.unwrap() as i64).collect();
        assert_eq!(dims, graph_dims, "the image is the detector's input item");
        assert_eq!(names(&detect["input_map"]), [image.name.as_str()]);
        assert_eq!(names(&detect["output_map"]), sorted(&detector.outputs));
        let classifier = signature("classifier");
        assert_eq!(
            names(&classify["input_map"]),
            [classifier.inputs[0].name.as_str()]
        );
        assert_eq!(names(&classify["output_map"]), sorted(&classifier.outputs));
        let fan_out = &classify["fan_out"];
        assert_eq!(fan_out["rows"].as_str(), Some("crops"));
        assert_eq!(fan_out["score"].as_str(), Some("scores"));
        let min = fan_out["min"].as_float().expect("a threshold");
        assert_eq!(min as f32, CROP_MIN_SCORE);
        let outputs: Vec<&str> = pipeline["outputs"]
            .as_array()
            .expect("outputs")
            .iter()
            .filter_map(toml::Value::as_str)
            .collect();
        assert_eq!(outputs, ["scores", "labels"]);
        assert_eq!(classify["output_map"]["probs"].as_str(), Some("labels"));
    }

    #[test]
    fn pipelines_are_written_as_a_directory_with_only_a_config() {
        let root = std::env::temp_dir().join(format!("clockwork-zoo-pipes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(write_pipelines(&root).unwrap(), PIPELINES);
        let dir = root.join("detect_classify");
        let entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(entries, [CONFIG_FILE]);
        let written = std::fs::read_to_string(dir.join(CONFIG_FILE)).unwrap();
        assert_eq!(Some(written), pipeline_text("detect_classify"));
        // A second call leaves an existing declaration alone.
        assert!(write_pipelines(&root).unwrap().is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn regions_tile_the_image_in_row_major_order() {
        let corners: Vec<_> = (0..REGIONS).map(region_corner).collect();
        let want = [
            (0, 0),
            (0, 8),
            (0, 16),
            (8, 0),
            (8, 8),
            (8, 16),
            (16, 0),
            (16, 8),
            (16, 16),
        ];
        assert_eq!(corners, want);
    }
}
