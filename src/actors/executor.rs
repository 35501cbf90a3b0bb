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
//! one thing it fills in is a probe's model (`ActionKind::Probe`): whichever is resident
//! (the lowest id), which only its core knows for certain.

use std::sync::Arc;

use actix::prelude::*;

use super::messages::{ActionReport, Execute, ExecutorSnapshot, FetchArtifact, SnapshotExecutor};
use crate::gpu::{
    Backend, BackendFuture, BackendInfo, BatchOutputs, DeviceError, Executed, InferJob,
    ModelArtifact,
};
use crate::model::{DeviceId, ModelId};
use crate::protocol::core::{ExecutorCore, Lane, Step};
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
            ActionKind::Probe => match self.core.resident().min() {
                Some(model) => self.fetch(model, ctx, move |act, artifact, ctx| {
                    act.probe_fetched(action, begin, artifact, ctx);
                }),
                None => self.probe_fetched(action, begin, None, ctx),
            },
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
            Some(artifact) => {
                let item: Vec<Tensor> = artifact.spec.inputs.iter().map(Tensor::zeros).collect();
                let job = InferJob {
                    model: artifact.id,
                    inputs: vec![Arc::new(item)],
                };
                // Its outputs are nobody's.
                without_outputs(self.backend.infer(job))
            }
            None => without_outputs(self.backend.unload(action.model)),
        };
        self.run(action, begin, work, ctx);
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
        // A backend that panics fails its action; the executor and its device live on.
        let done =
            crate::gpu::fault::catch_panics(work)
                .into_actor(self)
                .map(move |result, act, ctx| {
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
        ctx.spawn(done);
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
