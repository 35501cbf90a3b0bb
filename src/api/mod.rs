//! The HTTP API (actix-web). For now the health routes of the Open Inference Protocol;
//! the inference, metadata, repository and metrics routes build on the same state.
//!
//! Handlers only translate: HTTP in, a typed message to the controller, HTTP out.

use actix::Addr;
use actix_web::{web, HttpResponse};

use crate::actors::messages::SnapshotController;
use crate::actors::Controller;

/// What every handler can reach.
#[derive(Clone)]
pub struct ApiState {
    pub controller: Addr<Controller>,
}

/// Mounts the routes.
pub fn routes(config: &mut web::ServiceConfig) {
    config
        .route("/v2/health/live", web::get().to(live))
        .route("/v2/health/ready", web::get().to(ready));
}

/// Alive as long as the process answers.
async fn live() -> HttpResponse {
    HttpResponse::Ok().finish()
}

/// Ready while the controller runs and admits requests; 503 while draining.
async fn ready(state: web::Data<ApiState>) -> HttpResponse {
    match state.controller.send(SnapshotController).await {
        Ok(snapshot) if !snapshot.draining => HttpResponse::Ok().finish(),
        _ => HttpResponse::ServiceUnavailable().finish(),
    }
}
