//! Server health and identity: `GET /v2/health/live`, `GET /v2/health/ready`, `GET /v2`.
//!
//! Health answers carry their meaning in the status code alone (200 or 503), as load
//! balancers and Kubernetes probes read them.

use actix_web::{get, web, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use super::ApiState;
use crate::actors::messages::SnapshotController;

/// Protocol extensions this server implements.
pub const EXTENSIONS: &[&str] = &[
    "binary_tensor_data",
    "model_configuration",
    "model_repository",
    "parameters",
    "statistics",
    "system_shared_memory",
];

/// `GET /v2`: who the server is.
#[derive(Debug, Serialize, ToSchema)]
pub struct ServerMetadata {
    pub name: String,
    pub version: String,
    pub extensions: Vec<String>,
}

/// Alive as long as the process answers.
#[utoipa::path(tag = "health", responses((status = 200, description = "alive")))]
#[get("/v2/health/live")]
pub(super) async fn live() -> HttpResponse {
    HttpResponse::Ok().finish()
}

/// Ready while the controller runs and admits requests; 503 while draining, or while
/// fewer devices have joined than `[cluster] wait_for_devices`.
#[utoipa::path(tag = "health", responses(
    (status = 200, description = "admitting requests"),
    (status = 503, description = "shutting down, or waiting for workers' devices"),
))]
#[get("/v2/health/ready")]
pub(super) async fn ready(state: web::Data<ApiState>) -> HttpResponse {
    if admitting(&state).await {
        HttpResponse::Ok().finish()
    } else {
        HttpResponse::ServiceUnavailable().finish()
    }
}

/// Whether the controller runs and admits requests (not draining), for every protocol.
pub(super) async fn admitting(state: &ApiState) -> bool {
    let snapshot = state.controller.send(SnapshotController).await;
    snapshot.is_ok_and(|s| !s.draining && !s.waiting_for_devices)
}

/// Name, version and extensions of the server.
#[utoipa::path(tag = "health", responses((status = 200, body = ServerMetadata)))]
#[get("/v2")]
pub(super) async fn server_metadata() -> web::Json<ServerMetadata> {
    web::Json(identity())
}

/// Who the server is, for every protocol.
pub(super) fn identity() -> ServerMetadata {
    ServerMetadata {
        name: env!("CARGO_PKG_NAME").to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        extensions: EXTENSIONS.iter().map(|e| (*e).to_owned()).collect(),
    }
}
