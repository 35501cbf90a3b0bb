//! Requests that carry several items (a client's batch, `shape: [n, ...]`) against a real
//! server on port 0: answered with a leading dimension of n whose rows equal n requests of
//! one item each (cpu zoo model, JSON and binary; an emulated model with several
//! datatypes, `BYTES` included), and refused with a clear error when they carry more items
//! than the model's largest batch or when their inputs disagree on n. Triton's
//! `nv_inference_count` counts items.

mod api_support;
mod cpu_support;

use api_support::{assert_error, start_default, start_with, TestServer};
use clockwork::api::{ApiSettings, HEADER_LENGTH};
use clockwork::repository::zoo;
use cpu_support::{config, values, TempDir, SLACK_SLO_MS};
use serde_json::{json, Value};

/// mlp's items: 256 values each.
const WIDTH: usize = 256;

async fn serve(root: &std::path::Path) -> TestServer {
    let text =
        config(root, 1, 64, 16 << 20).replace("[repository]", "[repository]\nload_all = true");
    start_with(&text, Vec::new(), ApiSettings::default()).await
}

fn floats(value: &Value) -> Vec<f32> {
    let all = value.as_array().expect("array").iter();
    all.map(|v| v.as_f64().unwrap() as f32).collect()
}

/// Rows computed in different batch sizes may differ in the last bits.
fn assert_rows_near(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-5 + 1e-4 * w.abs(), "{g} vs {w}");
    }
}

fn mlp_json(items: usize, data: &[f32]) -> Value {
    json!({
        "parameters": {"slo_ms": SLACK_SLO_MS},
        "inputs": [{"name": "input", "shape": [items, WIDTH], "datatype": "FP32", "data": data}]
    })
}

/// The output of `n` one-item requests, one after another.
async fn singles(server: &TestServer, n: usize, input: &[f32]) -> Vec<f32> {
    let mut rows = Vec::new();
    for item in input.chunks(WIDTH).take(n) {
        let (status, answer) = server
            .post_json("/v2/models/mlp/infer", &mlp_json(1, item))
            .await;
        assert_eq!(status, 200, "{answer}");
        rows.extend(floats(&answer["outputs"][0]["data"]));
    }
    rows
}

#[actix_web::test]
async fn a_batch_of_items_answers_what_single_items_do_row_by_row() {
    let root = TempDir::new("api-batch");
    zoo::write_missing(root.path()).unwrap();
    let server = serve(root.path()).await;
    let input = values(5 * WIDTH, 11);
    let want = singles(&server, 5, &input).await;

    // JSON: 5 items in one request, answered with a leading dimension of 5.
    let (status, answer) = server
        .post_json("/v2/models/mlp/infer", &mlp_json(5, &input))
        .await;
    assert_eq!(status, 200, "{answer}");
    let output = &answer["outputs"][0];
    let row = want.len() / 5;
    assert_eq!(output["shape"], json!([5, row]));
    assert_rows_near(&floats(&output["data"]), &want);
    assert!(answer["parameters"]["batch_size"].as_u64().unwrap() >= 5);

    // Binary tensors both ways: 3 items.
    let header = json!({
        "parameters": {"slo_ms": SLACK_SLO_MS},
        "inputs": [{"name": "input", "shape": [3, WIDTH], "datatype": "FP32",
                    "parameters": {"binary_data_size": 3 * WIDTH * 4}}],
        "outputs": [{"name": output["name"], "parameters": {"binary_data": true}}]
    });
    let header = serde_json::to_vec(&header).unwrap();
    let mut body = header.clone();
    body.extend(input[..3 * WIDTH].iter().flat_map(|v| v.to_le_bytes()));
    let headers = [(HEADER_LENGTH, header.len().to_string())];
    let (status, answer_headers, answer) = server
        .post_raw("/v2/models/mlp/infer", &headers, body)
        .await;
    assert_eq!(status, 200);
    let json_length: usize = answer_headers
        .get(HEADER_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("binary answer header");
    let head: Value = serde_json::from_slice(&answer[..json_length]).unwrap();
    assert_eq!(head["outputs"][0]["shape"], json!([3, row]));
    let rows: Vec<f32> = answer[json_length..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_rows_near(&rows, &want[..3 * row]);

    // More items than the largest batch (16): refused at once, naming both numbers.
    let input = values(17 * WIDTH, 3);
    let answer = server
        .post_json("/v2/models/mlp/infer", &mlp_json(17, &input))
        .await;
    assert_error(&answer, 400, "bad_input", "17 items");
    assert_error(&answer, 400, "bad_input", "at most 16");
    server.stop().await;
}

/// A request for `typed` (see `api_support::typed_model`) of `n` items, item `i` of each
/// input from `seed + i`.
fn typed(n: usize, seed: i64) -> Value {
    let items = |f: &dyn Fn(i64) -> Vec<Value>| -> Vec<Value> {
        (0..n as i64).flat_map(|i| f(seed + i)).collect()
    };
    json!({
        "inputs": [
            {"name": "ints", "shape": [n, 2], "datatype": "INT64", "data": items(&|s| vec![json!(s), json!(-s)])},
            {"name": "flags", "shape": [n, 3], "datatype": "BOOL", "data": items(&|s| vec![json!(s % 2 == 0), json!(true), json!(false)])},
            {"name": "halves", "shape": [n, 2], "datatype": "FP16", "data": items(&|s| vec![json!(s as f64 / 2.0), json!(1.5)])},
            {"name": "text", "shape": [n, 1], "datatype": "BYTES", "data": items(&|s| vec![json!("x".repeat(s as usize % 5))])},
            {"name": "small", "shape": [n, 2, 2], "datatype": "UINT8", "data": items(&|s| vec![json!(s % 7); 4])}
        ]
    })
}

#[actix_web::test]
async fn items_of_every_datatype_are_split_and_joined_and_must_agree_on_their_number() {
    let server = start_default().await;
    let (status, batch) = server
        .post_json("/v2/models/typed/infer", &typed(3, 4))
        .await;
    assert_eq!(status, 200, "{batch}");
    for (i, seed) in (4..7).enumerate() {
        let (status, one) = server
            .post_json("/v2/models/typed/infer", &typed(1, seed))
            .await;
        assert_eq!(status, 200, "{one}");
        for (joined, single) in batch["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .zip(one["outputs"].as_array().unwrap())
        {
            let data = joined["data"].as_array().unwrap();
            let row = data.len() / 3;
            assert_eq!(joined["shape"][0], 3);
            assert_eq!(
                &data[i * row..(i + 1) * row],
                single["data"].as_array().unwrap().as_slice()
            );
        }
    }
    // Triton's counters: 4 successful requests, 6 inferences (items).
    let series = |text: &str, name: &str| {
        let line = text.lines().find(|l| l.starts_with(name));
        line.and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
    };
    let mut counts = (None, None);
    for _ in 0..200 {
        let (_, body) = server.get("/metrics").await;
        let text = String::from_utf8(body).unwrap();
        counts = (
            series(&text, "nv_inference_request_success{model=\"typed\"}"),
            series(&text, "nv_inference_count{model=\"typed\"}"),
        );
        if counts == (Some(4.0), Some(6.0)) {
            break;
        }
        actix_web::rt::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(counts, (Some(4.0), Some(6.0)));
    // Inputs that disagree on the number of items.
    let mut mixed = typed(2, 0);
    mixed["inputs"][1] =
        json!({"name": "flags", "shape": [3, 3], "datatype": "BOOL", "data": vec![true; 9]});
    let answer = server.post_json("/v2/models/typed/infer", &mixed).await;
    assert_error(&answer, 400, "bad_input", "same number of items");
    server.stop().await;
}
