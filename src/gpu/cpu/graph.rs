//! What an ONNX graph takes: its inputs, outputs and batch dimension, read off the
//! protobuf before anything is compiled.
//!
//! A graph whose inputs all start with a symbolic dimension (`N`, or an unknown one) is
//! batched: plans are built for each allowed batch size. One whose inputs all start with a
//! fixed 1 has a batch dimension of 1 and serves batch size 1 only. Anything else has no
//! batch dimension: each tensor is one whole item.

use prost::Message as _;
use tract_onnx::pb;
use tract_onnx::pb::tensor_shape_proto::dimension;

use super::CpuError;
use crate::model::DataType;

/// The batch dimension of a graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchDim {
    /// The first dimension of every input is symbolic.
    Symbolic,
    /// The first dimension of every input is fixed to 1.
    FixedOne,
    /// No batch dimension.
    None,
}

/// One graph input with its dimensions; `None` marks a symbolic one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphInput {
    pub name: String,
    pub datatype: DataType,
    pub dims: Vec<Option<u64>>,
}

/// Inputs and outputs of a graph, as declared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    pub inputs: Vec<GraphInput>,
    /// Output names, in graph order.
    pub outputs: Vec<String>,
}

impl Signature {
    /// Reads the signature of ONNX `bytes`.
    pub fn read(bytes: &[u8]) -> Result<Self, CpuError> {
        let model = pb::ModelProto::decode(bytes)
            .map_err(|e| CpuError::Decode(format!("not an ONNX model: {e}")))?;
        let graph = model
            .graph
            .ok_or_else(|| CpuError::Decode("the model has no graph".into()))?;
        let initializers: std::collections::HashSet<&str> =
            graph.initializer.iter().map(|t| t.name.as_str()).collect();
        // Older IR versions list initializers among the inputs: those are weights.
        let inputs = graph
            .input
            .iter()
            .filter(|i| !initializers.contains(i.name.as_str()))
            .map(graph_input)
            .collect::<Result<Vec<_>, _>>()?;
        if inputs.is_empty() {
            return Err(CpuError::Unsupported("the graph has no inputs".into()));
        }
        // tract indexes its outlets by these names and panics on one nothing produces.
        let produced: std::collections::HashSet<&str> = graph
            .node
            .iter()
            .flat_map(|n| n.output.iter().map(String::as_str))
            .chain(graph.input.iter().map(|i| i.name.as_str()))
            .chain(initializers.iter().copied())
            .collect();
        if let Some(o) = graph
            .output
            .iter()
            .find(|o| !produced.contains(o.name.as_str()))
        {
            return Err(CpuError::Decode(format!(
                "the graph output '{}' is produced by no node",
                o.name
            )));
        }
        Ok(Self {
            inputs,
            outputs: graph.output.iter().map(|o| o.name.clone()).collect(),
        })
    }

    /// The batch dimension the inputs declare.
    pub fn batch_dim(&self) -> BatchDim {
        let first = |i: &GraphInput| i.dims.first().copied();
        if self.inputs.iter().all(|i| first(i) == Some(None)) {
            BatchDim::Symbolic
        } else if self.inputs.iter().all(|i| first(i) == Some(Some(1))) {
            BatchDim::FixedOne
        } else {
            BatchDim::None
        }
    }
}

fn graph_input(value: &pb::ValueInfoProto) -> Result<GraphInput, CpuError> {
    let unsupported = |what: &str| CpuError::Unsupported(format!("input '{}': {what}", value.name));
    let Some(pb::type_proto::Value::TensorType(tensor)) =
        value.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return Err(unsupported("not a tensor"));
    };
    let datatype = datatype(tensor.elem_type)
        .ok_or_else(|| unsupported(&format!("element type {} is not served", tensor.elem_type)))?;
    let shape = tensor
        .shape
        .as_ref()
        .ok_or_else(|| unsupported("no shape declared"))?;
    let dims = shape
        .dim
        .iter()
        .map(|d| match d.value {
            Some(dimension::Value::DimValue(v)) if v > 0 => Some(v as u64),
            _ => None,
        })
        .collect();
    Ok(GraphInput {
        name: value.name.clone(),
        datatype,
        dims,
    })
}

/// The V2 datatype of an ONNX element type, if the API can carry it.
pub fn datatype(elem_type: i32) -> Option<DataType> {
    use pb::tensor_proto::DataType as Pb;
    let t = Pb::from_i32(elem_type)?;
    Some(match t {
        Pb::Float => DataType::Fp32,
        Pb::Double => DataType::Fp64,
        Pb::Float16 => DataType::Fp16,
        Pb::Int8 => DataType::Int8,
        Pb::Int16 => DataType::Int16,
        Pb::Int32 => DataType::Int32,
        Pb::Int64 => DataType::Int64,
        Pb::Uint8 => DataType::Uint8,
        Pb::Uint16 => DataType::Uint16,
        Pb::Uint32 => DataType::Uint32,
        Pb::Uint64 => DataType::Uint64,
        Pb::Bool => DataType::Bool,
        _ => return None,
    })
}
