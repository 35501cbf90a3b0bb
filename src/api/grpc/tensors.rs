//! A `ModelInferRequest` into the front end's [`Decoded`] and an answer back into a
//! `ModelInferResponse`: tensors as raw little-endian bytes (`raw_input_contents`, one
//! entry per input) or typed contents, parameters both ways.
//!
//! Every check of a tensor against the model is the HTTP path's (`body::check_input`,
//! `codec::check_raw`, `body::wanted`); only the protobuf layout is this module's.
//! Outputs always go back raw (`raw_output_contents`), as Triton's server does and its
//! clients expect.

use serde_json::Value;

use super::super::body::{self, all_outputs, check_input, wanted, Answer, Checked, Decoded, Items};
use super::super::codec;
use super::super::error::ApiError;
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

/// Turns a request into the runtime's tensors against `spec`: the decode pool's job.
pub fn decode(spec: &ModelSpec, request: ModelInferRequest) -> Result<Decoded, ApiError> {
    let slo = body::slo(&json_parameters(&request.parameters))?;
    let raw = request.raw_input_contents;
    if !raw.is_empty() && raw.len() != request.inputs.len() {
        return Err(ApiError::bad_input(format!(
            "raw_input_contents has {} entries for {} inputs: send one per input, or none",
            raw.len(),
            request.inputs.len()
        )));
    }
    let mut inputs = Vec::with_capacity(request.inputs.len());
    let mut items = Items::default();
    for (i, input) in request.inputs.into_iter().enumerate() {
        let name = input.name;
        let placed = input.parameters.contains_key(body::SHARED_MEMORY);
        body::refuse_shared_memory(&format!("input '{name}'"), placed)?;
        let Checked {
            datatype,
            shape,
            count,
        } = check_input(spec, &name, &input.datatype, &input.shape, &mut items)?;
        let data: std::sync::Arc<[u8]> = match (raw.get(i), input.contents) {
            (Some(bytes), None) => {
                codec::check_raw(&name, datatype, count, bytes).map_err(ApiError::bad_input)?;
                bytes[..].into()
            }
            (None, Some(contents)) => typed(&name, datatype, count, contents)?.into(),
            (Some(_), Some(_)) => {
                return Err(ApiError::bad_input(format!(
                    "input '{name}' has both contents and raw_input_contents"
                )))
            }
            (None, None) => return Err(ApiError::bad_input(format!("input '{name}' has no data"))),
        };
        inputs.push(Tensor {
            name,
            datatype,
            shape,
            data,
        });
    }
    let outputs = if request.outputs.is_empty() {
        all_outputs(spec, true)
    } else {
        let asked = request.outputs.iter().map(|o| {
            let placed = o.parameters.contains_key(body::SHARED_MEMORY);
            body::refuse_shared_memory(&format!("output '{}'", o.name), placed)?;
            wanted(spec, &o.name, true)
        });
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

/// The answer to a request: the outputs it asked for, in its order, all raw.
pub fn encode(spec: &ModelSpec, decoded: &Decoded, answer: Answer) -> ModelInferResponse {
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
        outputs.push(InferOutputTensor {
            name: tensor.name.clone(),
            datatype: datatype_name(tensor.datatype).to_owned(),
            shape: batch.into_iter().chain(item).collect(),
            parameters: Default::default(),
            contents: None,
        });
        raw.push(tensor.data.to_vec());
    }
    ModelInferResponse {
        model_name: spec.name.clone(),
        model_version: spec.version.to_string(),
        id: decoded.id.clone().unwrap_or_default(),
        // Protobuf parameters are a map keyed by strings: the typed answer becomes one here.
        parameters: proto_parameters(answer.parameters.to_map()),
        outputs,
        raw_output_contents: raw,
    }
}
