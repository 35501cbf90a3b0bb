//! The typed messages between actors.
//!
//! Requests flow one way: API -> [`Controller`](super::Controller) ([`Submit`]) ->
//! [`Executor`](super::Executor) ([`Execute`]) -> controller ([`ActionReport`]) -> API (the
//! [`InferResult`] on the request's own reply channel). Executors fetch model artifacts
//! from the [`ModelCache`](super::ModelCache) ([`FetchArtifact`]). Every actor answers a
//! snapshot message with a plain, serialisable view of its state.

use std::sync::Arc;

use actix::Message;
use serde::Serialize;

use super::eligibility::IneligibleModel;
use crate::config::BackendKind;
use crate::gpu::{ModelArtifact, Prepared};
use crate::model::{DeviceId, KindProfile, ModelId, ModelSpec, RequestId};
use crate::outcome::Outcome;
use crate::scheduler::{ActionError, Measured, PolicySnapshot, Refusal};
use crate::tensor::Tensor;
use crate::time::Nanos;

/// One inference request: one item of the model's inputs, or several (a client's batch).
#[derive(Debug, Message)]
#[rtype(result = "InferResult")]
pub struct Infer {
    /// Name of the model.
    pub model: String,
    /// Each input holds `items` items of its shape back to back.
    pub inputs: Vec<Tensor>,
    /// Items the request carries (0 is taken as 1): scheduled, run in one device batch
    /// and answered together (each output of the answer holds as many), refused together;
    /// more than the model's largest batch is refused before admission.
    pub items: u32,
    /// Latency objective; the model's own if `None`.
    pub slo: Option<Nanos>,
    /// Where its time started; `None`: when the controller admits it.
    pub edge: Option<Edge>,
    /// The pipeline root it serves, if it is a pipeline's sub-request.
    pub root: Option<Root>,
}

/// The pipeline root request a sub-request serves: the controller never lets it plan
/// past the root's deadline, and a [`Withdraw`] of its group takes it back while queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Root {
    /// The root's end-to-end deadline (the runtime clock).
    pub deadline: Nanos,
    /// The sub-requests of one root share a group, withdrawn together.
    pub group: GroupId,
    /// R_v of the sub-request's stage: the least time the stages after it still need. The
    /// controller hands the policy `deadline - downstream` as its latest useful finish,
    /// past which it is dropped, and its root refused, before spending more device time.
    pub downstream: Nanos,
}

/// A group of requests withdrawn together: the sub-requests of one pipeline root.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId(pub u64);

/// Takes back the group's requests still queued: each is answered once, `withdrawn`
/// (`Refusal::Withdrawn`), and uses no device time. Requests already in a batch, or
/// answered, get their answers as usual.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Withdraw {
    pub group: GroupId,
}

/// Asks the policy to keep at least `replicas` replicas of the model named `model`
/// (`Policy::set_replica_floor`): a pipeline's planner sends its stages' replica targets,
/// foreseen from the roots' rate, so that LOADs start before the stage's traffic does. An
/// unknown name is ignored (the model was unloaded meanwhile).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct SetReplicaFloor {
    pub model: String,
    pub replicas: u32,
}

/// Where a request's time started, for callers with work of their own around the
/// controller's (the HTTP front end reads and decodes before, encodes after): the
/// deadline counts from `arrival`, and the policy plans to finish `reserve` before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Edge {
    /// When the request's head was read (the runtime clock): its deadline is
    /// `arrival + slo`, whatever happened before admission.
    pub arrival: Nanos,
    /// Time the caller still needs after the answer (encoding it), kept off the
    /// objective the policy plans with so the answer leaves by the deadline.
    pub reserve: Nanos,
}

/// An inference request that brings its own reply channel and shared inputs: the way in
/// for the HTTP and gRPC front end (the controller answers the waiting handler directly)
/// and for callers that send very many (the simulator). [`Infer`] is the convenient form
/// of the same thing, whose answer takes one more hop (a task on the controller's thread
/// forwards it).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Submit {
    pub model: String,
    pub inputs: Arc<Vec<Tensor>>,
    /// Items the request carries, as [`Infer::items`].
    pub items: u32,
    pub slo: Option<Nanos>,
    /// Where its time started; `None`: when the controller admits it.
    pub edge: Option<Edge>,
    /// The pipeline root it serves, if it is a pipeline's sub-request.
    pub root: Option<Root>,
    /// Who counts its answer in the metrics, for a caller that may answer its client
    /// otherwise (the front end; `tally.rs`); `None`: the controller's outcome counts.
    pub tally: Option<crate::tally::Tally>,
    /// Receives the one answer.
    pub reply: tokio::sync::oneshot::Sender<InferResult>,
}

/// The one answer to an [`Infer`].
pub type InferResult = Result<Inferred, InferError>;

/// A successful inference.
#[derive(Debug, Clone)]
pub struct Inferred {
    pub request: RequestId,
    pub model: ModelId,
    /// Each output holds the request's items back to back, in its inputs' order.
    pub outputs: Vec<Tensor>,
    /// The device only emulated the model: the outputs are not a real inference.
    pub emulated: bool,
    /// The answer came after the deadline (the estimates were wrong).
    pub late: bool,
    pub timing: RequestTiming,
}

/// Where the time of a request went.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RequestTiming {
    pub arrival: Nanos,
    pub deadline: Nanos,
    /// Execution of its batch as the executor measured it.
    pub exec: Measured,
    pub answered: Nanos,
    pub batch: u32,
    pub device: DeviceId,
}

/// Why an [`Infer`] has no result: the controller's own refusals (before admission), the
/// policy's, or what went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InferError {
    /// The policy refused it after admission.
    #[error("refused: {0}")]
    Refused(Refusal),
    /// The controller has no model of that name; refused before admission.
    #[error("refused: unknown model '{0}'")]
    UnknownModel(String),
    /// The controller is draining and admits nothing new.
    #[error("refused: the server is shutting down and admits no new requests")]
    ShuttingDown,
    #[error("bad input: {0}")]
    BadInput(String),
    #[error("execution failed: {0}")]
    Failed(ActionError),
}

impl InferError {
    /// Its name in the one outcome vocabulary.
    pub fn kind(&self) -> Outcome {
        match self {
            InferError::Refused(r) => r.outcome(),
            InferError::UnknownModel(_) => Outcome::UnknownModel,
            InferError::ShuttingDown => Outcome::ShuttingDown,
            InferError::BadInput(_) => Outcome::BadInput,
            InferError::Failed(_) => Outcome::ExecutionFailed,
        }
    }
}

/// The executor protocol's messages are the actor messages: one definition, in
/// `crate::protocol`, for the actors in process and for a remote executor on the wire.
pub use crate::protocol::{ActionReport, Execute};

/// An executor answers nothing to an [`Execute`]; it later sends an [`ActionReport`].
impl Message for Execute {
    type Result = ();
}

impl Message for ActionReport {
    type Result = ();
}

/// Asks the model cache for what a LOAD needs.
#[derive(Debug, Message)]
#[rtype(result = "Option<Arc<ModelArtifact>>")]
pub struct FetchArtifact(pub ModelId);

/// Asks the model cache for every registered model.
#[derive(Debug, Message)]
#[rtype(result = "Vec<Arc<ModelArtifact>>")]
pub struct ListModels;

/// Hands a registered model's artifact to the cache, under the id the registry gave it.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RegisterArtifact {
    /// The id the registry gave it; LOADs fetch the artifact by it.
    pub id: ModelId,
    /// Its description, for the device that loads it.
    pub spec: ModelSpec,
    /// Its graph, for devices that need one.
    pub bytes: Option<Arc<[u8]>>,
    /// What the backends built from the graph at registration, shared by their devices.
    pub prepared: Prepared,
}

/// Registers a model while serving (a repository load): the controller's registry gives
/// it the next id and tells the policy, the model cache and the model table. Answers the
/// id, or why not.
#[derive(Debug, Message)]
#[rtype(result = "Result<ModelId, RegisterError>")]
pub struct RegisterModel {
    pub spec: ModelSpec,
    /// The graph, for real devices.
    pub bytes: Option<Arc<[u8]>>,
    /// What the backends built from the graph (the repository built it, off the
    /// controller's thread).
    pub prepared: Prepared,
    /// Profiles measured per device kind; kinds without one start from `spec.profile`.
    pub profiles: Vec<KindProfile>,
    /// Backends allowed to serve it; `None`: any.
    pub backends: Option<Vec<BackendKind>>,
}

/// Why a model could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    #[error("a model named '{0}' is already registered")]
    Duplicate(String),
    #[error(transparent)]
    Ineligible(#[from] IneligibleModel),
    /// The policy numbered the model differently: a bug, refused rather than served with
    /// mixed-up ids.
    #[error("model '{name}': the policy gave id {policy} where the registry gave {registry}")]
    OutOfStep {
        name: String,
        registry: u32,
        policy: u32,
    },
}

/// Asks the controller for its state.
#[derive(Debug, Message)]
#[rtype(result = "ControllerSnapshot")]
pub struct SnapshotController;

/// The controller's state.
#[derive(Debug, Clone, Serialize)]
pub struct ControllerSnapshot {
    pub now: Nanos,
    /// Requests admitted and not answered yet.
    pub pending: usize,
    pub admitted: u64,
    pub answered: u64,
    /// Passes of the policy so far (each admission, report and wake-up makes one): far
    /// more of them than messages means the controller is waking for nothing.
    pub steps: u64,
    pub draining: bool,
    /// Fewer devices have joined than `[cluster] wait_for_devices`: not ready yet.
    pub waiting_for_devices: bool,
    pub policy: PolicySnapshot,
}

/// Asks an executor for its state.
#[derive(Debug, Message)]
#[rtype(result = "ExecutorSnapshot")]
pub struct SnapshotExecutor;

/// An executor's state.
#[derive(Debug, Clone, Serialize)]
pub struct ExecutorSnapshot {
    pub device: DeviceId,
    pub kind: String,
    pub pages: u32,
    pub pages_used: u32,
    /// Models whose weights are resident and ready.
    pub resident: Vec<ModelId>,
    /// Actions waiting per lane (exec, load).
    pub waiting: [usize; 2],
    /// Whether each lane (exec, load) is running an action.
    pub busy: [bool; 2],
    pub completed: u64,
    pub refused_late: u64,
}

/// Stops admitting requests and answers once every admitted request is answered.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Drain;
