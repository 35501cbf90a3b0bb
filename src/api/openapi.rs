//! The OpenAPI document of the API, served at `/v2/openapi.json`.
//!
//! Paths and schemas are collected from the very `service(...)` calls that mount the
//! handlers (utoipa-actix-web), so a route cannot be served without being documented;
//! `tests/api_openapi.rs` checks the other direction (every documented route answers).

use actix_web::{get, web, App, HttpResponse};
use utoipa::OpenApi;
use utoipa_actix_web::AppExt;

use super::error::ErrorBody;
use super::ApiState;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "clockwork",
        description = "Open Inference Protocol (KServe V2) with Triton's binary tensor data, \
            model configuration, model repository, statistics and system shared-memory extensions. \
            Every error answers \
            {\"error\": message, \"error_type\": kind}."
    ),
    components(schemas(ErrorBody)),
    tags(
        (name = "health", description = "liveness, readiness, server metadata"),
        (name = "models", description = "model metadata, readiness, Triton configuration"),
        (name = "inference", description = "inference with JSON or binary tensors"),
        (name = "repository", description = "Triton's model repository extension"),
        (name = "shared memory", description = "Triton's system shared-memory extension: regions of /dev/shm objects that requests place tensors in"),
        (name = "server", description = "metrics and this document"),
    )
)]
struct Base;

/// The document, built from the routes.
pub fn document() -> utoipa::openapi::OpenApi {
    let (_, document) = App::new()
        .into_utoipa_app()
        .openapi(Base::openapi())
        .configure(super::services)
        .split_for_parts();
    document
}

/// This document.
#[utoipa::path(tag = "server", responses(
    (status = 200, description = "the OpenAPI 3.1 document of this API", content_type = "application/json"),
))]
#[get("/v2/openapi.json")]
pub(super) async fn openapi_json(state: web::Data<ApiState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(state.openapi.clone())
}
