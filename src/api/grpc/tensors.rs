//! A `ModelInferRequest` into the front end's [`Decoded`] and an answer back into a
//! `ModelInferResponse`: tensors as raw little-endian bytes (`raw_input_contents`, one
//! entry per input not placed in shared memory), typed contents, or in a shared-memory
//! region (`regions.rs`); parameters both ways.
//!
//! Every check of a tensor against the model is the HTTP path's (`body::check_input`,
//! `codec::check_raw`, `body::wanted`); only the protobuf layout is this module's.
//! Outputs go back raw (`raw_output_contents`), as Triton's server does and its clients
//! expect, or into their region (their raw entry then empty, so that the entries still
//! line up with the outputs, and no data or parameters in the answer, as over HTTP).

use serde_json::Value;

use super::super::body::{self, all_outputs, check_input, wanted, Answer, Checked, Decoded, Items};
use super::super::codec;
use super::super::error::ApiError;
use super::super::regions::{self, Regions};
use super::super::v2::{datatype_name, Parameters};
use super::proto::infer_parameter::ParameterChoice;
use super::proto::model_infer_response::InferOutputTensor;
use super::proto::{InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse};
use crate::model::{DataType, ModelSpec};
use crate::tensor::Tensor;

/// Parameters as the HTTP API reads them (a JSON object), so both read them alike.
pub fn json_parameters<'a>(
    parameters: impl IntoIterator<Item = (&'a String, &'a InferParameter)>,
) -> Parameters {
    let value = |p: &InferParameter| match &p.parameter_choice {
        Some(ParameterChoice::BoolParam(b)) => Value::Bool(*b),
        Some(ParameterChoice::Int64Param(i)) => (*i).into(),
        Some(ParameterChoice::StringParam(s)) => Value::String(s.clone()),
        Some(ParameterChoice::DoubleParam(d)) => (*d).into(),
        Some(ParameterChoice::Uint64Param(u)) => (*u).into(),
        None => Value::Null,
    };
    parameters
        .into_iter()
        .map(|(k, p)| (k.clone(), value(p)))
        .collect()
}

/// Answer parameters as protobuf ones: numbers as int64, uint64 or double, anything
/// that is not a scalar as its JSON text.
pub fn proto_parameters(
    parameters: Parameters,
) -> std::collections::HashMap<String, InferParameter> {
    let choice = |v: Value| match v {
        Value::Bool(b) => ParameterChoice::BoolParam(b),
        Value::String(s) => ParameterChoice::StringParam(s),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => ParameterChoice::Int64Param(i),
            (None, Some(u), _) => ParameterChoice::Uint64Param(u),
            (_, _, f) => ParameterChoice::DoubleParam(f.unwrap_or(f64::NAN)),
        },
        other => ParameterChoice::StringParam(other.to_string()),
    };
    parameters
        .into_iter()
        .map(|(k, v)| {
            let parameter_choice = Some(choice(v));
            (k, InferParameter { parameter_choice })
        })
        .collect()
}

/// Turns a request into the runtime's tensors against `spec`, reading those placed in
/// shared memory from `regions`: the decode pool's job.
pub fn decode(
    spec: &ModelSpec,
    request: ModelInferRequest,
    regions: &Regions,
) -> Result<Decoded, ApiError> {
    let slo = body::slo(&json_parameters(&request.parameters))?;
    let mut raw = Raw::new(request.raw_input_contents);
    let mut inputs = Vec::with_capacity(request.inputs.len());
    let mut items = Items::default();
    for input in request.inputs {
        let name = input.name;
        let Checked {
            datatype,
            shape,
            count,
        } = check_input(spec, &name, &input.datatype, &input.shape, &mut items)?;
        let tensor = regions::Tensor {
            side: regions::Side::Input,
            name: &name,
        };
        let placed = regions.placement(tensor, &placing(&input.parameters))?;
        let data: std::sync::Arc<[u8]> = match (placed, input.contents) {
            (Some(at), None) => at.read_input(&name, datatype, count)?.into(),
            (Some(at), Some(_)) => {
                return Err(ApiError::bad_input(format!(
                    "input '{name}' is placed in region '{}' and has contents too",
                    at.name()
                )))
            }
            (None, contents) => match (raw.next(&name, contents.is_some())?, contents) {
                (Some(bytes), _) => {
                    codec::check_raw(&name, datatype, count, &bytes)
                        .map_err(ApiError::bad_input)?;
                    bytes[..].into()
                }
                (None, Some(contents)) => typed(&name, datatype, count, contents)?.into(),
                (None, None) => {
                    return Err(ApiError::bad_input(format!("input '{name}' has no data")))
                }
            },
        };
        inputs.push(Tensor {
            name,
            datatype,
            shape,
            data,
        });
    }
    raw.finish()?;
    let outputs = if request.outputs.is_empty() {
        all_outputs(spec, true)
    } else {
        let asked = request
            .outputs
            .iter()
            .map(|o| wanted(spec, &o.name, true, regions, &placing(&o.parameters)));
        asked.collect::<Result<_, _>>()?
    };
    Ok(Decoded {
        id: Some(request.id).filter(|id| !id.is_empty()),
        slo,
        inputs,
        batched: items.batch(),
        outputs,
    })
}

/// A tensor's parameters as `Regions::placement` reads them: converted only if they
/// place it in a region (most tensors have none, and converting allocates).
fn placing(parameters: &std::collections::HashMap<String, InferParameter>) -> Parameters {
    if parameters.contains_key(regions::REGION) {
        json_parameters(parameters)
    } else {
        Parameters::new()
    }
}

/// `raw_input_contents`, taken in order by the inputs that are neither typed nor in
/// shared memory: all of them, or none.
struct Raw {
    entries: std::vec::IntoIter<bytes::Bytes>,
    /// Entries the request sent.
    sent: usize,
}

impl Raw {
    fn new(entries: Vec<bytes::Bytes>) -> Self {
        Self {
            sent: entries.len(),
            entries: entries.into_iter(),
        }
    }

    /// The error of entries that are not one per input that reads them.
    fn miscounted(&self) -> ApiError {
        ApiError::bad_input(format!(
            "raw_input_contents has {} entries, not one per input outside shared memory: \
             send one per such input, in order, or none",
            self.sent
        ))
    }

    /// The next entry, for an input not in shared memory (`typed`: it has contents).
    fn next(&mut self, name: &str, typed: bool) -> Result<Option<bytes::Bytes>, ApiError> {
        if self.sent == 0 {
            return Ok(None);
        }
        if typed {
            return Err(ApiError::bad_input(format!(
                "input '{name}' has both contents and raw_input_contents"
            )));
        }
        match self.entries.next() {
            Some(entry) => Ok(Some(entry)),
            None => Err(self.miscounted()),
        }
    }

    /// Refuses a request that sent more entries than its inputs read.
    fn finish(mut self) -> Result<(), ApiError> {
        match self.entries.next() {
            Some(_) => Err(self.miscounted()),
            None => Ok(()),
        }
    }
}

/// Each value in the narrower type `T`, as little-endian bytes; one out of its range is
/// refused.
fn narrow<S: Copy + std::fmt::Display, T: TryFrom<S>>(
    name: &str,
    values: &[S],
    bytes: impl Fn(T) -> Vec<u8>,
) -> Result<Vec<u8>, ApiError> {
    let mut out = Vec::with_capacity(values.len() * std::mem::size_of::<T>());
    for &v in values {
        let t = T::try_from(v).map_err(|_| {
            ApiError::bad_input(format!(
                "input '{name}' has the value {v}, out of its datatype's range"
            ))
        })?;
        out.extend(bytes(t));
    }
    Ok(out)
}

/// The little-endian bytes of typed contents: the one field of the datatype, `count`
/// elements, each in the datatype's range.
fn typed(
    name: &str,
    datatype: DataType,
    count: usize,
    c: InferTensorContents,
) -> Result<Vec<u8>, ApiError> {
    let given = |n: usize| {
        if n == count {
            Ok(())
        } else {
            Err(ApiError::bad_input(format!(
                "input '{name}' has {n} elements of {} contents, its shape needs {count}",
                datatype_name(datatype)
            )))
        }
    };
    use DataType::*;
    match datatype {
        Bool => given(c.bool_contents.len())
            .map(|()| c.bool_contents.iter().map(|&b| u8::from(b)).collect()),
        Int8 => given(c.int_contents.len())
            .and_then(|()| narrow(name, &c.int_contents, |t: i8| t.to_le_bytes().to_vec())),
        Int16 => given(c.int_contents.len())
            .and_then(|()| narrow(name, &c.int_contents, |t: i16| t.to_le_bytes().to_vec())),
        Int32 => given(c.int_contents.len())
            .and_then(|()| narrow(name, &c.int_contents, |t: i32| t.to_le_bytes().to_vec())),
        Int64 => given(c.int64_contents.len())
            .and_then(|()| narrow(name, &c.int64_contents, |t: i64| t.to_le_bytes().to_vec())),
        Uint8 => given(c.uint_contents.len())
            .and_then(|()| narrow(name, &c.uint_contents, |t: u8| t.to_le_bytes().to_vec())),
        Uint16 => given(c.uint_contents.len())
            .and_then(|()| narrow(name, &c.uint_contents, |t: u16| t.to_le_bytes().to_vec())),
        Uint32 => given(c.uint_contents.len())
            .and_then(|()| narrow(name, &c.uint_contents, |t: u32| t.to_le_bytes().to_vec())),
        Uint64 => given(c.uint64_contents.len())
            .and_then(|()| narrow(name, &c.uint64_contents, |t: u64| t.to_le_bytes().to_vec())),
        Fp32 => given(c.fp32_contents.len()).map(|()| {
            c.fp32_contents
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect()
        }),
        Fp64 => given(c.fp64_contents.len()).map(|()| {
            c.fp64_contents
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect()
        }),
        Bytes => given(c.bytes_contents.len()).and_then(|()| {
            let mut out = Vec::new();
            for element in &c.bytes_contents {
                let len = u32::try_from(element.len()).map_err(|_| {
                    ApiError::bad_input(format!("input '{name}' has an element over 4 GiB"))
                })?;
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(element);
            }
            Ok(out)
        }),
        // The protocol has no typed field for half floats.
        Fp16 => Err(ApiError::bad_input(format!(
            "input '{name}' is FP16, which has no typed contents: send it in raw_input_contents"
        ))),
    }
}

/// The answer to a request: the outputs it asked for, in its order, raw or written into
/// the region the request placed them in.
pub fn encode(
    spec: &ModelSpec,
    decoded: &Decoded,
    answer: Answer,
) -> Result<ModelInferResponse, ApiError> {
    let mut outputs = Vec::with_capacity(decoded.outputs.len());
    let mut raw = Vec::with_capacity(decoded.outputs.len());
    for want in &decoded.outputs {
        // As over HTTP: an output the device did not give is left out, not invented.
        let Some(tensor) = answer.outputs.iter().find(|t| t.name == want.name) else {
            tracing::warn!(model = %spec.name, output = %want.name, "device gave no such output");
            continue;
        };
        let batch = decoded.batched.leading().map(i64::from);
        let item = tensor.shape.iter().map(|&d| d as i64);
        raw.push(match &want.placed {
            Some(at) => {
                at.write_output(&want.name, &tensor.data)?;
                Vec::new()
            }
            None => tensor.data.to_vec(),
        });
        outputs.push(InferOutputTensor {
            name: tensor.name.clone(),
            datatype: datatype_name(tensor.datatype).to_owned(),
            shape: batch.into_iter().chain(item).collect(),
            parameters: Default::default(),
            contents: None,
        });
    }
    Ok(ModelInferResponse {
        model_name: spec.name.clone(),
        model_version: spec.version.to_string(),
        id: decoded.id.clone().unwrap_or_default(),
        // Protobuf parameters are a map keyed by strings: the typed answer becomes one here.
        parameters: proto_parameters(answer.parameters.to_map()),
        outputs,
        raw_output_contents: raw,
    })
}
