//! The executor actor: one per device.
//!
//! It keeps two lanes, exec (INFER) and load (LOAD, UNLOAD), each an ordered queue of
//! actions released at their `earliest` time and run one at a time, so a weight transfer
//! overlaps an execution. An action that cannot start by its `latest` is refused without
//! doing anything. Weight memory is a table of fixed-size pages: LOAD without enough free
//! pages fails, INFER on weights that are not resident fails, and nothing is ever evicted
//! except by an UNLOAD from the controller. Every report carries what was measured.
//!
//! The executor holds no policy: it does exactly what it is told, when it is told.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use actix::prelude::*;

use super::messages::{ActionReport, Execute, ExecutorSnapshot, FetchArtifact, SnapshotExecutor};
use crate::gpu::{
    Backend, BackendFuture, BackendInfo, BatchOutputs, Executed, InferJob, ModelArtifact,
};
use crate::model::{ActionId, DeviceId, ModelId};
use crate::scheduler::{Action, ActionError, ActionKind, Measured};
use crate::time::{Clock, Nanos};

const EXEC: usize = 0;
const LOAD: usize = 1;

/// Where an executor sends reports and fetches artifacts.
pub struct ExecutorLinks {
    pub reports: Recipient<ActionReport>,
    pub artifacts: Recipient<FetchArtifact>,
}

/// Weights resident on the device.
#[derive(Clone, Copy, Debug)]
struct Weights {
    pages: u32,
    /// The LOAD finished: INFER may use them.
    ready: bool,
}

/// One lane: waiting actions by (earliest, id), and what it is doing.
#[derive(Default)]
struct Lane {
    waiting: BTreeMap<(Nanos, ActionId), Execute>,
    busy: bool,
    /// Timer armed for the head's `earliest`: (when, handle).
    timer: Option<(Nanos, SpawnHandle)>,
}

/// The actor driving one device.
pub struct Executor {
    device: DeviceId,
    clock: Clock,
    backend: Box<dyn Backend>,
    info: BackendInfo,
    page_bytes: u64,
    links: ExecutorLinks,
    lanes: [Lane; 2],
    weights: HashMap<ModelId, Weights>,
    pages_used: u32,
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
            backend,
            info,
            page_bytes,
            links,
            lanes: [Lane::default(), Lane::default()],
            weights: HashMap::new(),
            pages_used: 0,
            completed: 0,
            refused_late: 0,
        }
    }

    /// Starts the head of the lane if it is due, or arms a timer for when it will be.
    fn pump(&mut self, lane: usize, ctx: &mut Context<Self>) {
        while !self.lanes[lane].busy {
            let Some((&(earliest, id), _)) = self.lanes[lane].waiting.first_key_value() else {
                return;
            };
            let now = self.clock.now();
            if earliest > now {
                self.arm(lane, earliest, ctx);
                return;
            }
            let Some(execute) = self.lanes[lane].waiting.remove(&(earliest, id)) else {
                return;
            };
            if now > execute.action.latest {
                self.refused_late += 1;
                self.report(&execute.action, Err(ActionError::TooLate), None);
                continue;
            }
            self.start(lane, execute, now, ctx);
        }
    }

    fn arm(&mut self, lane: usize, at: Nanos, ctx: &mut Context<Self>) {
        if let Some((armed, handle)) = self.lanes[lane].timer {
            if armed <= at {
                return;
            }
            ctx.cancel_future(handle);
        }
        let handle = ctx.run_later(self.clock.until(at), move |act, ctx| {
            act.lanes[lane].timer = None;
            act.pump(lane, ctx);
        });
        self.lanes[lane].timer = Some((at, handle));
    }

    fn start(&mut self, lane: usize, execute: Execute, begin: Nanos, ctx: &mut Context<Self>) {
        let action = execute.action;
        match &action.kind {
            ActionKind::Infer { .. } => {
                if !self.weights.get(&action.model).is_some_and(|w| w.ready) {
                    self.report(&action, Err(ActionError::NotResident), None);
                    return;
                }
                let job = InferJob {
                    model: action.model,
                    inputs: execute.inputs,
                };
                let work = self.backend.infer(job);
                self.run(lane, action, begin, with_outputs(work), ctx);
            }
            ActionKind::Unload => {
                if let Some(w) = self.weights.remove(&action.model) {
                    self.pages_used -= w.pages;
                }
                let work = self.backend.unload(action.model);
                self.run(lane, action, begin, without_outputs(work), ctx);
            }
            ActionKind::Load => {
                self.lanes[lane].busy = true;
                let fetch = self.links.artifacts.send(FetchArtifact(action.model));
                let fetched = fetch.into_actor(self).map(move |artifact, act, ctx| {
                    act.load_fetched(action, begin, artifact.ok().flatten(), ctx);
                });
                ctx.spawn(fetched);
            }
        }
    }

    /// Second half of a LOAD, once the model cache answered.
    fn load_fetched(
        &mut self,
        action: Action,
        begin: Nanos,
        artifact: Option<Arc<ModelArtifact>>,
        ctx: &mut Context<Self>,
    ) {
        let checked = match artifact {
            None => Err(ActionError::Device(format!(
                "model {:?} is not registered",
                action.model
            ))),
            Some(_) if self.weights.contains_key(&action.model) => {
                Err(ActionError::Device("model is already resident".into()))
            }
            Some(artifact) => {
                let pages = artifact.spec.profile.pages(self.page_bytes);
                if self.pages_used + pages > self.info.pages {
                    Err(ActionError::NoFreePages)
                } else {
                    Ok((artifact, pages))
                }
            }
        };
        match checked {
            Ok((artifact, pages)) => {
                self.pages_used += pages;
                self.weights.insert(
                    action.model,
                    Weights {
                        pages,
                        ready: false,
                    },
                );
                let work = self.backend.load(artifact);
                self.run(LOAD, action, begin, without_outputs(work), ctx);
            }
            Err(error) => self.finish(LOAD, &action, Err(error), None, ctx),
        }
    }

    /// Runs backend work on the lane and finishes the action when it is done.
    fn run(
        &mut self,
        lane: usize,
        action: Action,
        begin: Nanos,
        work: BackendFuture<Executed<Option<BatchOutputs>>>,
        ctx: &mut Context<Self>,
    ) {
        self.lanes[lane].busy = true;
        let done = work.into_actor(self).map(move |result, act, ctx| {
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
                Err(error) => (Err(ActionError::Device(error.to_string())), None),
            };
            act.finish(lane, &action, measured, outputs, ctx);
        });
        ctx.spawn(done);
    }

    fn finish(
        &mut self,
        lane: usize,
        action: &Action,
        result: Result<Measured, ActionError>,
        outputs: Option<BatchOutputs>,
        ctx: &mut Context<Self>,
    ) {
        if matches!(action.kind, ActionKind::Load) {
            match result {
                Ok(_) => {
                    if let Some(w) = self.weights.get_mut(&action.model) {
                        w.ready = true;
                    }
                }
                Err(_) => {
                    if let Some(w) = self.weights.remove(&action.model) {
                        self.pages_used -= w.pages;
                    }
                }
            }
        }
        self.completed += u64::from(result.is_ok());
        self.report(action, result, outputs);
        self.lanes[lane].busy = false;
        self.pump(lane, ctx);
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

fn without_outputs(
    work: BackendFuture<Executed<()>>,
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
        let lane = if execute.action.kind.is_load_lane() {
            LOAD
        } else {
            EXEC
        };
        let key = (execute.action.earliest, execute.action.id);
        self.lanes[lane].waiting.insert(key, execute);
        self.pump(lane, ctx);
    }
}

impl Handler<SnapshotExecutor> for Executor {
    type Result = MessageResult<SnapshotExecutor>;

    fn handle(&mut self, _: SnapshotExecutor, _: &mut Context<Self>) -> Self::Result {
        let mut resident: Vec<ModelId> = self
            .weights
            .iter()
            .filter(|(_, w)| w.ready)
            .map(|(&m, _)| m)
            .collect();
        resident.sort_unstable();
        MessageResult(ExecutorSnapshot {
            device: self.device,
            kind: self.info.kind.clone(),
            pages: self.info.pages,
            pages_used: self.pages_used,
            resident,
            waiting: [
                self.lanes[EXEC].waiting.len(),
                self.lanes[LOAD].waiting.len(),
            ],
            busy: [self.lanes[EXEC].busy, self.lanes[LOAD].busy],
            completed: self.completed,
            refused_late: self.refused_late,
        })
    }
}
