//! `POST /v2/models/{model}[/versions/{version}]/infer`: HTTP in, one `Submit` to the
//! controller (or, for a pipeline, one root request to its actor), HTTP out.
//!
//! Models and pipelines take the same edge path ([`Front`]): arrival stamp, refusal
//! before reading, reading within the slack, decoding on the pool, the learned phases,
//! `Server-Timing`; only the call made of the decoded request differs ([`Target`]).
//!
//! Everything a client can get wrong is checked here or by the controller before the
//! request is admitted, and answered with a 4xx naming the problem; nothing a client sends
//! can panic the handler. The latency objective is the request's `slo_ms` parameter, else
//! the model's (the controller falls back to it).

use actix_web::http::header::HeaderMap;
use actix_web::{post, web, HttpRequest, HttpResponse, ResponseError};

use super::binary::HEADER_LENGTH_NAME;
use super::body::{decode_body, respond};
use super::decode;
use super::edge;
use super::error::{ApiError, ErrorBody};
pub(super) use super::front::{Body, Delivered, Front};
use super::server_timing::with_server_timing;
pub(super) use super::target::Target;
use super::v2::{InferRequest, InferResponse};
use super::ApiState;
use crate::model::ModelSpec;

/// Infers with a model, or a pipeline (its root request; the answer holds its outputs).
#[utoipa::path(
    tag = "inference",
    request_body(content = InferRequest, description = "JSON, or with Triton's binary tensor \
        extension a JSON header of Inference-Header-Content-Length bytes followed by binary data"),
    responses(
        (status = 200, description = "outputs; binary outputs follow the JSON header", body = InferResponse),
        (status = 400, description = "invalid_json, invalid_binary, invalid_body, bad_input", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "unknown_model, unknown_version", body = ErrorBody),
        (status = 413, description = "payload_too_large", body = ErrorBody),
        (status = 500, description = "execution_failed", body = ErrorBody),
        (status = 503, description = "deadline_unreachable, timed_out, overran, withdrawn, shutting_down, model_unavailable", body = ErrorBody),
    )
)]
#[post("/v2/models/{model}/infer")]
pub(super) async fn infer(
    state: web::Data<ApiState>,
    path: web::Path<String>,
    request: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    handle(&state, &path, None, &request, body).await
}

/// Infers with a model version.
#[utoipa::path(
    tag = "inference",
    request_body(content = InferRequest),
    responses(
        (status = 200, description = "outputs; binary outputs follow the JSON header", body = InferResponse),
        (status = 400, description = "invalid_json, invalid_binary, invalid_body, bad_input", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "unknown_model, unknown_version", body = ErrorBody),
        (status = 413, description = "payload_too_large", body = ErrorBody),
        (status = 500, description = "execution_failed", body = ErrorBody),
        (status = 503, description = "deadline_unreachable, timed_out, overran, withdrawn, shutting_down, model_unavailable", body = ErrorBody),
    )
)]
#[post("/v2/models/{model}/versions/{version}/infer")]
pub(super) async fn version_infer(
    state: web::Data<ApiState>,
    path: web::Path<(String, String)>,
    request: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (model, version) = path.into_inner();
    handle(&state, &model, Some(&version), &request, body).await
}

pub(super) async fn handle(
    state: &ApiState,
    model: &str,
    version: Option<&str>,
    request: &HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let result = run(state, model, version, request, body).await;
    let Err(error) = result else {
        return result;
    };
    // An error names the server's time too: under overload a client can then tell a
    // refusal that took microseconds here from the milliseconds it spent outside.
    let took = state
        .clock
        .now()
        .saturating_sub(edge::arrival(request, &state.clock));
    let whose = Target::key_of(state, model, version);
    state
        .metrics
        .api_error(&error, whose.as_ref().map(|key| (key, took)));
    Ok(with_server_timing(error.error_response(), took, None))
}

pub(super) async fn run(
    state: &ApiState,
    model: &str,
    version: Option<&str>,
    request: &HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let target = Target::find(state, model, version)?;
    let front = Front::new(state, &target, edge::arrival(request, &state.clock));
    let judged = match front.admit_before_reading(Body::Declared(edge::declared(request))) {
        Ok(judged) => judged,
        Err(refused) => {
            // Refused without reading or decoding it; a small body is taken off the
            // connection so that it can carry the client's next request.
            edge::discard(request, body).await;
            return Err(refused);
        }
    };
    let (body, read) = front.read(body, edge::declared(request), judged).await?;
    let headers = binary_header(request);
    let small = body.len() <= decode::INLINE_DECODE_BYTES;
    let regions = std::sync::Arc::clone(&state.regions);
    let job = move |spec: &ModelSpec| decode_body(spec, &headers, body, &regions);
    let decoded = front.decode(small, read, job).await?;
    let delivered = front
        .answer(decoded, |spec, decoded, answer| {
            respond(
                spec,
                decoded.id.clone(),
                &answer.outputs,
                &decoded.outputs,
                decoded.batched,
                answer.parameters,
            )
        })
        .await?;
    Ok(with_server_timing(
        delivered.response,
        delivered.took,
        delivered.exec,
    ))
}

/// The one header decoding reads (Triton's binary extension's header length), in a map of
/// its own: the decoding job may run on another thread, and copying every header of every
/// request for it cost more than the decoding of a small body. Without that header the map
/// stays empty, which allocates nothing.
fn binary_header(request: &HttpRequest) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Some(value) = request.headers().get(HEADER_LENGTH_NAME) {
        headers.insert(HEADER_LENGTH_NAME, value.clone());
    }
    headers
}
