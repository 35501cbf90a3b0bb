//! `GET /metrics`: Prometheus text exposition.
//!
//! Most numbers come from the controller's events, folded in off the request path: by
//! every reader of them (a scrape, the statistics, the dashboard) before it reads, and
//! every [`FOLD_EVERY`] by a task of their own, which keeps the channel's backlog short.
//! Not on each event: a task waiting for each woke its thread once per answer, and under
//! the overload bench's burst 23% of the controller's samples went to that wake-up (the
//! write to the runtime's waker and the switch to the woken thread on the front end's
//! core; docs/EXPERIMENTS.md, "The metrics fold their events in ticks").
//!
//! The request path adds only what no event carries: requests pending at the API, the
//! answers it gives (by what its client got, which may differ from the controller's
//! outcome: a request refused `overran` at its deadline still finishes at the controller;
//! `tally.rs` says who counts each answer, so that it is counted once), the front end's own
//! time and each success's latency from its arrival at the edge to its answer encoded.
//!
//! Triton's names where they fit (`nv_inference_*`, label `model`), this runtime's own as
//! `clockwork_*`. Label values are model and pipeline names, device numbers and fixed
//! kinds (outcomes, phases, stages), so the number of series is bounded by the
//! configuration.
//!
//! | file | what |
//! | --- | --- |
//! | `mod.rs` | the registry, the front end's updates, the events task, the route |
//! | `model.rs` | a model's series: Triton's counters, answers by outcome, latency histograms and their buckets, the front end's phases |
//! | `devices.rs` | the devices' series, from the executors' reports |
//! | `pipeline.rs` | the pipelines' series, from the pipeline actors' events |

mod devices;
mod model;
mod pipeline;

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use actix_web::{get, web, HttpResponse};
use prometheus::{
    core::Collector, Encoder as _, IntCounter, IntCounterVec, Opts, Registry, TextEncoder,
};
use tokio::sync::broadcast::{self, error::TryRecvError};

use super::edge::{FrontKey, Phase, Stage};
use super::error::ApiError;
use super::ApiState;
use crate::events::{Event, RequestAnswered};
use crate::model::{ModelId, ModelSpec};
use crate::outcome::Outcome;
use crate::tally::Held;
use crate::time::Nanos;
use devices::DeviceMetrics;
pub use model::Totals;
use model::{ModelFamilies, PerModel};
use pipeline::PipelineMetrics;

/// Every metric of the server.
pub struct Metrics {
    registry: Registry,
    families: ModelFamilies,
    /// Series of each model, indexed by id; grows when a model is registered.
    models: RwLock<Vec<Arc<PerModel>>>,
    api_errors: IntCounterVec,
    events_lost: IntCounter,
    /// Answers that left after their deadline as measured from the edge.
    edge_late: IntCounterVec,
    devices: DeviceMetrics,
    /// Pipelines' roots, stages and fan-outs.
    pipelines: PipelineMetrics,
    /// The events not folded in yet ([`Metrics::catch_up`]); `None` before [`collect`]
    /// gives it the runtime's, and after the runtime closed its bus.
    events: Mutex<Option<broadcast::Receiver<Event>>>,
    /// Answers the controller published before the front end decided who counts them
    /// (`tally.rs`): counted, or dropped as the front end's, at a later fold. At most the
    /// requests in flight at the front end: each is decided when its handler ends.
    held: Held<RequestAnswered>,
}

/// How often the events are folded in while nobody reads the metrics: 100 times a second,
/// so that even a burst of 100,000 events a second leaves the channel's backlog (65,536,
/// `events.rs`) far from full.
pub const FOLD_EVERY: Duration = Duration::from_millis(10);

fn counter(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<IntCounterVec> {
    registered(registry, IntCounterVec::new(Opts::new(name, help), labels)?)
}

/// The controller's answer counted by its outcome (its front end did not answer it).
fn count(m: &PerModel, event: &RequestAnswered) {
    m.answered(event.outcome, event.items);
    if event.outcome.is_success() {
        let duration = event.answered.saturating_sub(event.arrival);
        m.request_us.inc_by(duration / 1000);
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

impl Metrics {
    /// Registers every series; the models' series start at zero.
    pub fn new(models: &[ModelSpec]) -> prometheus::Result<Self> {
        let r = Registry::new();
        let families = ModelFamilies::register(&r)?;
        let per_model = models
            .iter()
            .map(|spec| Arc::new(families.resolve(&spec.name)))
            .collect();
        let events_lost = IntCounter::new(
            "clockwork_metrics_events_lost",
            "Events the metrics task fell too far behind to see",
        )?;
        Ok(Self {
            pipelines: PipelineMetrics::register(&r)?,
            devices: DeviceMetrics::register(&r)?,
            api_errors: counter(
                &r,
                "clockwork_request_errors",
                "Error answers of the inference routes (and refused tokens on any route), by error_type",
                &["error_type"],
            )?,
            events_lost: registered(&r, events_lost)?,
            edge_late: counter(
                &r,
                "clockwork_edge_late",
                "Answers that left after the deadline counted from the request's arrival",
                &["model"],
            )?,
            families,
            models: RwLock::new(per_model),
            registry: r,
            events: Mutex::new(None),
            held: Held::default(),
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

    /// A model's counts since it was registered (`None`: no such id).
    pub fn model_totals(&self, model: ModelId) -> Option<Totals> {
        self.catch_up();
        self.model(model).map(|m| m.totals())
    }

    /// A model's batches run by size: (size, count, nanoseconds).
    pub fn model_batches(&self, model: ModelId) -> Vec<(u32, u64, u64)> {
        self.catch_up();
        self.model(model).map(|m| m.batches()).unwrap_or_default()
    }

    /// A pipeline's root requests so far: successes and other answers, no durations (its
    /// stages' models report theirs).
    pub fn pipeline_totals(&self, pipeline: &str) -> Totals {
        self.catch_up();
        let (success, fail) = self.pipelines.roots(pipeline);
        Totals {
            success,
            fail,
            inferences: success,
            ..Totals::default()
        }
    }

    /// Every model's name and answers so far by outcome, by model id: the numbers of
    /// `clockwork_requests`, for the dashboard.
    pub fn answers(&self) -> Vec<(String, Vec<(Outcome, u64)>)> {
        self.catch_up();
        let models = self.models.read().unwrap_or_else(|e| e.into_inner());
        models
            .iter()
            .map(|m| (m.name.clone(), m.counts().collect()))
            .collect()
    }

    /// Adds `delta` to the requests of `model` waiting at the API.
    pub fn pending(&self, model: ModelId, delta: i64) {
        if let Some(m) = self.model(model) {
            m.pending.add(delta);
        }
    }

    /// An error answer; `whose`: the model or pipeline it was for, when known, and how long
    /// after its arrival it was answered. Counted there as the answer its client got,
    /// whoever decided it (the published event for the request is not counted then,
    /// `tally.rs`).
    pub fn api_error(&self, error: &ApiError, whose: Option<(&FrontKey, Nanos)>) {
        let kind = error.kind();
        self.api_errors.with_label_values(&[kind.as_str()]).inc();
        match whose {
            Some((FrontKey::Model(id), _)) => {
                if let Some(m) = self.model(*id) {
                    m.answered(kind, 1);
                }
            }
            Some((FrontKey::Pipeline(name), took)) => self.pipelines.counted(name, kind, took),
            None => {}
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

    /// Time the front end spent on phases of a request of `key` (a model's series are
    /// resolved already; a pipeline's are looked up by name).
    pub fn front(&self, key: &FrontKey, measured: &[(Phase, Nanos)]) {
        self.front_series(key, |name, model| {
            for &(phase, took) in measured {
                match model {
                    Some(m) => m.front(phase, took),
                    None => self
                        .families
                        .front
                        .with_label_values(&[name, phase.as_str()])
                        .observe(seconds(took)),
                }
            }
        });
    }

    /// A request the front end refused on its own (the controller never saw it; for a
    /// pipeline, neither did its actor, so its root outcomes do not count it). Its answer
    /// is counted by outcome when the error is (`api_error`).
    pub fn refused_at_edge(&self, key: &FrontKey, stage: Stage) {
        self.front_series(key, |name, model| match model {
            Some(m) => m.refused_at_edge(stage),
            None => self
                .families
                .edge_refusals
                .with_label_values(&[name, stage.as_str()])
                .inc(),
        });
    }

    /// A success of a request of `items` items to a model or a pipeline, its answer
    /// encoded `took` after its arrival at the edge: counted by `outcome` (`ok`, or `late`
    /// past its objective), as the client gets it, in the model's series or the
    /// pipeline's (`clockwork_pipeline_*`).
    pub fn delivered(&self, key: &FrontKey, took: Nanos, outcome: Outcome, items: u32) {
        match key {
            FrontKey::Model(id) => {
                if let Some(m) = self.model(*id) {
                    m.latency.observe(seconds(took));
                    m.answered(outcome, items);
                    m.request_us.inc_by(took / 1000);
                }
            }
            FrontKey::Pipeline(name) => self.pipelines.counted(name, outcome, took),
        }
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
        // The device's work counts whoever answers the client.
        if let Some(ran) = event.ran {
            m.ran(ran.begin.saturating_sub(event.arrival), ran.duration);
        }
        if self.held.counts_now(event.tally.as_ref(), || event.clone()) {
            count(&m, event);
        }
    }

    /// Counts the held answers whose front end has let its request go (`tally.rs`).
    fn settle_held(&self) {
        for event in self.held.settle() {
            if let Some(m) = self.model(event.model) {
                count(&m, &event);
            }
        }
        self.pipelines.settle_held();
    }

    /// Folds in every event published so far, and settles the answers held for their
    /// front end: a reader that calls it first sees every event published before it
    /// read. Answers false once the runtime's bus is closed (or before `collect` gave it
    /// one).
    pub fn catch_up(&self) -> bool {
        let open = self.fold_events();
        self.settle_held();
        open
    }

    /// Folds in every event published so far (see [`Metrics::catch_up`]).
    fn fold_events(&self) -> bool {
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(receiver) = events.as_mut() else {
            return false;
        };
        loop {
            match receiver.try_recv() {
                Ok(event) => self.observe(&event),
                Err(TryRecvError::Lagged(lost)) => self.events_lost.inc_by(lost),
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Closed) => {
                    *events = None;
                    return false;
                }
            }
        }
    }

    /// Folds one event into the metrics.
    pub fn observe(&self, event: &Event) {
        match event {
            Event::RequestAnswered(e) => self.answered(e),
            Event::ActionDone(e) => {
                if self.devices.action(e) {
                    if let (Some(m), Some(ran)) = (self.model(e.model), e.measured) {
                        m.batch_ran(e.batch, ran.duration);
                    }
                }
            }
            Event::PipelineAnswered(e) => self.pipelines.answered(e),
            Event::StageAnswered(e) => self.pipelines.stage(e),
            Event::FanOut(e) => self.pipelines.fan_out(e),
            Event::DeviceHealth(e) => self.devices.health(e),
            Event::Probed(e) => self.devices.probed(e),
            // Plans are not counts: only what ran is.
            Event::ActionPlanned(_) => {}
        }
    }

    /// The registry its series live in: other parts (the cluster's) add theirs to it.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        self.catch_up();
        TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .unwrap_or_else(|e| format!("# metrics could not be encoded: {e}\n"))
    }
}

fn seconds(nanos: Nanos) -> f64 {
    nanos as f64 / 1e9
}

/// Folds the runtime's `events` into `metrics` from now on: on each read of them, and
/// every [`FOLD_EVERY`] until the runtime closes its bus.
pub fn collect(metrics: Arc<Metrics>, events: broadcast::Receiver<Event>) {
    *metrics
        .events
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = Some(events);
    actix_web::rt::spawn(async move {
        let mut tick = actix_web::rt::time::interval(FOLD_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if !metrics.catch_up() {
                break;
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
