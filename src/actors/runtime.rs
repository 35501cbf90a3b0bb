//! Building and stopping the actor system.

use std::sync::{Arc, Mutex, PoisonError};

use actix::prelude::*;

use super::admission::AdmissionTable;
use super::eligibility::{DeviceFacts, IneligibleModel};
use super::messages::RegisterError;
use super::messages::{Drain, RegisterArtifact};
use super::pipeline_table::{PipelineHost, PipelineTable};
use super::registry::{Candidate, Catalog, ModelTable, Registry};
use super::{Controller, ControllerParts, ControllerSettings, Executor, ExecutorLinks, ModelCache};
use crate::config::{BackendKind, PolicyConfig, RuntimeConfig};
use crate::cores::CorePlan;
use crate::events::{Event, EventBus};
use crate::gpu::profiles;
use crate::gpu::Backend;
use crate::model::{ModelId, ModelSpec};
use crate::pipeline::PipelineDecl;
use crate::repository::{Registration, RepositoryError, RepositorySource};
use crate::scheduler::{self, DeviceInfo, Policy};
use crate::time::Clock;

/// Where the actors run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// All on the current arbiter: required under a paused (virtual) clock.
    CurrentThread,
    /// The controller (with the model cache) on an arbiter thread of its own, and each
    /// executor on another (on its device's core, if the device has one): for serving in
    /// real time.
    Threads,
}

/// Why the runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("unknown device profile '{0}' (built-in: {known})", known = profiles::DEVICES.join(", "))]
    UnknownDeviceProfile(String),
    #[error("unknown model profile '{0}' (built-in: {known})", known = profiles::MODELS.join(", "))]
    UnknownModelProfile(String),
    #[error(transparent)]
    Ineligible(#[from] IneligibleModel),
    #[error("duplicate model name '{0}'")]
    DuplicateModel(String),
    #[error("no devices configured")]
    NoDevices,
    #[error("cannot start device {name}: {message}")]
    Device { name: String, message: String },
    #[error(transparent)]
    Repository(#[from] RepositoryError),
    #[error("registry: {0}")]
    Registry(String),
}

impl From<RegisterError> for StartError {
    fn from(error: RegisterError) -> Self {
        match error {
            RegisterError::Duplicate(name) => StartError::DuplicateModel(name),
            RegisterError::Ineligible(why) => StartError::Ineligible(why),
            out_of_step => StartError::Registry(out_of_step.to_string()),
        }
    }
}

/// A model to register at start.
pub(super) struct ModelEntry {
    pub candidate: Candidate,
    /// A repository model that cannot be served is refused alone (the runtime starts
    /// without it); any other model that cannot be served stops the start.
    pub refusable: bool,
    /// Why ONNX Runtime refused the model at registration, if it did: said with a
    /// refusal for want of a device (where `auto` chose ONNX Runtime, no tract device is
    /// left to serve it).
    pub ort_refused: Option<String>,
}

/// Collects models and devices, then starts the actors.
pub struct RuntimeBuilder {
    pub(super) clock: Clock,
    pub(super) policy: PolicyConfig,
    pub(super) runtime: RuntimeConfig,
    pub(super) models: Vec<ModelEntry>,
    pub(super) devices: Vec<Box<dyn Backend>>,
    /// The configured backend of each device (`None`: added in code).
    pub(super) backends: Vec<Option<BackendKind>>,
    pub(super) placement: Placement,
    /// Repository models refused at start, with the reason.
    pub(super) refused: Vec<(String, String)>,
    pub(super) repository: Option<RepositorySource>,
    /// The controller's watchdog and shutdown limits.
    pub(super) settings: ControllerSettings,
    /// Which cores devices and front end run on (`from_config` with cpu devices); the
    /// arbiters of `Placement::Threads` are pinned to the front end's.
    pub(super) cores: Option<CorePlan>,
    /// Pipelines to serve, validated once the models are registered.
    pub(super) pipelines: Vec<(String, PipelineDecl)>,
    /// Remote workers' devices may join while serving: start without devices, and keep
    /// models no device holds yet.
    pub(super) open: bool,
}

/// Handles on a running actor system.
pub struct Runtime {
    pub clock: Clock,
    pub controller: Addr<Controller>,
    pub cache: Addr<ModelCache>,
    pub executors: Vec<Addr<Executor>>,
    pub events: EventBus,
    /// What the controller publishes for the HTTP front end to refuse requests early.
    pub admission: Arc<AdmissionTable>,
    /// Models registered at start, indexed by id (more may be registered later: see
    /// `table`).
    pub models: Vec<ModelSpec>,
    /// Every registered model, growing as models are registered while serving; the API
    /// watches it.
    pub table: ModelTable,
    /// Repository models refused at start: (name, reason).
    pub refused: Vec<(String, String)>,
    /// Where models registered on demand come from.
    pub repository: Option<RepositorySource>,
    /// Which cores devices and front end run on, if the configuration had cpu devices:
    /// `serve` sizes and pins its HTTP workers by it.
    pub cores: Option<CorePlan>,
    /// The pipelines served; the API reads it, repository loads add to it.
    pub pipelines: PipelineTable,
    /// What serving another pipeline needs (a repository load).
    pub pipeline_host: PipelineHost,
    /// Subscribed before the controller started, for the first who asks
    /// ([`Runtime::events_from_start`]: the API's metrics, the simulator's recorder): what
    /// happens while the models load at start (a device taken out, a LOAD that failed)
    /// comes before any API exists to count it. Until taken it holds at most the bus's
    /// backlog.
    from_start: Mutex<Option<tokio::sync::broadcast::Receiver<Event>>>,
    arbiters: Vec<Arbiter>,
}

impl RuntimeBuilder {
    pub fn new(clock: Clock, policy: PolicyConfig) -> Self {
        Self {
            clock,
            policy,
            runtime: RuntimeConfig::default(),
            models: Vec::new(),
            devices: Vec::new(),
            backends: Vec::new(),
            placement: Placement::CurrentThread,
            refused: Vec::new(),
            repository: None,
            settings: ControllerSettings::default(),
            cores: None,
            pipelines: Vec::new(),
            open: false,
        }
    }

    /// Devices may join while serving (remote workers, `[cluster] listen`): the runtime may
    /// start with none, and a model no device may hold yet waits for one.
    pub fn open_to_workers(mut self) -> Self {
        self.open = true;
        self
    }

    /// A pipeline to serve once the models are registered; one that does not fit them
    /// is refused alone (in `Runtime::refused`).
    pub fn pipeline(mut self, name: &str, decl: PipelineDecl) -> Self {
        self.pipelines.push((name.to_owned(), decl));
        self
    }

    /// A model described by a spec only (built-in profiles, tests): emulated devices and
    /// custom backends serve it.
    pub fn model(mut self, spec: ModelSpec) -> Self {
        self.models.push(ModelEntry {
            candidate: Candidate::spec_only(spec),
            refusable: false,
            ort_refused: None,
        });
        self
    }

    /// A model of the repository, with its graph; if it cannot be served, the runtime
    /// starts without it and lists it in `Runtime::refused`.
    pub fn registered(mut self, registration: Registration) -> Self {
        self.models.push(ModelEntry {
            candidate: Candidate {
                profiles: registration.kind_profiles(),
                spec: registration.spec,
                bytes: Some(registration.bytes),
                prepared: registration.prepared,
                backends: registration.backends,
            },
            refusable: true,
            ort_refused: registration.ort_refused,
        });
        self
    }

    /// The controller's watchdog and shutdown limits.
    pub fn controller_settings(mut self, settings: ControllerSettings) -> Self {
        self.settings = settings;
        self
    }

    /// A device added in code (a custom backend).
    pub fn device(self, backend: Box<dyn Backend>) -> Self {
        self.configured_device(None, backend)
    }

    pub(super) fn configured_device(
        mut self,
        kind: Option<BackendKind>,
        backend: Box<dyn Backend>,
    ) -> Self {
        self.devices.push(backend);
        self.backends.push(kind);
        self
    }

    /// Where models registered on demand (repository load) come from.
    pub fn repository(mut self, source: RepositorySource) -> Self {
        self.repository = Some(source);
        self
    }

    /// Page size and default objective (defaults: [`RuntimeConfig::default`]).
    pub fn runtime(mut self, runtime: RuntimeConfig) -> Self {
        self.runtime = runtime;
        self
    }

    pub fn placement(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    /// What registration knows of each device.
    fn device_facts(&self) -> Vec<DeviceFacts> {
        self.devices
            .iter()
            .zip(&self.backends)
            .map(|(d, &backend)| DeviceFacts::new(backend, &d.info()))
            .collect()
    }

    /// Starts the actors; must be called from inside an actix system.
    pub fn start(mut self) -> Result<Runtime, StartError> {
        if self.devices.is_empty() && !self.open {
            return Err(StartError::NoDevices);
        }
        let (mut policy, emulated) = self.policy_with_devices();
        // The cache's address exists before it starts, so registration can tell it before
        // anything runs; nothing is started if registration fails.
        let (cache_tx, cache_rx) = actix::dev::channel::channel(super::MAILBOX);
        let cache: Addr<ModelCache> = Addr::new(cache_tx);
        let table = ModelTable::default();
        let registry = self.register_models(policy.as_mut(), cache.clone(), &table)?;
        let mut arbiters = Vec::new();
        let home = match self.placement {
            Placement::CurrentThread => Arbiter::current(),
            Placement::Threads => {
                let arbiter = self.front_end_arbiter(0, "controller");
                let handle = arbiter.handle();
                arbiters.push(arbiter);
                handle
            }
        };
        home.spawn(async move {
            Context::with_receiver(cache_rx).run(ModelCache::default());
        });
        let clock = self.clock;
        // The controller needs the executors and the executors need the controller: the
        // controller's address exists before it starts, so create it first.
        let (controller_tx, controller_rx) = actix::dev::channel::channel(super::MAILBOX);
        let controller_addr: Addr<Controller> = Addr::new(controller_tx);
        let executors = self.start_executors(&controller_addr, &cache, &home, &mut arbiters);
        let parts = ControllerParts {
            clock,
            policy,
            registry,
            executors: executors.iter().map(|e| e.clone().recipient()).collect(),
            emulated,
            events: EventBus::default(),
            settings: self.settings,
            admission: Arc::default(),
        };
        let events = parts.events.clone();
        let from_start = Mutex::new(Some(events.subscribe()));
        let admission = Arc::clone(&parts.admission);
        let controller = Controller::new(parts);
        home.spawn(async move {
            Context::with_receiver(controller_rx).run(controller);
        });
        let pipeline_host = PipelineHost {
            models: table.clone(),
            controller: controller_addr.clone(),
            clock,
            events: events.clone(),
            arbiter: home.clone(),
            table: PipelineTable::default(),
            admission: Arc::clone(&admission),
        };
        self.serve_pipelines(&pipeline_host);
        Ok(Runtime {
            clock,
            controller: controller_addr,
            cache,
            executors,
            events,
            admission,
            models: table.models().iter().map(|m| m.spec.clone()).collect(),
            table,
            refused: self.refused,
            repository: self.repository,
            cores: self.cores,
            pipelines: pipeline_host.table.clone(),
            pipeline_host,
            from_start,
            arbiters,
        })
    }

    /// The configured policy with every device added, and which devices only emulate.
    fn policy_with_devices(&self) -> (Box<dyn Policy + Send>, Vec<bool>) {
        let mut policy = scheduler::build(&self.policy);
        let mut emulated = Vec::new();
        for backend in &self.devices {
            let info = backend.info();
            emulated.push(info.emulated);
            policy.add_device(DeviceInfo {
                kind: info.kind,
                pages: info.pages,
            });
        }
        (policy, emulated)
    }

    /// Serves the pipelines read from the repository, each validated against the models
    /// just registered; a broken one is refused alone, with its reason.
    fn serve_pipelines(&mut self, host: &PipelineHost) {
        for (name, decl) in std::mem::take(&mut self.pipelines) {
            if let Err(error) = host.serve(&name, &decl) {
                tracing::error!(pipeline = %name, %error, "pipeline refused");
                self.refused.push((name, error.to_string()));
            }
        }
    }

    /// A new arbiter thread, pinned to the `i`-th front-end core (round robin) if the
    /// front end has cores of its own: it must not run on a device's core.
    fn front_end_arbiter(&self, i: usize, what: &'static str) -> Arbiter {
        arbiter_on(
            self.cores.as_ref().and_then(|plan| plan.front_core(i)),
            what,
        )
    }

    /// Registers every model through one registry; a repository model that cannot be
    /// served is refused alone, any other stops the start.
    fn register_models(
        &mut self,
        policy: &mut dyn Policy,
        cache: Addr<ModelCache>,
        table: &ModelTable,
    ) -> Result<Registry, StartError> {
        let mut catalog = Catalog::new(self.device_facts(), self.runtime.page_bytes);
        if self.open {
            catalog = catalog.open_to_workers();
        }
        let sink = Box::new(move |artifact: RegisterArtifact| cache.do_send(artifact));
        let mut registry = Registry::new(catalog, sink, table.clone());
        for entry in std::mem::take(&mut self.models) {
            let name = entry.candidate.spec.name.clone();
            match registry.register(policy, entry.candidate) {
                Ok(_) => {}
                Err(error @ (RegisterError::Duplicate(_) | RegisterError::Ineligible(_)))
                    if entry.refusable =>
                {
                    let error = refusal(&error, entry.ort_refused.as_deref());
                    tracing::error!(model = %name, %error, "model refused");
                    self.refused.push((name, error));
                }
                Err(error) => return Err(error.into()),
            }
        }
        Ok(registry)
    }

    /// Starts one executor per device, on `home` or on threads of their own.
    fn start_executors(
        &mut self,
        controller: &Addr<Controller>,
        cache: &Addr<ModelCache>,
        home: &ArbiterHandle,
        arbiters: &mut Vec<Arbiter>,
    ) -> Vec<Addr<Executor>> {
        let mut executors = Vec::new();
        for (i, backend) in std::mem::take(&mut self.devices).into_iter().enumerate() {
            let links = ExecutorLinks {
                reports: controller.clone().recipient(),
                artifacts: cache.clone().recipient(),
            };
            let device = crate::model::DeviceId(i as u32);
            let core = backend.core();
            let (clock, page_bytes) = (self.clock, self.runtime.page_bytes);
            let make = move |_: &mut Context<Executor>| {
                Executor::new(device, clock, backend, page_bytes, links)
            };
            let addr = match self.placement {
                Placement::CurrentThread => Executor::start_in_arbiter(home, make),
                Placement::Threads => {
                    // A device with a core of its own has its executor there: the executor
                    // hands the device its next action the moment one ends, and on the
                    // front end's core, busy with HTTP under load, it waited for its turn
                    // while the device idled between short batches (docs/EXPERIMENTS.md,
                    // "The executor on its device's core"). It runs while the device
                    // waits for work, and briefly on a message or timer.
                    let arbiter = match core {
                        Some(core) => arbiter_on(Some(core), "executor"),
                        None => self.front_end_arbiter(i + 1, "executor"),
                    };
                    let addr = Executor::start_in_arbiter(&arbiter.handle(), make);
                    arbiters.push(arbiter);
                    addr
                }
            };
            executors.push(addr);
        }
        executors
    }
}

impl Runtime {
    /// Stops admitting, waits until every admitted request is answered, then stops the
    /// actors' threads.
    pub async fn shutdown(self) {
        // A mailbox error means the controller is already gone: nothing left to drain.
        let _ = self.controller.send(Drain).await;
        for arbiter in &self.arbiters {
            arbiter.stop();
        }
    }

    /// Every event since the runtime started, to the first caller (the metrics: a device
    /// out since the start is counted out, and its coming back then leaves the gauge at
    /// 0, not -1); later callers get the events from now on.
    pub fn events_from_start(&self) -> tokio::sync::broadcast::Receiver<Event> {
        let first = self
            .from_start
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        first.unwrap_or_else(|| self.events.subscribe())
    }

    /// Id of a model by name.
    pub fn model_id(&self, name: &str) -> Option<ModelId> {
        self.models
            .iter()
            .position(|m| m.name == name)
            .map(|i| ModelId(i as u32))
    }
}

/// A new arbiter thread named `what` (so that a profile or `top -H` tells the threads
/// apart), pinned to `core` if given.
fn arbiter_on(core: Option<crate::cores::Core>, what: &'static str) -> Arbiter {
    let arbiter = Arbiter::new();
    arbiter.spawn_fn(move || crate::cores::enter(core, what));
    arbiter
}

/// Why a repository model is refused, said so that its user can fix it: a model ONNX
/// Runtime refused that no device can serve needs a tract device.
fn refusal(error: &RegisterError, ort_refused: Option<&str>) -> String {
    match (error, ort_refused) {
        (RegisterError::Ineligible(IneligibleModel::NoDevice { .. }), Some(why)) => format!(
            "{error}; ONNX Runtime refuses it ({why}) and no tract device is configured: add \
             a [[devices]] group with backend = \"cpu\" to serve it"
        ),
        _ => error.to_string(),
    }
}
