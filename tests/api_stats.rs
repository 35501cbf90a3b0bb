//! Triton's statistics extension over real HTTP and gRPC: a model's counts and durations
//! after requests of known sizes and outcomes, the same over both protocols, every model
//! listed, unknown names and versions refused as on the model's other routes.

mod api_support;
mod grpc_support;

use std::time::Duration;

use api_support::{assert_error, mlp_request, start_default, TestServer};
use clockwork::api::grpc::proto::ModelStatisticsRequest;
use grpc_support::grpc;
use serde_json::{json, Value};

/// `mlp`'s statistics once its successes reach `successes` (the counts come from events,
/// folded in by the metrics task a moment after the answers).
async fn stats_after(server: &TestServer, successes: u64) -> Value {
    for _ in 0..200 {
        let (status, stats) = server.get_json("/v2/models/mlp/stats").await;
        assert_eq!(status, 200, "{stats}");
        let entry = stats["model_stats"][0].clone();
        if entry["inference_stats"]["success"]["count"] == json!(successes) {
            return entry;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("mlp's statistics never counted {successes} successes");
}

/// Mutations that break it: `inference_count` from the requests instead of their items,
/// the compute and queue durations swapped, a batch not counted by its size.
#[actix_web::test]
async fn a_models_counts_and_durations_over_http_and_grpc() {
    let since_epoch_ms = || {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        now.expect("after 1970").as_millis() as u64
    };
    let began_ms = since_epoch_ms();
    let server = start_default().await;
    let (_, metadata) = server.get_json("/v2").await;
    assert!(metadata["extensions"]
        .as_array()
        .unwrap()
        .contains(&json!("statistics")));
    let zero = stats_after(&server, 0).await;
    assert_eq!(
        (zero["name"].clone(), zero["version"].clone()),
        (json!("mlp"), json!("1"))
    );
    assert_eq!(zero["inference_count"], 0);
    assert_eq!(zero["last_inference"], 0);

    // Two successes (one of two items), and one request refused for its input.
    let mut two = mlp_request(0.5);
    two["inputs"][0]["shape"] = json!([2, 64]);
    two["inputs"][0]["data"] = json!(vec![0.5; 128]);
    for request in [mlp_request(0.25), two] {
        let (status, answer) = server.post_json("/v2/models/mlp/infer", &request).await;
        assert_eq!(status, 200, "{answer}");
    }
    let mut bad = mlp_request(0.5);
    bad["inputs"][0]["shape"] = json!([1, 63]);
    let answer = server.post_json("/v2/models/mlp/infer", &bad).await;
    assert_error(&answer, 400, "bad_input", "input");

    let entry = stats_after(&server, 2).await;
    let stats = &entry["inference_stats"];
    assert_eq!(entry["inference_count"], 3, "{entry}");
    assert!(entry["execution_count"].as_u64().unwrap() >= 1, "{entry}");
    assert_eq!(stats["fail"]["count"], 1, "{entry}");
    for timed in ["queue", "compute_infer"] {
        assert_eq!(stats[timed]["count"], 2, "{timed}: {entry}");
    }
    let ns = |what: &str| stats[what]["ns"].as_u64().unwrap();
    // The same durations as Triton's Prometheus counters, in their microseconds; each
    // answer took its wait and its batch's run, and more.
    let (_, text) = server.get("/metrics").await;
    let text = String::from_utf8(text).unwrap();
    let counter = |name: &str| -> u64 {
        let head = format!("{name}{{model=\"mlp\"}} ");
        let line = text.lines().find_map(|l| l.strip_prefix(head.as_str()));
        let value = line.and_then(|v| v.trim().parse().ok());
        value.unwrap_or_else(|| panic!("{name} of mlp in /metrics"))
    };
    assert_eq!(
        ns("queue"),
        counter("nv_inference_queue_duration_us") * 1000
    );
    let compute_us = counter("nv_inference_compute_infer_duration_us");
    assert_eq!(ns("compute_infer"), compute_us * 1000);
    assert!(ns("compute_infer") > 0 && ns("queue") > 0, "{entry}");
    assert!(
        ns("success") >= ns("compute_infer") + ns("queue"),
        "{entry}"
    );
    // Every batch that ran, by size: as many as the executions, none larger than the two
    // requests' three items, each with its run's time; the last success just now.
    let batches = entry["batch_stats"].as_array().expect("batch_stats");
    let count = |b: &Value| b["compute_infer"]["count"].as_u64().unwrap();
    let ran: u64 = batches.iter().map(count).sum();
    assert_eq!(json!(ran), entry["execution_count"], "{entry}");
    for batch in batches {
        let size = batch["batch_size"].as_u64().unwrap();
        let took = batch["compute_infer"]["ns"].as_u64().unwrap();
        assert!((1..=3).contains(&size) && took > 0, "{entry}");
    }
    let last = entry["last_inference"].as_u64().unwrap();
    assert!(
        (began_ms..=since_epoch_ms()).contains(&last),
        "{last} {entry}"
    );

    // The same over gRPC.
    let mut client = grpc(&server.state).await;
    let ask = |name: &str, version: &str| ModelStatisticsRequest {
        name: name.into(),
        version: version.into(),
    };
    let answer = client
        .model_statistics(ask("mlp", "1"))
        .await
        .expect("statistics");
    let grpc = answer.into_inner().model_stats;
    assert_eq!(grpc.len(), 1);
    let grpc_stats = grpc[0].inference_stats.clone().expect("inference_stats");
    assert_eq!(grpc[0].inference_count, 3);
    let compute = grpc_stats.compute_infer.expect("compute_infer");
    assert_eq!((compute.count, compute.ns), (2, ns("compute_infer")));
    assert_eq!(grpc[0].batch_stats.len(), batches.len());
    assert_eq!(json!(grpc[0].last_inference), entry["last_inference"]);
    let every = client
        .model_statistics(ask("", ""))
        .await
        .expect("every model");
    let names: Vec<String> = every
        .into_inner()
        .model_stats
        .into_iter()
        .map(|m| m.name)
        .collect();

    // Every model, over HTTP too; unknown names and versions as on the other routes.
    let (_, all) = server.get_json("/v2/models/stats").await;
    let http_names: Vec<&str> = all["model_stats"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert!(
        http_names.contains(&"mlp") && http_names.contains(&"typed"),
        "{all}"
    );
    assert_eq!(names, http_names);
    let unknown = server.get_json("/v2/models/nope/stats").await;
    assert_error(&unknown, 404, "unknown_model", "nope");
    let version = server.get_json("/v2/models/mlp/versions/7/stats").await;
    assert_error(&version, 404, "unknown_version", "7");
    let (status, _) = server.get_json("/v2/models/mlp/versions/1/stats").await;
    assert_eq!(status, 200);
    let refused = client.model_statistics(ask("nope", "")).await;
    assert_eq!(refused.expect_err("unknown").code(), tonic::Code::NotFound);
    server.stop().await;
}
