//! The zoo's pipeline models run by hand with tract, through the reference of
//! `cpu_support::pipeline_ref`: the number of crops the detector selects really varies with
//! the image, the seeded images the pipeline tests use give 0, 1 and many crops, and the
//! reference's rows are the classifier run alone on the detector's crops.

mod cpu_support;

use clockwork::repository::zoo;
use clockwork::tensor::Tensor;
use cpu_support::pipeline_ref::{
    image, Joined, PipelineRef, CLASSES, CROP_SHAPE, IMAGE_SHAPE, MANY_CROPS_SEED, NO_CROP_SEED,
    ONE_CROP_SEED,
};
use cpu_support::{assert_close, from_tract, tract_direct, TempDir};
use tract_onnx::prelude::Tensor as TractTensor;

fn reference(tag: &str) -> (TempDir, PipelineRef) {
    let root = TempDir::new(tag);
    zoo::write_missing(root.path()).unwrap();
    let reference = PipelineRef::new(root.path());
    (root, reference)
}

#[test]
fn the_number_of_selected_crops_varies_with_the_image() {
    let (_root, reference) = reference("zoo-pipeline-spread");
    let mut histogram = [0usize; zoo::REGIONS + 1];
    for seed in 0..200u64 {
        histogram[reference.run(&image(seed)).selected.len()] += 1;
    }
    eprintln!("crops selected over 200 seeded images: {histogram:?}");
    assert!(histogram[0] > 0, "no image without a crop: {histogram:?}");
    assert!(histogram[1] > 0, "no image with one crop: {histogram:?}");
    let several: usize = histogram[3..].iter().sum();
    assert!(several > 0, "no image with 3 crops or more: {histogram:?}");
    let seen = histogram.iter().filter(|&&c| c > 0).count();
    assert!(
        seen > zoo::REGIONS / 2,
        "too few distinct counts: {histogram:?}"
    );
}

#[test]
fn the_seeded_images_select_no_crop_one_and_many() {
    let (root, reference) = reference("zoo-pipeline-seeds");
    let count = |seed| reference.run(&image(seed)).selected.len();
    assert_eq!(count(NO_CROP_SEED), 0);
    assert_eq!(count(ONE_CROP_SEED), 1);
    let many = count(MANY_CROPS_SEED);
    assert!((3..zoo::REGIONS).contains(&many), "{many} crops");
    for seed in [NO_CROP_SEED, ONE_CROP_SEED, MANY_CROPS_SEED] {
        let image = image(seed);
        let joined = reference.run(&image);
        check_scores_and_crops(seed, &image, &joined);
        check_rows_are_the_classifier_alone(root.path(), seed, &joined);
    }
}

/// Scores are probabilities, selection is by the threshold, and each crop is its region of
/// the image.
fn check_scores_and_crops(seed: u64, image: &Tensor, joined: &Joined) {
    let scores = joined.scores.to_f32().unwrap();
    assert!(scores.iter().all(|s| (0.0..=1.0).contains(s)), "{scores:?}");
    let passing: Vec<usize> = (0..zoo::REGIONS)
        .filter(|&k| scores[k] >= zoo::CROP_MIN_SCORE)
        .collect();
    assert_eq!(joined.selected, passing, "image {seed}");
    let pixels = image.to_f32().unwrap();
    for (k, crop) in joined.crops.iter().enumerate() {
        let (top, left) = zoo::region_corner(k);
        let [channels, side, _] = CROP_SHAPE;
        let want: Vec<f32> = (0..channels)
            .flat_map(|c| (0..side).map(move |y| (c, y)))
            .flat_map(|(c, y)| {
                let row = (c * IMAGE_SHAPE[1] + top + y) * IMAGE_SHAPE[2] + left;
                pixels[row..row + side].to_vec()
            })
            .collect();
        assert_eq!(crop.to_f32().unwrap(), want, "image {seed}, region {k}");
    }
}

/// Row `i` of `labels` is the classifier, run alone by tract on a plan of its own, on the
/// crop of the `i`-th selected region; every row is a distribution.
fn check_rows_are_the_classifier_alone(root: &std::path::Path, seed: u64, joined: &Joined) {
    let n = joined.selected.len();
    assert_eq!(joined.labels.shape, vec![n, CLASSES], "image {seed}");
    let labels = joined.labels.to_f32().unwrap();
    let onnx = root.join("classifier/1/model.onnx");
    for (i, &k) in joined.selected.iter().enumerate() {
        let crop = joined.crops[k].to_f32().unwrap();
        let [c, h, w] = CROP_SHAPE;
        let direct = TractTensor::from_shape(&[1, c, h, w], &crop).unwrap();
        let mut want = from_tract("labels", &tract_direct(&onnx, &[&direct])[0]);
        want.shape.remove(0);
        let row = &labels[i * CLASSES..(i + 1) * CLASSES];
        let got = Tensor::from_f32("labels", vec![CLASSES], row);
        assert_close(&format!("image {seed}, row {i}"), &got, &want, 1e-5, 1e-6);
        let total: f32 = row.iter().sum();
        assert!((total - 1.0).abs() < 1e-4, "image {seed}, row {i}: {total}");
    }
}
