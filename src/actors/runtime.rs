//! Building and stopping the actor system.

use actix::prelude::*;

use super::messages::{Drain, RegisterArtifact};
use super::{Controller, ControllerParts, Executor, ExecutorLinks, ModelCache};
use crate::config::{BackendKind, Config, PolicyConfig};
use crate::events::EventBus;
use crate::gpu::profiles;
use crate::gpu::sim::{SimDevice, SimSettings};
use crate::gpu::Backend;
use crate::model::{ModelId, ModelSpec};
use crate::scheduler::{self, DeviceInfo, ModelInfo};
use crate::time::{nanos, Clock};

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
    #[error("model '{name}' needs {pages} pages, more than any device has ({largest})")]
    ModelTooLarge {
        name: String,
        pages: u32,
        largest: u32,
    },
    #[error("duplicate model name '{0}'")]
    DuplicateModel(String),
    #[error("no devices configured")]
    NoDevices,
    #[error(transparent)]
    UnknownPolicy(#[from] scheduler::UnknownPolicy),
}

/// Collects models and devices, then starts the actors.
pub struct RuntimeBuilder {
    clock: Clock,
    policy: PolicyConfig,
    models: Vec<ModelSpec>,
    devices: Vec<Box<dyn Backend>>,
    placement: Placement,
}

/// Handles on a running actor system.
pub struct Runtime {
    pub clock: Clock,
    pub controller: Addr<Controller>,
    pub cache: Addr<ModelCache>,
    pub executors: Vec<Addr<Executor>>,
    pub events: EventBus,
    pub models: Vec<ModelSpec>,
    arbiters: Vec<Arbiter>,
}

impl RuntimeBuilder {
    pub fn new(clock: Clock, policy: PolicyConfig) -> Self {
        Self {
            clock,
            policy,
            models: Vec::new(),
            devices: Vec::new(),
            placement: Placement::CurrentThread,
        }
    }

    /// Models and devices as the configuration file describes them.
    pub fn from_config(clock: Clock, config: &Config) -> Result<Self, StartError> {
        let mut builder = Self::new(clock, config.policy.clone());
        for group in &config.devices {
            let profile = profiles::device(&group.profile)
                .ok_or_else(|| StartError::UnknownDeviceProfile(group.profile.clone()))?;
            for i in 0..group.count {
                let backend: Box<dyn Backend> = match group.backend {
                    BackendKind::Sim => {
                        let mut emulation = group.sim.clone();
                        emulation.seed = emulation.seed.wrapping_add(u64::from(i));
                        let settings = SimSettings {
                            profile: profile.clone(),
                            pages: group.pages,
                            emulation,
                        };
                        Box::new(SimDevice::new(clock, settings))
                    }
                };
                builder = builder.device(backend);
            }
        }
        for model in &config.models {
            let slo = nanos(model.slo.unwrap_or(config.policy.default_slo));
            for copy in 0..model.copies {
                let name = if model.copies == 1 {
                    model.name.clone()
                } else {
                    format!("{}-{copy}", model.name)
                };
                let spec = profiles::model(&model.profile, &name, slo)
                    .ok_or_else(|| StartError::UnknownModelProfile(model.profile.clone()))?;
                builder = builder.model(spec);
            }
        }
        Ok(builder)
    }

    pub fn model(mut self, spec: ModelSpec) -> Self {
        self.models.push(spec);
        self
    }

    pub fn device(mut self, backend: Box<dyn Backend>) -> Self {
        self.devices.push(backend);
        self
    }

    pub fn placement(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    fn check(&self) -> Result<(), StartError> {
        let largest = self
            .devices
            .iter()
            .map(|d| d.info().pages)
            .max()
            .ok_or(StartError::NoDevices)?;
        let mut names = std::collections::HashSet::new();
        for spec in &self.models {
            if !names.insert(spec.name.as_str()) {
                return Err(StartError::DuplicateModel(spec.name.clone()));
            }
            let pages = spec.profile.pages(self.policy.page_bytes);
            if pages > largest {
                let name = spec.name.clone();
                return Err(StartError::ModelTooLarge {
                    name,
                    pages,
                    largest,
                });
            }
        }
        Ok(())
    }

    /// Starts the actors; must be called from inside an actix system.
    pub fn start(self) -> Result<Runtime, StartError> {
        self.check()?;
        let events = EventBus::default();
        let mut policy = scheduler::build(&self.policy.name, &self.policy)?;
        let mut cache = ModelCache::default();
        for spec in &self.models {
            let pages = spec.profile.pages(self.policy.page_bytes);
            let id = cache.register(RegisterArtifact {
                spec: spec.clone(),
                bytes: None,
            });
            let policy_id = policy.add_model(ModelInfo {
                pages,
                profile: spec.profile.clone(),
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
        let parts = ControllerParts {
            clock,
            policy,
            models: self.models.clone(),
            executors: executors.iter().map(|e| e.clone().recipient()).collect(),
            emulated,
            events: events.clone(),
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
            models: self.models,
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
