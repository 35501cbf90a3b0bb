//! Bearer tokens over real HTTP: 401 without a token, 403 with a wrong one, the right one
//! passes; reading routes stay open; refusals are counted and never echo a token.

mod api_support;

use api_support::{assert_error, mlp_request, start_guarded, TestServer, DEFAULT_CONFIG};
use clockwork::api::{Access, ApiSettings};
use clockwork::config::{AuthConfig, Token};
use serde_json::Value;

const ADMIN: &str = "admin-secret-1";
const USER: &str = "user-secret-2";

async fn guarded() -> TestServer {
    let auth = AuthConfig {
        admin_tokens: Some(vec![Token::new(ADMIN)]),
        infer_tokens: Some(vec![Token::new(USER)]),
    };
    let access = Access::from_config(&auth);
    start_guarded(DEFAULT_CONFIG, Vec::new(), ApiSettings::default(), access).await
}

/// POST `body` to `path` with `token` (if any): status, `WWW-Authenticate`, JSON body.
async fn post(
    server: &TestServer,
    path: &str,
    token: Option<&str>,
    body: &Value,
) -> (u16, Option<String>, Value) {
    let headers: Vec<(&str, String)> = token
        .map(|t| ("Authorization", format!("Bearer {t}")))
        .into_iter()
        .collect();
    let bytes = serde_json::to_vec(body).expect("json");
    let (status, headers, body) = server.post_raw(path, &headers, bytes).await;
    let challenge = headers
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body_text = String::from_utf8_lossy(&body).into_owned();
    for secret in [ADMIN, USER, "wrong-token"] {
        assert!(!body_text.contains(secret), "a token echoed: {body_text}");
    }
    (
        status,
        challenge,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    )
}

#[actix_web::test]
async fn inference_and_admin_routes_need_their_tokens() {
    let server = guarded().await;
    let infer = "/v2/models/mlp/infer";
    let request = mlp_request(0.5);

    let (status, challenge, body) = post(&server, infer, None, &request).await;
    assert_error(&(status, body), 401, "unauthorized", "bearer token");
    assert_eq!(challenge.as_deref(), Some("Bearer"));
    let (status, challenge, body) = post(&server, infer, Some("wrong-token"), &request).await;
    assert_error(&(status, body), 403, "forbidden", "not accepted");
    assert_eq!(challenge, None);
    assert_eq!(post(&server, infer, Some(USER), &request).await.0, 200);
    assert_eq!(post(&server, infer, Some(ADMIN), &request).await.0, 200);

    let load = "/v2/repository/models/mlp/load";
    let empty = serde_json::json!({});
    let (status, _, body) = post(&server, load, None, &empty).await;
    assert_error(&(status, body), 401, "unauthorized", "admin");
    let (status, _, body) = post(&server, load, Some(USER), &empty).await;
    assert_error(&(status, body), 403, "forbidden", "admin");
    let unload = "/v2/repository/models/mlp/unload";
    assert_eq!(post(&server, unload, Some(USER), &empty).await.0, 403);
    assert_eq!(
        server.get("/v2/models/mlp/ready").await.0,
        200,
        "not unloaded"
    );
    assert_eq!(post(&server, load, Some(ADMIN), &empty).await.0, 200);

    let (_, metrics) = server.get("/metrics").await;
    let metrics = String::from_utf8_lossy(&metrics);
    for line in [
        "clockwork_request_errors{error_type=\"unauthorized\"} 2",
        "clockwork_request_errors{error_type=\"forbidden\"} 3",
    ] {
        assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    }
    server.stop().await;
}

#[actix_web::test]
async fn reading_routes_stay_open() {
    let server = guarded().await;
    for path in [
        "/v2/health/live",
        "/v2/health/ready",
        "/v2",
        "/v2/models/mlp",
        "/v2/models/mlp/ready",
        "/v2/models/mlp/config",
        "/metrics",
        "/v2/openapi.json",
    ] {
        assert_eq!(server.get(path).await.0, 200, "{path}");
    }
    let index = post(
        &server,
        "/v2/repository/index",
        None,
        &serde_json::json!({}),
    )
    .await;
    assert_eq!(index.0, 200);
    server.stop().await;
}

/// Every POST route of the OpenAPI document but the index is guarded: a route added later
/// is checked here without being listed.
#[actix_web::test]
async fn every_documented_post_route_is_guarded() {
    let server = guarded().await;
    let (_, document) = server.get_json("/v2/openapi.json").await;
    let paths = document["paths"].as_object().expect("paths");
    let mut checked = 0;
    for (path, operations) in paths {
        if operations.get("post").is_none() || path == "/v2/repository/index" {
            continue;
        }
        let concrete = path.replace("{model}", "mlp").replace("{version}", "1");
        let (status, _, body) = post(&server, &concrete, None, &Value::Null).await;
        assert_eq!(status, 401, "{path}: {body}");
        checked += 1;
    }
    assert!(checked >= 4, "only {checked} POST routes documented");
    server.stop().await;
}

mod cpu_support;

/// A load naming a path, `..`, or a directory that leads out of the repository is refused
/// with 400 before anything is read; a plain name is still read.
#[actix_web::test]
async fn loads_never_read_outside_the_repository() {
    let root = cpu_support::TempDir::new("api-access-paths");
    let outside = cpu_support::TempDir::new("api-access-outside");
    cpu_support::write_broken(outside.path(), "secret");
    #[cfg(unix)]
    std::os::unix::fs::symlink(outside.path().join("secret"), root.path().join("escape"))
        .expect("link");
    let text = cpu_support::config(root.path(), 1, 64, 16 << 20)
        .replace("[repository]", "[repository]\nload_all = false");
    let server = api_support::start_with(&text, Vec::new(), ApiSettings::default()).await;
    let empty = serde_json::json!({});
    for name in [
        "..",
        "%2E%2E",
        "..%2Fsecret",
        "%2Fetc%2Fpasswd",
        "a%5Cb",
        "escape",
    ] {
        if name == "escape" && cfg!(not(unix)) {
            continue;
        }
        let path = format!("/v2/repository/models/{name}/load");
        let answer = server.post_json(&path, &empty).await;
        assert_error(
            &answer,
            400,
            "bad_input",
            "read only from inside the repository",
        );
    }
    // A plain name is read from the repository (this one is no ONNX model).
    cpu_support::write_broken(root.path(), "plain");
    let answer = server
        .post_json("/v2/repository/models/plain/load", &empty)
        .await;
    assert_error(&answer, 400, "load_failed", "plain");
    server.stop().await;
}
