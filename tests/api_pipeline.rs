//! Pipelines over HTTP against a real server on port 0 (emulated devices, whose outputs
//! are deterministic in the inputs): the pipeline's outputs equal calling its stage models
//! one after another; metadata, ready and Triton's ensemble config; the repository index
//! lists it, unload and load work on it; a declaration refused for each kind of mistake
//! while the rest serves.

mod api_support;
mod cpu_support;

use api_support::{assert_error, index_names, start_with, typed_model, TestServer};
use clockwork::api::ApiSettings;
use clockwork::model::{DataType, ModelSpec, TensorSpec};
use clockwork::time::MS;
use cpu_support::TempDir;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn spec(name: &str, shape: &[i64]) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        datatype: DataType::Fp32,
        shape: shape.to_vec(),
    }
}

/// `det`: image [4] -> crops [-1, 4] (one row when emulated), scores [-1];
/// `cls`: input [4] -> probs [3]. mlp-small's timing, any backend.
fn models() -> Vec<ModelSpec> {
    let base = typed_model();
    let mut det = base.clone();
    det.name = "det".into();
    det.inputs = vec![spec("image", &[4])];
    det.outputs = vec![spec("crops", &[-1, 4]), spec("scores", &[-1])];
    det.slo = 100 * MS;
    let mut cls = base;
    cls.name = "cls".into();
    cls.inputs = vec![spec("input", &[4])];
    cls.outputs = vec![spec("probs", &[3])];
    vec![det, cls]
}

const GOOD: &str = r#"
[pipeline]
slo = "500ms"
inputs = [{ name = "image", datatype = "FP32", shape = [4] }]
outputs = ["scores", "labels"]

[[pipeline.stages]]
name = "detect"
model = "det"
input_map = { image = "image" }
output_map = { crops = "crops", scores = "scores" }

[[pipeline.stages]]
name = "classify"
model = "cls"
after = "detect"
fan_out = { rows = "crops" }
input_map = { input = "crops" }
output_map = { probs = "labels" }
"#;

/// One broken declaration per kind of mistake: (directory, text, words of its reason).
fn broken() -> Vec<(&'static str, String, &'static str)> {
    vec![
        (
            "p-model",
            GOOD.replace("\"cls\"", "\"nope\""),
            "no model 'nope'",
        ),
        (
            "p-tensor",
            GOOD.replace("{ input = \"crops\" }", "{ input = \"crop\" }"),
            "no pipeline tensor 'crop'",
        ),
        (
            "p-shape",
            GOOD.replace("fan_out = { rows = \"crops\" }\n", ""),
            "takes",
        ),
        (
            "p-dtype",
            GOOD.replace("datatype = \"FP32\"", "datatype = \"INT32\""),
            "takes",
        ),
        (
            "p-cycle",
            GOOD.replace(
                "input_map = { image = \"image\" }",
                "after = \"classify\"\ninput_map = { image = \"image\" }",
            ),
            "cycle",
        ),
        (
            "p-rows",
            GOOD.replace("rows = \"crops\"", "rows = \"image\"")
                .replace("{ input = \"crops\" }", "{ input = \"image\" }"),
            "takes",
        ),
        (
            "p-output",
            GOOD.replace("\"scores\", \"labels\"", "\"scores\", \"label\""),
            "never produced",
        ),
        ("p-syntax", GOOD.replace("slo =", "slow ="), "slow"),
    ]
}

async fn serve(root: &std::path::Path) -> TestServer {
    std::fs::create_dir_all(root.join("cascade")).unwrap();
    std::fs::write(root.join("cascade/config.toml"), GOOD).unwrap();
    for (dir, text, _) in broken() {
        std::fs::create_dir_all(root.join(dir)).unwrap();
        std::fs::write(root.join(dir).join("config.toml"), text).unwrap();
    }
    let config = format!(
        "[[devices]]\nbackend = \"sim\"\nprofile = \"v100\"\n\n[repository]\npath = \"{}\"\n",
        root.display()
    );
    start_with(&config, models(), ApiSettings::default()).await
}

fn image() -> Value {
    json!({"inputs": [{"name": "image", "shape": [1, 4], "datatype": "FP32", "data": [0.5, 1.0, 1.5, 2.0]}]})
}

async fn wait_ready(server: &TestServer, path: &str) {
    for _ in 0..200 {
        if server.get(path).await.0 == 200 {
            return;
        }
        actix_web::rt::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{path} never ready");
}

#[actix_web::test]
async fn pipeline_outputs_equal_its_stages_called_one_after_another() {
    let root = TempDir::new("api-pipeline-serve");
    let server = serve(root.path()).await;
    wait_ready(&server, "/v2/models/cascade/ready").await;
    let (status, answer) = server.post_json("/v2/models/cascade/infer", &image()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["model_name"], "cascade");
    assert_eq!(answer["parameters"]["missing"], json!([]));

    let (status, det) = server.post_json("/v2/models/det/infer", &image()).await;
    assert_eq!(status, 200, "{det}");
    let crops = &det["outputs"][0];
    assert_eq!(crops["name"], "crops");
    assert_eq!(crops["shape"], json!([1, 1, 4]));
    let request = json!({"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": crops["data"]}]});
    let (status, cls) = server.post_json("/v2/models/cls/infer", &request).await;
    assert_eq!(status, 200, "{cls}");

    let out = |name: &str| {
        answer["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {answer}"))
    };
    assert_eq!(out("scores")["data"], det["outputs"][1]["data"]);
    // One crop: the join has one row of the classifier's outputs (batch dim added).
    assert_eq!(out("labels")["shape"], json!([1, 1, 3]));
    assert_eq!(out("labels")["data"], cls["outputs"][0]["data"]);

    // Metrics per pipeline and per stage (the subscriber runs behind the answers).
    let wanted = [
        "clockwork_pipeline_requests{outcome=\"ok\",pipeline=\"cascade\"} 1",
        "clockwork_pipeline_latency_seconds_count{pipeline=\"cascade\"} 1",
        "clockwork_pipeline_stage_latency_seconds_count{pipeline=\"cascade\",stage=\"classify\"} 1",
        "clockwork_pipeline_stage_requests{outcome=\"ok\",pipeline=\"cascade\",stage=\"classify\"} 1",
        "clockwork_pipeline_fan_out_sum{pipeline=\"cascade\",stage=\"classify\"} 1",
    ];
    let mut text = String::new();
    for _ in 0..100 {
        text = String::from_utf8(server.get("/metrics").await.1).unwrap();
        if wanted.iter().all(|w| text.contains(w)) {
            break;
        }
        actix_web::rt::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    for w in wanted {
        assert!(text.contains(w), "{w} not in\n{text}");
    }
    // Triton's statistics: the pipeline counts its root; a stage's model times its
    // sub-requests with its own (the detector answered one of each, two in all).
    // Mutation that breaks it: queue and compute times kept by the front end only.
    let (_, stats) = server.get_json("/v2/models/cascade/stats").await;
    let cascade = &stats["model_stats"][0];
    assert_eq!(cascade["inference_stats"]["success"]["count"], 1, "{stats}");
    let mut stats = Value::Null;
    for _ in 0..100 {
        stats = server.get_json("/v2/models/det/stats").await.1;
        if stats["model_stats"][0]["inference_stats"]["success"]["count"] == 2 {
            break;
        }
        actix_web::rt::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let det = &stats["model_stats"][0]["inference_stats"];
    for timed in ["success", "queue", "compute_infer"] {
        assert_eq!(det[timed]["count"], 2, "{timed}: {stats}");
    }
    server.stop().await;
}

#[actix_web::test]
async fn metadata_config_index_unload_and_refused_declarations() {
    let root = TempDir::new("api-pipeline-routes");
    let server = serve(root.path()).await;
    let (status, metadata) = server.get_json("/v2/models/cascade").await;
    assert_eq!(status, 200);
    assert_eq!(metadata["platform"], "ensemble");
    assert_eq!(metadata["outputs"][1]["shape"], json!([-1, -1, 3]));
    let (status, config) = server.get_json("/v2/models/cascade/config").await;
    assert_eq!(status, 200);
    assert_eq!(config["platform"], "ensemble");
    let steps = &config["ensemble_scheduling"]["step"];
    assert_eq!(steps[0]["model_name"], "det");
    assert_eq!(steps[1]["model_name"], "cls");
    assert_eq!(steps[1]["model_version"], 1);
    assert_eq!(steps[1]["input_map"], json!({"input": "crops"}));
    assert_eq!(steps[1]["output_map"], json!({"probs": "labels"}));
    assert_eq!(
        config["parameters"]["fan_out.classify"]["string_value"],
        "rows=crops"
    );
    assert_eq!(config["parameters"]["slo_ms"]["string_value"], "500");

    // Each broken declaration is listed with its reason; the rest serves.
    let (_, index) = server.post_json("/v2/repository/index", &json!({})).await;
    assert!(index_names(&index).contains(&"cascade"));
    for (dir, _, reason) in broken() {
        let entry = index
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == dir)
            .unwrap_or_else(|| panic!("{dir} not in {index}"));
        assert_eq!(entry["state"], "UNAVAILABLE", "{dir}");
        let said = entry["reason"].as_str().unwrap_or_default();
        assert!(said.contains(reason), "{dir}: {said}");
        let answer = server
            .post_json(&format!("/v2/models/{dir}/infer"), &image())
            .await;
        assert_error(&answer, 404, "unknown_model", dir);
        let answer = server
            .post_json(&format!("/v2/repository/models/{dir}/load"), &json!({}))
            .await;
        assert_error(&answer, 400, "load_failed", reason);
    }

    let (status, _) = server
        .post_json("/v2/repository/models/cascade/unload", &json!({}))
        .await;
    assert_eq!(status, 200);
    // Unloaded, not unknown: unavailable, as an unloaded model is.
    let answer = server.post_json("/v2/models/cascade/infer", &image()).await;
    assert_error(&answer, 503, "model_unavailable", "cascade");
    let (status, _) = server.get("/v2/models/cascade/ready").await;
    assert_eq!(status, 503);
    for path in ["/v2/models/cascade", "/v2/models/cascade/config"] {
        let answer = server.get_json(path).await;
        assert_error(&answer, 503, "model_unavailable", "cascade");
    }
    let (_, index) = server.post_json("/v2/repository/index", &json!({})).await;
    let entry = index
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "cascade");
    assert_eq!(entry.unwrap()["reason"], "unloaded", "{index}");
    let (status, _) = server
        .post_json("/v2/repository/models/cascade/load", &json!({}))
        .await;
    assert_eq!(status, 200);
    wait_ready(&server, "/v2/models/cascade/ready").await;
    let (status, answer) = server.post_json("/v2/models/cascade/infer", &image()).await;
    assert_eq!(status, 200, "{answer}");
    let bad = json!({"inputs": [{"name": "image", "shape": [1, 5], "datatype": "FP32", "data": [0, 0, 0, 0, 0]}]});
    let answer = server.post_json("/v2/models/cascade/infer", &bad).await;
    assert_eq!(answer.0, 400, "{}", answer.1);
    server.stop().await;
}

/// A pipeline's request takes a model's edge path: its answer says in `Server-Timing` how
/// long the server held it, its front-end phases are learned under the pipeline's name,
/// and a body that eats the pipeline's objective (500 ms) is refused while reading (503,
/// `Retry-After`) instead of being read to the end and answered late.
#[actix_web::test]
async fn a_pipeline_request_takes_the_edge_path() {
    let root = TempDir::new("api-pipeline-edge");
    let server = serve(root.path()).await;
    wait_ready(&server, "/v2/models/cascade/ready").await;
    let body = serde_json::to_vec(&image()).unwrap();
    let (status, headers, _) = server
        .post_raw("/v2/models/cascade/infer", &[], body.clone())
        .await;
    assert_eq!(status, 200);
    let timing = headers.get("server-timing").and_then(|v| v.to_str().ok());
    assert!(
        timing.is_some_and(|t| t.starts_with("edge;dur=")),
        "{timing:?}"
    );

    let address = server.base.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /v2/models/cascade/infer HTTP/1.1\r\nHost: {address}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body[..10]).await.unwrap();
    actix_web::rt::time::sleep(std::time::Duration::from_millis(600)).await;
    let _ = stream.write_all(&body[10..]).await; // the server may have answered already
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer).to_lowercase();
    assert!(answer.starts_with("http/1.1 503"), "{answer}");
    assert!(answer.contains("retry-after: "), "{answer}");
    assert!(answer.contains("deadline_unreachable"), "{answer}");

    let text = String::from_utf8(server.get("/metrics").await.1).unwrap();
    for wanted in [
        "clockwork_edge_refusals{model=\"cascade\",stage=\"reading\"} 1",
        "clockwork_front_seconds_count{model=\"cascade\",phase=\"decode\"} 1",
        "clockwork_front_seconds_count{model=\"cascade\",phase=\"respond\"} 1",
        // Each root counted once, by the answer its client got, the one its actor never
        // saw too.
        "clockwork_pipeline_requests{outcome=\"ok\",pipeline=\"cascade\"} 1",
        "clockwork_pipeline_requests{outcome=\"deadline_unreachable\",pipeline=\"cascade\"} 1",
    ] {
        assert!(text.contains(wanted), "{wanted} not in\n{text}");
    }
    server.stop().await;
}

/// Splits a binary-extension body into its JSON header and the rest.
fn split(headers: &awc::http::header::HeaderMap, body: &[u8]) -> (Value, Vec<u8>) {
    let length: usize = headers
        .get("inference-header-content-length")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .expect("binary responses say where the JSON ends");
    let header = serde_json::from_slice(&body[..length]).unwrap();
    (header, body[length..].to_vec())
}

/// Triton's binary tensors in and out of a pipeline: the binary answer holds the same
/// values as the JSON answer to the same image, each output where its header says.
#[actix_web::test]
async fn a_pipeline_takes_and_gives_binary_tensors() {
    let root = TempDir::new("api-pipeline-binary");
    let server = serve(root.path()).await;
    wait_ready(&server, "/v2/models/cascade/ready").await;
    let (status, json_answer) = server.post_json("/v2/models/cascade/infer", &image()).await;
    assert_eq!(status, 200, "{json_answer}");

    let raw: Vec<u8> = [0.5f32, 1.0, 1.5, 2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let header = json!({
        "inputs": [{"name": "image", "shape": [1, 4], "datatype": "FP32",
                    "parameters": {"binary_data_size": raw.len()}}],
        "parameters": {"binary_data_output": true}
    });
    let mut body = serde_json::to_vec(&header).unwrap();
    let headers = [("Inference-Header-Content-Length", body.len().to_string())];
    body.extend_from_slice(&raw);
    let (status, response_headers, answer) = server
        .post_raw("/v2/models/cascade/infer", &headers, body)
        .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let (head, binary) = split(&response_headers, &answer);
    assert_eq!(head["model_name"], "cascade");
    let mut at = 0;
    for (i, output) in head["outputs"].as_array().unwrap().iter().enumerate() {
        assert!(output.get("data").is_none(), "{output}");
        let size = output["parameters"]["binary_data_size"].as_u64().unwrap() as usize;
        let values: Vec<f32> = binary[at..at + size]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        at += size;
        let same = &json_answer["outputs"][i];
        assert_eq!(output["name"], same["name"]);
        assert_eq!(output["shape"], same["shape"]);
        let expected: Vec<f32> = same["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(values, expected, "{}", output["name"]);
    }
    assert_eq!(at, binary.len(), "every byte belongs to an output");
    assert_eq!(head["outputs"].as_array().unwrap().len(), 2);
    server.stop().await;
}
