//! The series of one model: Triton's `nv_inference_*` counters, the answers by outcome
//! (the SLO attainment), and the latency histograms of its requests (end to end, queued,
//! computing). Every series of a model is resolved when the model is registered, so it is
//! exposed at zero from the start (a `rate()` sees the first request) and each update is
//! an atomic add, with no label lookup on the request path (the front end's phases too:
//! four lookups of `clockwork_front_seconds` per request before).

use prometheus::{
    exponential_buckets, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry,
};

use super::{counter, registered, seconds};
use crate::api::edge::{Phase, Stage};
use crate::outcome::Outcome;
use crate::time::Nanos;

/// Upper bounds (seconds) of every latency histogram of the server, the pipelines' too.
///
/// `histogram_quantile` interpolates inside a bucket, and the share of answers under an
/// objective is exact only where the objective is a bound. So the bounds are the round
/// numbers people set objectives at (1, 1.5, 2, 2.5, 3, 4, 5 and 7.5 in each decade from
/// 1 ms up to 5 s), which keeps consecutive bounds within a ratio of 1.5: a quantile read
/// between them is off by at most a third of its value. Below 1 ms, 0.25 and 0.5 ms still
/// separate the compute time of small models on a CPU; past 5 s, `+Inf` is enough, since
/// such a request has missed any interactive objective.
pub fn latency_buckets() -> Vec<f64> {
    const MANTISSAS: [f64; 8] = [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5];
    let mut bounds = vec![0.000_25, 0.000_5];
    // In milliseconds first, so that each bound is the double nearest its round value.
    for decade_ms in [1.0, 10.0, 100.0, 1000.0] {
        bounds.extend(MANTISSAS.iter().map(|m| m * decade_ms / 1000.0));
    }
    bounds.retain(|&b| b <= 5.0);
    bounds
}

/// A model's (or pipeline's) counts since it was registered: Triton's statistics
/// extension (`api/stats.rs`) reports them. Durations are cumulative nanoseconds (kept
/// in microseconds by the counters they come from).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Milliseconds since the epoch of the last success (0: none yet).
    pub last_ms: u64,
    /// Successful requests (answered with outputs), and their time from the edge's
    /// arrival to the answer.
    pub success: u64,
    pub success_ns: u64,
    /// Requests answered otherwise: refused or failed.
    pub fail: u64,
    /// Items of the successful requests (a request of `n` items counts `n`).
    pub inferences: u64,
    /// Of the successful requests (each answer's event carries its batch's execution, a
    /// pipeline's sub-requests' too): arrival to their batch's start, and their batches'
    /// runs.
    pub queue_ns: u64,
    pub compute_ns: u64,
}

/// Series of one model, resolved once so updates are plain atomic adds.
pub(super) struct PerModel {
    /// Its name: the `model` label of the series resolved later (the front end's).
    pub name: String,
    success: IntCounter,
    failure: IntCounter,
    count: IntCounter,
    exec_count: IntCounter,
    pub request_us: IntCounter,
    queue_us: IntCounter,
    compute_us: IntCounter,
    /// Batches run by size: (count, nanoseconds), for Triton's `batch_stats`.
    batches: std::sync::Mutex<std::collections::BTreeMap<u32, (u64, u64)>>,
    /// Milliseconds since the epoch of its last success (0: none yet).
    last_ms: std::sync::atomic::AtomicU64,
    pub pending: IntGauge,
    /// Answers by outcome, in the order of [`Outcome::ALL`].
    outcomes: Vec<IntCounter>,
    /// Edge arrival to answer encoded, successes.
    pub latency: Histogram,
    queued: Histogram,
    compute: Histogram,
    /// Front-end refusals, in the order of [`Stage::ALL`].
    edge_refusals: Vec<IntCounter>,
    /// The front end's time per phase, by `Phase as usize`.
    front: Vec<Histogram>,
}

impl PerModel {
    /// One answer of a request of `items` items: counted by its outcome, and as Triton's
    /// success or failure; a success's items as Triton's inferences.
    pub fn answered(&self, outcome: Outcome, items: u32) {
        if let Some(i) = Outcome::ALL.iter().position(|&o| o == outcome) {
            self.outcomes[i].inc();
        }
        if outcome.is_success() {
            // Wall time (the runtime's clock is its own): the statistics extension says
            // when a model last answered, as milliseconds since the epoch.
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            let ms = now.map_or(0, |d| d.as_millis() as u64);
            self.last_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
            // Items first: a scrape between the two then never shows a success without
            // its items (tests wait for the success count, then read both).
            self.count.inc_by(u64::from(items));
            self.success.inc();
        } else {
            self.failure.inc();
        }
    }

    /// A batch of `items` that ran for `took`: counted as Triton's executions, by size.
    pub fn batch_ran(&self, items: u32, took: Nanos) {
        self.exec_count.inc();
        let mut batches = self.batches.lock().unwrap_or_else(|e| e.into_inner());
        let (count, ns) = batches.entry(items).or_default();
        *count += 1;
        *ns += took;
    }

    /// Its batches run so far by size: (size, count, nanoseconds).
    pub fn batches(&self) -> Vec<(u32, u64, u64)> {
        let batches = self.batches.lock().unwrap_or_else(|e| e.into_inner());
        batches.iter().map(|(&b, &(n, ns))| (b, n, ns)).collect()
    }

    /// Its counts so far, as Triton's statistics extension reports them.
    pub fn totals(&self) -> Totals {
        Totals {
            last_ms: self.last_ms.load(std::sync::atomic::Ordering::Relaxed),
            success: self.success.get(),
            success_ns: self.request_us.get() * 1000,
            fail: self.failure.get(),
            inferences: self.count.get(),
            queue_ns: self.queue_us.get() * 1000,
            compute_ns: self.compute_us.get() * 1000,
        }
    }

    /// Its answers so far by outcome, as `clockwork_requests` exposes them.
    pub fn counts(&self) -> impl Iterator<Item = (Outcome, u64)> + '_ {
        Outcome::ALL
            .iter()
            .zip(&self.outcomes)
            .map(|(&o, c)| (o, c.get()))
    }

    /// Where a success's time went: waiting from its arrival to its batch's start, and the
    /// batch's execution.
    pub fn ran(&self, queued: Nanos, compute: Nanos) {
        self.queue_us.inc_by(queued / 1000);
        self.compute_us.inc_by(compute / 1000);
        self.queued.observe(seconds(queued));
        self.compute.observe(seconds(compute));
    }

    /// Time the front end spent on `phase` of one request.
    pub fn front(&self, phase: Phase, took: Nanos) {
        if let Some(h) = self.front.get(phase as usize) {
            h.observe(seconds(took));
        }
    }

    /// A refusal by the front end at `stage`.
    pub fn refused_at_edge(&self, stage: Stage) {
        if let Some(i) = Stage::ALL.iter().position(|&s| s == stage) {
            self.edge_refusals[i].inc();
        }
    }
}

/// The per-model families, kept to resolve the series of models registered later.
pub(super) struct ModelFamilies {
    success: IntCounterVec,
    failure: IntCounterVec,
    count: IntCounterVec,
    exec_count: IntCounterVec,
    request_us: IntCounterVec,
    queue_us: IntCounterVec,
    compute_us: IntCounterVec,
    pending: IntGaugeVec,
    outcomes: IntCounterVec,
    latency: HistogramVec,
    queued: HistogramVec,
    compute: HistogramVec,
    /// Shared with pipelines, whose refusals the front end counts under their names.
    pub edge_refusals: IntCounterVec,
    /// The front end's time per request by phase; shared with pipelines, as above.
    pub front: HistogramVec,
}

/// The front end's time per request, by model and phase.
fn front_family(r: &Registry) -> prometheus::Result<HistogramVec> {
    let opts = HistogramOpts::new(
        "clockwork_front_seconds",
        "Time the HTTP front end spent on a request, by phase",
    );
    let opts = opts.buckets(exponential_buckets(0.000_05, 2.0, 14)?);
    registered(r, HistogramVec::new(opts, &["model", "phase"])?)
}

/// A latency histogram family by `model`, on [`latency_buckets`].
fn latency(r: &Registry, name: &str, help: &str) -> prometheus::Result<HistogramVec> {
    let opts = HistogramOpts::new(name, help).buckets(latency_buckets());
    registered(r, HistogramVec::new(opts, &["model"])?)
}

impl ModelFamilies {
    /// Registers the per-model families (label `model`).
    pub fn register(r: &Registry) -> prometheus::Result<Self> {
        let m = ["model"];
        let c = |name: &str, help: &str| counter(r, name, help, &m);
        let pending = IntGaugeVec::new(
            Opts::new(
                "nv_inference_pending_request_count",
                "Requests waiting for their answer",
            ),
            &m,
        )?;
        Ok(Self {
            success: c(
                "nv_inference_request_success",
                "Successful inference requests",
            )?,
            failure: c(
                "nv_inference_request_failure",
                "Failed or refused inference requests of a known model",
            )?,
            count: c(
                "nv_inference_count",
                "Inferences performed (the items of successful requests)",
            )?,
            exec_count: c("nv_inference_exec_count", "Batches executed")?,
            request_us: c(
                "nv_inference_request_duration_us",
                "Cumulative time from admission to answer of successful requests",
            )?,
            queue_us: c(
                "nv_inference_queue_duration_us",
                "Cumulative time successful requests waited before their batch started",
            )?,
            compute_us: c(
                "nv_inference_compute_infer_duration_us",
                "Cumulative execution time of the batches of successful requests",
            )?,
            pending: registered(r, pending)?,
            outcomes: counter(
                r,
                "clockwork_requests",
                "Answers by outcome: ok within the objective, late after it, refusals by \
                 reason, errors by kind",
                &["model", "outcome"],
            )?,
            latency: latency(
                r,
                "clockwork_request_duration_seconds",
                "Successful requests from their arrival at the edge to their answer encoded",
            )?,
            queued: latency(
                r,
                "clockwork_request_queue_seconds",
                "Successful requests from their arrival to their batch's start",
            )?,
            compute: latency(
                r,
                "clockwork_request_compute_seconds",
                "Execution time of the batches of successful requests",
            )?,
            edge_refusals: counter(
                r,
                "clockwork_edge_refusals",
                "Requests the front end refused before the controller saw them, by stage",
                &["model", "stage"],
            )?,
            front: front_family(r)?,
        })
    }

    /// The series of the model `name`, every one at zero.
    pub fn resolve(&self, name: &str) -> PerModel {
        let l = [name];
        PerModel {
            name: name.to_owned(),
            success: self.success.with_label_values(&l),
            failure: self.failure.with_label_values(&l),
            count: self.count.with_label_values(&l),
            exec_count: self.exec_count.with_label_values(&l),
            request_us: self.request_us.with_label_values(&l),
            queue_us: self.queue_us.with_label_values(&l),
            compute_us: self.compute_us.with_label_values(&l),
            batches: Default::default(),
            last_ms: Default::default(),
            pending: self.pending.with_label_values(&l),
            outcomes: Outcome::ALL
                .iter()
                .map(|o| self.outcomes.with_label_values(&[name, o.as_str()]))
                .collect(),
            latency: self.latency.with_label_values(&l),
            queued: self.queued.with_label_values(&l),
            compute: self.compute.with_label_values(&l),
            edge_refusals: Stage::ALL
                .iter()
                .map(|s| self.edge_refusals.with_label_values(&[name, s.as_str()]))
                .collect(),
            front: Phase::ALL
                .iter()
                .map(|p| self.front.with_label_values(&[name, p.as_str()]))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_rise_and_resolve_objectives_from_1_ms_to_5_s() {
        let b = latency_buckets();
        assert!(b.windows(2).all(|w| w[0] < w[1]), "{b:?}");
        assert_eq!(b.first(), Some(&0.000_25));
        assert_eq!(b.last(), Some(&5.0));
        for w in b.windows(2).filter(|w| w[0] >= 1e-3) {
            assert!(w[1] / w[0] <= 1.5 + 1e-9, "{w:?}");
        }
        // Common objectives are bounds, so the share under them is exact.
        for ms in [1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0] {
            let s: f64 = ms / 1e3;
            assert!(b.iter().any(|x| (x - s).abs() < 1e-12), "{ms} ms");
        }
    }

    #[test]
    fn an_answer_counts_once_by_outcome_and_as_success_or_failure() {
        let families = ModelFamilies::register(&Registry::new()).unwrap();
        let m = families.resolve("m");
        for &o in Outcome::ALL {
            m.answered(o, 1);
        }
        assert!(m.outcomes.iter().all(|c| c.get() == 1));
        assert_eq!(m.success.get(), 2);
        assert_eq!(m.count.get(), 2);
        assert_eq!(m.failure.get(), Outcome::ALL.len() as u64 - 2);
        m.refused_at_edge(Stage::Reading);
        let refusals: Vec<u64> = m.edge_refusals.iter().map(|c| c.get()).collect();
        assert_eq!(refusals, [0, 1, 0, 0, 0]);
    }

    /// Mutation that breaks it: the series resolved in another order than `Phase::ALL`
    /// (a decoding time counted as a read).
    #[test]
    fn a_front_time_lands_in_its_phase_series() {
        let families = ModelFamilies::register(&Registry::new()).unwrap();
        let m = families.resolve("m");
        m.front(Phase::Decode, 1_000);
        for &phase in &Phase::ALL {
            let series = families.front.with_label_values(&["m", phase.as_str()]);
            let expected = u64::from(phase == Phase::Decode);
            assert_eq!(series.get_sample_count(), expected, "{phase:?}");
        }
    }
}
