//! The metrics of pipelines, from the pipeline actors' events: per pipeline, root
//! requests by outcome and their end-to-end latency (a root the front end answered, by the
//! answer it gave: `tally.rs`); per stage, its sub-requests by outcome and latency, and how
//! many requests one upstream result became (the fan-out).
//! Latencies use the models' buckets ([`latency_buckets`]), so one panel reads both alike.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

use super::model::latency_buckets;
use crate::events::{FanOut, PipelineAnswered, StageAnswered};
use crate::outcome::Outcome;
use crate::tally::Held;
use crate::time::Nanos;

/// The pipeline families of the server's registry.
pub(super) struct PipelineMetrics {
    /// Root requests answered, by pipeline and outcome.
    requests: IntCounterVec,
    /// End-to-end latency of answered roots, by pipeline.
    latency: HistogramVec,
    /// A stage's sub-requests answered, by pipeline, stage and outcome: they are also in
    /// their model's `clockwork_requests`, and this tells a model's own requests from a
    /// pipeline's (which of them wait to be refused under overload, for one).
    stage_requests: IntCounterVec,
    /// Latency of a stage's sub-requests (submitted to answered), by pipeline and stage.
    stage_latency: HistogramVec,
    /// Requests one upstream result became, by pipeline and stage.
    fan_out: HistogramVec,
    /// Root requests answered by pipeline, (successes, other answers): what Triton's
    /// statistics extension reports for a pipeline (read back without a scrape).
    roots: Mutex<HashMap<String, (u64, u64)>>,
    /// Roots' answers published before their front end decided who counts them.
    held: Held<PipelineAnswered>,
}

impl PipelineMetrics {
    /// Registers the families in `r`.
    pub fn register(r: &Registry) -> prometheus::Result<Self> {
        let seconds = latency_buckets();
        let requests = IntCounterVec::new(
            Opts::new(
                "clockwork_pipeline_requests",
                "Pipeline root requests answered, by outcome",
            ),
            &["pipeline", "outcome"],
        )?;
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "clockwork_pipeline_latency_seconds",
                "End-to-end latency of pipeline root requests",
            )
            .buckets(seconds.clone()),
            &["pipeline"],
        )?;
        let stage_requests = IntCounterVec::new(
            Opts::new(
                "clockwork_pipeline_stage_requests",
                "Sub-requests of a pipeline stage answered, by outcome (also counted in their model's clockwork_requests)",
            ),
            &["pipeline", "stage", "outcome"],
        )?;
        let stage_latency = HistogramVec::new(
            HistogramOpts::new(
                "clockwork_pipeline_stage_latency_seconds",
                "Latency of a pipeline stage's sub-requests, submitted to answered",
            )
            .buckets(seconds),
            &["pipeline", "stage"],
        )?;
        let fan_out = HistogramVec::new(
            HistogramOpts::new(
                "clockwork_pipeline_fan_out",
                "Requests to a stage that one upstream result became",
            )
            .buckets(vec![0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]),
            &["pipeline", "stage"],
        )?;
        for family in [&latency, &stage_latency, &fan_out] {
            r.register(Box::new(family.clone()))?;
        }
        for family in [&requests, &stage_requests] {
            r.register(Box::new(family.clone()))?;
        }
        Ok(Self {
            requests,
            latency,
            stage_requests,
            stage_latency,
            fan_out,
            roots: Mutex::default(),
            held: Held::default(),
        })
    }

    /// A root's answer as its actor published it: counted by outcome with its latency,
    /// unless its front end counts the answer it gave (`tally.rs`).
    pub fn answered(&self, e: &PipelineAnswered) {
        if self.held.counts_now(e.tally.as_ref(), || e.clone()) {
            let took = e.answered.saturating_sub(e.arrival);
            self.counted(&e.pipeline, e.outcome, took);
        }
    }

    /// Counts the held answers whose front end has let its root go.
    pub fn settle_held(&self) {
        for e in self.held.settle() {
            let took = e.answered.saturating_sub(e.arrival);
            self.counted(&e.pipeline, e.outcome, took);
        }
    }

    /// A root of `pipeline` answered `outcome`, `took` after its arrival: counted by
    /// outcome, its latency observed.
    pub fn counted(&self, pipeline: &str, outcome: Outcome, took: Nanos) {
        let mut roots = self.roots.lock().unwrap_or_else(|e| e.into_inner());
        let counts = roots.entry(pipeline.to_owned()).or_default();
        if outcome.is_success() {
            counts.0 += 1;
        } else {
            counts.1 += 1;
        }
        drop(roots);
        self.requests
            .with_label_values(&[pipeline, outcome.as_str()])
            .inc();
        self.latency
            .with_label_values(&[pipeline])
            .observe(took as f64 / 1e9);
    }

    /// A pipeline's root requests answered so far: (successes, other answers).
    pub fn roots(&self, pipeline: &str) -> (u64, u64) {
        let roots = self.roots.lock().unwrap_or_else(|e| e.into_inner());
        roots.get(pipeline).copied().unwrap_or_default()
    }

    /// A stage's sub-request answered: counted by outcome, its latency observed.
    pub fn stage(&self, e: &StageAnswered) {
        self.stage_requests
            .with_label_values(&[&*e.pipeline, &*e.stage, e.outcome.as_str()])
            .inc();
        self.stage_latency
            .with_label_values(&[&*e.pipeline, &*e.stage])
            .observe(e.latency as f64 / 1e9);
    }

    /// One upstream result became `e.count` requests.
    pub fn fan_out(&self, e: &FanOut) {
        self.fan_out
            .with_label_values(&[&*e.pipeline, &*e.stage])
            .observe(e.count as f64);
    }
}
