//! Building and stopping the actor system.

use std::sync::Arc;

use actix::prelude::*;

use super::eligibility::{eligible_devices, DeviceFacts, IneligibleModel, ModelFacts};
use super::messages::{Drain, RegisterArtifact};
use super::{Controller, ControllerParts, ControllerSettings, Executor, ExecutorLinks, ModelCache};
use crate::config::{BackendKind, PolicyConfig};
use crate::events::EventBus;
use crate::gpu::profiles;
use crate::gpu::Backend;
use crate::model::{ModelId, ModelSpec};
use crate::repository::{Registration, RepositoryError, RepositorySource};
use crate::scheduler::{self, DeviceInfo, ModelInfo};
use crate::time::Clock;

/// Where the actors run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// All on the current arbiter: required under a paused (virtual) clock.
    CurrentThread,
    /// The controller (with the model cache) on an arbiter thread of its own, and each
    /// executor on another: for serving in real time.
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
    #[error(transparent)]
    UnknownPolicy(#[from] scheduler::UnknownPolicy),
}

/// A model to register: its description, its graph if it has one, and the backends its
/// configuration allows.
pub(super) struct ModelEntry {
    pub spec: ModelSpec,
    pub bytes: Option<Arc<[u8]>>,
    pub backends: Option<Vec<BackendKind>>,
}

/// Collects models and devices, then starts the actors.
pub struct RuntimeBuilder {
    pub(super) clock: Clock,
    pub(super) policy: PolicyConfig,
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
}

/// Handles on a running actor system.
pub struct Runtime {
    pub clock: Clock,
    pub controller: Addr<Controller>,
    pub cache: Addr<ModelCache>,
    pub executors: Vec<Addr<Executor>>,
    pub events: EventBus,
    /// Models registered at start, indexed by id (more may be registered later).
    pub models: Vec<ModelSpec>,
    /// Repository models refused at start: (name, reason).
    pub refused: Vec<(String, String)>,
    /// Where models registered on demand come from.
    pub repository: Option<RepositorySource>,
    arbiters: Vec<Arbiter>,
}

impl RuntimeBuilder {
    pub fn new(clock: Clock, policy: PolicyConfig) -> Self {
        Self {
            clock,
            policy,
            models: Vec::new(),
            devices: Vec::new(),
            backends: Vec::new(),
            placement: Placement::CurrentThread,
            refused: Vec::new(),
            repository: None,
            settings: ControllerSettings::default(),
        }
    }

    /// A model described by a spec only (built-in profiles, tests): emulated devices and
    /// custom backends serve it.
    pub fn model(mut self, spec: ModelSpec) -> Self {
        self.models.push(ModelEntry {
            spec,
            bytes: None,
            backends: None,
        });
        self
    }

    /// A model of the repository, with its graph.
    pub fn registered(mut self, registration: Registration) -> Self {
        self.models.push(ModelEntry {
            spec: registration.spec,
            bytes: Some(registration.bytes),
            backends: registration.backends,
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

    pub fn placement(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    /// What registration knows of each device.
    pub(super) fn device_facts(&self) -> Vec<DeviceFacts> {
        self.devices
            .iter()
            .zip(&self.backends)
            .map(|(d, &backend)| DeviceFacts {
                backend,
                pages: d.info().pages,
            })
            .collect()
    }

    /// The devices each model may use; refuses duplicates and models no device can hold.
    fn check(&self) -> Result<Vec<Option<Vec<crate::model::DeviceId>>>, StartError> {
        if self.devices.is_empty() {
            return Err(StartError::NoDevices);
        }
        let facts = self.device_facts();
        let mut names = std::collections::HashSet::new();
        let mut allowed = Vec::with_capacity(self.models.len());
        for entry in &self.models {
            let spec = &entry.spec;
            if !names.insert(spec.name.as_str()) {
                return Err(StartError::DuplicateModel(spec.name.clone()));
            }
            let model = ModelFacts::new(
                spec,
                self.policy.page_bytes,
                entry.bytes.is_some(),
                entry.backends.as_deref(),
            );
            allowed.push(eligible_devices(model, &facts)?);
        }
        Ok(allowed)
    }

    /// Starts the actors; must be called from inside an actix system.
    pub fn start(self) -> Result<Runtime, StartError> {
        let allowed = self.check()?;
        let device_facts = self.device_facts();
        let events = EventBus::default();
        let mut policy = scheduler::build(&self.policy.name, &self.policy)?;
        let mut cache = ModelCache::default();
        for (entry, devices) in self.models.iter().zip(allowed) {
            let spec = &entry.spec;
            let pages = spec.profile.pages(self.policy.page_bytes);
            let id = cache.register(RegisterArtifact {
                spec: spec.clone(),
                bytes: entry.bytes.clone(),
            });
            let policy_id = policy.add_model(ModelInfo {
                pages,
                profile: spec.profile.clone(),
                devices,
            });
            debug_assert_eq!(id, policy_id);
        }
        let mut emulated = Vec::new();
        for backend in &self.devices {
            let info = backend.info();
            emulated.push(info.emulated);
            policy.add_device(DeviceInfo {
                kind: info.kind,
                pages: info.pages,
            });
        }
        let mut arbiters = Vec::new();
        let home = match self.placement {
            Placement::CurrentThread => Arbiter::current(),
            Placement::Threads => {
                let arbiter = Arbiter::new();
                let handle = arbiter.handle();
                arbiters.push(arbiter);
                handle
            }
        };
        let cache = ModelCache::start_in_arbiter(&home, move |_| cache);
        let clock = self.clock;
        // The controller needs the executors and the executors need the controller: the
        // controller's address exists before it starts, so create it first.
        let (controller_tx, controller_rx) = actix::dev::channel::channel(super::MAILBOX);
        let controller_addr: Addr<Controller> = Addr::new(controller_tx);
        let mut executors = Vec::new();
        for (i, backend) in self.devices.into_iter().enumerate() {
            let links = ExecutorLinks {
                reports: controller_addr.clone().recipient(),
                artifacts: cache.clone().recipient(),
            };
            let device = crate::model::DeviceId(i as u32);
            let page_bytes = self.policy.page_bytes;
            let make = move |_: &mut Context<Executor>| {
                Executor::new(device, clock, backend, page_bytes, links)
            };
            let addr = match self.placement {
                Placement::CurrentThread => Executor::start_in_arbiter(&home, make),
                Placement::Threads => {
                    let arbiter = Arbiter::new();
                    let addr = Executor::start_in_arbiter(&arbiter.handle(), make);
                    arbiters.push(arbiter);
                    addr
                }
            };
            executors.push(addr);
        }
        let specs: Vec<ModelSpec> = self.models.into_iter().map(|e| e.spec).collect();
        let parts = ControllerParts {
            clock,
            policy,
            models: specs.clone(),
            devices: device_facts,
            page_bytes: self.policy.page_bytes,
            cache: cache.clone().recipient(),
            executors: executors.iter().map(|e| e.clone().recipient()).collect(),
            emulated,
            events: events.clone(),
            settings: self.settings,
        };
        let controller = Controller::new(parts);
        home.spawn(async move {
            let ctx = Context::with_receiver(controller_rx);
            ctx.run(controller);
        });
        Ok(Runtime {
            clock,
            controller: controller_addr,
            cache,
            executors,
            events,
            models: specs,
            refused: self.refused,
            repository: self.repository,
            arbiters,
        })
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

    /// Id of a model by name.
    pub fn model_id(&self, name: &str) -> Option<ModelId> {
        self.models
            .iter()
            .position(|m| m.name == name)
            .map(|i| ModelId(i as u32))
    }
}
