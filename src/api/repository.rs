//! Triton's model repository extension: `POST /v2/repository/index`,
//! `POST /v2/repository/models/{model}/load` and `.../unload`.
//!
//! The repository is every registered model plus, when the server has a model repository
//! on disk, every model in it. Loading a registered model makes the API admit its
//! requests again; loading a model that is only on disk registers it: it is read, checked
//! and profiled (or its stored profile reused), then the controller takes it in, and a
//! model that cannot be served is refused with `load_failed` (400) naming the problem
//! while every other model keeps serving. Unloading stops the API from admitting the
//! model's requests (`model_unavailable`, 503); its weights leave the devices when the
//! policy next needs the pages (idle models are evicted first).

use actix_web::{post, web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody};
use super::ApiState;
use crate::actors::messages::{InferError, RegisterError, RegisterModel};
use crate::repository::RepositoryError;

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
    /// Triton's `config` and `file:` overrides are refused: models come from the
    /// repository as stored.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub parameters: serde_json::Map<String, serde_json::Value>,
}

impl LoadRequest {
    fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let request: Self = optional_json(body)?;
        refuse_overrides(request.parameters.keys().map(String::as_str))?;
        Ok(request)
    }
}

/// Refuses Triton's `config` and `file:` load parameters, for every protocol.
pub(super) fn refuse_overrides<'a>(
    mut keys: impl Iterator<Item = &'a str>,
) -> Result<(), ApiError> {
    match keys.find(|k| *k == "config" || k.starts_with("file:")) {
        Some(key) => Err(ApiError::bad_input(format!(
            "parameter '{key}' is not supported: models are loaded from the repository as stored"
        ))),
        None => Ok(()),
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
    Ok(web::Json(entries(&state, request.ready)))
}

/// The repository index, only the models ready (or not) if `ready` says so, for every
/// protocol.
pub(super) fn entries(state: &ApiState, ready: Option<bool>) -> Vec<IndexEntry> {
    let mut entries: Vec<IndexEntry> = state
        .models
        .entries()
        .iter()
        .map(|e| IndexEntry {
            name: e.spec.name.clone(),
            version: e.version(),
            state: if e.available() {
                "READY"
            } else {
                "UNAVAILABLE"
            }
            .to_owned(),
            reason: if e.available() { "" } else { "unloaded" }.to_owned(),
        })
        .collect();
    entries.extend(state.pipelines.all().iter().map(|p| IndexEntry {
        name: p.pipeline.name.clone(),
        version: "1".to_owned(),
        state: "READY".to_owned(),
        reason: String::new(),
    }));
    entries.extend(
        state
            .unregistered()
            .into_iter()
            .map(|(name, reason)| IndexEntry {
                name,
                version: String::new(),
                state: "UNAVAILABLE".to_owned(),
                reason,
            }),
    );
    entries.retain(|e| ready.is_none_or(|ready| (e.state == "READY") == ready));
    entries
}

/// Makes a model available: again if it is registered, else registers it from the
/// repository (reading, checking and profiling it first).
#[utoipa::path(tag = "repository", request_body(content = Option<LoadRequest>), responses(
    (status = 200, description = "loaded"),
    (status = 400, description = "invalid_json, bad_input, load_failed", body = ErrorBody),
    (status = 401, description = "unauthorized", body = ErrorBody),
    (status = 403, description = "forbidden", body = ErrorBody),
    (status = 404, description = "unknown_model", body = ErrorBody),
    (status = 503, description = "shutting_down", body = ErrorBody),
))]
#[post("/v2/repository/models/{model}/load")]
pub(super) async fn load(
    state: web::Data<ApiState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    LoadRequest::parse(&body)?;
    load_model(&state, path.into_inner()).await?;
    Ok(HttpResponse::Ok().finish())
}

/// Loads a model or pipeline (parameters already checked), for every protocol.
pub(super) async fn load_model(state: &ApiState, name: String) -> Result<(), ApiError> {
    // Before anything is looked up or read: a name is never a path.
    crate::repository::check_name(&name).map_err(|reason| {
        let refused = RepositoryError::Outside {
            model: name.clone(),
            reason,
        };
        ApiError::bad_input(refused.to_string())
    })?;
    if let Ok(entry) = state.models.find(&name, None) {
        entry.set_available(true);
        tracing::info!(model = %name, "model loaded (admitting requests)");
        return Ok(());
    }
    if state.pipelines.get(&name).is_some() || serve_pipeline(state, &name)? {
        return Ok(());
    }
    register(state, name).await
}

/// Registers model `name` from the repository (one at a time: a model is read and
/// profiled once). The controller's registry tells the model table and the metrics.
/// Serves `name` if the repository declares it a pipeline (validated against the models
/// registered now); false if it is no pipeline.
fn serve_pipeline(state: &ApiState, name: &str) -> Result<bool, ApiError> {
    let Some(source) = &state.repository else {
        return Ok(false);
    };
    let failed = |reason: String| {
        state.note_refused(name, reason.clone());
        ApiError::LoadFailed {
            model: name.to_owned(),
            reason,
        }
    };
    let declared = source.repository.pipeline(name).map_err(|e| match e {
        RepositoryError::Outside { .. } => ApiError::bad_input(e.to_string()),
        e => failed(e.to_string()),
    });
    let Some(decl) = declared? else {
        return Ok(false);
    };
    state
        .pipeline_host
        .serve(name, &decl)
        .map_err(|e| failed(e.to_string()))?;
    state.note_refused(name, String::new());
    Ok(true)
}

async fn register(state: &ApiState, name: String) -> Result<(), ApiError> {
    let Some(source) = state.repository.clone() else {
        return Err(ApiError::UnknownModel(name));
    };
    let _one_at_a_time = state.registering.lock().await;
    if state.models.contains(&name) {
        return Ok(()); // registered by a concurrent load while this one waited
    }
    let failed = |reason: String| ApiError::LoadFailed {
        model: name.clone(),
        reason,
    };
    let wanted = name.clone();
    let prepared = web::block(move || source.prepare(&wanted))
        .await
        .map_err(|e| failed(e.to_string()))?;
    let registration = match prepared {
        Ok(registration) => registration,
        Err(RepositoryError::NotFound { .. }) => return Err(ApiError::UnknownModel(name)),
        Err(refused @ RepositoryError::Outside { .. }) => {
            return Err(ApiError::bad_input(refused.to_string()))
        }
        Err(error) => {
            state.note_refused(&name, error.to_string());
            return Err(failed(error.to_string()));
        }
    };
    let message = RegisterModel {
        profiles: registration.kind_profiles(),
        spec: registration.spec,
        bytes: Some(registration.bytes),
        prepared: registration.prepared,
        backends: registration.backends,
    };
    let registered = state
        .controller
        .send(message)
        .await
        .map_err(|_| ApiError::Infer(InferError::ShuttingDown))?;
    match registered {
        Ok(_) | Err(RegisterError::Duplicate(_)) => {}
        Err(error) => {
            state.note_refused(&name, error.to_string());
            return Err(failed(error.to_string()));
        }
    }
    state.note_refused(&name, String::new());
    tracing::info!(model = %name, "model registered from the repository");
    Ok(())
}

/// Stops admitting a model's requests.
#[utoipa::path(tag = "repository", request_body(content = Option<LoadRequest>), responses(
    (status = 200, description = "unloaded"),
    (status = 400, description = "invalid_json, bad_input", body = ErrorBody),
    (status = 401, description = "unauthorized", body = ErrorBody),
    (status = 403, description = "forbidden", body = ErrorBody),
    (status = 404, description = "unknown_model", body = ErrorBody),
))]
#[post("/v2/repository/models/{model}/unload")]
pub(super) async fn unload(
    state: web::Data<ApiState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    LoadRequest::parse(&body)?;
    unload_model(&state, &path)?;
    Ok(HttpResponse::Ok().finish())
}

/// Unloads a model or pipeline (parameters already checked), for every protocol.
pub(super) fn unload_model(state: &ApiState, name: &str) -> Result<(), ApiError> {
    // A pipeline stops being served; its root requests in flight still get their answers.
    if state.pipelines.remove(name) {
        tracing::info!(pipeline = %name, "pipeline unloaded");
        return Ok(());
    }
    state.models.find(name, None)?.set_available(false);
    tracing::info!(model = %name, "model unloaded (refusing requests)");
    Ok(())
}
