//! The zoo's `detect_classify` pipeline run by hand with tract, outside the runtime: the
//! reference a served pipeline's answers are checked against.
//!
//! One image through `detector`; the regions whose score is at least
//! `zoo::CROP_MIN_SCORE` are selected, in region order; `classifier` runs once per
//! selected crop; the answer is the pipeline's outputs: `scores` [K] as the detector gave
//! them and `labels` [n, 10], the classifier's rows stacked (n = 0 allowed).

use std::path::Path;

use clockwork::repository::zoo;
use clockwork::tensor::Tensor;
use tract_onnx::prelude::*;

use super::values;

/// Item shape of the pipeline's `image` input (and the detector's `input`).
pub const IMAGE_SHAPE: [usize; 3] = [3, 32, 32];
/// Item shape of one crop (the classifier's `input`).
pub const CROP_SHAPE: [usize; 3] = [3, 16, 16];
/// Classes per row of `labels`.
pub const CLASSES: usize = 10;

/// Seeds of [`image`] for which the zoo's detector (weights seeded with `zoo::SEED`)
/// selects no crop, exactly one, and many (see `tests/zoo_pipeline.rs`).
pub const NO_CROP_SEED: u64 = 6;
pub const ONE_CROP_SEED: u64 = 0;
pub const MANY_CROPS_SEED: u64 = 3;

/// A seeded image of uniform [-1, 1) pixels, [3, 32, 32].
pub fn image(seed: u64) -> Tensor {
    let count = IMAGE_SHAPE.iter().product();
    Tensor::from_f32("image", IMAGE_SHAPE.to_vec(), &values(count, seed))
}

/// What the pipeline answers for one image, and what led to it.
pub struct Joined {
    /// Every region's score, [K]: the detector's output, not fanned out.
    pub scores: Tensor,
    /// One row of class probabilities per selected crop, in region order: [n, 10].
    pub labels: Tensor,
    /// The regions whose crop was classified, in order.
    pub selected: Vec<usize>,
    /// Every region's crop as the detector gave it, each [3, 16, 16].
    pub crops: Vec<Tensor>,
}

/// Plans of the two stage models, built once for batch 1.
pub struct PipelineRef {
    detector: TypedRunnableModel<TypedModel>,
    classifier: TypedRunnableModel<TypedModel>,
}

impl PipelineRef {
    /// Plans for `root/detector/1/model.onnx` and `root/classifier/1/model.onnx`.
    pub fn new(root: &Path) -> Self {
        Self {
            detector: batch_one_plan(&root.join("detector/1/model.onnx"), &IMAGE_SHAPE),
            classifier: batch_one_plan(&root.join("classifier/1/model.onnx"), &CROP_SHAPE),
        }
    }

    /// The pipeline's outputs for one `image` ([3, 32, 32]).
    pub fn run(&self, image: &Tensor) -> Joined {
        let outputs = run_one(&self.detector, image, &IMAGE_SHAPE);
        let scores = outputs[0].clone();
        let crop_len: usize = CROP_SHAPE.iter().product();
        let crops: Vec<Tensor> = outputs[1]
            .chunks_exact(crop_len)
            .map(|c| Tensor::from_f32("crop", CROP_SHAPE.to_vec(), c))
            .collect();
        assert_eq!(scores.len(), zoo::REGIONS, "one score per region");
        assert_eq!(crops.len(), zoo::REGIONS, "one crop per region");
        let selected: Vec<usize> = (0..zoo::REGIONS)
            .filter(|&k| scores[k] >= zoo::CROP_MIN_SCORE)
            .collect();
        let mut labels = Vec::with_capacity(selected.len() * CLASSES);
        for &k in &selected {
            let probs = self.classify(&crops[k]);
            assert_eq!(probs.len(), CLASSES);
            labels.extend(probs);
        }
        Joined {
            scores: Tensor::from_f32("scores", vec![zoo::REGIONS], &scores),
            labels: Tensor::from_f32("labels", vec![selected.len(), CLASSES], &labels),
            selected,
            crops,
        }
    }

    /// The classifier's `probs` for one crop ([3, 16, 16]).
    pub fn classify(&self, crop: &Tensor) -> Vec<f32> {
        run_one(&self.classifier, crop, &CROP_SHAPE).remove(0)
    }
}

/// An optimised plan of `model` for one item of `shape` (a batch of one).
fn batch_one_plan(model: &Path, shape: &[usize]) -> TypedRunnableModel<TypedModel> {
    let mut dims = vec![1];
    dims.extend(shape);
    tract_onnx::onnx()
        .model_for_path(model)
        .unwrap_or_else(|e| panic!("tract reads {}: {e}", model.display()))
        .with_input_fact(0, InferenceFact::dt_shape(f32::datum_type(), dims))
        .expect("input fact")
        .into_optimized()
        .expect("optimise")
        .into_runnable()
        .expect("plan")
}

/// Every output of `plan` for one item, as f32 values without the batch dimension.
fn run_one(plan: &TypedRunnableModel<TypedModel>, item: &Tensor, shape: &[usize]) -> Vec<Vec<f32>> {
    assert_eq!(item.shape, shape, "{}: item shape", item.name);
    let mut dims = vec![1];
    dims.extend(shape);
    let data = item.to_f32().expect("an FP32 tensor");
    let input = tract_onnx::prelude::Tensor::from_shape(&dims, &data).expect("input");
    let outputs = plan.run(tvec!(input.into_tvalue())).expect("tract runs");
    outputs
        .iter()
        .map(|t| {
            assert_eq!(t.shape().first(), Some(&1), "a batch of one");
            t.as_slice::<f32>().expect("FP32 output").to_vec()
        })
        .collect()
}
