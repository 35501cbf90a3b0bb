//! `/metrics`: Triton's names with a `model` label and the runtime's own, fed by events.

mod api_support;

use std::time::Duration;

use api_support::{mlp_request, start_default};
use serde_json::json;

/// The value of the series `name` (with its labels, as printed), if present.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
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

    // Events reach the metrics task asynchronously: wait for them.
    let mut text = String::new();
    for _ in 0..100 {
        let (status, body) = server.get("/metrics").await;
        assert_eq!(status, 200);
        text = String::from_utf8(body).unwrap();
        if value(&text, "nv_inference_request_failure{model=\"mlp\"}") == Some(2.0)
            && value(&text, "nv_inference_request_success{model=\"mlp\"}") == Some(3.0)
        {
            break;
        }
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
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
    assert_eq!(get("clockwork_requests_within_slo{model=\"mlp\"}"), 3.0);
    // Refused at admission or on expiry, depending on whether the model was warm.
    let refusals: f64 = ["deadline_unreachable", "timed_out"]
        .iter()
        .filter_map(|r| {
            value(
                &text,
                &format!("clockwork_refusals{{model=\"mlp\",reason=\"{r}\"}}"),
            )
        })
        .sum();
    assert_eq!(refusals, 1.0, "{text}");
    assert_eq!(
        get("clockwork_request_errors{error_type=\"bad_input\"}"),
        1.0
    );
    assert_eq!(
        get("clockwork_request_errors{error_type=\"unknown_model\"}"),
        1.0
    );
    assert_eq!(get("clockwork_loads{device=\"0\"}"), 1.0);
    assert!(get("clockwork_device_busy_seconds{device=\"0\",lane=\"exec\"}") > 0.0);
    assert!(get("clockwork_prediction_error_seconds_count{kind=\"infer\"}") >= 1.0);
    assert!(text.contains("# TYPE nv_inference_request_success counter"));
    // No label carries an unknown model's name.
    assert!(!text.contains("model=\"x\""));
    server.stop().await;
}
