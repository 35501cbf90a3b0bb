//! The scheduling policy: pure decision code.
//!
//! Nothing here knows about actors, clocks or I/O. A [`Policy`] is told what happened
//! (a request arrived, an action finished) and what time it is, and appends what to do to a
//! [`Plan`]: actions for executors and answers for requests. The controller actor gathers
//! the events and dispatches the plan; tests and benchmarks drive a policy directly (see
//! [`testbed`]).
//!
//! Every request admitted to a policy leaves it through exactly one [`Answer`].

mod clockwork;
mod device;
mod estimate;
pub mod ids;
mod queue;
mod reactive;
pub mod testbed;
pub mod view;

pub use clockwork::ClockworkPolicy;
pub use estimate::Estimator;
pub use reactive::ReactivePolicy;

/// The executor protocol's types, where the policy has always named them.
pub use crate::protocol::{Action, ActionError, ActionKind, Measured};

use serde::{Deserialize, Serialize};

use crate::config::{PolicyConfig, PolicyName};
use crate::model::{ActionId, DeviceId, KindProfile, ModelId, ModelProfile, RequestId};
use crate::outcome::Outcome as RequestOutcome;
use crate::time::Nanos;

/// A request as the policy sees it: no payload, only what decides its fate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub id: RequestId,
    pub model: ModelId,
    /// When the controller received it.
    pub arrival: Nanos,
    /// Latency objective: the answer is due at `arrival + slo`.
    pub slo: Nanos,
    /// A pipeline sub-request's latest useful finish: its root's end-to-end deadline less
    /// R_v, the least time the stages after it still need. Past its own objective (the
    /// stage's share of the budget) it is still served while it can finish by this, and
    /// it is dropped as soon as it cannot (adaptive batch drop, `clockwork/admit.rs`).
    /// `None`: a model's own request, bounded by its objective alone.
    pub latest_finish: Option<Nanos>,
    /// Items it carries (a client's batch; 1 for most): they run in one device batch and
    /// are answered together, so batches are counted in items. 0 is taken as 1.
    pub items: u32,
}

impl Request {
    /// Items it carries, at least 1.
    pub fn items(&self) -> u32 {
        self.items.max(1)
    }

    /// When the answer is due.
    pub fn deadline(&self) -> Nanos {
        self.arrival.saturating_add(self.slo)
    }
}

/// The report of one action, as the policy needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub action: ActionId,
    pub result: Result<Measured, ActionError>,
}

impl Outcome {
    /// Its measured times held to what a report that arrived at `now` can have
    /// ([`Measured::received_at`]): every policy reads them so.
    pub fn received_at(self, now: Nanos) -> Self {
        Self {
            result: self.result.map(|m| m.received_at(now)),
            ..self
        }
    }
}

/// Why the policy refused an admitted request without a result. Only what the policy
/// decides: requests the controller turns away before admission (unknown model, draining)
/// are its own errors (`InferError`), never the policy's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// When it could start, it could no longer finish before its deadline.
    #[error("the request could not be finished within its latency objective")]
    DeadlineUnreachable,
    /// It waited in the queue until no device could finish it in time.
    #[error("the request waited until no device could finish it within its latency objective")]
    TimedOut,
    /// Its caller withdrew it while it was queued (a pipeline's root was answered).
    #[error("the request was withdrawn before it ran")]
    Withdrawn,
}

impl Refusal {
    /// Its name in the one outcome vocabulary.
    pub fn outcome(self) -> RequestOutcome {
        match self {
            Refusal::DeadlineUnreachable => RequestOutcome::DeadlineUnreachable,
            Refusal::TimedOut => RequestOutcome::TimedOut,
            Refusal::Withdrawn => RequestOutcome::Withdrawn,
        }
    }
}

/// The fate of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Executed in batch `action`; `late` if it finished after its deadline.
    Completed {
        action: ActionId,
        late: bool,
    },
    Refused(Refusal),
    /// The action that carried it failed.
    Failed(ActionError),
}

/// The one answer a request gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub request: RequestId,
    pub verdict: Verdict,
}

/// What a policy decided in one step.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub answers: Vec<Answer>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty() && self.answers.is_empty()
    }

    pub fn clear(&mut self) {
        self.actions.clear();
        self.answers.clear();
    }
}

/// A device as the policy needs to know it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Kind of device; estimates are kept per kind.
    pub kind: String,
    /// Weight pages of the device.
    pub pages: u32,
}

/// A registered model as the policy needs to know it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelInfo {
    /// Pages its weights take on a device.
    pub pages: u32,
    /// The allowed batch sizes, and the seed of the estimates on device kinds that have
    /// no profile of their own in `by_kind`.
    pub profile: ModelProfile,
    /// Profiles measured on particular device kinds: devices of such a kind start from
    /// their own (a profile taken on one kind is wrong on another).
    pub by_kind: Vec<KindProfile>,
    /// Devices allowed to hold it (its backends, and real devices need a real graph);
    /// `None`: any device.
    pub devices: Option<Vec<DeviceId>>,
}

impl ModelInfo {
    /// The profile that seeds the estimates on devices of `kind`: its own if measured,
    /// else the fallback.
    pub fn profile_for(&self, kind: &str) -> &ModelProfile {
        self.by_kind
            .iter()
            .find(|k| k.kind == kind)
            .map_or(&self.profile, |k| &k.profile)
    }

    /// Whether `device` may hold the model.
    pub fn allowed_on(&self, device: DeviceId) -> bool {
        self.devices.as_ref().is_none_or(|d| d.contains(&device))
    }

    /// Allows or forbids `device` (one of `devices` known): the one rule for a device
    /// that joined after the model (`None`, every device, becomes a list when one is
    /// forbidden).
    pub fn set_allowed(&mut self, device: DeviceId, allowed: bool, devices: usize) {
        match (&mut self.devices, allowed) {
            (None, true) => {}
            (None, false) => {
                let others = (0..devices as u32).map(DeviceId).filter(|&d| d != device);
                self.devices = Some(others.collect());
            }
            (Some(list), true) if !list.contains(&device) => list.push(device),
            (Some(list), false) => list.retain(|&d| d != device),
            (Some(_), true) => {}
        }
    }
}

/// Counters and gauges of a policy, for observers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PolicySnapshot {
    /// Requests waiting in queues.
    pub queued: usize,
    /// Actions sent and not yet reported.
    pub in_flight: usize,
    pub devices: Vec<DeviceSnapshot>,
    /// Ready replicas of each model, by model id: a model is servable (its `ready` route
    /// answers 200) only while it has one, so clients wait for a warm model.
    pub ready_replicas: Vec<u32>,
}

/// The controller's mirror of one device.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeviceSnapshot {
    pub pages_used: u32,
    pub pages: u32,
    /// Models whose weights are resident or being loaded.
    pub models: usize,
    /// Predicted time the exec lane runs out of planned work.
    pub exec_free_at: Nanos,
    /// Predicted time the load lane runs out of planned work.
    pub load_free_at: Nanos,
    /// The watchdog found an action on it overdue: it gets no work until it reports.
    pub suspect: bool,
    /// It was taken out for good (`Policy::remove_device`: its worker was lost).
    pub gone: bool,
    /// How many times longer than its kind's estimates it is planned, in thousandths
    /// (1000: as its kind; `estimate::Slowdown`).
    pub slowdown: u32,
}

/// A scheduling policy: the controller's brain.
///
/// Methods append to `plan` and never clear it. `now` never goes backwards.
pub trait Policy {
    /// Makes a model known; its id must be the next dense index.
    fn add_model(&mut self, model: ModelInfo) -> ModelId;
    /// Makes a device known; its id must be the next dense index.
    fn add_device(&mut self, device: DeviceInfo) -> DeviceId;
    /// Takes a request into the queues (or answers it at once). `request.model` must be
    /// a model added with `add_model` (the controller turns unknown names away before
    /// admission); a policy panics on any other, as on any broken invariant.
    fn admit(&mut self, request: Request, now: Nanos, plan: &mut Plan);
    /// Learns from the report of an action it planned.
    fn observe(&mut self, outcome: Outcome, now: Nanos, plan: &mut Plan);
    /// Learns what it can from the report of an action it was told had failed as
    /// `Overdue` (the watchdog gave up on it, and its requests were planned again): how
    /// long it really ran on its device. Nothing is answered or planned from it.
    fn observe_late(&mut self, _action: ActionId, _run: &Measured) {}
    /// Marks a device suspect (an action on it is overdue: plan nothing more on it) or
    /// healthy again (it reported). What is resident on it stays as the mirror has it.
    fn set_suspect(&mut self, device: DeviceId, suspect: bool);
    /// Allows or forbids `model` on `device`: a device that joins while serving (a remote
    /// worker's) is judged against the models already registered.
    fn set_allowed(&mut self, model: ModelId, device: DeviceId, allowed: bool);
    /// Takes a device out for good (its worker was lost): nothing more is planned on it,
    /// its memory and timeline are dropped, and every action in flight on it fails as if
    /// it had reported `Overdue` (nothing known to have run): an INFER's requests are
    /// planned again elsewhere if they can still make it, else refused as usual; a LOAD's
    /// pages are freed. Its id is never reused (a worker that comes back joins as new
    /// devices), so a report of one of its actions that comes after is unknown and ignored.
    fn remove_device(&mut self, device: DeviceId, now: Nanos, plan: &mut Plan);
    /// The delay before `device`'s executor sees an action, measured (a remote worker's
    /// one-way trip): planning uses it where it exceeds the configured `expected_lag`.
    /// Policies that do not plan ahead ignore it.
    fn set_lag(&mut self, _device: DeviceId, _lag: Nanos) {}
    /// Takes back a request still queued (a pipeline withdraws the sub-requests of a root
    /// already answered), answering it `Refusal::Withdrawn` in `plan` so that it uses no
    /// device time. Returns false when it is no longer queued (in a batch, or answered):
    /// it then gets its answer as usual, except that a policy that would queue it again
    /// (its batch did not run) answers it `Refusal::Withdrawn` instead.
    fn withdraw(&mut self, request: RequestId, model: ModelId, plan: &mut Plan) -> bool;
    /// Keeps at least `replicas` replicas of `model` loaded or loading (while devices
    /// allow), whatever its own arrival rate says: a planner that foresees its load (a
    /// pipeline's downstream stage, from the rate of root requests) asks ahead of the
    /// traffic, since a LOAD takes time. 0 removes the floor. Policies without placement
    /// ignore it.
    fn set_replica_floor(&mut self, _model: ModelId, _replicas: u32) {}
    /// The most items one request of `model` may carry: the largest batch the policy runs
    /// it in (a request's items are never split over batches). The controller turns larger
    /// requests away before admission; a policy refuses one it is given anyway.
    fn max_items(&self, model: ModelId) -> u32;
    /// Plans what the devices should do next.
    fn schedule(&mut self, now: Nanos, plan: &mut Plan);
    /// When `schedule` should next be called even if nothing happens.
    fn next_wakeup(&self, now: Nanos) -> Option<Nanos>;
    /// Current counters, for observers.
    fn snapshot(&self, now: Nanos) -> PolicySnapshot;
    /// What the edge may know of `model` to refuse its requests before reading them
    /// (see [`view`]); `None`: nothing, the edge admits everything.
    fn view(&self, _model: ModelId, _now: Nanos) -> Option<view::ModelView> {
        None
    }
}

pub use crate::config::UnknownPolicy;

/// Index of the smallest of the allowed batch sizes `batches` (ascending) that holds
/// `items`: the batch a request of that many items runs in, padded. `None`: none does.
pub(crate) fn cover(batches: &[u32], items: u32) -> Option<usize> {
    let at = batches.partition_point(|&b| b < items);
    (at < batches.len()).then_some(at)
}

/// Policies that can be named in configuration and on the command line (the names of
/// [`PolicyName::ALL`], for callers that hold strings).
pub const POLICIES: [&str; PolicyName::ALL.len()] = {
    let mut names = [""; PolicyName::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = PolicyName::ALL[i].as_str();
        i += 1;
    }
    names
};

/// Builds the policy `config.name` names: `clockwork`, its ablation without early
/// refusal `clockwork-nodrop`, the `reactive` baseline, or its Triton-like variant.
pub fn build(config: &PolicyConfig) -> Box<dyn Policy + Send> {
    match config.name {
        PolicyName::Clockwork => Box::new(ClockworkPolicy::new(config)),
        PolicyName::ClockworkNodrop => Box::new(ClockworkPolicy::new(config).without_early_drop()),
        PolicyName::Reactive => Box::new(ReactivePolicy::new(config)),
        PolicyName::Triton => Box::new(ReactivePolicy::new(config).triton()),
    }
}
