//! The actors of the runtime and how they are put together.
//!
//! - [`Controller`]: queues, the device mirror and the policy; answers requests.
//! - [`Executor`]: one per device; runs actions on a [`Backend`](crate::gpu::Backend).
//! - [`ModelCache`]: registered models and their artifacts.
//! - [`admission`]: the per-model views the HTTP front end refuses requests by.
//! - [`health`]: which failures take a device out of service, and how it comes back.
//! - [`registry`]: the one place that registers a model and gives it its id.
//! - [`pipeline`], [`pipeline_stage`]: one actor per registered pipeline and one per
//!   stage; they run root requests through the stages' models via the controller.
//!
//! [`RuntimeBuilder`] wires them up, on threads of their own for serving or all on the
//! current thread so that a paused tokio clock drives them in virtual time.

/// Messages an actor's mailbox holds before `send` waits. `do_send` (actions, reports)
/// ignores it; it only slows callers that outrun the controller by this much.
/// (Not `usize::MAX`: actix adds the sender count to it.)
pub(crate) const MAILBOX: usize = 1 << 16;

pub mod admission;
mod controller;
pub mod eligibility;
mod executor;
mod from_config;
pub mod health;
pub mod messages;
mod model_cache;
pub mod pipeline;
pub mod pipeline_stage;
pub mod pipeline_table;
pub mod registry;
mod runtime;
pub mod watchdog;

pub use controller::{
    Controller, ControllerParts, ControllerSettings, DeviceLag, Join, JoiningDevice, Leave,
};
pub use executor::{Executor, ExecutorLinks};
pub use from_config::devices_from_config;
pub use model_cache::ModelCache;
pub use registry::{ModelTable, Registered};
pub use runtime::{Placement, Runtime, RuntimeBuilder, StartError};
