//! `GET /metrics`: Prometheus text exposition.
//!
//! Most numbers come from the controller's events, aggregated by a task of their own off
//! the request path. The request path adds only what no event carries: requests pending
//! at the API, errors found before the controller admitted a request, and each request's
//! queue and compute time (its answer carries them; the events do not).
//!
//! Triton's names where they fit (`nv_inference_*`, label `model`), this runtime's own as
//! `clockwork_*`. Label values are model names, device numbers and fixed kinds, so the
//! number of series is bounded by the configuration.

use std::sync::{Arc, RwLock};

use actix_web::{get, web, HttpResponse};
use prometheus::{
    core::Collector, exponential_buckets, CounterVec, Encoder as _, Histogram, HistogramOpts,
    HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};
use tokio::sync::broadcast::{self, error::RecvError};

use super::edge::{FrontKey, Phase, Stage};
use super::error::ApiError;
use super::ApiState;
use crate::actors::messages::Inferred;
use crate::events::{ActionDone, Event, RequestAnswered};
use crate::model::{ModelId, ModelSpec};
use crate::outcome::Class;
use crate::protocol::ActionTag;
use crate::time::Nanos;

/// Series of one model, resolved once so updates are plain atomic adds.
struct PerModel {
    name: String,
    success: IntCounter,
    failure: IntCounter,
    count: IntCounter,
    exec_count: IntCounter,
    request_us: IntCounter,
    queue_us: IntCounter,
    compute_us: IntCounter,
    pending: IntGauge,
    within_slo: IntCounter,
    late: IntCounter,
}

/// The per-model families, kept to resolve the series of models registered later.
struct ModelFamilies {
    success: IntCounterVec,
    failure: IntCounterVec,
    count: IntCounterVec,
    exec_count: IntCounterVec,
    request_us: IntCounterVec,
    queue_us: IntCounterVec,
    compute_us: IntCounterVec,
    pending: IntGaugeVec,
    within_slo: IntCounterVec,
    late: IntCounterVec,
}

impl ModelFamilies {
    fn resolve(&self, name: &str) -> PerModel {
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
            pending: self.pending.with_label_values(&l),
            within_slo: self.within_slo.with_label_values(&l),
            late: self.late.with_label_values(&l),
        }
    }
}

/// Every metric of the server.
pub struct Metrics {
    registry: Registry,
    families: ModelFamilies,
    /// Series of each model, indexed by id; grows when a model is registered.
    models: RwLock<Vec<Arc<PerModel>>>,
    api_errors: IntCounterVec,
    refusals: IntCounterVec,
    loads: IntCounterVec,
    evictions: IntCounterVec,
    action_failures: IntCounterVec,
    busy: CounterVec,
    prediction_error: HistogramVec,
    latency: Histogram,
    events_lost: IntCounter,
    /// The front end's own time per request, by model and phase (read, wait, decode,
    /// respond): what the edge counts in each request's plan.
    front: HistogramVec,
    /// Requests the front end refused on its own, by model and stage; those refused
    /// before reading were never decoded.
    edge_refusals: IntCounterVec,
    /// Answers that left after their deadline as measured from the edge.
    edge_late: IntCounterVec,
    /// Pipelines' roots, stages and fan-outs.
    pipelines: super::pipeline_metrics::PipelineMetrics,
}

fn counter(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<IntCounterVec> {
    let family = IntCounterVec::new(Opts::new(name, help), labels)?;
    registry.register(Box::new(family.clone()))?;
    Ok(family)
}

impl ModelFamilies {
    /// Registers the per-model families (label `model`).
    fn register(r: &Registry) -> prometheus::Result<Self> {
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
                "Inferences performed (one per successful request)",
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
            within_slo: c(
                "clockwork_requests_within_slo",
                "Successes answered by their deadline",
            )?,
            late: c(
                "clockwork_requests_late",
                "Successes answered after their deadline (estimates were wrong)",
            )?,
        })
    }
}

/// Registers `collector` with `registry` and hands it back.
fn registered<C: Collector + Clone + 'static>(
    registry: &Registry,
    collector: C,
) -> prometheus::Result<C> {
    registry.register(Box::new(collector.clone()))?;
    Ok(collector)
}

/// Measured minus planned duration of actions, by action kind: buckets on both sides of 0.
fn prediction_error_family() -> prometheus::Result<HistogramVec> {
    let signed = vec![-1e-2, -1e-3, -1e-4, -1e-5, 0.0, 1e-5, 1e-4, 1e-3, 1e-2];
    let opts = HistogramOpts::new(
        "clockwork_prediction_error_seconds",
        "Measured minus planned duration of actions",
    );
    HistogramVec::new(opts.buckets(signed), &["kind"])
}

/// Admission to answer of successful requests.
fn latency_family() -> prometheus::Result<Histogram> {
    let opts = HistogramOpts::new(
        "clockwork_request_duration_seconds",
        "Admission to answer of successful requests",
    );
    Histogram::with_opts(opts.buckets(exponential_buckets(0.0005, 2.0, 12)?))
}

/// The front end's time per request, by model and phase.
fn front_family() -> prometheus::Result<HistogramVec> {
    let opts = HistogramOpts::new(
        "clockwork_front_seconds",
        "Time the HTTP front end spent on a request, by phase",
    );
    HistogramVec::new(
        opts.buckets(exponential_buckets(0.000_05, 2.0, 14)?),
        &["model", "phase"],
    )
}

impl Metrics {
    /// Registers every series; the models' series start at zero.
    pub fn new(models: &[ModelSpec]) -> prometheus::Result<Self> {
        let r = Registry::new();
        let families = ModelFamilies::register(&r)?;
        let per_model = models
            .iter()
            .map(|spec| Arc::new(families.resolve(&spec.name)))
            .collect();
        let busy = CounterVec::new(
            Opts::new(
                "clockwork_device_busy_seconds",
                "Time devices spent executing actions, by lane",
            ),
            &["device", "lane"],
        )?;
        let events_lost = IntCounter::new(
            "clockwork_metrics_events_lost",
            "Events the metrics task fell too far behind to see",
        )?;
        let device = ["device"];
        Ok(Self {
            pipelines: super::pipeline_metrics::PipelineMetrics::register(&r)?,
            api_errors: counter(
                &r,
                "clockwork_request_errors",
                "Error answers of the inference routes, by error_type",
                &["error_type"],
            )?,
            refusals: counter(
                &r,
                "clockwork_refusals",
                "Admitted requests refused by the policy, by reason",
                &["model", "reason"],
            )?,
            loads: counter(
                &r,
                "clockwork_loads",
                "Model loads completed, by device",
                &device,
            )?,
            evictions: counter(
                &r,
                "clockwork_evictions",
                "Model unloads (evictions) completed, by device",
                &device,
            )?,
            action_failures: counter(
                &r,
                "clockwork_action_failures",
                "Actions that did not complete, by kind",
                &["kind"],
            )?,
            busy: registered(&r, busy)?,
            prediction_error: registered(&r, prediction_error_family()?)?,
            latency: registered(&r, latency_family()?)?,
            events_lost: registered(&r, events_lost)?,
            front: registered(&r, front_family()?)?,
            edge_refusals: counter(
                &r,
                "clockwork_edge_refusals",
                "Requests the front end refused before the controller saw them, by stage",
                &["model", "stage"],
            )?,
            edge_late: counter(
                &r,
                "clockwork_edge_late",
                "Answers that left after the deadline counted from the request's arrival",
                &["model"],
            )?,
            families,
            models: RwLock::new(per_model),
            registry: r,
        })
    }

    fn model(&self, id: ModelId) -> Option<Arc<PerModel>> {
        let models = self.models.read().unwrap_or_else(|e| e.into_inner());
        models.get(id.0 as usize).cloned()
    }

    /// Starts the series of a model registered while serving; its id is the next one.
    pub fn add_model(&self, spec: &ModelSpec) {
        let series = Arc::new(self.families.resolve(&spec.name));
        let mut models = self.models.write().unwrap_or_else(|e| e.into_inner());
        models.push(series);
    }

    /// Adds `delta` to the requests of `model` waiting at the API.
    pub fn pending(&self, model: ModelId, delta: i64) {
        if let Some(m) = self.model(model) {
            m.pending.add(delta);
        }
    }

    /// A success as the API saw it: where its time went.
    pub fn success(&self, model: ModelId, inferred: &Inferred) {
        if let Some(m) = self.model(model) {
            let timing = &inferred.timing;
            m.queue_us
                .inc_by(timing.exec.begin.saturating_sub(timing.arrival) / 1000);
            m.compute_us.inc_by(timing.exec.duration / 1000);
        }
    }

    /// An error answer; a known model's failure is counted here unless the controller
    /// admitted the request (then its event counts it).
    pub fn api_error(&self, error: &ApiError, model: Option<ModelId>) {
        let kind = error.kind();
        self.api_errors.with_label_values(&[kind.as_str()]).inc();
        if let Some(m) = model.and_then(|id| self.model(id)) {
            if !kind.after_admission() {
                m.failure.inc();
            }
        }
    }

    /// Calls `f` with the `model` label of the front end's series (a model's name, or a
    /// pipeline's: pipelines are served at the models' paths) and, for a model, its series.
    fn front_series(&self, key: &FrontKey, f: impl FnOnce(&str, Option<&PerModel>)) {
        match key {
            FrontKey::Model(id) => {
                if let Some(m) = self.model(*id) {
                    f(m.name.as_str(), Some(&m));
                }
            }
            FrontKey::Pipeline(name) => f(name, None),
        }
    }

    /// Time the front end spent on one phase of a request of `key`.
    pub fn front(&self, key: &FrontKey, phase: Phase, took: Nanos) {
        self.front_series(key, |name, _| {
            self.front
                .with_label_values(&[name, phase.as_str()])
                .observe(seconds(took));
        });
    }

    /// A request the front end refused on its own (the controller never saw it; for a
    /// pipeline, neither did its actor, so its root outcomes do not count it).
    pub fn refused_at_edge(&self, key: &FrontKey, stage: Stage) {
        self.front_series(key, |name, model| {
            if let Some(m) = model {
                m.failure.inc();
            }
            self.edge_refusals
                .with_label_values(&[name, stage.as_str()])
                .inc();
        });
    }

    /// An answer that left after its deadline counted from the edge.
    pub fn late_at_edge(&self, key: &FrontKey) {
        self.front_series(key, |name, _| {
            self.edge_late.with_label_values(&[name]).inc();
        });
    }

    fn answered(&self, event: &RequestAnswered) {
        let Some(m) = self.model(event.model) else {
            return;
        };
        let duration = event.answered.saturating_sub(event.arrival);
        let succeeded = || {
            m.success.inc();
            m.count.inc();
            m.request_us.inc_by(duration / 1000);
            self.latency.observe(seconds(duration));
        };
        match event.outcome.class() {
            Class::InTime => {
                succeeded();
                m.within_slo.inc();
            }
            Class::Late => {
                succeeded();
                m.late.inc();
            }
            Class::Refused => {
                m.failure.inc();
                let reason = event.outcome.as_str();
                self.refusals.with_label_values(&[&m.name, reason]).inc();
            }
            Class::Rejected | Class::Failed => m.failure.inc(),
        }
    }

    fn action(&self, event: &ActionDone) {
        let Some(measured) = event.measured else {
            self.action_failures
                .with_label_values(&[event.kind.as_str()])
                .inc();
            return;
        };
        let device = event.device.0.to_string();
        let lane = if event.kind.is_load_lane() {
            "load"
        } else {
            "exec"
        };
        self.busy
            .with_label_values(&[device.as_str(), lane])
            .inc_by(seconds(measured.duration));
        let error = measured.duration as f64 - event.expected as f64;
        self.prediction_error
            .with_label_values(&[event.kind.as_str()])
            .observe(error / 1e9);
        match event.kind {
            ActionTag::Infer => {
                if let Some(m) = self.model(event.model) {
                    m.exec_count.inc();
                }
            }
            ActionTag::Load => self.loads.with_label_values(&[device.as_str()]).inc(),
            ActionTag::Unload => self.evictions.with_label_values(&[device.as_str()]).inc(),
        }
    }

    /// Folds one event into the metrics.
    pub fn observe(&self, event: &Event) {
        match event {
            Event::RequestAnswered(e) => self.answered(e),
            Event::ActionDone(e) => self.action(e),
            Event::PipelineAnswered(e) => self.pipelines.answered(e),
            Event::StageAnswered(e) => self.pipelines.stage(e),
            Event::FanOut(e) => self.pipelines.fan_out(e),
        }
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .unwrap_or_else(|e| format!("# metrics could not be encoded: {e}\n"))
    }
}

fn seconds(nanos: Nanos) -> f64 {
    nanos as f64 / 1e9
}

/// Aggregates the runtime's events into `metrics` until the runtime stops.
pub fn collect(metrics: Arc<Metrics>, mut events: broadcast::Receiver<Event>) {
    actix_web::rt::spawn(async move {
        loop {
            match events.recv().await {
                Ok(event) => metrics.observe(&event),
                Err(RecvError::Lagged(lost)) => metrics.events_lost.inc_by(lost),
                Err(RecvError::Closed) => break,
            }
        }
    });
}

/// Prometheus text exposition of every metric.
#[utoipa::path(tag = "server", responses(
    (status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain"),
))]
#[get("/metrics")]
pub(super) async fn prometheus_text(state: web::Data<ApiState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(TextEncoder::new().format_type())
        .body(state.metrics.render())
}
