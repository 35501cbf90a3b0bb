//! One runnable tract plan: an ONNX graph optimised for one batch size, and the copies of
//! a batch's tensors in and out of it.
//!
//! A batch of `n` requests runs on the plan built for the smallest allowed size of at
//! least `n`, assembled and split by the rules every real backend shares ([`batch`]).

use tract_onnx::prelude::*;
use tract_onnx::tract_hir::internal::InferenceFact;

use super::batch::{self, full_shape};
use super::CpuError;
use crate::gpu::BatchOutputs;
use crate::model::{DataType, TensorSpec};
use crate::tensor::Tensor as Item;

type Runnable = TypedRunnableModel<TypedModel>;

/// What a plan is built from.
#[derive(Clone, Copy, Debug)]
pub struct PlanRequest<'a> {
    /// Inputs of one item, in graph order (no batch dimension).
    pub inputs: &'a [TensorSpec],
    /// Names of the graph outputs, in graph order.
    pub outputs: &'a [String],
    /// Whether tensors carry a leading batch dimension.
    pub batched: bool,
    /// The batch size to build for (1 when not batched).
    pub batch: u32,
}

/// A compiled plan. (A run builds a fresh session: tract's sessions are not `Send`, and
/// the device that owns the plan must be.) It holds no thread pool: the device that runs
/// it chooses its threads for the run, so one plan serves devices of every thread count.
pub struct Plan {
    pub batch: u32,
    batched: bool,
    inputs: Vec<(TensorSpec, DatumType)>,
    /// Outputs of one item, as the compiled graph gives them.
    outputs: Vec<TensorSpec>,
    /// Bytes of the constants the optimised graph holds (weights, repacked for its
    /// kernels): the memory a LOAD of this plan takes.
    weight_bytes: u64,
    runnable: Arc<Runnable>,
}

impl Plan {
    /// Compiles the graph for one batch size. tract may panic on a graph it accepted (a
    /// malformed tensor in a mutated model, found by `tests/fuzz_onnx.rs`): the panic is
    /// caught and the model refused with it, like any other graph tract cannot plan,
    /// rather than taking the registering thread down.
    pub fn compile(bytes: &[u8], request: PlanRequest<'_>) -> Result<Self, CpuError> {
        let batch = request.batch;
        let compiled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Self::compile_unguarded(bytes, request)
        }));
        compiled.unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("no message");
            Err(CpuError::Compile {
                batch,
                message: format!("tract panicked: {message}"),
            })
        })
    }

    /// Parses, types, optimises and plans `bytes` for `request.batch`.
    fn compile_unguarded(bytes: &[u8], request: PlanRequest<'_>) -> Result<Self, CpuError> {
        let batch = request.batch;
        let failed = |e: TractError| CpuError::Compile {
            batch,
            message: format!("{e:#}"),
        };
        let mut model = tract_onnx::onnx()
            .model_for_read(&mut &bytes[..])
            .map_err(failed)?;
        let mut inputs = Vec::with_capacity(request.inputs.len());
        for (i, spec) in request.inputs.iter().enumerate() {
            let datum = datum_type(spec.datatype)?;
            let shape = full_shape(spec, request.batched, batch)?;
            model = model
                .with_input_fact(i, InferenceFact::dt_shape(datum, shape))
                .map_err(failed)?;
            inputs.push((spec.clone(), datum));
        }
        let optimized = model.into_optimized().map_err(failed)?;
        let mut outputs = Vec::with_capacity(request.outputs.len());
        for (j, name) in request.outputs.iter().enumerate() {
            let fact = optimized.output_fact(j).map_err(failed)?;
            outputs.push(item_output(name, fact, request.batched, batch)?);
        }
        let weight_bytes = constant_bytes(&optimized);
        let runnable = optimized.into_runnable().map_err(failed)?;
        Ok(Self {
            batch,
            batched: request.batched,
            inputs,
            outputs,
            weight_bytes,
            runnable: Arc::new(runnable),
        })
    }

    /// Outputs of one item.
    pub fn outputs(&self) -> &[TensorSpec] {
        &self.outputs
    }

    /// Memory the plan's constants take.
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    /// Runs `items` (at most `self.batch` of them) and returns each item's outputs.
    pub fn run(&self, items: &[&[Item]]) -> Result<BatchOutputs, CpuError> {
        let n = items.len();
        if n == 0 || n > self.batch as usize {
            return Err(CpuError::Run(format!(
                "{n} items do not fit a plan for batch {}",
                self.batch
            )));
        }
        let mut values = TVec::with_capacity(self.inputs.len());
        for (spec, datum) in &self.inputs {
            values.push(self.stack(spec, *datum, items)?.into_tvalue());
        }
        let results = self
            .runnable
            .run(values)
            .map_err(|e| CpuError::Run(format!("{e:#}")))?;
        let bytes = results.iter().map(|value| value.as_bytes());
        Ok(batch::split_outputs(&self.outputs, bytes, self.batch, n)?)
    }

    /// One input of the whole batch: the items' data back to back, zeros for padding.
    fn stack(
        &self,
        spec: &TensorSpec,
        datum: DatumType,
        items: &[&[Item]],
    ) -> Result<Tensor, CpuError> {
        let shape = full_shape(spec, self.batched, self.batch)?;
        let mut tensor =
            Tensor::zero_dt(datum, &shape).map_err(|e| CpuError::Run(e.to_string()))?;
        batch::fill_input(spec, items, tensor.as_bytes_mut(), self.batch)?;
        Ok(tensor)
    }
}

/// Bytes of every constant of an optimised graph, packed payloads included.
fn constant_bytes(model: &TypedModel) -> u64 {
    model
        .nodes()
        .iter()
        .filter(|n| n.op_is::<tract_onnx::tract_core::ops::konst::Const>())
        .filter_map(|n| n.outputs.first())
        .filter_map(|o| o.fact.mem_size().to_i64().ok())
        .map(|b| b as u64)
        .sum()
}

/// An output of one item from the compiled graph's output fact.
fn item_output(
    name: &str,
    fact: &TypedFact,
    batched: bool,
    batch: u32,
) -> Result<TensorSpec, CpuError> {
    let datatype = data_type(fact.datum_type).ok_or_else(|| {
        CpuError::Unsupported(format!("output '{name}' has type {:?}", fact.datum_type))
    })?;
    let shape = fact.shape.as_concrete().ok_or_else(|| {
        CpuError::Unsupported(format!(
            "output '{name}' has no fixed shape ({:?})",
            fact.shape
        ))
    })?;
    let item = if batched {
        match shape.split_first() {
            Some((&b, rest)) if b == batch as usize => rest,
            _ => {
                return Err(CpuError::Unsupported(format!(
                    "output '{name}' of shape {shape:?} does not start with the batch ({batch})"
                )))
            }
        }
    } else {
        shape
    };
    Ok(TensorSpec {
        name: name.to_owned(),
        datatype,
        shape: item.iter().map(|&d| d as i64).collect(),
    })
}

/// tract's element type of a V2 datatype.
pub fn datum_type(datatype: DataType) -> Result<DatumType, CpuError> {
    Ok(match datatype {
        DataType::Bool => DatumType::Bool,
        DataType::Uint8 => DatumType::U8,
        DataType::Uint16 => DatumType::U16,
        DataType::Uint32 => DatumType::U32,
        DataType::Uint64 => DatumType::U64,
        DataType::Int8 => DatumType::I8,
        DataType::Int16 => DatumType::I16,
        DataType::Int32 => DatumType::I32,
        DataType::Int64 => DatumType::I64,
        DataType::Fp16 => DatumType::F16,
        DataType::Fp32 => DatumType::F32,
        DataType::Fp64 => DatumType::F64,
        DataType::Bytes => {
            return Err(CpuError::Unsupported(
                "BYTES tensors are not served by the cpu backend".into(),
            ))
        }
    })
}

/// The V2 datatype of a tract element type, if the API can carry it.
pub fn data_type(datum: DatumType) -> Option<DataType> {
    Some(match datum {
        DatumType::Bool => DataType::Bool,
        DatumType::U8 => DataType::Uint8,
        DatumType::U16 => DataType::Uint16,
        DatumType::U32 => DataType::Uint32,
        DatumType::U64 => DataType::Uint64,
        DatumType::I8 => DataType::Int8,
        DatumType::I16 => DataType::Int16,
        DatumType::I32 => DataType::Int32,
        DatumType::I64 => DataType::Int64,
        DatumType::F16 => DataType::Fp16,
        DatumType::F32 => DataType::Fp32,
        DatumType::F64 => DataType::Fp64,
        _ => return None,
    })
}
