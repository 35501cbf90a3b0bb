//! The report of a run: what was offered, what was answered how, and how fast.
//!
//! `clockwork simulate` (virtual time, real actors) and `clockwork loadgen` (real HTTP)
//! write the same report, so a simulated run and a real one can be compared line by line.
//! A [`Recorder`] is fed one call per request and per action; [`Recorder::finish`] makes a
//! [`PolicyReport`]; [`Report`] holds one per policy and writes `report.json`, `report.md`
//! and the SVG plots. A run that drives a pipeline also feeds it each stage's fan-outs and
//! answers (`stages.rs`), and its request figures are those of the root requests.

mod over_time;
mod plots;
mod recorder;
mod stages;
mod write;

pub use over_time::OutcomesAt;
pub use recorder::{Answered, Recorder};
pub use stages::{FanOutStats, PipelineReport, StageOutline, StageReport};

use std::collections::BTreeMap;

use serde::Serialize;

use crate::protocol::ActionTag;
use crate::time::Nanos;

/// Latency percentiles of successful answers, in milliseconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LatencyMs {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
}

/// Percentiles of measured minus planned action durations, in milliseconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PredictionErrorMs {
    pub p1: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// One point of a series over time.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TimePoint {
    /// Start of the bucket, seconds from the start of the run.
    pub t_s: f64,
    pub value: f64,
}

/// An action on a device, for the timeline excerpt.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TimelineSpan {
    pub device: u32,
    /// `infer` or `load`.
    pub kind: ActionTag,
    pub begin_ms: f64,
    pub end_ms: f64,
    pub batch: u32,
}

/// What one policy did with the workload.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PolicyReport {
    pub policy: String,
    pub offered: u64,
    /// Successful answers inside their objective.
    pub ok_in_slo: u64,
    /// Successful answers after their objective.
    pub late: u64,
    /// Refusals by reason.
    pub refused: BTreeMap<String, u64>,
    /// Answers that are neither successes nor refusals: the sum of `errors`.
    pub failed: u64,
    /// Those answers by kind (a load generator also names answers it could not read).
    pub errors: BTreeMap<String, u64>,
    /// `ok_in_slo / offered`.
    pub goodput: f64,
    pub latency_ms: LatencyMs,
    /// How long refused requests waited for their refusal (zeros without refusals).
    pub refusal_ms: LatencyMs,
    pub cold_loads: u64,
    /// Actions executors did not complete, by error (a refusal as too late means the
    /// controller's timeline was wrong).
    pub action_errors: BTreeMap<String, u64>,
    pub evictions: u64,
    pub mean_batch: f64,
    /// Fraction of the run each device's exec lane spent executing.
    pub device_busy: Vec<f64>,
    pub prediction_error_ms: PredictionErrorMs,
    /// Requests handled per wall-clock second (for a simulation: how fast it simulates).
    pub sim_requests_per_wall_s: f64,
    pub wall_s: f64,
    /// Goodput of the requests that arrived in each time bucket.
    pub goodput_over_time: Vec<TimePoint>,
    /// The requests that arrived in each time bucket, by answer (the buckets of
    /// `goodput_over_time`).
    pub outcomes_over_time: Vec<OutcomesAt>,
    /// Latency CDF of successful answers: (latency ms, fraction at or below).
    pub latency_cdf: Vec<(f64, f64)>,
    /// Device activity in a short window of the run.
    pub timeline: Vec<TimelineSpan>,
    /// The stages of the pipeline the run drove, if it drove one; the figures above are
    /// then those of its root requests (end to end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<PipelineReport>,
}

/// The whole report: how the run was made and one entry per policy.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The command line that produced it.
    pub command: String,
    /// Workload and system description, as key-value pairs for the table header.
    pub setup: BTreeMap<String, String>,
    pub policies: Vec<PolicyReport>,
}

/// Converts nanoseconds to milliseconds for the report.
pub(crate) fn ms(nanos: Nanos) -> f64 {
    nanos as f64 / 1e6
}

pub use write::{markdown, write_all, ReportError};
