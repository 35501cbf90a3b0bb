//! Triton's model repository extension: index, unload (requests refused), load again.

mod api_support;

use api_support::{assert_error, index_names, mlp_request, start_default};
use serde_json::json;

#[actix_web::test]
async fn unload_refuses_and_load_restores() {
    let server = start_default().await;
    let (status, index) = server.post_json("/v2/repository/index", &json!({})).await;
    assert_eq!(status, 200);
    let names = index_names(&index);
    assert_eq!(names, ["mlp", "resnet", "typed"]);
    assert_eq!(index[0]["state"], "READY");

    let (status, _, _) = server
        .post_raw("/v2/repository/models/mlp/unload", &[], Vec::new())
        .await;
    assert_eq!(status, 200);
    assert_eq!(server.get("/v2/models/mlp/ready").await.0, 503);
    let answer = server
        .post_json("/v2/models/mlp/infer", &mlp_request(1.0))
        .await;
    assert_error(&answer, 503, "model_unavailable", "mlp");
    let (_, ready) = server
        .post_json("/v2/repository/index", &json!({"ready": false}))
        .await;
    assert_eq!(
        ready,
        json!([{"name": "mlp", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}])
    );
    // Metadata stays readable while unloaded.
    assert_eq!(server.get("/v2/models/mlp").await.0, 200);

    let (status, _) = server
        .post_json("/v2/repository/models/mlp/load", &json!({}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(server.get("/v2/models/mlp/ready").await.0, 200);
    let (status, _) = server
        .post_json("/v2/models/mlp/infer", &mlp_request(1.0))
        .await;
    assert_eq!(status, 200);

    let answer = server
        .post_json("/v2/repository/models/nope/load", &json!({}))
        .await;
    assert_error(&answer, 404, "unknown_model", "nope");
    let answer = server
        .post_json(
            "/v2/repository/models/mlp/load",
            &json!({"parameters": {"config": "{}"}}),
        )
        .await;
    assert_error(&answer, 400, "bad_input", "config");
    let (status, _, _) = server
        .post_raw("/v2/repository/index", &[], b"{not json".to_vec())
        .await;
    assert_eq!(status, 400);
    server.stop().await;
}
