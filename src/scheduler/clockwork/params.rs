//! The policy's constants as it uses them: `PolicyConfig`'s durations in nanoseconds,
//! its switches, and the bounds it clamps to.

use crate::config::{DriftMargin, PolicyConfig};
use crate::scheduler::device::LaneTiming;
use crate::time::{nanos, Nanos};

/// The policy's constants in nanoseconds.
#[derive(Clone, Copy, Debug)]
pub(super) struct Params {
    /// How far ahead each lane is kept busy (`PolicyConfig::schedule_ahead`).
    pub(super) schedule_ahead: Nanos,
    /// The starting overrun margin taken off deadlines (learned per device after).
    pub(super) buffer: Nanos,
    /// Load demand is counted against this much device time (at least 1 ns: a divisor).
    pub(super) load_budget: Nanos,
    /// Largest batch the policy forms, whatever a model allows.
    pub(super) max_batch: u32,
    /// Batches whose estimate exceeds this are not formed.
    pub(super) max_exec_time: Nanos,
    /// Measurements per estimate, and the percentile of them the estimate is.
    pub(super) window: usize,
    pub(super) percentile: f64,
    /// Starting lag between sending an action and its start, and the allowance for
    /// overdue work.
    pub(super) lanes: LaneTiming,
    /// Refuse hopeless requests early (off only for the ablation that serves them late).
    pub(super) early_drop: bool,
    /// Count the work other models will run first on shared devices when projecting at
    /// arrival (`shared.rs`; `PolicyConfig::shared_arrival`, on by default).
    pub(super) shared_arrival: bool,
    /// Measurements older than this no longer hold a model's requests back: before
    /// refusing them, its estimates go back to their seeds (see `estimate::Estimator`).
    pub(super) estimate_max_age: Nanos,
    /// Busy share of a device that replicas are sized for.
    pub(super) target_utilisation: f64,
    /// Learn each device's lag and overrun margin (`device::DeviceMirror::margins`), with
    /// the window and percentile they are taken over.
    pub(super) learn_margins: bool,
    pub(super) margin_window: usize,
    pub(super) margin_percentile: f64,
    /// Project the queue ahead of an arrival at the estimates' means (`admit.rs`).
    pub(super) queue_at_mean: bool,
    /// Where the replicas' drift is kept before the objective of an arrival behind other
    /// work (`admit.rs`, `shared.rs`, `estimate::Drift`).
    pub(super) drift_margin: DriftMargin,
    /// Refuse an arrival that would push a request queued behind it past its latest
    /// finish (`behind.rs`).
    pub(super) protect_admitted: bool,
    /// Admit a looser request no further ahead than the tightest busy neighbour's
    /// objective (`horizon.rs`).
    pub(super) booking_horizon: bool,
    /// Refuse at arrival below the slack where a model's admitted requests missed more
    /// than they were served (`hindsight.rs`).
    pub(super) admission_hindsight: bool,
    /// How many requests served in time a miss weighs in hindsight (`hindsight.rs`).
    pub(super) hindsight_weight: u32,
    /// Share of its arrivals below which a model losing requests is admitted without its
    /// margin in hindsight (`floor.rs`).
    pub(super) hindsight_floor: f64,
    /// Objectives, in runs alone, below which a request is judged without hindsight.
    pub(super) hindsight_min_runs: u32,
    /// Plan a device much slower than its kind at its own pace (`estimate::Slowdown`).
    pub(super) device_slowdown: bool,
}

impl From<&PolicyConfig> for Params {
    fn from(c: &PolicyConfig) -> Self {
        Self {
            schedule_ahead: nanos(c.schedule_ahead),
            buffer: nanos(c.buffer),
            load_budget: nanos(c.load_budget).max(1),
            max_batch: c.max_batch,
            max_exec_time: nanos(c.max_exec_time),
            window: c.estimate_window,
            percentile: c.estimate_percentile,
            lanes: LaneTiming {
                expected_lag: nanos(c.expected_lag),
                lag_allowance: nanos(c.lag_allowance),
            },
            early_drop: true,
            shared_arrival: c.shared_arrival,
            estimate_max_age: nanos(c.estimate_max_age).max(1),
            target_utilisation: c.target_utilisation.clamp(0.05, 1.0),
            learn_margins: c.learn_margins,
            margin_window: c.margin_window,
            margin_percentile: c.margin_percentile,
            queue_at_mean: c.queue_at_mean,
            drift_margin: c.drift_margin,
            protect_admitted: c.protect_admitted,
            booking_horizon: c.booking_horizon,
            admission_hindsight: c.admission_hindsight,
            hindsight_weight: c.hindsight_weight,
            hindsight_floor: c.hindsight_floor,
            hindsight_min_runs: c.hindsight_min_runs,
            device_slowdown: c.device_slowdown,
        }
    }
}
