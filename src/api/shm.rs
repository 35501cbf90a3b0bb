//! Triton's system shared-memory extension over HTTP: `/v2/systemsharedmemory/...` to
//! register, list and unregister regions (`regions.rs`); requests then place tensors in
//! them by parameters (`body.rs`). Registering and unregistering change the server's
//! state and are admin routes (`access.rs`); the status routes only read.

use actix_web::{get, post, web, HttpResponse};

use super::error::{ApiError, ErrorBody};
use super::regions::RegionStatus;
use super::ApiState;

/// The body of a registration: the object, and where the region lies in it.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
pub struct RegisterRequest {
    /// The shared-memory object's key, as given to `shm_open` (`/input0`).
    pub key: String,
    /// Where the region starts in the object.
    #[serde(default)]
    pub offset: u64,
    /// The region's length in bytes.
    pub byte_size: u64,
}

/// Every registered region.
#[utoipa::path(tag = "shared memory", responses((status = 200, body = Vec<RegionStatus>)))]
#[get("/v2/systemsharedmemory/status")]
pub(super) async fn status(state: web::Data<ApiState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(state.regions.status(None)?))
}

/// One registered region.
#[utoipa::path(tag = "shared memory", responses(
    (status = 200, body = Vec<RegionStatus>),
    (status = 400, description = "bad_input", body = ErrorBody),
))]
#[get("/v2/systemsharedmemory/region/{name}/status")]
pub(super) async fn region_status(
    state: web::Data<ApiState>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(state.regions.status(Some(&name))?))
}

/// Registers a region of a shared-memory object under `/dev/shm` (`bad_input`: the name
/// is taken, the key names no object there, or the region does not fit in it).
#[utoipa::path(tag = "shared memory", request_body = RegisterRequest, responses(
    (status = 200, description = "registered"),
    (status = 400, description = "invalid_json, bad_input", body = ErrorBody),
    (status = 401, description = "unauthorized", body = ErrorBody),
    (status = 403, description = "forbidden", body = ErrorBody),
))]
#[post("/v2/systemsharedmemory/region/{name}/register")]
pub(super) async fn register(
    state: web::Data<ApiState>,
    name: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let request: RegisterRequest =
        serde_json::from_slice(&body).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    state.regions.register(RegionStatus {
        name: name.into_inner(),
        key: request.key,
        offset: request.offset,
        byte_size: request.byte_size,
    })?;
    Ok(HttpResponse::Ok().finish())
}

/// Unregisters every region.
#[utoipa::path(tag = "shared memory", responses(
    (status = 200, description = "unregistered"),
    (status = 401, description = "unauthorized", body = ErrorBody),
    (status = 403, description = "forbidden", body = ErrorBody),
))]
#[post("/v2/systemsharedmemory/unregister")]
pub(super) async fn unregister_all(state: web::Data<ApiState>) -> Result<HttpResponse, ApiError> {
    state.regions.unregister(None)?;
    Ok(HttpResponse::Ok().finish())
}

/// Unregisters one region; requests that placed tensors in it finish with it.
#[utoipa::path(tag = "shared memory", responses(
    (status = 200, description = "unregistered"),
    (status = 400, description = "bad_input", body = ErrorBody),
    (status = 401, description = "unauthorized", body = ErrorBody),
    (status = 403, description = "forbidden", body = ErrorBody),
))]
#[post("/v2/systemsharedmemory/region/{name}/unregister")]
pub(super) async fn unregister(
    state: web::Data<ApiState>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    state.regions.unregister(Some(&name))?;
    Ok(HttpResponse::Ok().finish())
}
