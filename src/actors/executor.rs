//! The executor actor: one per device.
//!
//! It drives the executor core (`crate::protocol::core`), which holds the rules: two lanes,
//! exec (INFER) and load (LOAD, UNLOAD), each released in `earliest` order and running one
//! action at a time, so a weight transfer overlaps an execution; refusal of what cannot
//! start by its `latest`; weight pages; residency. The actor reads the clock, arms a timer
//! for a lane's next `earliest`, fetches the model's artifact for a LOAD, runs the work on
//! the backend and reports every action, with what was measured, to the controller.
//!
//! The executor holds no policy: it does exactly what it is told, when it is told. The
//! one thing it fills in is a probe's work (`ActionKind::Probe`, `ProbeWork`): the model
//! the controller names run if resident, else loaded, run and unloaded again, else
//! whichever is resident (the lowest id), which only its core knows for certain.

use std::sync::Arc;

use actix::prelude::*;

use super::health::PROBE_MODEL;
use super::messages::{ActionReport, Execute, ExecutorSnapshot, FetchArtifact, SnapshotExecutor};
use crate::gpu::{
    Backend, BackendFuture, BackendInfo, BatchOutputs, DeviceError, Executed, InferJob,
    ModelArtifact,
};
use crate::model::{DeviceId, ModelId};
use crate::protocol::core::{ExecutorCore, Lane, ProbeWork, Step};
use crate::scheduler::{Action, ActionError, ActionKind, Measured};
use crate::tensor::Tensor;
use crate::time::{Clock, Nanos};

/// Where an executor sends reports and fetches artifacts.
pub struct ExecutorLinks {
    /// The controller, which gets one report per action.
    pub reports: Recipient<ActionReport>,
    /// The model cache, which holds what a LOAD copies to the device.
    pub artifacts: Recipient<FetchArtifact>,
}

/// The actor driving one device.
pub struct Executor {
    device: DeviceId,
    clock: Clock,
    backend: Box<dyn Backend>,
    info: BackendInfo,
    page_bytes: u64,
    links: ExecutorLinks,
    core: ExecutorCore<Execute>,
    /// Per lane: the timer armed for the head's `earliest`, (when, handle).
    timers: [Option<(Nanos, SpawnHandle)>; 2],
    completed: u64,
    refused_late: u64,
}

impl Executor {
    pub fn new(
        device: DeviceId,
        clock: Clock,
        backend: Box<dyn Backend>,
        page_bytes: u64,
        links: ExecutorLinks,
    ) -> Self {
        let info = backend.info();
        Self {
            device,
            clock,
            core: ExecutorCore::new(info.pages),
            backend,
            info,
            page_bytes,
            links,
            timers: [None, None],
            completed: 0,
            refused_late: 0,
        }
    }

    /// Starts or refuses what the lane has due, or arms a timer for when it will be.
    fn pump(&mut self, lane: Lane, ctx: &mut Context<Self>) {
        loop {
            let now = self.clock.now();
            match self.core.next(lane, now) {
                Step::Idle => return,
                Step::WaitUntil(at) => return self.arm(lane, at, ctx),
                Step::Refuse(execute, error) => {
                    self.refused_late += u64::from(error == ActionError::TooLate);
                    self.report(&execute.action, Err(error), None);
                }
                Step::Start(execute) => self.start(execute, now, ctx),
            }
        }
    }

    fn arm(&mut self, lane: Lane, at: Nanos, ctx: &mut Context<Self>) {
        let timer = &mut self.timers[lane.index()];
        if let Some((armed, handle)) = *timer {
            if armed <= at {
                return;
            }
            ctx.cancel_future(handle);
        }
        let handle = ctx.run_later(self.clock.until(at), move |act, ctx| {
            act.timers[lane.index()] = None;
            act.pump(lane, ctx);
        });
        *timer = Some((at, handle));
    }

    /// Runs an action the core started.
    fn start(&mut self, execute: Execute, begin: Nanos, ctx: &mut Context<Self>) {
        let action = execute.action;
        match &action.kind {
            ActionKind::Infer { .. } => {
                let job = InferJob {
                    model: action.model,
                    inputs: execute.inputs,
                };
                let work = self.backend.infer(job);
                self.run(action, begin, with_outputs(work), ctx);
            }
            ActionKind::Unload => {
                let work = self.backend.unload(action.model);
                self.run(action, begin, without_outputs(work), ctx);
            }
            ActionKind::Load => {
                let model = action.model;
                self.fetch(model, ctx, move |act, artifact, ctx| {
                    act.load_fetched(action, begin, artifact, ctx);
                });
            }
            ActionKind::Probe => {
                // The controller names the model whose action failed last, if it knows one.
                let named = (action.model != PROBE_MODEL).then_some(action.model);
                self.probe(action, begin, named, ctx);
            }
        }
    }

    /// Runs a probe: the work [`ExecutorCore::probe_work`] picks for the `named` model.
    fn probe(
        &mut self,
        action: Action,
        begin: Nanos,
        named: Option<ModelId>,
        ctx: &mut Context<Self>,
    ) {
        match self.core.probe_work(named) {
            ProbeWork::Run(model) => self.fetch(model, ctx, move |act, artifact, ctx| {
                act.probe_fetched(action, begin, artifact, ctx);
            }),
            ProbeWork::LoadAndRun(model) => self.fetch(model, ctx, move |act, artifact, ctx| {
                act.probe_load(action, begin, artifact, ctx);
            }),
            ProbeWork::Nothing => self.probe_fetched(action, begin, None, ctx),
        }
    }

    /// Asks the model cache for `model`'s artifact, then goes on with `then`.
    fn fetch(
        &mut self,
        model: ModelId,
        ctx: &mut Context<Self>,
        then: impl FnOnce(&mut Self, Option<Arc<ModelArtifact>>, &mut Context<Self>) + 'static,
    ) {
        let fetch = self.links.artifacts.send(FetchArtifact(model));
        let fetched = fetch.into_actor(self).map(move |artifact, act, ctx| {
            then(act, artifact.ok().flatten(), ctx);
        });
        ctx.spawn(fetched);
    }

    /// Second half of a probe: one item of zeros through the resident model whose
    /// artifact came, or without one, an UNLOAD of the probe's model (nothing to unload).
    fn probe_fetched(
        &mut self,
        action: Action,
        begin: Nanos,
        artifact: Option<Arc<ModelArtifact>>,
        ctx: &mut Context<Self>,
    ) {
        let work = match artifact {
            // Its outputs are nobody's.
            Some(artifact) => without_outputs(self.backend.infer(zeros(&artifact))),
            None => without_outputs(self.backend.unload(PROBE_MODEL)),
        };
        self.run(action, begin, work, ctx);
    }

    /// Second half of a probe that loads: reserve the pages, LOAD, run one item of zeros,
    /// UNLOAD, give the pages back, then report (a model failing on the zeros passes, as
    /// in any probe). Without the artifact or the pages, a run of what is resident.
    fn probe_load(
        &mut self,
        action: Action,
        begin: Nanos,
        artifact: Option<Arc<ModelArtifact>>,
        ctx: &mut Context<Self>,
    ) {
        // The policy plans nothing on a device out of service, and the core's pages are
        // the device's truth: a LOAD planned before the device went out finds these
        // pages taken and is refused for want of them, never overcommitted.
        let reserved = artifact.filter(|a| {
            let pages = a.spec.profile.pages(self.page_bytes);
            self.core.reserve(a.id, pages).is_ok()
        });
        let Some(artifact) = reserved else {
            return self.probe(action, begin, None, ctx);
        };
        let (model, job) = (artifact.id, zeros(&artifact));
        let load = self.backend.load(artifact);
        self.then(load, ctx, move |act, loaded, ctx| {
            if let Err(error) = loaded {
                return act.end_probe_load(&action, begin, model, Err(error), ctx);
            }
            let run = act.backend.infer(job);
            act.then(run, ctx, move |act, ran, ctx| {
                let unload = act.backend.unload(model);
                act.then(unload, ctx, move |act, unloaded, ctx| {
                    let result = ran.map(drop).and(unloaded.map(drop));
                    act.end_probe_load(&action, begin, model, result, ctx);
                });
            });
        });
    }

    /// The end of a probe that loaded `model`: its pages are free again.
    fn end_probe_load(
        &mut self,
        action: &Action,
        begin: Nanos,
        model: ModelId,
        result: Result<(), DeviceError>,
        ctx: &mut Context<Self>,
    ) {
        self.core.release(model);
        let end = self.clock.now();
        let measured = result.map_err(action_error).map(|()| Measured {
            begin,
            end,
            duration: end - begin,
        });
        self.finish(action, measured, None, ctx);
    }

    /// Runs backend work (a panic fails it, the executor lives on), then `next`.
    fn then<T: 'static>(
        &mut self,
        work: BackendFuture<T>,
        ctx: &mut Context<Self>,
        next: impl FnOnce(&mut Self, Result<T, DeviceError>, &mut Context<Self>) + 'static,
    ) {
        let done = crate::gpu::fault::catch_panics(work)
            .into_actor(self)
            .map(move |result, act, ctx| next(act, result, ctx));
        ctx.spawn(done);
    }

    /// Second half of a LOAD, once the model cache answered: reserve the pages and copy.
    fn load_fetched(
        &mut self,
        action: Action,
        begin: Nanos,
        artifact: Option<Arc<ModelArtifact>>,
        ctx: &mut Context<Self>,
    ) {
        let Some(artifact) = artifact else {
            let error = ActionError::Device(format!("model {:?} is not registered", action.model));
            return self.finish(&action, Err(error), None, ctx);
        };
        let pages = artifact.spec.profile.pages(self.page_bytes);
        match self.core.reserve(action.model, pages) {
            Ok(()) => {
                let work = self.backend.load(artifact);
                self.run(action, begin, without_outputs(work), ctx);
            }
            Err(error) => self.finish(&action, Err(error), None, ctx),
        }
    }

    /// Runs backend work and finishes the action when it is done.
    fn run(
        &mut self,
        action: Action,
        begin: Nanos,
        work: BackendFuture<Executed<Option<BatchOutputs>>>,
        ctx: &mut Context<Self>,
    ) {
        self.then(work, ctx, move |act, result, ctx| {
            let end = act.clock.now();
            let (measured, outputs) = match result {
                Ok(executed) => {
                    let duration = executed.device_time.unwrap_or(end - begin);
                    (
                        Ok(Measured {
                            begin,
                            end,
                            duration,
                        }),
                        executed.value,
                    )
                }
                Err(error) => (Err(action_error(error)), None),
            };
            act.finish(&action, measured, outputs, ctx);
        });
    }

    fn finish(
        &mut self,
        action: &Action,
        result: Result<Measured, ActionError>,
        outputs: Option<BatchOutputs>,
        ctx: &mut Context<Self>,
    ) {
        self.core.finish(action, result.is_ok());
        self.completed += u64::from(result.is_ok());
        self.report(action, result, outputs);
        self.pump(Lane::of(&action.kind), ctx);
    }

    fn report(
        &self,
        action: &Action,
        result: Result<Measured, ActionError>,
        outputs: Option<BatchOutputs>,
    ) {
        self.links.reports.do_send(ActionReport {
            action: action.id,
            device: self.device,
            result,
            outputs,
        });
    }
}

/// A device's error as the report says it: a crash and a failure of the model on its
/// inputs are told apart from a device's failure, since the controller's health rule and
/// the policy treat them differently.
fn action_error(error: DeviceError) -> ActionError {
    match error {
        DeviceError::Panicked(_) | DeviceError::Gone(_) => ActionError::Crashed(error.to_string()),
        DeviceError::Model(_) | DeviceError::BadInput(_) => ActionError::Model(error.to_string()),
        other => ActionError::Device(other.to_string()),
    }
}

/// One item of zeros for `artifact`'s model: a probe's run.
fn zeros(artifact: &ModelArtifact) -> InferJob {
    let item: Vec<Tensor> = artifact.spec.inputs.iter().map(Tensor::zeros).collect();
    InferJob {
        model: artifact.id,
        inputs: vec![Arc::new(item)],
    }
}

fn with_outputs(
    work: BackendFuture<Executed<BatchOutputs>>,
) -> BackendFuture<Executed<Option<BatchOutputs>>> {
    Box::pin(async move {
        work.await.map(|e| Executed {
            value: Some(e.value),
            device_time: e.device_time,
        })
    })
}

/// Work that answers no outputs, or whose outputs nobody reads (a probe's run).
fn without_outputs<T: 'static>(
    work: BackendFuture<Executed<T>>,
) -> BackendFuture<Executed<Option<BatchOutputs>>> {
    Box::pin(async move {
        work.await.map(|e| Executed {
            value: None,
            device_time: e.device_time,
        })
    })
}

impl Actor for Executor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // A burst of actions must not be throttled by the default mailbox bound (16).
        ctx.set_mailbox_capacity(super::MAILBOX);
    }
}

impl Handler<Execute> for Executor {
    type Result = ();

    fn handle(&mut self, execute: Execute, ctx: &mut Context<Self>) {
        let lane = self.core.submit(execute);
        self.pump(lane, ctx);
    }
}

impl Handler<SnapshotExecutor> for Executor {
    type Result = MessageResult<SnapshotExecutor>;

    fn handle(&mut self, _: SnapshotExecutor, _: &mut Context<Self>) -> Self::Result {
        MessageResult(ExecutorSnapshot {
            device: self.device,
            kind: self.info.kind.clone(),
            pages: self.core.pages(),
            pages_used: self.core.pages_used(),
            resident: self.core.resident().collect(),
            waiting: Lane::ALL.map(|lane| self.core.waiting(lane)),
            busy: Lane::ALL.map(|lane| self.core.busy(lane)),
            completed: self.completed,
            refused_late: self.refused_late,
        })
    }
}
