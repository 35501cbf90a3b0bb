//! The HTTP API (actix-web): the Open Inference Protocol (KServe V2) with Triton's binary
//! tensor data, model configuration, model repository, statistics and system shared-memory
//! extensions, Prometheus metrics and an OpenAPI document.
//!
//! Handlers only translate: HTTP in, a typed message to the controller, HTTP out.
//!
//! | file | what |
//! | --- | --- |
//! | `health.rs` | `/v2/health/live`, `/v2/health/ready`, `/v2` |
//! | `models.rs` | the model table; metadata, readiness, Triton config |
//! | `infer.rs` | the inference routes |
//! | `front.rs` | a request's one path at the edge, both protocols: refusal before reading, reading, decoding, the call, the answer by the deadline |
//! | `relay.rs` | what other threads finish for a request, handed over from its HTTP worker's own thread |
//! | `lag.rs` | how far behind its own work an HTTP worker is |
//! | `edge.rs` | where a request's time starts, the front end's measured time, the decode pool |
//! | `shed.rs` | adaptive shedding before reading: let through about twice what is accepted |
//! | `v2.rs`, `codec.rs` | protocol bodies; tensor data to bytes and back |
//! | `binary.rs` | Triton's binary tensor data extension |
//! | `repository.rs` | Triton's model repository extension |
//! | `stats.rs` | Triton's statistics extension: each model's counts and durations |
//! | `shm.rs`, `regions.rs` | Triton's system shared-memory extension: the routes; the regions, read and written by requests |
//! | `trace.rs` | debug log lines of each batch (planned, measured) and each request refused or late, with its times |
//! | `metrics/` | `/metrics`, fed by the runtime's events: per-model counters and latency histograms, the front end's, the devices', the pipelines' |
//! | `openapi.rs` | `/v2/openapi.json`, collected from the routes |
//! | `dashboard/` | `/dashboard`: the live timeline page and its event stream (not part of the API document) |
//! | `error.rs` | the one error type, its kinds and status codes |
//! | `access.rs` | bearer tokens: which routes need one, and the check |

mod access;
mod binary;
mod body;
pub mod codec;
pub mod dashboard;
mod decode;
mod edge;
mod error;
mod front;
pub mod grpc;
mod health;
mod infer;
mod lag;
mod metrics;
mod models;
pub mod openapi;
mod pipelines;
mod regions;
mod relay;
mod repository;
mod server_timing;
mod shed;
mod shm;
mod soon;
mod stats;
mod submit;
mod target;
mod trace;
mod v2;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use actix::Addr;
use actix_web::body::BoxBody;
use actix_web::dev::{ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::{web, App, HttpRequest};
use utoipa_actix_web::service_config::ServiceConfig;
use utoipa_actix_web::AppExt;

pub use access::Access;
pub use binary::HEADER_LENGTH;
pub use error::{status_for, ApiError, ErrorBody};
pub use metrics::Metrics;
pub use models::Models;

use crate::actors::admission::AdmissionTable;
use crate::actors::pipeline_table::{PipelineHost, PipelineTable};
use crate::actors::{Controller, Runtime};
use crate::repository::RepositorySource;
use crate::time::Clock;
use decode::DecodePool;
use edge::FrontTimes;

/// Limits of the API.
#[derive(Clone, Copy, Debug)]
pub struct ApiSettings {
    /// Largest request body accepted; larger ones get `payload_too_large` (413).
    pub max_body_bytes: usize,
    /// Bodies decoded at once: the cores the front end may use for decoding.
    pub decode_threads: usize,
    /// Requests that may wait for a decoder; more are refused at once.
    pub decode_queue: usize,
    /// Send an answer not ready by its deadline late instead of refusing the request then
    /// (`ServerConfig::answer_late`).
    pub answer_late: bool,
    /// gRPC connections served at once (`[server.connections] grpc_max_connections`).
    pub grpc_max_connections: usize,
    /// Calls one gRPC connection carries at once (`[server.connections] grpc_max_streams`).
    pub grpc_max_streams: u32,
    /// Time a new gRPC connection has to send HTTP/2's preface (`[server.connections]
    /// request_head_timeout`).
    pub grpc_preface_within: std::time::Duration,
}

impl Default for ApiSettings {
    fn default() -> Self {
        Self {
            max_body_bytes: 32 << 20,
            decode_threads: crate::config::ServerConfig::default().decoders(),
            decode_queue: 256,
            answer_late: false,
            grpc_max_connections: crate::config::ConnectionConfig::default().grpc_max_connections,
            grpc_max_streams: crate::config::ConnectionConfig::default().grpc_max_streams,
            grpc_preface_within: crate::config::ConnectionConfig::default().request_head_timeout,
        }
    }
}

/// What every handler can reach; cheap to clone (one per HTTP worker).
#[derive(Clone)]
pub struct ApiState {
    pub controller: Addr<Controller>,
    pub models: Arc<Models>,
    pub metrics: Arc<Metrics>,
    pub settings: ApiSettings,
    /// The runtime's clock: requests' arrivals and the front end's durations.
    pub clock: Clock,
    /// The controller's per-model views, to refuse requests before reading them.
    pub admission: Arc<AdmissionTable>,
    /// The front end's learned durations per model and phase.
    pub front: Arc<FrontTimes>,
    /// Where bodies are decoded.
    pub decoders: Arc<DecodePool>,
    /// Where models registered through the repository routes come from.
    pub repository: Option<RepositorySource>,
    /// Who may call the guarded routes (see `access.rs`); open unless set with
    /// [`ApiState::with_access`].
    pub access: Arc<Access>,
    /// The pipelines served (their routes are the models' routes).
    pub pipelines: PipelineTable,
    /// What serving a pipeline loaded through the repository routes needs.
    pub pipeline_host: PipelineHost,
    /// The live dashboard's snapshot and event source.
    pub dashboard: dashboard::Dashboard,
    /// Shared-memory regions clients registered to place tensors in (`regions.rs`).
    pub regions: Arc<regions::Regions>,
    /// Repository models that could not be registered, with the reason.
    refused: Arc<Mutex<BTreeMap<String, String>>>,
    /// Held while a model is registered (one at a time).
    registering: Arc<tokio::sync::Mutex<()>>,
    /// The OpenAPI document, serialised once.
    openapi: web::Bytes,
}

impl ApiState {
    /// The API of a running runtime; starts the task that turns its events into metrics
    /// (every event since the runtime started), so it must be called inside the actix
    /// system that serves. The metrics and the model
    /// table watch the runtime's registry, metrics first: a request the table admits finds
    /// its series.
    pub fn new(runtime: &Runtime, settings: ApiSettings) -> anyhow::Result<Self> {
        let metrics = Arc::new(Metrics::new(&[])?);
        let series = Arc::clone(&metrics);
        runtime.table.watch(move |m| series.add_model(&m.spec));
        metrics::collect(Arc::clone(&metrics), runtime.events_from_start());
        trace::start(&runtime.events);
        let dashboard = dashboard::Dashboard::start(runtime, Arc::clone(&metrics));
        let openapi = openapi::document().to_json()?;
        Ok(Self {
            controller: runtime.controller.clone(),
            models: Models::watching(&runtime.table),
            metrics,
            settings,
            clock: runtime.clock,
            admission: Arc::clone(&runtime.admission),
            front: Arc::default(),
            decoders: Arc::new(DecodePool::new(
                settings.decode_threads,
                settings.decode_queue,
            )),
            repository: runtime.repository.clone(),
            access: Arc::new(Access::open()),
            pipelines: runtime.pipelines.clone(),
            pipeline_host: runtime.pipeline_host.clone(),
            dashboard,
            regions: Arc::default(),
            refused: Arc::new(Mutex::new(runtime.refused.iter().cloned().collect())),
            registering: Arc::default(),
            openapi: web::Bytes::from(openapi),
        })
    }

    /// The same API with its guarded routes needing `access`'s tokens.
    pub fn with_access(mut self, access: Access) -> Self {
        self.access = Arc::new(access);
        self
    }

    /// Records why a repository model was refused (an empty reason clears it).
    fn note_refused(&self, name: &str, reason: String) {
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        if reason.is_empty() {
            refused.remove(name);
        } else {
            refused.insert(name.to_owned(), reason);
        }
    }

    /// Models of the repository on disk that are not registered, with the reason (a
    /// refusal, or not loaded yet).
    fn unregistered(&self) -> Vec<(String, String)> {
        let Some(source) = &self.repository else {
            return Vec::new();
        };
        let refused = self
            .refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let names = source.repository.names().unwrap_or_default();
        names
            .into_iter()
            .filter(|name| !self.models.contains(name) && self.pipelines.get(name).is_none())
            .map(|name| {
                let reason = refused.get(&name).cloned().unwrap_or_else(|| {
                    let unloaded = self.pipelines.is_unloaded(&name);
                    if unloaded { "unloaded" } else { "not loaded" }.to_owned()
                });
                (name, reason)
            })
            .collect()
    }
}

/// Mounts every route; the OpenAPI document is collected from these same calls.
///
/// The inference routes come first: actix-web tries the routes in this order, each with a
/// path parameter by a regular expression (and the access guard resolves the route once
/// more, the same way), so every route before them cost each inference request a regex
/// match (a third of the HTTP worker's time in `bench/http.rs` before they moved here).
/// No two routes match the same path, so the order changes nothing else.
pub fn services(config: &mut ServiceConfig) {
    config
        .service(infer::infer)
        .service(infer::version_infer)
        // Before the model routes: `/v2/models/{model}` would take `/v2/models/stats`.
        .service(stats::every_model)
        .service(stats::one_model)
        .service(stats::one_version)
        .service(health::live)
        .service(health::ready)
        .service(health::server_metadata)
        .service(models::metadata)
        .service(models::version_metadata)
        .service(models::ready)
        .service(models::version_ready)
        .service(models::config)
        .service(models::version_config)
        .service(repository::index)
        .service(repository::load)
        .service(repository::unload)
        .service(shm::status)
        .service(shm::region_status)
        .service(shm::register)
        .service(shm::unregister_all)
        .service(shm::unregister)
        .service(metrics::prometheus_text)
        .service(openapi::openapi_json);
}

/// The application of one HTTP worker.
pub fn app(
    state: ApiState,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<BoxBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    // Called on each worker's thread as it starts: the worker measures its own lag.
    lag::start_probe();
    // And hands answers from other threads to its requests from its own (`relay.rs`).
    relay::start();
    let clock = state.clock;
    let access = Arc::clone(&state.access);
    let metrics = Arc::clone(&state.metrics);
    let (app, _) = App::new()
        .into_utoipa_app()
        .app_data(web::Data::new(state))
        .configure(services)
        .split_for_parts();
    app.configure(dashboard::routes)
        .default_service(web::to(not_found))
        .wrap_fn(move |request, service| access::guard(&access, &metrics, request, service))
        .wrap_fn(move |request, service| edge::stamp(clock, request, service))
}

/// Any other path: a JSON 404 like every other error.
async fn not_found(request: HttpRequest) -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::NotFound {
        method: request.method().to_string(),
        path: request.path().to_owned(),
    })
}
