//! The V2 routes over real HTTP: health, server and model metadata, Triton's model
//! config, and inference with JSON and binary tensors.

mod api_support;

use api_support::{mlp_request, start_default};
use serde_json::{json, Value};

#[actix_web::test]
async fn health_and_server_metadata() {
    let server = start_default().await;
    assert_eq!(server.get("/v2/health/live").await.0, 200);
    assert_eq!(server.get("/v2/health/ready").await.0, 200);
    let (status, metadata) = server.get_json("/v2").await;
    assert_eq!(status, 200);
    assert_eq!(metadata["name"], "clockwork");
    let extensions = metadata["extensions"].as_array().unwrap();
    assert!(extensions.contains(&json!("binary_tensor_data")));
    server.stop().await;
}

#[actix_web::test]
async fn model_metadata_readiness_and_config() {
    let server = start_default().await;
    for path in ["/v2/models/mlp", "/v2/models/mlp/versions/1"] {
        let (status, metadata) = server.get_json(path).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(metadata["name"], "mlp");
        assert_eq!(metadata["versions"], json!(["1"]));
        assert_eq!(
            metadata["inputs"],
            json!([{"name": "input", "datatype": "FP32", "shape": [-1, 64]}])
        );
        assert_eq!(metadata["outputs"][0]["shape"], json!([-1, 10]));
    }
    assert_eq!(server.get("/v2/models/mlp/ready").await.0, 200);
    assert_eq!(server.get("/v2/models/mlp/versions/1/ready").await.0, 200);
    assert_eq!(server.get("/v2/models/nope/ready").await.0, 404);
    assert_eq!(server.get("/v2/models/mlp/versions/7/ready").await.0, 404);

    let (status, config) = server.get_json("/v2/models/resnet/config").await;
    assert_eq!(status, 200);
    assert_eq!(config["name"], "resnet");
    // resnet50's largest profiled batch: the most items one request may carry.
    assert_eq!(config["max_batch_size"], 16);
    assert_eq!(
        config["input"],
        json!([{"name": "data", "data_type": "TYPE_FP32", "dims": [3, 224, 224]}])
    );
    assert_eq!(config["output"][0]["dims"], json!([1000]));
    let (_, typed) = server.get_json("/v2/models/typed/versions/1/config").await;
    assert_eq!(typed["input"][3]["data_type"], "TYPE_STRING");
    assert_eq!(typed["input"][3]["dims"], json!([-1]));
    server.stop().await;
}

#[actix_web::test]
async fn json_inference_flat_nested_and_selected_outputs() {
    let server = start_default().await;
    let mut request = mlp_request(0.5);
    request["id"] = json!("request-42");
    let (status, answer) = server.post_json("/v2/models/mlp/infer", &request).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["model_name"], "mlp");
    assert_eq!(answer["model_version"], "1");
    assert_eq!(answer["id"], "request-42");
    assert_eq!(answer["parameters"]["emulated"], true);
    assert_eq!(answer["parameters"]["late"], false);
    assert_eq!(answer["parameters"]["slo_ms"], 100.0);
    let output = &answer["outputs"][0];
    assert_eq!(output["name"], "output");
    assert_eq!(output["datatype"], "FP32");
    assert_eq!(
        output["shape"],
        json!([1, 10]),
        "a batch dimension in, one out"
    );
    assert_eq!(output["data"].as_array().map(Vec::len), Some(10));

    // The same item, nested and without a batch dimension: same outputs (emulation is
    // deterministic in the inputs), item shape.
    let nested: Vec<Value> = (0..8).map(|_| json!(vec![0.5; 8])).collect();
    let request = json!({
        "parameters": {"slo_ms": 250},
        "inputs": [{"name": "input", "shape": [64], "datatype": "FP32", "data": nested}],
        "outputs": [{"name": "output"}]
    });
    let (status, again) = server
        .post_json("/v2/models/mlp/versions/1/infer", &request)
        .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["outputs"][0]["shape"], json!([10]));
    assert_eq!(again["outputs"][0]["data"], output["data"]);
    assert_eq!(again["parameters"]["slo_ms"], 250.0);
    assert!(again.get("id").is_none());
    server.stop().await;
}

#[actix_web::test]
async fn every_datatype_the_model_takes() {
    let server = start_default().await;
    let request = json!({
        "inputs": [
            {"name": "ints", "shape": [2], "datatype": "INT64", "data": [-9007199254740993i64, 7]},
            {"name": "flags", "shape": [1, 3], "datatype": "BOOL", "data": [true, false, true]},
            {"name": "halves", "shape": [2], "datatype": "FP16", "data": [0.5, -1.25]},
            {"name": "text", "shape": [3], "datatype": "BYTES", "data": ["a", "", "héllo"]},
            {"name": "small", "shape": [2, 2], "datatype": "UINT8", "data": [[0, 1], [254, 255]]}
        ],
        "outputs": [{"name": "ids"}]
    });
    let (status, answer) = server.post_json("/v2/models/typed/infer", &request).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outputs"].as_array().map(Vec::len), Some(1));
    assert_eq!(answer["outputs"][0]["name"], "ids");
    assert_eq!(answer["outputs"][0]["datatype"], "INT32");
    assert_eq!(answer["outputs"][0]["shape"], json!([1, 3]));
    assert!(answer["outputs"][0]["data"][0].is_i64());
    server.stop().await;
}

/// Splits a binary-extension body into its JSON header and the rest.
fn split(headers: &awc::http::header::HeaderMap, body: &[u8]) -> (Value, Vec<u8>) {
    let length: usize = headers
        .get("inference-header-content-length")
        .expect("binary responses say where the JSON ends")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let header = serde_json::from_slice(&body[..length]).unwrap();
    (header, body[length..].to_vec())
}

#[actix_web::test]
async fn binary_tensors_in_and_out() {
    let server = start_default().await;
    let values: Vec<f32> = (0..64).map(|i| i as f32 / 64.0).collect();
    let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let header = json!({
        "inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32",
                    "parameters": {"binary_data_size": raw.len()}}],
        "parameters": {"binary_data_output": true}
    });
    let mut body = serde_json::to_vec(&header).unwrap();
    let length = body.len();
    body.extend_from_slice(&raw);
    let headers = [("Inference-Header-Content-Length", length.to_string())];
    let (status, response_headers, answer) = server
        .post_raw("/v2/models/mlp/infer", &headers, body.clone())
        .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let (json_part, binary) = split(&response_headers, &answer);
    let output = &json_part["outputs"][0];
    assert_eq!(output["parameters"]["binary_data_size"], 40);
    assert!(output.get("data").is_none());
    assert_eq!(binary.len(), 40);
    let binary_values: Vec<f32> = binary
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();

    // The same input as JSON, asking for JSON output: the same values.
    let request = json!({
        "inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": values}],
        "outputs": [{"name": "output", "parameters": {"binary_data": false}}]
    });
    let (status, answer) = server.post_json("/v2/models/mlp/infer", &request).await;
    assert_eq!(status, 200, "{answer}");
    // Compared as f32: the text is the shortest that reads back as the same f32.
    let json_values: Vec<f32> = answer["outputs"][0]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    assert_eq!(json_values, binary_values);

    // Binary input, one output asked for as binary by name.
    let header = json!({
        "inputs": [{"name": "input", "shape": [64], "datatype": "FP32",
                    "parameters": {"binary_data_size": raw.len()}}],
        "outputs": [{"name": "output", "parameters": {"binary_data": true}}]
    });
    let mut body = serde_json::to_vec(&header).unwrap();
    let headers = [("Inference-Header-Content-Length", body.len().to_string())];
    body.extend_from_slice(&raw);
    let (status, response_headers, answer) = server
        .post_raw("/v2/models/mlp/infer", &headers, body)
        .await;
    assert_eq!(status, 200);
    let (json_part, binary) = split(&response_headers, &answer);
    assert_eq!(json_part["outputs"][0]["shape"], json!([10]));
    assert_eq!(binary.len(), 40);
    server.stop().await;
}

#[actix_web::test]
async fn draining_refuses_with_503() {
    let server = start_default().await;
    server
        .runtime
        .controller
        .send(clockwork::actors::messages::Drain)
        .await
        .unwrap();
    assert_eq!(server.get("/v2/health/ready").await.0, 503);
    assert_eq!(server.get("/v2/health/live").await.0, 200);
    let answer = server
        .post_json("/v2/models/mlp/infer", &mlp_request(1.0))
        .await;
    api_support::assert_error(&answer, 503, "shutting_down", "shutting down");
    server.stop().await;
}
