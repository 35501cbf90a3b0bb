//! What an executor runs on: the [`Backend`] trait and its implementations.
//!
//! The executor owns the semantics that are the same everywhere (lanes, `earliest` and
//! `latest`, page accounting, residency checks, timing); a backend only does the work:
//! copy weights in, drop them, run a batch. Backends are driven from the executor's
//! thread and return futures, so an emulated device can wait on the (possibly virtual)
//! clock while a real one waits on its own thread or device.
//!
//! - [`sim`]: an emulated device following latency profiles (first-class, for testers).
//! - [`cpu`]: real ONNX inference with tract, one dedicated thread per device.
//! - [`ort`]: real ONNX inference with ONNX Runtime (loaded at run time), the same way.
//! - [`fault`]: faults injected on purpose around any backend, for tests and soak runs.
//! - [`thread`]: adapter that runs a blocking device on a dedicated thread; real
//!   backends (cpu, cuda) implement [`thread::BlockingDevice`].
//! - [`contention`]: whether a device thread waits for its core (something else runs there).

pub mod contention;
pub mod cpu;
pub mod fault;
pub mod ort;
pub mod panics;
pub mod profiles;
pub mod sim;
pub mod thread;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::cores::Core;
use crate::model::{ModelId, ModelSpec};
use crate::tensor::Tensor;
use crate::time::Nanos;

/// Errors of a device doing its work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    #[error("injected fault: {0}")]
    Injected(&'static str),
    #[error("model {0:?} is not loaded on this device")]
    NotLoaded(ModelId),
    #[error("bad input: {0}")]
    BadInput(String),
    /// The model's run failed on these inputs (an error or a panic of the library that
    /// runs the graph), the device being sound: see `ActionError::Model`.
    #[error("{0}")]
    Model(String),
    #[error("device is gone: {0}")]
    Gone(String),
    /// The device's code panicked (caught on its thread or by the executor): the health
    /// rule takes such a device out at once.
    #[error("{0}")]
    Panicked(String),
    #[error("{0}")]
    Other(String),
}

/// The future of a backend operation.
pub type BackendFuture<T> = Pin<Box<dyn Future<Output = Result<T, DeviceError>>>>;

/// What a device is, for the controller and for responses.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendInfo {
    /// Kind of device (estimates are kept per kind), e.g. `v100`.
    pub kind: String,
    /// Weight pages it offers.
    pub pages: u32,
    /// Whether results are emulated rather than computed; every response says so, and
    /// real graphs are placed on such a device only if their configuration asks for it.
    pub emulated: bool,
    /// Whether it serves a model from its graph (ONNX bytes, prepared at registration): a
    /// model with only a profile cannot be placed on it.
    pub needs_graph: bool,
}

/// A model as a device receives it on LOAD: its description, its graph, and what each
/// backend prepared from the graph at registration (none for an emulated device).
#[derive(Clone, Debug)]
pub struct ModelArtifact {
    pub id: ModelId,
    pub spec: ModelSpec,
    /// The ONNX graph, kept for backends that would build from it.
    pub bytes: Option<Arc<[u8]>>,
    /// What the backends built from the graph once, in host memory; a LOAD only makes it
    /// resident on one device.
    pub prepared: Prepared,
}

/// What the backends prepare from a model's graph once, at registration, in host memory,
/// shared (`Arc`) by every device that loads the model, so that a LOAD costs what a
/// weight copy costs rather than a compilation. One field per backend that prepares
/// something (a cuda backend would add its own, e.g. its serialised engines); a backend
/// whose field is empty refuses the LOAD.
#[derive(Clone, Debug, Default)]
pub struct Prepared {
    /// The cpu backend's optimised tract plans, one per batch size. They depend only on
    /// the graph and the batch sizes (a device picks its threads when it runs them), so
    /// one build serves every cpu device of every kind.
    pub cpu: Option<Arc<cpu::ModelPlans>>,
    /// The `ort` backend's model, checked by ONNX Runtime once; each `ort` device builds
    /// its own session from it on LOAD. Empty when no `ort` device is configured.
    pub ort: Option<Arc<ort::OrtModel>>,
}

/// One batch to execute: the inputs of each item, in batch order (the controller splits a
/// request of several items into its items; their count is the batch size).
#[derive(Clone, Debug)]
pub struct InferJob {
    pub model: ModelId,
    pub inputs: Vec<Arc<Vec<Tensor>>>,
}

/// What a device did: its result and, if it can time itself, how long the work took.
#[derive(Clone, Debug)]
pub struct Executed<T> {
    pub value: T,
    /// Duration measured by the device (CUDA events); `None` to use the host's timing.
    pub device_time: Option<Nanos>,
}

/// The outputs of each item of a batch, in batch order.
pub type BatchOutputs = Vec<Vec<Tensor>>;

/// A device an executor can drive.
pub trait Backend: Send + 'static {
    fn info(&self) -> BackendInfo;
    /// Prepares the model on the device; pages are already accounted by the executor.
    fn load(&self, artifact: Arc<ModelArtifact>) -> BackendFuture<Executed<()>>;
    /// Drops the model from the device.
    fn unload(&self, model: ModelId) -> BackendFuture<Executed<()>>;
    /// Runs one batch of a loaded model.
    fn infer(&self, job: InferJob) -> BackendFuture<Executed<BatchOutputs>>;
    /// The core its work runs on, if it has one of its own (a pinned cpu device): its
    /// executor runs there too (`actors::runtime`), so that handing it the next action
    /// never waits for a turn on the front end's busy cores.
    fn core(&self) -> Option<Core> {
        None
    }
}
