//! A small builder of ONNX graphs on tract's protobuf types (`tract_onnx::pb`), so the
//! built-in zoo can write real models from Rust without any Python or download.
//!
//! Only what the zoo needs: float inputs and outputs with a symbolic or fixed batch
//! dimension, seeded random weights stored as raw little-endian data, and nodes with
//! integer, float and integer-list attributes.

use prost::Message as _;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};
use tract_onnx::pb;
use tract_onnx::pb::attribute_proto::AttributeType;
use tract_onnx::pb::tensor_proto::DataType as PbType;
use tract_onnx::pb::tensor_shape_proto::{dimension, Dimension};

/// The opset the zoo is written for (every operator it uses exists unchanged since 13).
const OPSET: i64 = 13;
/// ONNX IR version matching opset 13.
const IR_VERSION: i64 = 7;

/// One dimension of a graph input or output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dim {
    Fixed(i64),
    /// A named dimension that varies (the batch).
    Param(&'static str),
}

/// A node attribute.
pub enum Attr {
    Int(i64),
    Float(f32),
    Ints(Vec<i64>),
}

/// Builds one graph; weights come from a seeded generator, so the same seed writes the
/// same bytes.
pub struct GraphBuilder {
    graph: pb::GraphProto,
    rng: StdRng,
    names: usize,
}

impl GraphBuilder {
    pub fn new(name: &str, seed: u64) -> Self {
        Self {
            graph: pb::GraphProto {
                name: name.to_owned(),
                ..Default::default()
            },
            rng: StdRng::seed_from_u64(seed),
            names: 0,
        }
    }

    /// Declares a float graph input.
    pub fn input(&mut self, name: &str, dims: &[Dim]) -> String {
        self.graph.input.push(value_info(name, dims));
        name.to_owned()
    }

    /// Declares `value` as a float graph output named `name` (an Identity renames it).
    pub fn output(&mut self, value: &str, name: &str, dims: &[Dim]) {
        self.graph.node.push(pb::NodeProto {
            op_type: "Identity".into(),
            input: vec![value.to_owned()],
            output: vec![name.to_owned()],
            name: format!("{name}_identity"),
            ..Default::default()
        });
        self.graph.output.push(value_info(name, dims));
    }

    /// A float initializer of normally distributed values with standard deviation `std`.
    pub fn random(&mut self, prefix: &str, dims: &[i64], std: f32) -> String {
        let count: i64 = dims.iter().product();
        let normal = Normal::new(0.0f32, std.max(f32::MIN_POSITIVE)).expect("finite std");
        let values: Vec<f32> = (0..count).map(|_| normal.sample(&mut self.rng)).collect();
        self.constant(prefix, dims, &values)
    }

    /// A float initializer with the given values.
    pub fn constant(&mut self, prefix: &str, dims: &[i64], values: &[f32]) -> String {
        let name = self.fresh(prefix);
        self.graph.initializer.push(pb::TensorProto {
            name: name.clone(),
            dims: dims.to_vec(),
            data_type: PbType::Float as i32,
            raw_data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ..Default::default()
        });
        name
    }

    /// An `int64` initializer (shapes for Reshape and the like).
    pub fn constant_i64(&mut self, prefix: &str, values: &[i64]) -> String {
        let name = self.fresh(prefix);
        self.graph.initializer.push(pb::TensorProto {
            name: name.clone(),
            dims: vec![values.len() as i64],
            data_type: PbType::Int64 as i32,
            raw_data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ..Default::default()
        });
        name
    }

    /// Appends a node with one output and returns the output's name.
    pub fn node(&mut self, op: &str, inputs: &[&str], attrs: &[(&str, Attr)]) -> String {
        let output = self.fresh(&op.to_lowercase());
        self.graph.node.push(pb::NodeProto {
            op_type: op.to_owned(),
            input: inputs.iter().map(|s| (*s).to_owned()).collect(),
            output: vec![output.clone()],
            name: format!("{output}_node"),
            attribute: attrs.iter().map(|(n, a)| attribute(n, a)).collect(),
            ..Default::default()
        });
        output
    }

    /// The finished model, encoded as ONNX bytes.
    pub fn finish(self, producer: &str) -> Vec<u8> {
        let model = pb::ModelProto {
            ir_version: IR_VERSION,
            producer_name: producer.to_owned(),
            opset_import: vec![pb::OperatorSetIdProto {
                domain: String::new(),
                version: OPSET,
            }],
            graph: Some(self.graph),
            ..Default::default()
        };
        model.encode_to_vec()
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.names += 1;
        format!("{prefix}_{}", self.names)
    }
}

fn value_info(name: &str, dims: &[Dim]) -> pb::ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| Dimension {
            denotation: String::new(),
            value: Some(match d {
                Dim::Fixed(v) => dimension::Value::DimValue(*v),
                Dim::Param(p) => dimension::Value::DimParam((*p).to_owned()),
            }),
        })
        .collect();
    let tensor = pb::type_proto::Tensor {
        elem_type: PbType::Float as i32,
        shape: Some(pb::TensorShapeProto { dim }),
    };
    pb::ValueInfoProto {
        name: name.to_owned(),
        r#type: Some(pb::TypeProto {
            denotation: String::new(),
            value: Some(pb::type_proto::Value::TensorType(tensor)),
        }),
        ..Default::default()
    }
}

fn attribute(name: &str, value: &Attr) -> pb::AttributeProto {
    let mut attr = pb::AttributeProto {
        name: name.to_owned(),
        ..Default::default()
    };
    match value {
        Attr::Int(i) => {
            attr.i = *i;
            attr.r#type = AttributeType::Int as i32;
        }
        Attr::Float(f) => {
            attr.f = *f;
            attr.r#type = AttributeType::Float as i32;
        }
        Attr::Ints(v) => {
            attr.ints = v.clone();
            attr.r#type = AttributeType::Ints as i32;
        }
    }
    attr
}
