//! Typed telemetry events, published by the controller for whoever subscribes.
//!
//! Metrics, logs, dashboards and the simulator's report are subscribers: they receive
//! events on a broadcast channel and never sit on the request path. A subscriber that falls
//! behind loses the oldest events (and learns how many), it never slows the controller.

use serde::Serialize;
use tokio::sync::broadcast;

use crate::model::{ActionId, DeviceId, ModelId, RequestId};
use crate::outcome::Outcome;
use crate::protocol::{ActionError, ActionTag, Measured};
use crate::tally::Tally;
use crate::time::Nanos;

/// Events kept for a subscriber that has not read them yet.
const BACKLOG: usize = 65_536;

/// Something that happened in the runtime.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    RequestAnswered(RequestAnswered),
    /// The controller sent an action to its executor: its window and planned duration.
    ActionPlanned(ActionPlanned),
    ActionDone(ActionDone),
    /// A pipeline's root request got its one answer.
    PipelineAnswered(PipelineAnswered),
    /// A pipeline stage's sub-request got its answer.
    StageAnswered(StageAnswered),
    /// One upstream result became this many requests to a stage.
    FanOut(FanOut),
    /// A device went out of service or came back (see `actors::health`).
    DeviceHealth(DeviceHealth),
    /// A probe of a device out of service reported (see `actors::health`).
    Probed(Probed),
}

/// Why a device is out of service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutCause {
    /// An action of it had no report by the watchdog's deadline.
    Hung,
    /// Failures in a row (the health rule's strikes).
    Failing,
    /// Its code panicked or its thread is gone.
    Crashed,
    /// It hung over and over: ran several times slower than its estimates (the health
    /// rule's strikes of hangs, `actors::health`).
    Slow,
}

impl OutCause {
    /// The name in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hung => "hung",
            Self::Failing => "failing",
            Self::Crashed => "crashed",
            Self::Slow => "slow",
        }
    }
}

/// A device went out of service, or came back into it.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct DeviceHealth {
    pub device: DeviceId,
    /// When the controller decided it.
    pub at: Nanos,
    /// Why it is out now; `None` when it came back, or left the pool while out (a remote
    /// worker's device: out of service no more, since it is out of the pool).
    pub out: Option<OutCause>,
}

/// A probe of a device out of service reported: whether it passed (the device is back).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Probed {
    pub device: DeviceId,
    /// When its report came.
    pub at: Nanos,
    pub passed: bool,
}

/// A shared name, serialised as the string.
fn name<S: serde::Serializer>(name: &std::sync::Arc<str>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(name)
}

/// A pipeline's root request got its one answer (published by its pipeline actor).
#[derive(Clone, Debug, Serialize)]
pub struct PipelineAnswered {
    /// The pipeline's name.
    #[serde(serialize_with = "name")]
    pub pipeline: std::sync::Arc<str>,
    pub arrival: Nanos,
    pub answered: Nanos,
    /// The end-to-end deadline: answers after it are `late`.
    pub deadline: Nanos,
    pub outcome: Outcome,
    /// Rows left out of a partial answer.
    pub missing: usize,
    /// Who counts the answer in the metrics, when the front end may have answered
    /// otherwise (`tally.rs`); `None`: this event.
    #[serde(skip)]
    pub tally: Option<Tally>,
}

/// A pipeline stage's sub-request got its answer.
#[derive(Clone, Debug, Serialize)]
pub struct StageAnswered {
    #[serde(serialize_with = "name")]
    pub pipeline: std::sync::Arc<str>,
    /// The stage's name.
    #[serde(serialize_with = "name")]
    pub stage: std::sync::Arc<str>,
    /// From the request's submission to its answer.
    pub latency: Nanos,
    pub outcome: Outcome,
}

/// A fan-out: one upstream result became `count` requests to `stage`.
#[derive(Clone, Debug, Serialize)]
pub struct FanOut {
    #[serde(serialize_with = "name")]
    pub pipeline: std::sync::Arc<str>,
    #[serde(serialize_with = "name")]
    pub stage: std::sync::Arc<str>,
    pub count: usize,
}

/// A request got its one answer.
#[derive(Clone, Debug, Serialize)]
pub struct RequestAnswered {
    pub request: RequestId,
    pub model: ModelId,
    pub arrival: Nanos,
    pub answered: Nanos,
    pub slo: Nanos,
    /// How it was answered: only outcomes decided after admission
    /// ([`Outcome::after_admission`]) are published.
    pub outcome: Outcome,
    /// Size of the batch it ran in (items), if it ran.
    pub batch: Option<u32>,
    /// Items the request carried: Triton's `nv_inference_count` counts these.
    pub items: u32,
    /// Its batch's execution, if it succeeded: its queue time (arrival to the batch's
    /// start) and compute time for the metrics, a pipeline's sub-requests' too.
    pub ran: Option<Measured>,
    /// Who counts the answer in the metrics, when the front end may have answered
    /// otherwise (`tally.rs`); `None`: this event.
    #[serde(skip)]
    pub tally: Option<Tally>,
}

/// The controller sent an action to an executor (what the device will do, and when).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ActionPlanned {
    /// Its report (`ActionDone`) carries the same id.
    pub action: ActionId,
    /// The device whose lane it was put on.
    pub device: DeviceId,
    /// The model it loads, unloads or runs.
    pub model: ModelId,
    /// Its kind, which also names its lane ([`ActionTag::is_load_lane`]).
    pub kind: ActionTag,
    /// Requests in the batch (0 for LOAD and UNLOAD).
    pub batch: u32,
    /// It may not start before this.
    pub earliest: Nanos,
    /// It is refused if it cannot start by this.
    pub latest: Nanos,
    /// The duration the controller planned with.
    pub expected: Nanos,
}

/// An executor reported an action.
#[derive(Clone, Debug, Serialize)]
pub struct ActionDone {
    pub action: ActionId,
    pub device: DeviceId,
    pub model: ModelId,
    pub kind: ActionTag,
    /// Items in the batch, of all its requests (0 for LOAD and UNLOAD).
    pub batch: u32,
    /// Duration the controller planned with.
    pub expected: Nanos,
    /// What the executor measured, if the action ran.
    pub measured: Option<Measured>,
    /// Why it did not complete, if it did not.
    pub error: Option<ActionError>,
}

/// The publishing side; cheap to clone.
#[derive(Clone, Debug)]
pub struct EventBus {
    sender: broadcast::Sender<Event>,
}

impl Default for EventBus {
    fn default() -> Self {
        Self {
            sender: broadcast::channel(BACKLOG).0,
        }
    }
}

impl EventBus {
    /// A new receiver of every event published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.sender.subscribe()
    }

    /// Publishes to current subscribers; costs nothing when there are none.
    pub fn publish(&self, event: impl FnOnce() -> Event) {
        if self.sender.receiver_count() > 0 {
            // An error only means every subscriber left in between: nothing to do.
            let _ = self.sender.send(event());
        }
    }
}
