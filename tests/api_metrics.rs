//! `/metrics`: Triton's names with a `model` label and the runtime's own, fed by events.

mod api_support;
mod grpc_support;

use std::time::Duration;

use api_support::{mlp_request, start_default};
use clockwork::outcome::Outcome;
use serde_json::json;

/// The value of the series `name` (with its labels, as printed), if present.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// Refusals of `mlp` by the policy, whichever the reason.
fn refusals(text: &str) -> f64 {
    [Outcome::DeadlineUnreachable, Outcome::TimedOut]
        .iter()
        .filter_map(|r| {
            value(
                text,
                &format!("clockwork_requests{{model=\"mlp\",outcome=\"{r}\"}}"),
            )
        })
        .sum()
}

/// The metrics text once `ready` holds of it; fails after a bounded number of reads.
async fn metrics_when(server: &api_support::TestServer, ready: impl Fn(&str) -> bool) -> String {
    const TRIES: usize = 200;
    let mut text = String::new();
    for _ in 0..TRIES {
        let (status, body) = server.get("/metrics").await;
        assert_eq!(status, 200);
        text = String::from_utf8(body).unwrap();
        if ready(&text) {
            return text;
        }
        // Gives the metrics task its turn before reading again.
        actix_web::rt::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the metrics never reached the expected counts after {TRIES} reads:\n{text}");
}

/// A client that has its answer finds it counted in the next scrape, without waiting, and
/// its batch too: the front end counts the answer before it sends it, the metrics fold the
/// events in on each read (`Metrics::catch_up`), and the controller publishes a batch's
/// event before it sends its answers. Mutations that break it: `render` without
/// `catch_up` (the events folded in only every 10 ms: the batch is missing); the success
/// not counted in `Metrics::delivered`.
#[actix_web::test]
async fn an_answer_is_counted_in_the_next_scrape() {
    let server = start_default().await;
    let ok = "clockwork_requests{model=\"mlp\",outcome=\"ok\"}";
    let batches = "nv_inference_exec_count{model=\"mlp\"}";
    for answered in 1..=20 {
        let (status, _) = server
            .post_json("/v2/models/mlp/infer", &mlp_request(1.0))
            .await;
        assert_eq!(status, 200);
        let text = String::from_utf8(server.get("/metrics").await.1).expect("text");
        assert_eq!(value(&text, ok), Some(f64::from(answered)), "{text}");
        assert_eq!(value(&text, batches), Some(f64::from(answered)), "{text}");
    }
    server.stop().await;
}

#[actix_web::test]
async fn successes_failures_and_device_work_are_counted() {
    let server = start_default().await;
    for _ in 0..3 {
        let (status, _) = server
            .post_json("/v2/models/mlp/infer", &mlp_request(1.0))
            .await;
        assert_eq!(status, 200);
    }
    let bad = json!({"inputs": []});
    assert_eq!(server.post_json("/v2/models/mlp/infer", &bad).await.0, 400);
    let mut late = mlp_request(1.0);
    late["parameters"] = json!({"slo_ms": 0.01});
    assert_eq!(server.post_json("/v2/models/mlp/infer", &late).await.0, 503);
    assert_eq!(server.post_json("/v2/models/x/infer", &bad).await.0, 404);

    // Events reach the metrics task asynchronously: wait until every event-fed count is
    // in (the refusal, the last success and the load are each counted from one event).
    let text = metrics_when(&server, |text| {
        value(text, "nv_inference_request_failure{model=\"mlp\"}") == Some(2.0)
            && value(text, "clockwork_requests{model=\"mlp\",outcome=\"ok\"}") == Some(3.0)
            && refusals(text) == 1.0
            // mlp's load, and the zoo's other models preloaded while memory allows.
            && value(text, "clockwork_loads{device=\"0\"}").is_some_and(|n| n >= 1.0)
    })
    .await;
    let get = |series: &str| value(&text, series).unwrap_or_else(|| panic!("{series} in\n{text}"));
    assert_eq!(get("nv_inference_request_success{model=\"mlp\"}"), 3.0);
    assert_eq!(get("nv_inference_count{model=\"mlp\"}"), 3.0);
    assert_eq!(get("nv_inference_request_failure{model=\"mlp\"}"), 2.0);
    assert_eq!(get("nv_inference_request_success{model=\"resnet\"}"), 0.0);
    assert!(get("nv_inference_exec_count{model=\"mlp\"}") >= 1.0);
    assert!(get("nv_inference_request_duration_us{model=\"mlp\"}") > 0.0);
    assert!(get("nv_inference_compute_infer_duration_us{model=\"mlp\"}") > 0.0);
    assert_eq!(
        get("nv_inference_pending_request_count{model=\"mlp\"}"),
        0.0
    );
    assert_eq!(get("clockwork_requests{model=\"mlp\",outcome=\"ok\"}"), 3.0);
    // Refused at admission or on expiry, depending on whether the model was warm.
    assert_eq!(refusals(&text), 1.0, "{text}");
    assert_eq!(
        get("clockwork_request_errors{error_type=\"bad_input\"}"),
        1.0
    );
    assert_eq!(
        get("clockwork_request_errors{error_type=\"unknown_model\"}"),
        1.0
    );
    assert!(get("clockwork_loads{device=\"0\"}") >= 1.0);
    assert!(get("clockwork_device_busy_seconds{device=\"0\",lane=\"exec\"}") > 0.0);
    assert!(get("clockwork_prediction_error_seconds_count{kind=\"infer\"}") >= 1.0);
    assert!(text.contains("# TYPE nv_inference_request_success counter"));
    // Answers by outcome: every kind, decided by the controller or before it.
    assert_eq!(
        get("clockwork_requests{model=\"mlp\",outcome=\"bad_input\"}"),
        1.0
    );
    assert_eq!(
        get("clockwork_requests{model=\"mlp\",outcome=\"late\"}"),
        0.0
    );
    // One observation per success in each latency histogram, the end to end one counted
    // once the answer was encoded (before the reply, so before this read).
    for family in ["duration", "queue", "compute"] {
        let name = format!("clockwork_request_{family}_seconds");
        assert_eq!(get(&format!("{name}_count{{model=\"mlp\"}}")), 3.0);
        assert_eq!(
            get(&format!("{name}_bucket{{model=\"mlp\",le=\"+Inf\"}}")),
            3.0
        );
        assert_eq!(get(&format!("{name}_count{{model=\"resnet\"}}")), 0.0);
    }
    assert!(
        get("clockwork_request_duration_seconds_sum{model=\"mlp\"}")
            >= get("clockwork_request_compute_seconds_sum{model=\"mlp\"}")
    );
    // Series start at zero, so a rate sees the first refusal.
    assert_eq!(
        get("clockwork_edge_refusals{model=\"mlp\",stage=\"before_reading\"}"),
        0.0
    );
    // No label carries an unknown model's name.
    assert!(!text.contains("model=\"x\""));
    server.stop().await;
}

/// Every metric name a query of the Grafana dashboard reads (`clockwork_*`, `nv_*`).
fn dashboard_metrics() -> std::collections::BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/clockwork.json");
    let text = std::fs::read_to_string(path).expect("the dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut exprs: Vec<&str> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().expect("targets"))
        .map(|t| t["expr"].as_str().expect("expr"))
        .collect();
    exprs.extend(dashboard["templating"]["list"][0]["definition"].as_str());
    exprs
        .iter()
        .flat_map(|e| e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|word| word.starts_with("clockwork_") || word.starts_with("nv_"))
        .map(str::to_owned)
        .collect()
}

#[actix_web::test]
async fn every_metric_the_grafana_dashboard_reads_is_served() {
    let wanted = dashboard_metrics();
    // Each panel of the issue: outcomes and goodput, the three latencies, edge refusals.
    for name in [
        "clockwork_requests",
        "clockwork_request_duration_seconds_bucket",
        "clockwork_request_queue_seconds_bucket",
        "clockwork_request_compute_seconds_bucket",
        "clockwork_edge_refusals",
    ] {
        assert!(wanted.contains(name), "{name} not in {wanted:?}");
    }
    let server = start_default().await;
    let (status, _) = server
        .post_json("/v2/models/mlp/infer", &mlp_request(1.0))
        .await;
    assert_eq!(status, 200);
    let served = |text: &str, name: &str| {
        text.lines().any(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with(['{', ' ']))
        })
    };
    // Device time arrives with an event: wait until every name is there (or fail, showing
    // the text served).
    let text = metrics_when(&server, |text| wanted.iter().all(|n| served(text, n))).await;
    assert!(wanted.iter().all(|n| served(&text, n)));
    server.stop().await;
}

/// One emulated V100 whose LOADs fail for its first second: it is taken out while the
/// model loads at start, and its probes (0.1, 0.3, 0.7 and 1.5 s after) bring it back at
/// about 1.5 s: time enough for a test on a busy machine to see it out.
///
/// One device, not two: with a healthy second device, the preload that failed on device 0
/// may be placed on the other before device 0 retries it (which comes first is a race in
/// real time), and device 0, with one strike, is never taken out.
const LOADS_FAIL_AT_START: &str = r#"
[[devices]]
backend = "sim"
profile = "v100"
count = 1

[devices.faults]
devices = [0]
failing_loads = { from = "0s", lasting = "1s" }

[[models]]
name = "mlp"
profile = "mlp-small"
slo = "100ms"
"#;

/// Whether device 0 is out of service, by the controller's snapshot.
async fn device_0_out(runtime: &clockwork::actors::Runtime) -> bool {
    use clockwork::actors::messages::SnapshotController;
    let snapshot = runtime.controller.send(SnapshotController).await.unwrap();
    snapshot.policy.devices[0].suspect
}

/// Waits (bounded) until device 0's being out is `out`.
async fn until_device_0(runtime: &clockwork::actors::Runtime, out: bool) {
    for _ in 0..1_000 {
        if device_0_out(runtime).await == out {
            return;
        }
        actix_web::rt::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("device 0 never became out = {out}");
}

/// A device taken out before the API started is counted out, with its failed LOADs, and
/// its coming back leaves no device out (the metrics read every event since the runtime
/// started).
///
/// Mutation that breaks it: the metrics subscribing when the API starts
/// (`runtime.events.subscribe()` in `ApiState::new`): no outage, no failed LOAD, and
/// `clockwork_devices_out` at -1 once the device is back.
#[actix_web::test]
async fn a_device_out_before_the_api_started_is_counted() {
    use clockwork::actors::{Placement, RuntimeBuilder};
    use clockwork::api::{ApiSettings, ApiState};
    use clockwork::config::Config;
    use clockwork::time::Clock;

    let config = Config::parse(LOADS_FAIL_AT_START).unwrap();
    let runtime = RuntimeBuilder::from_config(Clock::start(), &config)
        .unwrap()
        .placement(Placement::Threads)
        .start()
        .unwrap();
    until_device_0(&runtime, true).await;
    let state = ApiState::new(&runtime, ApiSettings::default()).unwrap();
    let read = |text: &str, series: &str| value(text, series).unwrap_or(0.0);
    let mut text = String::new();
    for _ in 0..200 {
        text = state.metrics.render();
        if read(&text, "clockwork_devices_out") == 1.0 {
            break;
        }
        actix_web::rt::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(read(&text, "clockwork_devices_out"), 1.0, "{text}");
    let outages = "clockwork_device_outages{cause=\"failing\"}";
    assert_eq!(read(&text, outages), 1.0, "{text}");
    let failed = "clockwork_device_faults{device=\"0\",kind=\"load_failed\"}";
    assert!(read(&text, failed) >= 3.0, "{text}");

    until_device_0(&runtime, false).await;
    for _ in 0..200 {
        text = state.metrics.render();
        if read(&text, "clockwork_devices_out") != 1.0 {
            break;
        }
        actix_web::rt::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(read(&text, "clockwork_devices_out"), 0.0, "{text}");
    let passed = "clockwork_device_probes{device=\"0\",result=\"passed\"}";
    assert_eq!(read(&text, passed), 1.0, "{text}");
    runtime.shutdown().await;
}

/// The sum of `clockwork_requests` of model `slow`, every outcome.
fn answers_of_slow(text: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(r#"clockwork_requests{model="slow","#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A request whose client leaves before its answer is counted once, by the controller's
/// outcome (no answer was given): here a gRPC call its client gives up on (the stream is
/// reset and the server drops the call) while its 200 ms run goes on. The front end counts
/// the answers it gives and the controller's event is held until it decides; mutation that
/// breaks it: the front end not letting the request go when it is dropped
/// (`Tally::left` out of `Drop for Front`), and the request is never counted.
#[actix_web::test]
async fn a_request_whose_client_left_is_counted_by_the_controllers_outcome() {
    use clockwork::time::MS;
    let model = api_support::unbatched_mlp("slow", 1000 * MS, 200 * MS);
    let server = api_support::start_alone(model).await;
    let path = "/v2/models/slow/infer";
    // The first requests find the model cold.
    let mut warm = false;
    for _ in 0..50 {
        warm = server.post_json(path, &mlp_request(1.0)).await.0 == 200;
        if warm {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(warm, "the model never became servable");
    let ok = r#"clockwork_requests{model="slow",outcome="ok"}"#;
    let (_, text) = server.get("/metrics").await;
    let text = String::from_utf8(text).expect("text");
    let (before, ok_before) = (answers_of_slow(&text), value(&text, ok).unwrap_or(0.0));
    let mut client = grpc_support::grpc(&server.state).await;
    let mut request = grpc_support::mlp(&[1.0; 64], true);
    request.model_name = "slow".into();
    let call = client.model_infer(request);
    let gave_up = tokio::time::timeout(Duration::from_millis(50), call).await;
    assert!(gave_up.is_err(), "answered before its run: {gave_up:?}");
    let counted = metrics_when(&server, |text| answers_of_slow(text) > before).await;
    // Time for a second count, if there were one.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (_, text) = server.get("/metrics").await;
    let text = String::from_utf8(text).expect("text");
    assert_eq!(answers_of_slow(&text), before + 1.0, "{counted}\n{text}");
    assert_eq!(value(&text, ok), Some(ok_before + 1.0), "{text}");
    server.stop().await;
}
