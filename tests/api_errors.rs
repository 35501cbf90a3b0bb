//! Every kind of wrong input gets a 4xx naming the problem, an SLO that cannot be met
//! gets an immediate 503, and none of it affects the next request.

mod api_support;

use api_support::{assert_error, mlp_request, start, start_default};
use clockwork::api::ApiSettings;
use clockwork::outcome::Outcome;
use serde_json::json;

const INFER: &str = "/v2/models/mlp/infer";

#[actix_web::test]
async fn malformed_requests_are_named_4xx() {
    let server = start_default().await;
    let post = |body: &'static str| server.post_raw(INFER, &[], body.as_bytes().to_vec());
    let (status, _, body) = post("{\"inputs\": [").await;
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_error(&(status, body), 400, "invalid_json", "EOF");
    let (status, _, body) = post("{\"inputs\": 3}").await;
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_error(&(status, body), 400, "invalid_json", "expected a sequence");

    let input = |datatype: &str, shape: serde_json::Value, data: serde_json::Value| json!({"inputs": [{"name": "input", "shape": shape, "datatype": datatype, "data": data}]});
    let cases = [
        (
            input("INT32", json!([64]), json!(vec![1; 64])),
            "bad_input",
            "datatype",
        ),
        (
            input("FP99", json!([64]), json!(vec![1; 64])),
            "bad_input",
            "FP99",
        ),
        (
            input("FP32", json!([63]), json!(vec![1; 63])),
            "bad_input",
            "shape",
        ),
        (
            input("FP32", json!([64]), json!(vec![1; 63])),
            "bad_input",
            "63 elements",
        ),
        (
            input("FP32", json!([64]), json!(vec!["x"; 64])),
            "bad_input",
            "\"x\"",
        ),
        (
            input("FP32", json!([-64]), json!([])),
            "bad_input",
            "negative",
        ),
        (
            input("FP32", json!([40, 64]), json!(vec![1; 40 * 64])),
            "bad_input",
            "carries 40 items",
        ),
        (json!({"inputs": []}), "bad_input", "missing input 'input'"),
        (
            json!({"inputs": [{"name": "input", "shape": [64], "datatype": "FP32"}]}),
            "bad_input",
            "no data",
        ),
        (
            json!({"inputs": [{"name": "other", "shape": [1], "datatype": "FP32", "data": [1]}]}),
            "bad_input",
            "unexpected input 'other'",
        ),
        (
            {
                let mut r = mlp_request(1.0);
                r["outputs"] = json!([{"name": "nope"}]);
                r
            },
            "bad_input",
            "no output 'nope'",
        ),
        (
            {
                let mut r = mlp_request(1.0);
                r["parameters"] = json!({"slo_ms": -5});
                r
            },
            "bad_input",
            "slo_ms",
        ),
        // Triton's shared-memory extensions: a region not registered (nor a CUDA one,
        // which this server does not serve), and a place without its size.
        (
            json!({"inputs": [{"name": "input", "shape": [64], "datatype": "FP32",
                "parameters": {"shared_memory_region": "in", "shared_memory_byte_size": 256}}]}),
            "bad_input",
            "no system shared-memory region 'in' is registered",
        ),
        (
            {
                let mut r = mlp_request(1.0);
                let region = json!({"shared_memory_region": "out"});
                r["outputs"] = json!([{"name": "output", "parameters": region}]);
                r
            },
            "bad_input",
            "output 'output' is placed in region 'out' without 'shared_memory_byte_size'",
        ),
    ];
    for (request, kind, mentions) in cases {
        let answer = server.post_json(INFER, &request).await;
        assert_error(&answer, 400, kind, mentions);
    }

    let answer = server
        .post_json("/v2/models/nope/infer", &mlp_request(1.0))
        .await;
    assert_error(&answer, 404, "unknown_model", "nope");
    let answer = server
        .post_json("/v2/models/mlp/versions/3/infer", &mlp_request(1.0))
        .await;
    assert_error(&answer, 404, "unknown_version", "'3'");
    let answer = server.get_json("/v2/nothing-here").await;
    assert_error(&answer, 404, "not_found", "/v2/nothing-here");

    // The server is unharmed.
    let (status, answer) = server.post_json(INFER, &mlp_request(1.0)).await;
    assert_eq!(status, 200, "{answer}");
    server.stop().await;
}

#[actix_web::test]
async fn bad_binary_data_is_named() {
    let server = start_default().await;
    let header = json!({"inputs": [{"name": "input", "shape": [64], "datatype": "FP32",
                                    "parameters": {"binary_data_size": 256}}]});
    let header = serde_json::to_vec(&header).unwrap();
    let length = header.len();
    let with = |extra: usize, declared: String| {
        let mut body = header.clone();
        body.extend(std::iter::repeat_n(0u8, extra));
        let server = &server;
        async move {
            let headers = [("Inference-Header-Content-Length", declared)];
            server.post_raw(INFER, &headers, body).await
        }
    };
    let parse = |(status, _, body): (u16, _, Vec<u8>)| {
        (status, serde_json::from_slice(&body).unwrap_or(json!(null)))
    };
    assert_error(
        &parse(with(256, "ten".into()).await),
        400,
        "invalid_binary",
        "byte count",
    );
    assert_error(
        &parse(with(256, (length + 999).to_string()).await),
        400,
        "invalid_binary",
        "only",
    );
    assert_error(
        &parse(with(100, length.to_string()).await),
        400,
        "invalid_binary",
        "remain",
    );
    assert_error(
        &parse(with(300, length.to_string()).await),
        400,
        "invalid_binary",
        "44 bytes",
    );
    // A header cut inside the JSON.
    assert_error(
        &parse(with(256, "5".into()).await),
        400,
        "invalid_json",
        "EOF",
    );
    let answer = parse(with(256, length.to_string()).await);
    assert_eq!(answer.0, 200, "{}", answer.1);

    // Binary data whose size does not match the shape.
    let header = json!({"inputs": [{"name": "input", "shape": [64], "datatype": "FP32",
                                    "parameters": {"binary_data_size": 8}}]});
    let mut body = serde_json::to_vec(&header).unwrap();
    let length = body.len().to_string();
    body.extend([0u8; 8]);
    let answer = parse(
        server
            .post_raw(INFER, &[("Inference-Header-Content-Length", length)], body)
            .await,
    );
    assert_error(&answer, 400, "bad_input", "8 bytes of binary data");
    server.stop().await;
}

#[actix_web::test]
async fn oversized_bodies_get_413() {
    let server = start(ApiSettings {
        max_body_bytes: 1000,
        ..ApiSettings::default()
    })
    .await;
    let (status, _, body) = server.post_raw(INFER, &[], vec![b' '; 5000]).await;
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_error(&(status, body), 413, "payload_too_large", "1000 bytes");
    // A request under the cap still works.
    let small = json!({"inputs": [{"name": "input", "shape": [64], "datatype": "FP32", "data": vec![0; 64]}]});
    assert_eq!(server.post_json(INFER, &small).await.0, 200);
    server.stop().await;
}

#[actix_web::test]
async fn an_objective_that_cannot_be_met_is_refused_at_once() {
    let server = start_default().await;
    let mut request = mlp_request(1.0);
    // 10 µs: less than one execution of the model.
    request["parameters"] = json!({"slo_ms": 0.01});
    let started = std::time::Instant::now();
    let answer = server.post_json(INFER, &request).await;
    // Refused at admission (cold model) or as soon as it waits past hope (warm one).
    let kind = answer.1["error_type"].as_str().unwrap_or_default();
    let outcome: Outcome = kind.parse().unwrap_or_else(|e| panic!("{e}: {}", answer.1));
    assert!(
        matches!(outcome, Outcome::DeadlineUnreachable | Outcome::TimedOut),
        "{}",
        answer.1
    );
    assert_error(&answer, 503, outcome.as_str(), "latency objective");
    assert!(started.elapsed() < std::time::Duration::from_millis(500));
    let (status, _) = server.post_json(INFER, &mlp_request(1.0)).await;
    assert_eq!(status, 200);
    server.stop().await;
}
