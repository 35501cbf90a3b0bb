//! The OpenAPI document stays true: it is the one the code builds, every documented route
//! answers (the other direction holds by construction: routes are mounted through the
//! calls that document them), and the routes that list their error kinds list exactly the
//! kinds they can answer, each under its status.

mod api_support;

use std::collections::BTreeSet;

use api_support::start_default;
use clockwork::api::status_for;
use clockwork::outcome::Outcome;
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
        "/v2/models/stats",
        "/v2/models/{model}/stats",
        "/v2/models/{model}/versions/{version}/stats",
        "/v2/systemsharedmemory/status",
        "/v2/systemsharedmemory/region/{name}/status",
        "/v2/systemsharedmemory/region/{name}/register",
        "/v2/systemsharedmemory/unregister",
        "/v2/systemsharedmemory/region/{name}/unregister",
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
    server.stop().await;
}

/// The error kinds each route can answer. The inference routes can answer every kind but
/// `load_failed` (repository loads only) and `not_found` (no route at all), so a new kind
/// must be documented there or excluded here.
fn answerable() -> Vec<(&'static str, Vec<Outcome>)> {
    let inference: Vec<Outcome> = Outcome::ALL
        .iter()
        .copied()
        .filter(|o| !o.is_success() && !matches!(o, Outcome::LoadFailed | Outcome::NotFound))
        .collect();
    use Outcome::*;
    vec![
        ("/v2/models/{model}/infer", inference.clone()),
        ("/v2/models/{model}/versions/{version}/infer", inference),
        ("/v2/repository/index", vec![InvalidJson]),
        (
            "/v2/repository/models/{model}/load",
            vec![
                InvalidJson,
                BadInput,
                LoadFailed,
                UnknownModel,
                ShuttingDown,
                Unauthorized,
                Forbidden,
            ],
        ),
        (
            "/v2/repository/models/{model}/unload",
            vec![InvalidJson, BadInput, UnknownModel, Unauthorized, Forbidden],
        ),
        (
            "/v2/systemsharedmemory/region/{name}/register",
            vec![InvalidJson, BadInput, Unauthorized, Forbidden],
        ),
        (
            "/v2/systemsharedmemory/region/{name}/unregister",
            vec![BadInput, Unauthorized, Forbidden],
        ),
        (
            "/v2/systemsharedmemory/unregister",
            vec![Unauthorized, Forbidden],
        ),
    ]
}

/// The kinds a route's error responses list, checking each sits under its own status.
fn documented_kinds(path: &str, operation: &Value) -> BTreeSet<Outcome> {
    let mut kinds = BTreeSet::new();
    let responses = operation["responses"].as_object().expect("responses");
    for (status, response) in responses {
        let status: u16 = status.parse().expect("a numeric status");
        if status < 400 {
            continue;
        }
        let description = response["description"].as_str().unwrap_or_default();
        for name in description.split(", ") {
            let kind: Outcome = name
                .parse()
                .unwrap_or_else(|e| panic!("{path} {status}: {e} in '{description}'"));
            assert_eq!(
                status_for(kind).as_u16(),
                status,
                "{path} documents {kind} under {status}"
            );
            assert!(kinds.insert(kind), "{path} documents {kind} twice");
        }
    }
    kinds
}

#[test]
fn each_route_documents_the_error_kinds_it_answers() {
    let document = serde_json::to_value(clockwork::api::openapi::document()).unwrap();
    for (path, kinds) in answerable() {
        let item = document["paths"][path]
            .as_object()
            .unwrap_or_else(|| panic!("{path} is documented"));
        let post = item.get("post").unwrap_or_else(|| panic!("POST {path}"));
        let expected: BTreeSet<Outcome> = kinds.into_iter().collect();
        assert_eq!(documented_kinds(path, post), expected, "{path}");
    }
}
