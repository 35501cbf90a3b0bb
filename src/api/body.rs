//! The body of an infer request and its response, for models and pipelines alike: JSON
//! or Triton's binary tensors in, `Tensor`s out (each holding the request's items back to
//! back: a client may send a batch of `n` items as a leading dimension `n`, the same on
//! every input); outputs back as JSON or binary, with that leading dimension again.

use actix_web::{web, HttpResponse};

use actix_web::http::header::HeaderMap;

use super::binary::{self, Sections};
use super::codec;
use super::error::ApiError;
use super::regions::{self, Placement, Regions};
use super::v2::{self, AnswerParameters, Elements, InferRequest, Parameters};
use crate::model::{DataType, ModelSpec};
use crate::tensor::Tensor;
use crate::time::Nanos;
use serde::{Serialize, Serializer};

/// A request body turned into what the controller takes.
pub(super) struct Decoded {
    /// The request's id, echoed in the answer.
    pub(super) id: Option<String>,
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
    /// The leading dimension of every output, in either protocol: the items, if the
    /// client sent a batch dimension.
    pub(super) fn leading(self) -> Option<u32> {
        self.sent.then_some(self.items)
    }
}

/// Splits, parses and checks a body, reading tensors placed in shared memory from
/// `regions`: the work the decode pool does.
pub(super) fn decode_body(
    spec: &ModelSpec,
    headers: &HeaderMap,
    body: web::Bytes,
    regions: &Regions,
) -> Result<Decoded, ApiError> {
    let (json, binary) = binary::split(headers, body)?;
    let request: InferRequest = codec::parse_request(&json).map_err(ApiError::InvalidJson)?;
    let slo = slo(&request.parameters)?;
    let (inputs, batched) = decode_inputs(spec, &request, binary, regions)?;
    let outputs = choose_outputs(spec, &request, regions)?;
    Ok(Decoded {
        id: request.id,
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
    regions: &Regions,
) -> Result<(Vec<Tensor>, Batch), ApiError> {
    let mut sections = Sections::new(binary);
    let mut tensors = Vec::with_capacity(request.inputs.len());
    let mut items = Items::default();
    for input in &request.inputs {
        let name = &input.name;
        let Checked {
            datatype,
            shape,
            count,
        } = check_input(spec, name, &input.datatype, &input.shape, &mut items)?;
        let binary_size =
            v2::size(&input.parameters, "binary_data_size").map_err(ApiError::bad_input)?;
        let tensor = regions::Tensor {
            side: regions::Side::Input,
            name,
        };
        let placed = regions.placement(tensor, &input.parameters)?;
        let data: Vec<u8> = match (placed, binary_size, &input.data) {
            (Some(at), None, None) => at.read_input(name, datatype, count)?,
            (Some(at), _, _) => {
                return Err(ApiError::bad_input(format!(
                    "input '{name}' is placed in region '{}' and has data in the request too",
                    at.name()
                )))
            }
            (None, Some(_), Some(_)) => {
                return Err(ApiError::bad_input(format!(
                    "input '{name}' has both JSON data and binary_data_size"
                )))
            }
            (None, Some(size), None) => {
                let section = sections.take(name, size)?;
                codec::check_raw(name, datatype, count, &section).map_err(ApiError::bad_input)?;
                section.to_vec()
            }
            (None, None, Some(data)) => {
                codec::from_json(name, datatype, count, data).map_err(ApiError::bad_input)?
            }
            (None, None, None) => {
                return Err(ApiError::bad_input(format!("input '{name}' has no data")))
            }
        };
        tensors.push(Tensor {
            name: name.clone(),
            datatype,
            shape,
            data: data.into(),
        });
    }
    sections.finish()?;
    Ok((tensors, items.batch()))
}

/// An input as a client declared it, checked against the model.
pub(super) struct Checked {
    /// How to read its bytes.
    pub(super) datatype: DataType,
    /// The shape of one item.
    pub(super) shape: Vec<usize>,
    /// Elements of all its items together: what its data must hold.
    pub(super) count: usize,
}

/// The items a request's inputs carry, gathered input by input as each is checked.
#[derive(Debug, Default)]
pub(super) struct Items {
    /// The first input checked and its items, which every other must agree with.
    first: Option<(String, u32)>,
    /// Some input had a leading batch dimension: the outputs get one too.
    sent: bool,
}

impl Items {
    /// How the request laid out its items, once all its inputs are checked.
    pub(super) fn batch(&self) -> Batch {
        Batch {
            sent: self.sent,
            items: self.first.as_ref().map_or(1, |&(_, n)| n),
        }
    }
}

/// Checks one input's name, datatype and shape against the model, and its items against
/// the inputs checked before it (`items`), for every protocol.
pub(super) fn check_input(
    spec: &ModelSpec,
    name: &str,
    datatype: &str,
    shape: &[i64],
    items: &mut Items,
) -> Result<Checked, ApiError> {
    let parsed = v2::parse_datatype(datatype).ok_or_else(|| {
        ApiError::bad_input(format!("input '{name}' has unknown datatype '{datatype}'"))
    })?;
    let Some(declared) = spec.inputs.iter().find(|d| d.name == name) else {
        return Err(ApiError::bad_input(format!(
            "unexpected input '{name}'; model '{}' takes {:?}",
            spec.name,
            spec.inputs.iter().map(|d| &d.name).collect::<Vec<_>>()
        )));
    };
    let (item, batch) = codec::item_shape(declared, shape).map_err(ApiError::bad_input)?;
    let n = batch.unwrap_or(1);
    let n32 = u32::try_from(n)
        .map_err(|_| ApiError::bad_input(format!("input '{name}' carries too many items: {n}")))?;
    check_items(spec, name, n32, items.first.as_ref())?;
    items.first.get_or_insert_with(|| (name.to_owned(), n32));
    items.sent |= batch.is_some();
    let count = codec::elements(name, &item)
        .and_then(|one| {
            one.checked_mul(n)
                .ok_or_else(|| format!("input '{name}' has too many elements"))
        })
        .map_err(ApiError::bad_input)?;
    Ok(Checked {
        datatype: parsed,
        shape: item,
        count,
    })
}

/// Checks that input `name`'s `items` agree with the `first` input checked, and that a
/// model without a batch dimension gets one item.
fn check_items(
    spec: &ModelSpec,
    name: &str,
    items: u32,
    first: Option<&(String, u32)>,
) -> Result<(), ApiError> {
    if let Some((other, n)) = first.filter(|&&(_, n)| n != items) {
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

/// An output to answer, and where: as binary data, as JSON, or in shared memory.
pub(super) struct Wanted {
    pub(super) name: String,
    binary: bool,
    /// Written into this region instead of the answer.
    pub(super) placed: Option<Placement>,
}

/// An output a client asked for by name, which the model must have, and which its
/// `parameters` may place in one of `regions`.
pub(super) fn wanted(
    spec: &ModelSpec,
    name: &str,
    binary: bool,
    regions: &Regions,
    parameters: &Parameters,
) -> Result<Wanted, ApiError> {
    if !spec.outputs.iter().any(|o| o.name == name) {
        return Err(ApiError::bad_input(format!(
            "model '{}' has no output '{name}'",
            spec.name
        )));
    }
    let tensor = regions::Tensor {
        side: regions::Side::Output,
        name,
    };
    Ok(Wanted {
        name: name.to_owned(),
        binary,
        placed: regions.placement(tensor, parameters)?,
    })
}

/// Every output of the model, in its order.
pub(super) fn all_outputs(spec: &ModelSpec, binary: bool) -> Vec<Wanted> {
    let all = spec.outputs.iter().map(|o| Wanted {
        name: o.name.clone(),
        binary,
        placed: None,
    });
    all.collect()
}

/// The outputs to answer: those requested, in order, else all of the model's.
fn choose_outputs(
    spec: &ModelSpec,
    request: &InferRequest,
    regions: &Regions,
) -> Result<Vec<Wanted>, ApiError> {
    let all_binary =
        v2::flag(&request.parameters, "binary_data_output").map_err(ApiError::bad_input)?;
    let Some(requested) = &request.outputs else {
        return Ok(all_outputs(spec, all_binary));
    };
    requested
        .iter()
        .map(|output| {
            let binary = match output.parameters.get("binary_data") {
                Some(_) => {
                    v2::flag(&output.parameters, "binary_data").map_err(ApiError::bad_input)?
                }
                None => all_binary,
            };
            wanted(spec, &output.name, binary, regions, &output.parameters)
        })
        .collect()
}

/// The response of `outputs` (a model's or a pipeline's), with its `parameters`; outputs
/// placed in shared memory are written there first (an error if one does not fit).
pub(super) fn respond(
    spec: &ModelSpec,
    id: Option<String>,
    tensors: &[Tensor],
    wanted: &[Wanted],
    batched: Batch,
    parameters: AnswerParameters,
) -> Result<HttpResponse, ApiError> {
    let mut outputs = Vec::with_capacity(wanted.len());
    let mut binary = Vec::new();
    let mut elements = 0;
    for want in wanted {
        // The device gives every declared output; one it did not give is left out
        // rather than invented.
        let Some(tensor) = tensors.iter().find(|t| t.name == want.name) else {
            tracing::warn!(model = %spec.name, output = %want.name, "device gave no such output");
            continue;
        };
        let mut parameters = Parameters::new();
        let data = if let Some(at) = &want.placed {
            at.write_output(&want.name, &tensor.data)?;
            None
        } else if want.binary {
            parameters.insert("binary_data_size".into(), tensor.data.len().into());
            binary.push(web::Bytes::copy_from_slice(&tensor.data));
            None
        } else {
            elements += tensor.data.len();
            Some(codec::to_json(tensor.datatype, &tensor.data))
        };
        outputs.push(OutputText {
            name: &tensor.name,
            datatype: v2::datatype_name(tensor.datatype),
            shape: Shape {
                leading: batched.leading().map(|n| n as usize),
                dims: &tensor.shape,
            },
            parameters,
            data,
        });
    }
    let response = ResponseText {
        model_name: &spec.name,
        model_version: spec.version,
        id,
        parameters,
        outputs,
    };
    // Sized for the usual answer (a few hundred bytes of names and parameters, a few
    // characters per element): grown from empty it was reallocated several times.
    let mut json = Vec::with_capacity(256 + 4 * elements);
    // Serialising plain data into a Vec cannot fail; keep an answer even if it did.
    if serde_json::to_writer(&mut json, &response).is_err() {
        json = b"{}".to_vec();
    }
    Ok(binary::respond(json, binary))
}

/// [`v2::InferResponse`] as an answer writes it: the same fields, in the same order, with the
/// same JSON text, but borrowing the model's and tensors' names (an owned response cloned
/// four Strings per answer).
#[derive(Serialize)]
struct ResponseText<'a> {
    model_name: &'a str,
    #[serde(serialize_with = "as_text")]
    model_version: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    parameters: AnswerParameters,
    outputs: Vec<OutputText<'a>>,
}

/// [`v2::ResponseOutput`] as an answer writes it (see [`ResponseText`]).
#[derive(Serialize)]
struct OutputText<'a> {
    name: &'a str,
    datatype: &'static str,
    shape: Shape<'a>,
    #[serde(skip_serializing_if = "Parameters::is_empty")]
    parameters: Parameters,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<Elements>,
}

/// An output's shape: the client's batch dimension, if it sent one, then the tensor's.
struct Shape<'a> {
    leading: Option<usize>,
    dims: &'a [usize],
}

impl Serialize for Shape<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.leading.iter().chain(self.dims))
    }
}

/// A number as a JSON string, written without a String of its own.
fn as_text<S: Serializer>(number: &u64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(number)
}

/// A model's or a pipeline's answer, before a protocol encodes it, and what the front end
/// learns from it.
pub(super) struct Answer {
    /// Every output the model (the pipeline) gave, by name.
    pub(super) outputs: Vec<Tensor>,
    /// What the runtime tells of the answer (`emulated`, `late`, ...).
    pub(super) parameters: AnswerParameters,
    /// Where the way back starts (`Phase::Respond`): the end of the request's batch, or
    /// the pipeline's answer (its last stage's batch done and joined).
    pub(super) ended: Nanos,
    /// Its batch's run time (`None` for a pipeline: its stages ran many batches).
    pub(super) exec: Option<Nanos>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::v2::{InferResponse, ResponseOutput};

    /// The borrowed answer writes the text the protocol's owned one does. Mutation that
    /// breaks it: `shape` before `datatype` in `OutputText`, or the version as a number.
    #[test]
    fn the_borrowed_answer_writes_the_protocols_text() {
        let parameters = AnswerParameters {
            batch_size: Some(2),
            slo_ms: 12.5,
            ..Default::default()
        };
        let mut binary = Parameters::new();
        binary.insert("binary_data_size".into(), 8.into());
        let data = Some(Elements::Float(vec![1.5, -2.0]));
        let owned = InferResponse {
            model_name: "m".into(),
            model_version: "7".into(),
            id: Some("r1".into()),
            parameters: parameters.clone(),
            outputs: vec![
                ResponseOutput {
                    name: "y".into(),
                    datatype: "FP32".into(),
                    shape: vec![2, 1],
                    parameters: Parameters::new(),
                    data: data.clone(),
                },
                ResponseOutput {
                    name: "z".into(),
                    datatype: "INT32".into(),
                    shape: vec![2],
                    parameters: binary.clone(),
                    data: None,
                },
            ],
        };
        let borrowed = ResponseText {
            model_name: "m",
            model_version: 7,
            id: Some("r1".into()),
            parameters,
            outputs: vec![
                OutputText {
                    name: "y",
                    datatype: "FP32",
                    shape: Shape {
                        leading: Some(2),
                        dims: &[1],
                    },
                    parameters: Parameters::new(),
                    data,
                },
                OutputText {
                    name: "z",
                    datatype: "INT32",
                    shape: Shape {
                        leading: None,
                        dims: &[2],
                    },
                    parameters: binary,
                    data: None,
                },
            ],
        };
        let text = serde_json::to_string(&borrowed).unwrap();
        assert_eq!(text, serde_json::to_string(&owned).unwrap());
    }
}
