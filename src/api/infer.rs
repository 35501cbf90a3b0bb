//! `POST /v2/models/{model}[/versions/{version}]/infer`: HTTP in, one [`Infer`] to the
//! controller, HTTP out.
//!
//! Everything a client can get wrong is checked here or by the controller before the
//! request is admitted, and answered with a 4xx naming the problem; nothing a client sends
//! can panic the handler. The latency objective is the request's `slo_ms` parameter, else
//! the model's (the controller falls back to it).

use actix_web::{post, web, HttpRequest, HttpResponse};
use serde_json::Value;

use std::sync::Arc;

use actix_web::http::header::HeaderMap;

use super::binary::{self, Sections};
use super::codec;
use super::edge::{self, Expected, Phase, PoolError, Stage};
use super::error::{ApiError, ErrorBody};
use super::metrics::Metrics;
use super::models::Entry;
use super::v2::{self, InferRequest, InferResponse, Parameters, ResponseOutput};
use super::ApiState;
use crate::actors::messages::{Edge, Infer, InferError, Inferred};
use crate::model::ModelId;
use crate::scheduler::view::{judge, Admission};
use crate::tensor::Tensor;
use crate::time::Nanos;

/// Infers with a model.
#[utoipa::path(
    tag = "inference",
    request_body(content = InferRequest, description = "JSON, or with Triton's binary tensor \
        extension a JSON header of Inference-Header-Content-Length bytes followed by binary data"),
    responses(
        (status = 200, description = "outputs; binary outputs follow the JSON header", body = InferResponse),
        (status = 400, description = "invalid_json, invalid_binary, invalid_body, bad_input", body = ErrorBody),
        (status = 404, description = "unknown_model, unknown_version", body = ErrorBody),
        (status = 413, description = "payload_too_large", body = ErrorBody),
        (status = 500, description = "execution_failed", body = ErrorBody),
        (status = 503, description = "deadline_unreachable, timed_out, shutting_down, model_unavailable", body = ErrorBody),
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
        (status = 404, description = "unknown_model, unknown_version", body = ErrorBody),
        (status = 413, description = "payload_too_large", body = ErrorBody),
        (status = 500, description = "execution_failed", body = ErrorBody),
        (status = 503, description = "deadline_unreachable, timed_out, shutting_down, model_unavailable", body = ErrorBody),
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
    let known = state.models.find(model, version).ok().map(|e| e.id);
    let result = run(state, model, version, request, body).await;
    if let Err(error) = &result {
        state.metrics.api_error(error, known);
    }
    result
}

pub(super) async fn run(
    state: &ApiState,
    model: &str,
    version: Option<&str>,
    request: &HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let entry = state.models.ready(model, version)?;
    let front = Front::new(state, &entry, request);
    front.admit_before_reading()?;
    let body = front.read(body).await?;
    let decoded = front.decode(request, body).await?;
    let slo = decoded.slo.unwrap_or(entry.spec.slo);
    let message = Infer {
        model: entry.spec.name.clone(),
        inputs: decoded.inputs,
        slo: decoded.slo,
        edge: Some(Edge {
            arrival: front.arrival,
            reserve: front.expected.encode,
        }),
        root: None,
    };
    let waiting = Waiting::new(&state.metrics, entry.id);
    let answer = state.controller.send(message).await;
    drop(waiting);
    // A controller that is gone can only be one that is shutting down.
    let inferred = answer.unwrap_or(Err(InferError::ShuttingDown))?;
    state.metrics.success(entry.id, &inferred);
    let started = state.clock.now();
    let parsed = &decoded.request;
    let outputs = &decoded.outputs;
    let response = encode(
        &entry,
        parsed.id.clone(),
        &inferred,
        outputs,
        decoded.batched,
        decoded.slo,
    );
    front.took(Phase::Encode, started);
    if state.clock.now() > front.arrival.saturating_add(slo) {
        state.metrics.late_at_edge(entry.id);
    }
    Ok(response)
}

/// A request body turned into what the controller takes.
struct Decoded {
    request: InferRequest,
    slo: Option<Nanos>,
    inputs: Vec<Tensor>,
    batched: bool,
    outputs: Vec<Wanted>,
}

/// Splits, parses and checks a body: the work the decode pool does.
fn decode_body(entry: &Entry, headers: &HeaderMap, body: web::Bytes) -> Result<Decoded, ApiError> {
    let (json, binary) = binary::split(headers, body)?;
    let request: InferRequest =
        serde_json::from_slice(&json).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    let slo = slo(&request.parameters)?;
    let (inputs, batched) = decode_inputs(entry, &request, binary)?;
    let outputs = choose_outputs(entry, &request)?;
    Ok(Decoded {
        request,
        slo,
        inputs,
        batched,
        outputs,
    })
}

/// One request as the front end sees it: its arrival, the model's learned front-end
/// costs, and each step that may refuse it before the controller does.
struct Front<'a> {
    state: &'a ApiState,
    entry: &'a Arc<Entry>,
    arrival: Nanos,
    expected: Expected,
    /// The deadline the front end works to before the body says otherwise: the model's
    /// objective (a request's own `slo_ms` is inside the body), less the encoding.
    deadline: Nanos,
}

impl<'a> Front<'a> {
    fn new(state: &'a ApiState, entry: &'a Arc<Entry>, request: &HttpRequest) -> Self {
        let arrival = edge::arrival(request, &state.clock);
        let expected = state.front.expected(entry.id);
        let deadline = arrival
            .saturating_add(entry.spec.slo)
            .saturating_sub(expected.encode);
        Self {
            state,
            entry,
            arrival,
            expected,
            deadline,
        }
    }

    fn refuse(&self, stage: Stage, retry_after: Nanos) -> ApiError {
        self.state.metrics.refused_at_edge(self.entry.id, stage);
        ApiError::Early {
            model: self.entry.spec.name.clone(),
            stage,
            retry_after_s: retry_after.div_ceil(1_000_000_000).max(1),
        }
    }

    /// Records the time a phase took since `started`.
    fn took(&self, phase: Phase, started: Nanos) {
        self.record(phase, self.state.clock.now().saturating_sub(started));
    }

    /// Learns and shows the time a phase took.
    fn record(&self, phase: Phase, took: Nanos) {
        self.state.front.observe(self.entry.id, phase, took);
        self.state.metrics.front(self.entry.id, phase, took);
    }

    /// Refuses, from the controller's last view of the model, a request it cannot serve.
    fn admit_before_reading(&self) -> Result<(), ApiError> {
        let e = self.state.front.least(self.entry.id);
        let view = self.state.admission.get(self.entry.id);
        let now = self.state.clock.now();
        let ahead = e.read + e.wait + e.decode;
        match judge(view.as_ref(), now, ahead, self.deadline) {
            Admission::Admit => Ok(()),
            Admission::Refuse { retry_after } => {
                Err(self.refuse(Stage::BeforeReading, retry_after))
            }
        }
    }

    /// Reads the body, giving up when the rest could no longer be done in time.
    async fn read(&self, body: web::Payload) -> Result<web::Bytes, ApiError> {
        let started = self.state.clock.now();
        let limit = self.state.settings.max_body_bytes;
        let until = self.deadline.saturating_sub(self.expected.decode);
        let slack = self.state.clock.until(until);
        let read = tokio::time::timeout(slack, body.to_bytes_limited(limit)).await;
        let Ok(read) = read else {
            return Err(self.refuse(Stage::Reading, 0));
        };
        let bytes = read
            .map_err(|_| ApiError::PayloadTooLarge { limit })?
            .map_err(|e| ApiError::InvalidBody(e.to_string()))?;
        self.took(Phase::Read, started);
        Ok(bytes)
    }

    /// Decodes the body on the bounded pool, unless no decoder is free within its slack.
    async fn decode(&self, request: &HttpRequest, body: web::Bytes) -> Result<Decoded, ApiError> {
        let started = self.state.clock.now();
        let until = self.deadline.saturating_sub(self.expected.decode);
        let slack = self.state.clock.until(until);
        let (entry, headers) = (Arc::clone(self.entry), request.headers().clone());
        let state = self.state;
        let clock = state.clock;
        let small = body.len() <= edge::INLINE_DECODE_BYTES;
        let job = move || {
            let begun = clock.now();
            (begun, decode_body(&entry, &headers, body))
        };
        let (begun, decoded) = match state.decoders.run(slack, small, job).await {
            Ok(done) => done,
            Err(PoolError::Crashed) => {
                return Err(ApiError::InvalidBody("the decoder failed".into()))
            }
            Err(PoolError::Full(_) | PoolError::NoSlack) => {
                return Err(self.refuse(Stage::Decoding, 0))
            }
        };
        self.record(Phase::Wait, begun.saturating_sub(started));
        self.took(Phase::Decode, begun);
        decoded
    }
}

/// Counts a request as pending while it waits for the controller; a guard, because a
/// client that hangs up drops the handler mid-wait.
struct Waiting<'a> {
    metrics: &'a Metrics,
    model: ModelId,
}

impl<'a> Waiting<'a> {
    fn new(metrics: &'a Metrics, model: ModelId) -> Self {
        metrics.pending(model, 1);
        Self { metrics, model }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.metrics.pending(self.model, -1);
    }
}

/// The latency objective the request names, if any.
fn slo(parameters: &Parameters) -> Result<Option<Nanos>, ApiError> {
    let Some(value) = parameters.get("slo_ms") else {
        return Ok(None);
    };
    match value.as_f64() {
        Some(ms) if ms > 0.0 && ms.is_finite() && ms < 1e9 => Ok(Some((ms * 1e6) as Nanos)),
        _ => Err(ApiError::bad_input(format!(
            "parameter 'slo_ms' must be a positive number of milliseconds, got {value}"
        ))),
    }
}

/// The request's tensors as the runtime takes them, and whether the client sent a batch
/// dimension (then outputs get one too).
fn decode_inputs(
    entry: &Entry,
    request: &InferRequest,
    binary: web::Bytes,
) -> Result<(Vec<Tensor>, bool), ApiError> {
    let mut sections = Sections::new(binary);
    let mut tensors = Vec::with_capacity(request.inputs.len());
    let mut batched = false;
    for input in &request.inputs {
        let name = &input.name;
        let datatype = v2::parse_datatype(&input.datatype).ok_or_else(|| {
            ApiError::bad_input(format!(
                "input '{name}' has unknown datatype '{}'",
                input.datatype
            ))
        })?;
        let Some(declared) = entry.spec.inputs.iter().find(|d| &d.name == name) else {
            return Err(ApiError::bad_input(format!(
                "unexpected input '{name}'; model '{}' takes {:?}",
                entry.spec.name,
                entry
                    .spec
                    .inputs
                    .iter()
                    .map(|d| &d.name)
                    .collect::<Vec<_>>()
            )));
        };
        let (shape, with_batch) =
            codec::item_shape(declared, &input.shape).map_err(ApiError::bad_input)?;
        batched |= with_batch;
        let count = codec::elements(name, &shape).map_err(ApiError::bad_input)?;
        let binary_size =
            v2::size(&input.parameters, "binary_data_size").map_err(ApiError::bad_input)?;
        let data: Vec<u8> = match (binary_size, &input.data) {
            (Some(_), Some(_)) => {
                return Err(ApiError::bad_input(format!(
                    "input '{name}' has both JSON data and binary_data_size"
                )))
            }
            (Some(size), None) => {
                let section = sections.take(name, size)?;
                codec::check_raw(name, datatype, count, &section).map_err(ApiError::bad_input)?;
                section.to_vec()
            }
            (None, Some(data)) => {
                codec::from_json(name, datatype, count, data).map_err(ApiError::bad_input)?
            }
            (None, None) => return Err(ApiError::bad_input(format!("input '{name}' has no data"))),
        };
        tensors.push(Tensor {
            name: name.clone(),
            datatype,
            shape,
            data: data.into(),
        });
    }
    sections.finish()?;
    Ok((tensors, batched))
}

/// An output to answer, and whether as binary data.
struct Wanted {
    name: String,
    binary: bool,
}

/// The outputs to answer: those requested, in order, else all of the model's.
fn choose_outputs(entry: &Entry, request: &InferRequest) -> Result<Vec<Wanted>, ApiError> {
    let all_binary =
        v2::flag(&request.parameters, "binary_data_output").map_err(ApiError::bad_input)?;
    let Some(requested) = &request.outputs else {
        let all = entry.spec.outputs.iter().map(|o| Wanted {
            name: o.name.clone(),
            binary: all_binary,
        });
        return Ok(all.collect());
    };
    requested
        .iter()
        .map(|output| {
            if !entry.spec.outputs.iter().any(|o| o.name == output.name) {
                return Err(ApiError::bad_input(format!(
                    "model '{}' has no output '{}'",
                    entry.spec.name, output.name
                )));
            }
            let binary = match output.parameters.get("binary_data") {
                Some(_) => {
                    v2::flag(&output.parameters, "binary_data").map_err(ApiError::bad_input)?
                }
                None => all_binary,
            };
            Ok(Wanted {
                name: output.name.clone(),
                binary,
            })
        })
        .collect()
}

/// The response: JSON, or a JSON header followed by the binary outputs.
fn encode(
    entry: &Entry,
    id: Option<String>,
    inferred: &Inferred,
    wanted: &[Wanted],
    batched: bool,
    slo: Option<Nanos>,
) -> HttpResponse {
    let mut outputs = Vec::with_capacity(wanted.len());
    let mut binary = Vec::new();
    for want in wanted {
        // The device gives every declared output; one it did not give is left out
        // rather than invented.
        let Some(tensor) = inferred.outputs.iter().find(|t| t.name == want.name) else {
            tracing::warn!(model = %entry.spec.name, output = %want.name, "device gave no such output");
            continue;
        };
        let mut shape = tensor.shape.clone();
        if batched {
            shape.insert(0, 1);
        }
        let mut parameters = Parameters::new();
        let data = if want.binary {
            parameters.insert("binary_data_size".into(), tensor.data.len().into());
            binary.push(web::Bytes::copy_from_slice(&tensor.data));
            None
        } else {
            Some(codec::to_json(tensor.datatype, &tensor.data))
        };
        outputs.push(ResponseOutput {
            name: tensor.name.clone(),
            datatype: v2::datatype_name(tensor.datatype).to_owned(),
            shape,
            parameters,
            data,
        });
    }
    let slo_ms = slo.unwrap_or(entry.spec.slo) as f64 / 1e6;
    let parameters = Parameters::from_iter([
        ("emulated".to_owned(), Value::Bool(inferred.emulated)),
        ("late".to_owned(), Value::Bool(inferred.late)),
        ("batch_size".to_owned(), inferred.timing.batch.into()),
        ("slo_ms".to_owned(), slo_ms.into()),
    ]);
    let response = InferResponse {
        model_name: entry.spec.name.clone(),
        model_version: entry.version(),
        id,
        parameters,
        outputs,
    };
    // Serialising plain data into a Vec cannot fail; keep an answer even if it did.
    let json = serde_json::to_vec(&response).unwrap_or_else(|_| b"{}".to_vec());
    binary::respond(json, binary)
}
