//! The JSON bodies of the Open Inference Protocol (KServe V2) inference route, and the
//! names of its datatypes.
//!
//! Requests are read leniently (unknown fields are ignored, as the protocol lets servers
//! do) but every value the server uses is checked; responses follow the protocol and add
//! this runtime's facts as response parameters (`emulated`, `late`).
//!
//! Only the protocol's vocabulary lives here; `codec.rs` converts between these bodies'
//! data and the runtime's bytes, so it depends on this module and never the reverse.

use actix_web::web::Bytes;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::model::DataType;
use crate::pipeline::run::Missing;

/// Parameters of a request, tensor or response: a JSON object.
pub type Parameters = Map<String, Value>;

/// The runtime's facts about an answer, a response's `parameters`: typed, so that an
/// answer builds no map and allocates no keys, and serialised as the same JSON object
/// (the fields in the order a JSON map sorts its keys, so the text is the same too).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AnswerParameters {
    /// The size of the batch the request ran in (a model's answers; a pipeline's stages
    /// ran many).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    /// The device (some stage's device) only emulated the model: the outputs are not a
    /// real inference.
    pub emulated: bool,
    /// Answered after its deadline: the estimates were wrong.
    pub late: bool,
    /// A pipeline's rows left out (with `partial_results`); absent for a model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<Vec<Missing>>,
    /// The objective the request had, in milliseconds.
    pub slo_ms: f64,
}

impl AnswerParameters {
    /// As a JSON object, for a protocol that carries parameters as a map (gRPC).
    pub fn to_map(&self) -> Parameters {
        match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            // A struct of plain fields always serialises as an object.
            _ => Parameters::new(),
        }
    }
}

/// `POST /v2/models/{model}/infer`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct InferRequest {
    /// Echoed in the response.
    #[serde(default)]
    pub id: Option<String>,
    /// `slo_ms` (latency objective in milliseconds); `binary_data_output` (every output
    /// not listed in `outputs` comes back as binary data).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub parameters: Parameters,
    pub inputs: Vec<RequestInput>,
    /// The outputs wanted, in this order; all of them if absent.
    #[serde(default)]
    pub outputs: Option<Vec<RequestOutput>>,
}

/// One input tensor of a request.
#[derive(Debug, Deserialize, ToSchema)]
pub struct RequestInput {
    pub name: String,
    /// The model's shape of one item, optionally preceded by a batch dimension of 1.
    pub shape: Vec<i64>,
    pub datatype: String,
    /// `binary_data_size`: the tensor's bytes follow the JSON header (binary extension).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub parameters: Parameters,
    /// Elements in row-major order, flat or nested; absent for binary data.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub data: Option<Data>,
}

/// The `data` of a JSON input: its text as the request had it, and that text read as the
/// input's datatype (`codec::parse_request` cuts the text out of the body and reads it in
/// one pass, without building `Value`s; this module only names what it found).
#[derive(Debug, Clone)]
pub struct Data {
    /// The JSON text of the value: arrays, flat or nested, or one scalar.
    pub text: Bytes,
    /// `text` read; `None` until `codec::parse_request` has read it.
    pub read: Option<ReadData>,
}

/// What reading a `data` text as a datatype found.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadData {
    /// The datatype it was read as; `None` where the request named none the protocol
    /// knows (the text was only checked and counted).
    pub datatype: Option<DataType>,
    /// Its scalars: what its shape must hold.
    pub elements: usize,
    /// The elements' little-endian bytes (`BYTES` length-prefixed), up to the first wrong one.
    pub bytes: Vec<u8>,
    /// The first value the datatype cannot take, as JSON text, if any.
    pub wrong: Option<String>,
}

/// Read by `serde_json` as a whole (only where the body is not read by `parse_request`'s
/// fast path): the value is kept as its text, read afterwards like any other.
impl<'de> Deserialize<'de> for Data {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        let text = serde_json::to_vec(&value).map_err(serde::de::Error::custom)?;
        Ok(Data {
            text: text.into(),
            read: None,
        })
    }
}

/// One output a request asks for.
#[derive(Debug, Deserialize, ToSchema)]
pub struct RequestOutput {
    pub name: String,
    /// `binary_data`: answer this output as binary data.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub parameters: Parameters,
}

/// A successful inference.
#[derive(Debug, Serialize, ToSchema)]
pub struct InferResponse {
    pub model_name: String,
    pub model_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `emulated` (the device only emulated the model: outputs are not a real
    /// inference), `late` (answered after the deadline: the estimates were wrong),
    /// `batch_size` (size of the batch it ran in), `slo_ms` (the objective it had).
    #[schema(value_type = Object)]
    pub parameters: AnswerParameters,
    pub outputs: Vec<ResponseOutput>,
}

/// One output tensor of a response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ResponseOutput {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<usize>,
    /// `binary_data_size` when the data follows the JSON header.
    #[serde(skip_serializing_if = "Map::is_empty")]
    #[schema(value_type = Object)]
    pub parameters: Parameters,
    /// Flat elements in row-major order; absent for binary data.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Vec<Object>)]
    pub data: Option<Elements>,
}

/// The elements of an output, typed so that each serialises as its datatype does best
/// (an `FP32` as the shortest text that reads back as the same `f32`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Elements {
    Bool(Vec<bool>),
    Unsigned(Vec<u64>),
    Signed(Vec<i64>),
    Float(Vec<f32>),
    Double(Vec<f64>),
    Text(Vec<String>),
}

/// Every datatype and its protocol name.
const NAMES: [(DataType, &str); 13] = [
    (DataType::Bool, "BOOL"),
    (DataType::Uint8, "UINT8"),
    (DataType::Uint16, "UINT16"),
    (DataType::Uint32, "UINT32"),
    (DataType::Uint64, "UINT64"),
    (DataType::Int8, "INT8"),
    (DataType::Int16, "INT16"),
    (DataType::Int32, "INT32"),
    (DataType::Int64, "INT64"),
    (DataType::Fp16, "FP16"),
    (DataType::Fp32, "FP32"),
    (DataType::Fp64, "FP64"),
    (DataType::Bytes, "BYTES"),
];

/// The protocol's name of a datatype.
pub fn datatype_name(datatype: DataType) -> &'static str {
    NAMES
        .iter()
        .find(|(d, _)| *d == datatype)
        .map_or("BYTES", |(_, name)| name)
}

/// The datatype the protocol calls `name`.
pub fn parse_datatype(name: &str) -> Option<DataType> {
    NAMES.iter().find(|(_, n)| *n == name).map(|(d, _)| *d)
}

/// A boolean parameter; absent counts as `false`.
pub fn flag(parameters: &Parameters, key: &str) -> Result<bool, String> {
    match parameters.get(key) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(format!("parameter '{key}' must be a boolean, got {other}")),
    }
}

/// A byte count parameter (`binary_data_size`), if present.
pub fn size(parameters: &Parameters, key: &str) -> Result<Option<usize>, String> {
    match parameters.get(key) {
        None => Ok(None),
        Some(value) => value
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| format!("parameter '{key}' must be a byte count, got {value}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_datatype_has_a_name_and_back() {
        for (datatype, name) in NAMES {
            assert_eq!(datatype_name(datatype), name);
            assert_eq!(parse_datatype(name), Some(datatype));
            let serde_name = serde_json::to_value(datatype).unwrap();
            assert_eq!(serde_name, Value::from(name));
        }
        assert_eq!(parse_datatype("BF16"), None);
    }

    /// Mutation that breaks it: a field moved out of alphabetical order, or `missing`
    /// skipped when empty (a pipeline's answers always had it).
    #[test]
    fn answer_parameters_serialise_as_the_map_did() {
        let model = AnswerParameters {
            batch_size: Some(3),
            emulated: true,
            late: false,
            missing: None,
            slo_ms: 100.0,
        };
        let mut map = Parameters::new();
        map.insert("emulated".to_owned(), Value::Bool(true));
        map.insert("late".to_owned(), Value::Bool(false));
        map.insert("batch_size".to_owned(), 3.into());
        map.insert("slo_ms".to_owned(), 100.0.into());
        let text = |v: &AnswerParameters| serde_json::to_string(v).unwrap();
        let map_text = |m: &Parameters| serde_json::to_string(m).unwrap();
        assert_eq!(text(&model), map_text(&map));
        assert_eq!(model.to_map(), map);
        let pipeline = AnswerParameters {
            batch_size: None,
            missing: Some(vec![]),
            late: true,
            ..model
        };
        let mut map = Parameters::new();
        map.insert("emulated".to_owned(), Value::Bool(true));
        map.insert("late".to_owned(), Value::Bool(true));
        map.insert("slo_ms".to_owned(), 100.0.into());
        map.insert("missing".to_owned(), serde_json::json!([]));
        assert_eq!(text(&pipeline), map_text(&map));
        assert_eq!(pipeline.to_map(), map);
    }

    #[test]
    fn parameters_are_typed() {
        let p: Parameters = serde_json::from_str(r#"{"a": true, "n": 12, "s": "x"}"#).unwrap();
        assert_eq!(flag(&p, "a"), Ok(true));
        assert_eq!(flag(&p, "missing"), Ok(false));
        assert!(flag(&p, "s").is_err());
        assert_eq!(size(&p, "n"), Ok(Some(12)));
        assert!(size(&p, "s").is_err());
    }
}
