//! The HTTP API over cpu devices and a model repository on disk, against a real server on
//! port 0: real outputs (equal to tract run directly) in JSON and binary, metadata from
//! the graphs, and models registered, refused and versioned through the repository routes.

mod api_support;
mod cpu_support;

use api_support::{assert_error, index_names, start_with, TestServer};
use clockwork::api::{ApiSettings, HEADER_LENGTH};
use clockwork::repository::zoo;
use cpu_support::{config, tract_direct, values, write_broken, TempDir, SLACK_SLO_MS};
use serde_json::{json, Value};
use tract_onnx::prelude::Tensor as TractTensor;

async fn serve(root: &std::path::Path, load_all: bool) -> TestServer {
    let text = config(root, 1, 64, 16 << 20).replace(
        "[repository]",
        &format!("[repository]\nload_all = {load_all}"),
    );
    start_with(&text, Vec::new(), ApiSettings::default()).await
}

/// What tract computes for one item of `model` with `shape` (batch dimension included).
fn direct(root: &std::path::Path, model: &str, shape: &[usize], input: &[f32]) -> Vec<f32> {
    let x = TractTensor::from_shape(shape, input).unwrap();
    let out = tract_direct(&root.join(model).join("1/model.onnx"), &[&x]);
    out[0].as_slice::<f32>().unwrap().to_vec()
}

fn floats(value: &Value) -> Vec<f32> {
    value
        .as_array()
        .expect("array")
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect()
}

fn assert_near(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-5 + 1e-4 * w.abs(),
            "{got:?} vs {want:?}"
        );
    }
}

#[actix_web::test]
async fn repository_models_serve_real_outputs_in_json_and_binary() {
    let root = TempDir::new("api-cpu-serve");
    zoo::write_missing(root.path()).unwrap();
    let server = serve(root.path(), true).await;

    let (status, metadata) = server.get_json("/v2/models/cnn").await;
    assert_eq!(status, 200);
    assert_eq!(metadata["versions"], json!(["1"]));
    assert_eq!(metadata["inputs"][0]["shape"], json!([-1, 3, 32, 32]));
    assert_eq!(metadata["outputs"][0]["shape"], json!([-1, 10]));
    let (_, triton) = server.get_json("/v2/models/cnn/config").await;
    assert_eq!(
        triton["dynamic_batching"]["preferred_batch_size"],
        json!([1, 2, 4, 8, 16])
    );
    assert_eq!(triton["parameters"]["slo_ms"]["string_value"], "100");

    let input = values(3 * 32 * 32, 7);
    let want = direct(root.path(), "cnn", &[1, 3, 32, 32], &input);
    let request = json!({
        "parameters": {"slo_ms": SLACK_SLO_MS},
        "inputs": [{"name": "input", "shape": [1, 3, 32, 32], "datatype": "FP32", "data": input}]
    });
    let (status, answer) = server.post_json("/v2/models/cnn/infer", &request).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["parameters"]["emulated"], false);
    assert_eq!(answer["model_version"], "1");
    assert_near(&floats(&answer["outputs"][0]["data"]), &want);

    // The same with binary tensors both ways.
    let header = json!({
        "parameters": {"slo_ms": SLACK_SLO_MS},
        "inputs": [{"name": "input", "shape": [1, 3, 32, 32], "datatype": "FP32",
                    "parameters": {"binary_data_size": input.len() * 4}}],
        "outputs": [{"name": "output", "parameters": {"binary_data": true}}]
    });
    let header = serde_json::to_vec(&header).unwrap();
    let mut body = header.clone();
    body.extend(input.iter().flat_map(|v| v.to_le_bytes()));
    let headers = [(HEADER_LENGTH, header.len().to_string())];
    let (status, answer_headers, answer) = server
        .post_raw("/v2/models/cnn/infer", &headers, body)
        .await;
    assert_eq!(status, 200);
    let json_length: usize = answer_headers
        .get(HEADER_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("binary answer header");
    let scores: Vec<f32> = answer[json_length..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_near(&scores, &want);
    server.stop().await;
}

#[actix_web::test]
async fn models_are_registered_refused_and_versioned_through_the_repository_routes() {
    let root = TempDir::new("api-cpu-repository");
    zoo::write_missing(root.path()).unwrap();
    write_broken(root.path(), "broken");
    let server = serve(root.path(), false).await;

    // Nothing registered yet: the index lists what is on disk.
    let (status, index) = server.post_json("/v2/repository/index", &json!({})).await;
    assert_eq!(status, 200);
    let names = index_names(&index);
    assert_eq!(
        names,
        ["broken", "classifier", "cnn", "detector", "mlp", "resnet"]
    );
    assert!(index
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["state"] == "UNAVAILABLE"));
    let input = values(256, 3);
    let request = json!({
        "parameters": {"slo_ms": SLACK_SLO_MS},
        "inputs": [{"name": "input", "shape": [1, 256], "datatype": "FP32", "data": input}]
    });
    let answer = server.post_json("/v2/models/mlp/infer", &request).await;
    assert_error(&answer, 404, "unknown_model", "mlp");

    // Loading registers it: profiled, taken in by the controller, served for real.
    let (status, _) = server
        .post_json("/v2/repository/models/mlp/load", &json!({}))
        .await;
    assert_eq!(status, 200);
    let (status, answer) = server.post_json("/v2/models/mlp/infer", &request).await;
    assert_eq!(status, 200, "{answer}");
    let want = direct(root.path(), "mlp", &[1, 256], &input);
    assert_near(&floats(&answer["outputs"][0]["data"]), &want);
    let (status, _) = server.get("/v2/models/mlp/ready").await;
    assert_eq!(status, 200);

    // A broken model is refused with its reason; the rest keeps serving.
    let answer = server
        .post_json("/v2/repository/models/broken/load", &json!({}))
        .await;
    assert_error(&answer, 400, "load_failed", "not an ONNX model");
    let (_, index) = server
        .post_json("/v2/repository/index", &json!({"ready": false}))
        .await;
    let broken = index
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "broken")
        .expect("broken is listed");
    assert!(broken["reason"]
        .as_str()
        .unwrap()
        .contains("not an ONNX model"));
    assert_eq!(
        server.post_json("/v2/models/mlp/infer", &request).await.0,
        200
    );
    let answer = server
        .post_json("/v2/repository/models/nothing/load", &json!({}))
        .await;
    assert_error(&answer, 404, "unknown_model", "nothing");

    // A model added to disk while serving, at version 2.
    let v2 = root.path().join("mlp-v2/2");
    std::fs::create_dir_all(&v2).unwrap();
    std::fs::copy(root.path().join("mlp/1/model.onnx"), v2.join("model.onnx")).unwrap();
    let (status, _) = server
        .post_json("/v2/repository/models/mlp-v2/load", &json!({}))
        .await;
    assert_eq!(status, 200);
    let (_, metadata) = server.get_json("/v2/models/mlp-v2").await;
    assert_eq!(metadata["versions"], json!(["2"]));
    let (status, answer) = server
        .post_json("/v2/models/mlp-v2/versions/2/infer", &request)
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["model_version"], "2");
    let answer = server
        .post_json("/v2/models/mlp-v2/versions/1/infer", &request)
        .await;
    assert_error(&answer, 404, "unknown_version", "version 2");

    // The metrics know the models registered while serving. The answer is counted from
    // the controller's event, which may reach the metrics just after the answer reached
    // the client: read until it is there (a second at most).
    let counted = "nv_inference_request_success{model=\"mlp-v2\"} 1";
    let mut text = String::new();
    for _ in 0..100 {
        let (_, body) = server.get("/metrics").await;
        text = String::from_utf8(body).unwrap();
        if text.contains(counted) {
            break;
        }
        actix_web::rt::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(text.contains(counted), "{text}");
    server.stop().await;
}
