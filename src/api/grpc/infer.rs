//! `ModelInfer`: the same edge path as HTTP's (`front.rs`: [`Front`]), with protobuf in
//! and out. The arrival is stamped by the interceptor when the call's head is read
//! (`mod.rs`); tonic has read and parsed the message by the time the handler runs, so
//! that time is the request's `Read` phase.

use prost::Message as _;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status};

use super::super::decode;
use super::super::edge::{Arrival, Phase};
use super::super::error::ApiError;
use super::super::infer::{Body, Delivered, Front, Target};
use super::super::ApiState;
use super::proto::{ModelInferRequest, ModelInferResponse};
use super::status::status;
use super::tensors;
use crate::time::Nanos;

/// Serves one call, counting an error as the HTTP route does.
pub async fn infer(
    state: &ApiState,
    request: Request<ModelInferRequest>,
) -> Result<Response<ModelInferResponse>, Status> {
    let stamped = request.extensions().get::<Arrival>().map(|a| a.0);
    let arrival = stamped.unwrap_or_else(|| state.clock.now());
    let served = serve(state, arrival, request.into_inner()).await;
    served.map(with_server_timing).map_err(|e| status(&e))
}

/// The answer to one request that arrived at `arrival` (a call's, or one message of a
/// stream's), an error counted as the HTTP route counts one.
pub async fn serve(
    state: &ApiState,
    arrival: Nanos,
    request: ModelInferRequest,
) -> Result<Delivered<ModelInferResponse>, ApiError> {
    let name = request.model_name.clone();
    let version = Some(request.model_version.clone()).filter(|v| !v.is_empty());
    let result = run(state, arrival, &name, version.as_deref(), request).await;
    if let Err(error) = &result {
        let took = state.clock.now().saturating_sub(arrival);
        let whose = Target::key_of(state, &name, version.as_deref());
        state
            .metrics
            .api_error(error, whose.as_ref().map(|key| (key, took)));
    }
    result
}

async fn run(
    state: &ApiState,
    arrival: Nanos,
    name: &str,
    version: Option<&str>,
    request: ModelInferRequest,
) -> Result<Delivered<ModelInferResponse>, ApiError> {
    let target = Target::find(state, name, version)?;
    let front = Front::new(state, &target, arrival);
    front.admit_before_reading(Body::InHand)?;
    let read = front.took(Phase::Read, arrival);
    let small = request.encoded_len() <= decode::INLINE_DECODE_BYTES;
    let regions = std::sync::Arc::clone(&state.regions);
    let job = move |spec: &_| tensors::decode(spec, request, &regions);
    let decoded = front.decode(small, read, job).await?;
    front.answer(decoded, tensors::encode).await
}

/// The answer with the HTTP route's `Server-Timing` as response metadata: how long the
/// server held the call (`edge`) and its batch ran (`exec`), in milliseconds.
fn with_server_timing(delivered: Delivered<ModelInferResponse>) -> Response<ModelInferResponse> {
    let ms = |t: Nanos| t as f64 / 1e6;
    let mut value = format!("edge;dur={:.3}", ms(delivered.took));
    if let Some(exec) = delivered.exec {
        value.push_str(&format!(", exec;dur={:.3}", ms(exec)));
    }
    let mut response = Response::new(delivered.response);
    if let Ok(value) = MetadataValue::try_from(value) {
        response.metadata_mut().insert("server-timing", value);
    }
    response
}
