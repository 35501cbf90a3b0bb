//! The OpenAPI document stays true: it is the one the code builds, every documented route
//! answers (the other direction holds by construction: routes are mounted through the
//! calls that document them), and the documented error kinds are the ones the server uses.

mod api_support;

use api_support::start_default;
use serde_json::{json, Value};

#[actix_web::test]
async fn every_documented_route_is_served() {
    let server = start_default().await;
    let (status, document) = server.get_json("/v2/openapi.json").await;
    assert_eq!(status, 200);
    let built = serde_json::to_value(clockwork::api::openapi::document()).unwrap();
    assert_eq!(document, built);
    assert!(document["openapi"].as_str().unwrap().starts_with("3."));

    let paths = document["paths"].as_object().unwrap();
    let expected = [
        "/v2/health/live",
        "/v2/health/ready",
        "/v2",
        "/v2/models/{model}",
        "/v2/models/{model}/versions/{version}",
        "/v2/models/{model}/ready",
        "/v2/models/{model}/versions/{version}/ready",
        "/v2/models/{model}/config",
        "/v2/models/{model}/versions/{version}/config",
        "/v2/models/{model}/infer",
        "/v2/models/{model}/versions/{version}/infer",
        "/v2/repository/index",
        "/v2/repository/models/{model}/load",
        "/v2/repository/models/{model}/unload",
        "/metrics",
        "/v2/openapi.json",
    ];
    let mut documented: Vec<&str> = paths.keys().map(String::as_str).collect();
    documented.sort_unstable();
    let mut wanted = expected.to_vec();
    wanted.sort_unstable();
    assert_eq!(documented, wanted);

    for (path, item) in paths {
        let concrete = path.replace("{model}", "mlp").replace("{version}", "1");
        for method in item.as_object().unwrap().keys() {
            let (status, body) = match method.as_str() {
                "get" => server.get_json(&concrete).await,
                "post" => server.post_json(&concrete, &json!({})).await,
                other => panic!("undocumented method {other}"),
            };
            assert_ne!(
                body["error_type"], "not_found",
                "{method} {concrete} is documented but not served ({status})"
            );
            let parameters = item[method]["parameters"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let named: Vec<&str> = parameters
                .iter()
                .filter_map(|p| p["name"].as_str())
                .collect();
            for segment in ["model", "version"] {
                if path.contains(&format!("{{{segment}}}")) {
                    assert!(
                        named.contains(&segment),
                        "{method} {path} documents {segment}"
                    );
                }
            }
        }
    }
    let error = &document["components"]["schemas"]["ErrorBody"];
    assert_eq!(error["required"], json!(["error", "error_type"]));
    let _: &Value = error;
    server.stop().await;
}
