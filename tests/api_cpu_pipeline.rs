//! The built-in pipeline (`detect_classify`: the zoo's detector, then its classifier once
//! per crop whose score passes 0.5) served by real cpu devices over HTTP, against the same
//! two models run one after another with tract directly (`cpu_support::pipeline_ref`), for
//! images that give 0, 1 and many crops.

mod api_support;
mod cpu_support;

use std::time::{Duration, Instant};

use api_support::start_with;
use clockwork::api::ApiSettings;
use clockwork::repository::zoo;
use cpu_support::pipeline_ref::{
    image, PipelineRef, CLASSES, MANY_CROPS_SEED, NO_CROP_SEED, ONE_CROP_SEED,
};
use cpu_support::{config, TempDir, SLACK_SLO_MS};
use serde_json::{json, Value};

fn floats(value: &Value) -> Vec<f32> {
    let values = value.as_array().expect("data is an array");
    values
        .iter()
        .map(|v| v.as_f64().expect("a number") as f32)
        .collect()
}

fn assert_near(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-5 + 1e-4 * w.abs(),
            "{what}: {got:?} vs {want:?}"
        );
    }
}

#[actix_web::test]
async fn the_zoo_pipeline_over_http_equals_its_models_run_one_after_another() {
    let root = TempDir::new("api-cpu-pipeline");
    zoo::write_missing(root.path()).expect("zoo");
    zoo::write_pipelines(root.path()).expect("pipelines");
    let server = start_with(
        &config(root.path(), 1, 64, 16 << 20),
        Vec::new(),
        ApiSettings::default(),
    )
    .await;
    let ready = Instant::now();
    while server.get("/v2/models/detect_classify/ready").await.0 != 200 {
        assert!(ready.elapsed() < Duration::from_secs(20), "never ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reference = PipelineRef::new(root.path());
    let mut counts = Vec::new();
    for seed in [NO_CROP_SEED, ONE_CROP_SEED, MANY_CROPS_SEED] {
        let picture = image(seed);
        let want = reference.run(&picture);
        let body = json!({
            "inputs": [{
                "name": "image", "datatype": "FP32", "shape": [1, 3, 32, 32],
                "data": picture.to_f32().expect("FP32"),
            }],
            "parameters": { "slo_ms": SLACK_SLO_MS },
        });
        let (status, answer) = server
            .post_json("/v2/models/detect_classify/infer", &body)
            .await;
        assert_eq!(status, 200, "seed {seed}: {answer}");
        let output = |name: &str| {
            let outputs = answer["outputs"].as_array().expect("outputs");
            outputs
                .iter()
                .find(|o| o["name"] == name)
                .cloned()
                .expect(name)
        };
        let n = want.selected.len();
        let (scores, labels) = (output("scores"), output("labels"));
        assert_eq!(scores["shape"], json!([1, zoo::REGIONS]));
        assert_eq!(labels["shape"], json!([1, n, CLASSES]), "seed {seed}");
        assert_near(
            &floats(&scores["data"]),
            &want.scores.to_f32().expect("FP32"),
            "scores",
        );
        assert_near(
            &floats(&labels["data"]),
            &want.labels.to_f32().expect("FP32"),
            "labels",
        );
        counts.push(n);
    }
    assert_eq!(counts[..2], [0, 1]);
    assert!(counts[2] > 1, "many crops: {counts:?}");
    server.stop().await;
}
