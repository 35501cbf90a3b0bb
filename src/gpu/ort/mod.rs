//! The `ort` backend: real ONNX inference with ONNX Runtime (through the `ort` crate, the
//! library loaded at run time, see [`library`]) on a dedicated thread per device.
//!
//! It keeps the cpu backend's executor semantics: one thread by default (ONNX Runtime runs
//! a single-threaded session on the calling thread, the device's pinned one), batches of
//! the allowed sizes assembled and split by the shared rules of
//! [`crate::gpu::cpu::batch`], a capacity in pages, and profiling at registration by the
//! shared [`crate::gpu::cpu::profile::measure_device`]. Registration prepares an
//! [`OrtModel`] once (the graph checked by building a session from it); a LOAD builds the
//! device's own session from it (ONNX Runtime's sessions are not shared between threads
//! that run at once), so a LOAD costs a session build, which profiling measures like any
//! LOAD; UNLOAD drops it.

pub mod library;

use std::collections::HashMap;
use std::sync::Arc;

use ort::memory::Allocator;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;
use ort::value::{DynTensor, DynTensorValueType, TensorElementType};

use super::cpu::batch::{self, full_shape, BatchError};
use super::cpu::profile::{measure_device, MeasuredProfile, ProfileSettings};
use super::thread::BlockingDevice;
use super::Prepared;
use super::{BackendInfo, BatchOutputs, DeviceError, InferJob, ModelArtifact};
use crate::model::{DataType, ModelId, ModelSpec, TensorSpec};
use crate::tensor::Tensor;

/// Why the `ort` backend cannot load, prepare or run a model.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OrtError {
    #[error("ONNX Runtime is not available: {0}")]
    Library(String),
    #[error("ONNX Runtime cannot build a session: {0}")]
    Session(String),
    #[error("not supported by the ort backend: {0}")]
    Unsupported(String),
    #[error("bad input: {0}")]
    Input(String),
    #[error("ONNX Runtime failed: {0}")]
    Run(String),
}

impl From<BatchError> for OrtError {
    fn from(error: BatchError) -> Self {
        match error {
            BatchError::Input(message) => OrtError::Input(message),
            BatchError::Shape(message) => OrtError::Unsupported(message),
        }
    }
}

impl From<OrtError> for DeviceError {
    fn from(error: OrtError) -> Self {
        match error {
            OrtError::Input(message) => DeviceError::BadInput(message),
            OrtError::Run(_) => DeviceError::Model(error.to_string()),
            other => DeviceError::Other(other.to_string()),
        }
    }
}

/// How an `ort` device is set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrtSettings {
    /// Weight memory, in pages of the policy's page size.
    pub pages: u32,
    /// Threads ONNX Runtime may use within one run (its intra-op threads).
    pub threads: usize,
}

impl OrtSettings {
    /// The device kind estimates are kept for: `ort`, or `ort-<n>t` with `n` threads.
    pub fn kind(&self) -> String {
        if self.threads <= 1 {
            "ort".into()
        } else {
            format!("ort-{}t", self.threads)
        }
    }
}

/// A model as registration prepared it for `ort` devices: its graph, checked once, and
/// the tensors and batch sizes it is served with.
pub struct OrtModel {
    bytes: Arc<[u8]>,
    inputs: Vec<(TensorSpec, TensorElementType)>,
    /// Outputs of one item, in the graph's order.
    outputs: Vec<TensorSpec>,
    batches: Vec<u32>,
    batched: bool,
}

impl OrtModel {
    /// Prepares `bytes` for the tensors and batch sizes of `spec` (whose outputs are
    /// already known): checks every type, and that ONNX Runtime builds a session whose
    /// inputs and outputs are the spec's.
    pub fn prepare(bytes: Arc<[u8]>, spec: &ModelSpec) -> Result<Self, OrtError> {
        let inputs = spec
            .inputs
            .iter()
            .map(|i| Ok((i.clone(), element_type(i.datatype)?)))
            .collect::<Result<Vec<_>, OrtError>>()?;
        for output in &spec.outputs {
            element_type(output.datatype)?;
        }
        let mut batches: Vec<u32> = spec.profile.batches.iter().map(|b| b.batch).collect();
        batches.sort_unstable();
        batches.dedup();
        if !spec.batched {
            batches = vec![1];
        }
        let model = Self {
            bytes,
            inputs,
            outputs: spec.outputs.clone(),
            batches,
            batched: spec.batched,
        };
        let session = model.session(1)?;
        let names = |outlets: &[ort::value::Outlet]| -> Vec<String> {
            outlets.iter().map(|o| o.name().to_owned()).collect()
        };
        let declared = |tensors: Vec<&TensorSpec>| -> Vec<String> {
            tensors.into_iter().map(|t| t.name.clone()).collect()
        };
        let (graph_in, graph_out) = (names(session.inputs()), names(session.outputs()));
        let want_in = declared(model.inputs.iter().map(|(t, _)| t).collect());
        let want_out = declared(model.outputs.iter().collect());
        if graph_in != want_in || graph_out != want_out {
            return Err(OrtError::Unsupported(format!(
                "the session has inputs {graph_in:?} and outputs {graph_out:?}, the model \
                 {want_in:?} and {want_out:?}"
            )));
        }
        Ok(model)
    }

    /// Memory a LOAD takes: the graph, whose weights are nearly all of it.
    pub fn weight_bytes(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// The batch sizes served, smallest first.
    pub fn batches(&self) -> &[u32] {
        &self.batches
    }

    /// A session of the graph running on `threads` (1: the calling thread alone).
    fn session(&self, threads: usize) -> Result<Session, OrtError> {
        let environment = library::environment(None)?;
        let failed = |e: String| OrtError::Session(e);
        Session::builder(&environment)
            .map_err(|e| failed(e.to_string()))?
            .with_optimization_level(GraphOptimizationLevel::All)
            .map_err(|e| failed(e.to_string()))?
            .with_intra_threads(threads.max(1))
            .map_err(|e| failed(e.to_string()))?
            .with_inter_threads(1)
            .map_err(|e| failed(e.to_string()))?
            // Idle pool threads must not spin on cores other devices are pinned to.
            .with_intra_op_spinning(false)
            .map_err(|e| failed(e.to_string()))?
            .commit_from_memory(&self.bytes)
            .map_err(|e| failed(e.to_string()))
    }

    /// Runs `items` on `session` at the smallest allowed batch size that holds them.
    fn run(&self, session: &mut Session, items: &[&[Tensor]]) -> Result<BatchOutputs, OrtError> {
        let n = items.len() as u32;
        let batch = self
            .batches
            .iter()
            .copied()
            .find(|&b| b >= n && n > 0)
            .ok_or_else(|| OrtError::Run(format!("no allowed batch size holds {n} items")))?;
        let allocator = Allocator::default();
        let mut values = Vec::with_capacity(self.inputs.len());
        for (spec, element) in &self.inputs {
            let shape = full_shape(spec, self.batched, batch)?;
            let mut tensor = DynTensor::new(&allocator, *element, shape)
                .map_err(|e| OrtError::Run(e.to_string()))?;
            batch::fill_input(spec, items, tensor_bytes_mut(&mut tensor), batch)?;
            values.push(ort::session::SessionInputValue::from(tensor));
        }
        let results = session
            .run(values.as_slice())
            .map_err(|e| OrtError::Run(e.to_string()))?;
        let mut tensors = Vec::with_capacity(self.outputs.len());
        for (spec, (_, value)) in self.outputs.iter().zip(results.iter()) {
            let tensor = value
                .downcast::<DynTensorValueType>()
                .map_err(|e| OrtError::Run(format!("output '{}': {e}", spec.name)))?;
            if *tensor.data_type() != element_type(spec.datatype)? {
                return Err(OrtError::Run(format!(
                    "output '{}' is {:?}, the model declares {:?}",
                    spec.name,
                    tensor.data_type(),
                    spec.datatype
                )));
            }
            tensors.push(tensor);
        }
        let bytes = tensors.iter().map(|t| tensor_bytes(t));
        Ok(batch::split_outputs(
            &self.outputs,
            bytes,
            batch,
            items.len(),
        )?)
    }
}

impl std::fmt::Debug for OrtModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrtModel")
            .field("batches", &self.batches)
            .field("weight_bytes", &self.weight_bytes())
            .finish()
    }
}

/// The data of a cpu tensor ONNX Runtime allocated.
fn tensor_bytes_mut(tensor: &mut DynTensor) -> &mut [u8] {
    let len = tensor.size().unwrap_or(0);
    let data = tensor.data_ptr_mut().cast::<u8>();
    if len == 0 || data.is_null() {
        return &mut [];
    }
    // SAFETY: the tensor was allocated on the cpu with `len` bytes, and the borrow of
    // `tensor` keeps it alive and unaliased for the slice's life.
    unsafe { std::slice::from_raw_parts_mut(data, len) }
}

/// The data of an output tensor (on the cpu: the only execution provider used).
fn tensor_bytes<'t>(tensor: &'t ort::value::DynTensorRef<'_>) -> &'t [u8] {
    let len = tensor.size().unwrap_or(0);
    let data = tensor.data_ptr().cast::<u8>();
    if len == 0 || data.is_null() {
        return &[];
    }
    // SAFETY: as above, read-only, for as long as the tensor is borrowed.
    unsafe { std::slice::from_raw_parts(data, len) }
}

/// ONNX Runtime's element type of a V2 datatype.
pub fn element_type(datatype: DataType) -> Result<TensorElementType, OrtError> {
    Ok(match datatype {
        DataType::Bool => TensorElementType::Bool,
        DataType::Uint8 => TensorElementType::Uint8,
        DataType::Uint16 => TensorElementType::Uint16,
        DataType::Uint32 => TensorElementType::Uint32,
        DataType::Uint64 => TensorElementType::Uint64,
        DataType::Int8 => TensorElementType::Int8,
        DataType::Int16 => TensorElementType::Int16,
        DataType::Int32 => TensorElementType::Int32,
        DataType::Int64 => TensorElementType::Int64,
        DataType::Fp16 => TensorElementType::Float16,
        DataType::Fp32 => TensorElementType::Float32,
        DataType::Fp64 => TensorElementType::Float64,
        DataType::Bytes => {
            return Err(OrtError::Unsupported(
                "BYTES tensors are not served by the ort backend".into(),
            ))
        }
    })
}

/// Profiles `model` (prepared for `spec`) on an `ort` device of `settings.threads`
/// threads, with the profiling every real backend shares.
pub fn measure(
    model: &Arc<OrtModel>,
    spec: &ModelSpec,
    settings: ProfileSettings,
) -> Result<MeasuredProfile, OrtError> {
    let mut device = OrtDevice::new(OrtSettings {
        pages: 0,
        threads: settings.threads,
    })?;
    let artifact = ModelArtifact {
        id: ModelId(0),
        spec: spec.clone(),
        bytes: None,
        prepared: Prepared {
            ort: Some(Arc::clone(model)),
            ..Prepared::default()
        },
    };
    let (load, batches) = measure_device(&mut device, &artifact, model.batches(), settings)
        .map_err(|e| OrtError::Run(e.to_string()))?;
    Ok(MeasuredProfile {
        load,
        batches,
        weight_bytes: model.weight_bytes(),
        outputs: model.outputs.clone(),
    })
}

/// A model resident on a device: what registration prepared, and the device's session.
struct Loaded {
    model: Arc<OrtModel>,
    session: Session,
}

/// An `ort` device: the sessions of the models loaded on it.
pub struct OrtDevice {
    settings: OrtSettings,
    loaded: HashMap<ModelId, Loaded>,
}

impl OrtDevice {
    /// A device; fails (saying how to install it) when ONNX Runtime cannot be loaded.
    pub fn new(settings: OrtSettings) -> Result<Self, OrtError> {
        library::environment(None)?;
        Ok(Self {
            settings,
            loaded: HashMap::new(),
        })
    }
}

impl BlockingDevice for OrtDevice {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: self.settings.kind(),
            pages: self.settings.pages,
            emulated: false,
            needs_graph: true,
        }
    }

    fn load(&mut self, artifact: &ModelArtifact) -> Result<(), DeviceError> {
        let model = artifact.prepared.ort.as_ref().ok_or_else(|| {
            DeviceError::Other(format!(
                "model '{}' was not prepared for ONNX Runtime: the ort backend serves models \
                 prepared at registration (repository models, with ort devices configured)",
                artifact.spec.name
            ))
        })?;
        let session = model.session(self.settings.threads)?;
        let model = Arc::clone(model);
        self.loaded.insert(artifact.id, Loaded { model, session });
        Ok(())
    }

    fn unload(&mut self, model: ModelId) -> Result<(), DeviceError> {
        // Dropping the session frees its memory; unloading what is not there is harmless.
        self.loaded.remove(&model);
        Ok(())
    }

    fn infer(&mut self, job: &InferJob) -> Result<BatchOutputs, DeviceError> {
        let loaded = self
            .loaded
            .get_mut(&job.model)
            .ok_or(DeviceError::NotLoaded(job.model))?;
        let items: Vec<&[Tensor]> = job.inputs.iter().map(|i| i.as_slice()).collect();
        Ok(loaded.model.run(&mut loaded.session, &items)?)
    }
}
