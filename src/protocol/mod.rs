//! The executor protocol: everything that crosses between the controller and an executor.
//!
//! The controller sends an [`Execute`] (one [`Action`] and, for an INFER, the inputs of
//! each of its requests in batch order); the executor answers each one with exactly one
//! [`ActionReport`] (what it measured, or the [`ActionError`] that stopped it, and the
//! outputs of an INFER that ran). In process these are the actor messages themselves
//! (`crate::actors::messages` re-exports them); a remote executor will later send the same
//! types over TCP, encoded with [`encode`] and read back with [`decode`] (bincode 2, its
//! serde API). Tensors travel as raw bytes: name, datatype, shape and data (see `wire`).
//!
//! **Clock.** Every timestamp on the protocol (`earliest`, `latest`, `begin`, `end`) is on
//! the controller's clock, in [`Nanos`] since its epoch. An executor on another machine
//! translates its own readings before it reports them.
//!
//! [`core`] holds the rules every executor follows (lanes, `earliest`/`latest`, pages,
//! residency) as pure code, driven by the executor actor and the scheduler's testbed.
//!
//! This is a ground module: it uses only `model`, `tensor` and `time`.

pub mod core;
mod wire;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::model::{ActionId, DeviceId, ModelId, RequestId};
use crate::tensor::Tensor;
use crate::time::Nanos;

/// What an executor is asked to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ActionKind {
    /// Copy the model's weights into device pages.
    Load,
    /// Free the model's pages.
    Unload,
    /// Execute one batch of the requests' items (the batch size is their sum).
    Infer {
        /// The requests of the batch, in the order of their items' inputs and outputs
        /// (each request's items one after another, never split over batches).
        requests: Vec<RequestId>,
    },
    /// Test the device with real work, for the controller's health rule: the action's
    /// model (that of the device's last failed action) run on one item of zeros if
    /// resident, else loaded, run and unloaded again, else the resident model of lowest
    /// id run; with the model `PROBE_MODEL` and nothing resident, an UNLOAD of that id,
    /// which changes nothing (`ExecutorCore::probe_work`; outputs are dropped). A device
    /// that passes an UNLOAD but fails its runs or its LOADs fails this. Runs on the exec
    /// lane; the policies never plan one.
    Probe,
}

impl ActionKind {
    /// Short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        self.tag().as_str()
    }

    /// The kind without its payload, for events and counters.
    pub fn tag(&self) -> ActionTag {
        match self {
            ActionKind::Load => ActionTag::Load,
            ActionKind::Unload => ActionTag::Unload,
            ActionKind::Infer { .. } => ActionTag::Infer,
            ActionKind::Probe => ActionTag::Probe,
        }
    }

    /// Whether the action runs on the load lane (else the exec lane).
    pub fn is_load_lane(&self) -> bool {
        self.tag().is_load_lane()
    }
}

/// The kind of an action without its payload: what events carry and metrics label by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionTag {
    Load,
    Unload,
    Infer,
    Probe,
}

impl ActionTag {
    /// Its name in metrics and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionTag::Load => "load",
            ActionTag::Unload => "unload",
            ActionTag::Infer => "infer",
            ActionTag::Probe => "probe",
        }
    }

    /// Whether it runs on the load lane (else the exec lane).
    pub fn is_load_lane(self) -> bool {
        !matches!(self, ActionTag::Infer | ActionTag::Probe)
    }
}

/// One planned action for one device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Action {
    /// Identity of the action; its report carries it back.
    pub id: ActionId,
    /// The device that runs it.
    pub device: DeviceId,
    /// The model it loads, unloads or runs.
    pub model: ModelId,
    /// Never start before this.
    pub earliest: Nanos,
    /// If it cannot start by this, refuse it and do nothing.
    pub latest: Nanos,
    /// The duration the controller planned with.
    pub expected_duration: Nanos,
    /// What to do.
    pub kind: ActionKind,
}

/// What an executor measured of an action that ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Measured {
    /// When the work started (controller's clock).
    pub begin: Nanos,
    /// When the work ended (controller's clock).
    pub end: Nanos,
    /// Duration of the work itself (device-timed where the backend can).
    pub duration: Nanos,
}

impl Measured {
    /// Its times as a report that arrived at `now` can have them: ended by `now`, begun by
    /// its end. A remote worker's times are its own clock's translated by an estimated
    /// offset (unknown before the first frames), and the policy's mirror keeps a lane busy
    /// until its last report's end: one report ending in the far future kept a device out
    /// of every plan for good (`tests/policy_extremes.rs`).
    pub fn received_at(self, now: Nanos) -> Self {
        let end = self.end.min(now);
        Self {
            begin: self.begin.min(end),
            end,
            duration: self.duration,
        }
    }
}

/// Why an executor did not complete an action.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum ActionError {
    #[error("could not start before its latest start time")]
    TooLate,
    #[error("model weights are not resident on the device")]
    NotResident,
    #[error("not enough free pages on the device")]
    NoFreePages,
    /// A LOAD of a model whose weights are already resident or being loaded.
    #[error("model weights are already resident on the device")]
    AlreadyResident,
    #[error("device failed: {0}")]
    Device(String),
    /// The device's code panicked or its thread is gone: unlike an ordinary failure, one
    /// is enough for the controller's health rule to take the device out
    /// (`actors::health`).
    #[error("device crashed: {0}")]
    Crashed(String),
    /// The model's run failed on the batch's inputs (tract or ONNX Runtime returned an
    /// error, or panicked, on these values): the device is sound, so the health rule
    /// ignores it, and the policy runs each request of the batch again alone, so that one
    /// request's inputs cannot fail another's.
    #[error("the model failed on the batch's inputs: {0}")]
    Model(String),
    /// The controller's watchdog gave up on it: no report came by its deadline (see
    /// `actors::watchdog`). Nothing is known of what the device did.
    #[error("no report from the device in time (the device is suspect)")]
    Overdue,
}

/// An action for an executor, with the inputs of an INFER's items in batch order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Execute {
    /// What to do, and when.
    pub action: Action,
    /// Inputs of each item of an INFER, in the order of `requests` (a request of several
    /// items gives as many entries, one after another); empty otherwise.
    /// Shared with the controller, which keeps them until the request is answered.
    #[serde(with = "wire::shared_items")]
    pub inputs: Vec<Arc<Vec<Tensor>>>,
}

/// An executor's report of an action: exactly one per [`Execute`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActionReport {
    /// The action reported on.
    pub action: ActionId,
    /// The device that ran (or refused) it.
    pub device: DeviceId,
    /// What was measured, or why it did not complete.
    pub result: Result<Measured, ActionError>,
    /// Outputs of an INFER that ran: per item in batch order, that item's tensors.
    pub outputs: Option<Vec<Vec<Tensor>>>,
}

/// A protocol message that could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("cannot encode: {0}")]
    Encode(#[from] bincode::error::EncodeError),
    #[error("cannot decode: {0}")]
    Decode(#[from] bincode::error::DecodeError),
    /// The bytes hold a message and then more: a framing error on the sender's side.
    #[error("{0} bytes left after the message")]
    Trailing(usize),
}

/// The most bytes one message may take: a length prefix from a broken or hostile peer
/// must not make the reader allocate without bound.
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;

/// The one bincode configuration of the protocol (both sides must agree on it).
fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_MESSAGE_BYTES>()
}

/// Encodes a protocol message for the wire.
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, WireError> {
    Ok(bincode::serde::encode_to_vec(message, config())?)
}

/// Decodes one protocol message that fills `bytes` exactly.
///
/// The decoder may allocate what a length prefix claims before it finds the bytes
/// missing, so its limit follows the frame: a message holds no more than
/// `DECODE_GROWTH` times its encoded size in memory (elements are at least a byte on the
/// wire), and a 27-byte frame claiming half a gigabyte (found by `tests/fuzz_protocol.rs`)
/// is refused instead of allocated. The limit does not change the encoding.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, WireError> {
    let budget = bytes.len().saturating_mul(DECODE_GROWTH);
    let (message, read) = if budget <= 1 << 16 {
        decode_within::<T, { 1 << 16 }>(bytes)?
    } else if budget <= 1 << 20 {
        decode_within::<T, { 1 << 20 }>(bytes)?
    } else if budget <= 1 << 24 {
        decode_within::<T, { 1 << 24 }>(bytes)?
    } else if budget <= 1 << 28 {
        decode_within::<T, { 1 << 28 }>(bytes)?
    } else {
        decode_within::<T, MAX_MESSAGE_BYTES>(bytes)?
    };
    match bytes.len().saturating_sub(read) {
        0 => Ok(message),
        left => Err(WireError::Trailing(left)),
    }
}

/// How many times its encoded size a message may take once decoded (a `u64` written as a
/// one-byte varint takes 8).
const DECODE_GROWTH: usize = 16;

/// Decodes with the protocol's configuration and a limit of `LIMIT` bytes claimed.
fn decode_within<T: DeserializeOwned, const LIMIT: usize>(
    bytes: &[u8],
) -> Result<(T, usize), bincode::error::DecodeError> {
    let config = bincode::config::standard().with_limit::<LIMIT>();
    bincode::serde::decode_from_slice(bytes, config)
}
