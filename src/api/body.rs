//! The body of an infer request and its response, for models and pipelines alike: JSON
//! or Triton's binary tensors in, `Tensor`s out (each holding the request's items back to
//! back: a client may send a batch of `n` items as a leading dimension `n`, the same on
//! every input); outputs back as JSON or binary, with that leading dimension again.

use actix_web::{web, HttpResponse};

use actix_web::http::header::HeaderMap;

use super::binary::{self, Sections};
use super::codec;
use super::error::ApiError;
use super::v2::{self, InferRequest, InferResponse, Parameters, ResponseOutput};
use crate::model::ModelSpec;
use crate::tensor::Tensor;
use crate::time::Nanos;

/// A request body turned into what the controller takes.
pub(super) struct Decoded {
    pub(super) request: InferRequest,
    pub(super) slo: Option<Nanos>,
    pub(super) inputs: Vec<Tensor>,
    pub(super) batched: Batch,
    pub(super) outputs: Vec<Wanted>,
}

/// How the client laid out its items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Batch {
    /// Its tensors had a leading batch dimension: the outputs get one too.
    pub(super) sent: bool,
    /// Items in the request (the batch dimension; 1 without one).
    pub(super) items: u32,
}

impl Batch {
    /// One item, without a batch dimension (pipelines' sub-answers, and such clients).
    pub(super) const ONE: Batch = Batch {
        sent: false,
        items: 1,
    };
}

/// Splits, parses and checks a body: the work the decode pool does.
pub(super) fn decode_body(
    spec: &ModelSpec,
    headers: &HeaderMap,
    body: web::Bytes,
) -> Result<Decoded, ApiError> {
    let (json, binary) = binary::split(headers, body)?;
    let request: InferRequest =
        serde_json::from_slice(&json).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    let slo = slo(&request.parameters)?;
    let (inputs, batched) = decode_inputs(spec, &request, binary)?;
    let outputs = choose_outputs(spec, &request)?;
    Ok(Decoded {
        request,
        slo,
        inputs,
        batched,
        outputs,
    })
}

/// The latency objective the request names, if any.
pub(super) fn slo(parameters: &Parameters) -> Result<Option<Nanos>, ApiError> {
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

/// The request's tensors as the runtime takes them, and how the client laid out its
/// items (a batch dimension: then outputs get one too).
fn decode_inputs(
    spec: &ModelSpec,
    request: &InferRequest,
    binary: web::Bytes,
) -> Result<(Vec<Tensor>, Batch), ApiError> {
    let mut sections = Sections::new(binary);
    let mut tensors = Vec::with_capacity(request.inputs.len());
    let mut batched = Batch::ONE;
    // The first input that named its items, which every other must agree with.
    let mut first: Option<(&str, usize)> = None;
    for input in &request.inputs {
        let name = &input.name;
        let datatype = v2::parse_datatype(&input.datatype).ok_or_else(|| {
            ApiError::bad_input(format!(
                "input '{name}' has unknown datatype '{}'",
                input.datatype
            ))
        })?;
        let Some(declared) = spec.inputs.iter().find(|d| &d.name == name) else {
            return Err(ApiError::bad_input(format!(
                "unexpected input '{name}'; model '{}' takes {:?}",
                spec.name,
                spec.inputs.iter().map(|d| &d.name).collect::<Vec<_>>()
            )));
        };
        let (shape, batch) =
            codec::item_shape(declared, &input.shape).map_err(ApiError::bad_input)?;
        let items = batch.unwrap_or(1);
        check_items(spec, name, items, first)?;
        first = Some((name, items));
        batched.sent |= batch.is_some();
        batched.items = u32::try_from(items).map_err(|_| {
            ApiError::bad_input(format!("input '{name}' carries too many items: {items}"))
        })?;
        let count = codec::elements(name, &shape)
            .and_then(|one| {
                one.checked_mul(items)
                    .ok_or_else(|| format!("input '{name}' has too many elements"))
            })
            .map_err(ApiError::bad_input)?;
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

/// Checks that input `name`'s `items` agree with the `first` input that named its items,
/// and that a model without a batch dimension gets one item.
fn check_items(
    spec: &ModelSpec,
    name: &str,
    items: usize,
    first: Option<(&str, usize)>,
) -> Result<(), ApiError> {
    if let Some((other, n)) = first.filter(|&(_, n)| n != items) {
        return Err(ApiError::bad_input(format!(
            "input '{name}' carries {items} items and input '{other}' {n}; every input must \
             carry the same number of items"
        )));
    }
    if items > 1 && !spec.batched {
        return Err(ApiError::bad_input(format!(
            "input '{name}' carries a batch of {items} items; model '{}' has no batch \
             dimension and takes one item per request",
            spec.name
        )));
    }
    Ok(())
}

/// An output to answer, and whether as binary data.
pub(super) struct Wanted {
    name: String,
    binary: bool,
}

/// The outputs to answer: those requested, in order, else all of the model's.
fn choose_outputs(spec: &ModelSpec, request: &InferRequest) -> Result<Vec<Wanted>, ApiError> {
    let all_binary =
        v2::flag(&request.parameters, "binary_data_output").map_err(ApiError::bad_input)?;
    let Some(requested) = &request.outputs else {
        let all = spec.outputs.iter().map(|o| Wanted {
            name: o.name.clone(),
            binary: all_binary,
        });
        return Ok(all.collect());
    };
    requested
        .iter()
        .map(|output| {
            if !spec.outputs.iter().any(|o| o.name == output.name) {
                return Err(ApiError::bad_input(format!(
                    "model '{}' has no output '{}'",
                    spec.name, output.name
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

/// The response of `outputs` (a model's or a pipeline's), with its `parameters`.
pub(super) fn respond(
    spec: &ModelSpec,
    id: Option<String>,
    tensors: &[Tensor],
    wanted: &[Wanted],
    batched: Batch,
    parameters: Parameters,
) -> HttpResponse {
    let mut outputs = Vec::with_capacity(wanted.len());
    let mut binary = Vec::new();
    for want in wanted {
        // The device gives every declared output; one it did not give is left out
        // rather than invented.
        let Some(tensor) = tensors.iter().find(|t| t.name == want.name) else {
            tracing::warn!(model = %spec.name, output = %want.name, "device gave no such output");
            continue;
        };
        let mut shape = tensor.shape.clone();
        if batched.sent {
            shape.insert(0, batched.items as usize);
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
    let response = InferResponse {
        model_name: spec.name.clone(),
        model_version: spec.version.to_string(),
        id,
        parameters,
        outputs,
    };
    // Serialising plain data into a Vec cannot fail; keep an answer even if it did.
    let json = serde_json::to_vec(&response).unwrap_or_else(|_| b"{}".to_vec());
    binary::respond(json, binary)
}

/// A model's or a pipeline's answer, encoded, and what the front end learns from it.
pub(super) struct Called {
    pub(super) response: HttpResponse,
    /// Where the way back starts (`Phase::Respond`): the end of the request's batch, or
    /// the pipeline's answer (its last stage's batch done and joined).
    pub(super) ended: Nanos,
    /// Its batch's run time (`None` for a pipeline: its stages ran many batches).
    pub(super) exec: Option<Nanos>,
}
