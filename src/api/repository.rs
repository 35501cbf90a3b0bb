//! Triton's model repository extension: `POST /v2/repository/index`,
//! `POST /v2/repository/models/{model}/load` and `.../unload`.
//!
//! The repository is the set of models the server was configured with. Unloading a model
//! stops the API from admitting its requests (they get `model_unavailable`, 503) and marks
//! it unavailable in the index; its weights leave the devices when the policy next needs
//! the pages (idle models are evicted first). Loading makes it available again. Models
//! outside the configuration cannot be loaded (`unknown_model`, 404).

use actix_web::{post, web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody};
use super::models::VERSION;
use super::ApiState;

/// Optional body of an index request.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct IndexRequest {
    /// Only models that are (true) or are not (false) ready.
    #[serde(default)]
    pub ready: Option<bool>,
}

/// Optional body of a load or unload request.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct LoadRequest {
    /// Triton's `config` and `file:` overrides are refused: only configured models exist.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub parameters: serde_json::Map<String, serde_json::Value>,
}

impl LoadRequest {
    fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let request: Self = optional_json(body)?;
        if let Some(key) = request
            .parameters
            .keys()
            .find(|k| *k == "config" || k.starts_with("file:"))
        {
            return Err(ApiError::bad_input(format!(
                "parameter '{key}' is not supported: only the configured models can be loaded"
            )));
        }
        Ok(request)
    }
}

/// One model of the repository index.
#[derive(Debug, Serialize, ToSchema)]
pub struct IndexEntry {
    pub name: String,
    pub version: String,
    /// `READY` or `UNAVAILABLE`.
    pub state: String,
    pub reason: String,
}

/// Parses an optional JSON body: empty means the defaults.
fn optional_json<T: Default + for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| ApiError::InvalidJson(e.to_string()))
}

/// Lists the models of the repository and their state.
#[utoipa::path(tag = "repository", request_body(content = Option<IndexRequest>), responses(
    (status = 200, body = Vec<IndexEntry>),
    (status = 400, description = "invalid_json", body = ErrorBody),
))]
#[post("/v2/repository/index")]
pub(super) async fn index(
    state: web::Data<ApiState>,
    body: web::Bytes,
) -> Result<web::Json<Vec<IndexEntry>>, ApiError> {
    let request: IndexRequest = optional_json(&body)?;
    let entries = state
        .models
        .iter()
        .filter(|e| request.ready.is_none_or(|ready| e.available() == ready))
        .map(|e| IndexEntry {
            name: e.spec.name.clone(),
            version: VERSION.to_owned(),
            state: if e.available() {
                "READY"
            } else {
                "UNAVAILABLE"
            }
            .to_owned(),
            reason: if e.available() { "" } else { "unloaded" }.to_owned(),
        });
    Ok(web::Json(entries.collect()))
}

/// Makes a configured model available again.
#[utoipa::path(tag = "repository", request_body(content = Option<LoadRequest>), responses(
    (status = 200, description = "loaded"),
    (status = 400, description = "invalid_json, bad_input", body = ErrorBody),
    (status = 404, description = "unknown_model", body = ErrorBody),
))]
#[post("/v2/repository/models/{model}/load")]
pub(super) async fn load(
    state: web::Data<ApiState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    LoadRequest::parse(&body)?;
    state.models.find(&path, None)?.set_available(true);
    tracing::info!(model = %path, "model loaded (admitting requests)");
    Ok(HttpResponse::Ok().finish())
}

/// Stops admitting a model's requests.
#[utoipa::path(tag = "repository", request_body(content = Option<LoadRequest>), responses(
    (status = 200, description = "unloaded"),
    (status = 400, description = "invalid_json, bad_input", body = ErrorBody),
    (status = 404, description = "unknown_model", body = ErrorBody),
))]
#[post("/v2/repository/models/{model}/unload")]
pub(super) async fn unload(
    state: web::Data<ApiState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    LoadRequest::parse(&body)?;
    state.models.find(&path, None)?.set_available(false);
    tracing::info!(model = %path, "model unloaded (refusing requests)");
    Ok(HttpResponse::Ok().finish())
}
