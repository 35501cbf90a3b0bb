//! The controller actor: the one place where decisions are made.
//!
//! It is thin on purpose. It turns messages into calls on the pure [`Policy`] (a request
//! arrived, an executor reported, a timer fired), then dispatches the resulting [`Plan`]:
//! actions to executors with their inputs, answers to the waiting requests with their
//! outputs. It keeps the payloads and reply channels the policy does not need, a wake-up
//! timer for the policy's next deadline, and publishes telemetry events.

use std::sync::Arc;

use actix::prelude::*;
use tokio::sync::oneshot;

use super::messages::{
    ActionReport, ControllerSnapshot, Drain, Execute, Infer, InferError, InferResult, Inferred,
    RegisterError, RegisterModel, RequestTiming, SnapshotController, Submit,
};
use super::registry::{Candidate, Registry};
use crate::events::{self, Event, EventBus};
use crate::gpu::BatchOutputs;
use crate::model::{ActionId, DeviceId, ModelId, RequestId};
use crate::outcome::Outcome as RequestOutcome;
use crate::scheduler::ids::IdMap;
use crate::scheduler::{
    Action, ActionKind, Answer, Outcome, Plan, Policy, Request, Verdict,
};
use crate::tensor::{check_inputs, Tensor};
use crate::time::{Clock, Nanos};

/// A request waiting for its answer.
struct Pending {
    model: ModelId,
    inputs: Arc<Vec<Tensor>>,
    arrival: Nanos,
    slo: Nanos,
    reply: oneshot::Sender<InferResult>,
}

/// An action sent and not reported, as the controller needs to remember it.
struct Sent {
    action: Action,
    /// For an INFER, its requests in batch order (to match outputs).
    requests: Vec<RequestId>,
}

/// What the controller is given at start.
pub struct ControllerParts {
    pub clock: Clock,
    pub policy: Box<dyn Policy + Send>,
    /// The registered models (the policy already knows them); registers more.
    pub registry: Registry,
    /// Executors, indexed by device id (the policy already knows them).
    pub executors: Vec<Recipient<Execute>>,
    /// Whether each device only emulates.
    pub emulated: Vec<bool>,
    pub events: EventBus,
}

/// The controller actor.
pub struct Controller {
    parts: ControllerParts,
    pending: IdMap<RequestId, Pending>,
    sent: IdMap<ActionId, Sent>,
    next_request: u64,
    /// Reused buffer for the policy's decisions.
    plan: Plan,
    /// Outputs of a batch just reported, until the policy's answers claim them.
    outputs: IdMap<RequestId, (Vec<Tensor>, RequestTiming)>,
    /// The armed wake-up: (when, timer).
    wakeup: Option<(Nanos, SpawnHandle)>,
    admitted: u64,
    answered: u64,
    draining: bool,
    drained: Vec<oneshot::Sender<()>>,
}

impl Controller {
    pub fn new(parts: ControllerParts) -> Self {
        Self {
            parts,
            pending: IdMap::default(),
            sent: IdMap::default(),
            next_request: 0,
            plan: Plan::default(),
            outputs: IdMap::default(),
            wakeup: None,
            admitted: 0,
            answered: 0,
            draining: false,
            drained: Vec::new(),
        }
    }

    fn now(&self) -> Nanos {
        self.parts.clock.now()
    }

    /// Validates a request and hands it to the policy; answers at once what cannot wait.
    fn admit(&mut self, infer: Submit, ctx: &mut Context<Self>) {
        let reply = infer.reply;
        if self.draining {
            let _ = reply.send(Err(InferError::ShuttingDown));
            return;
        }
        let catalog = self.parts.registry.catalog();
        let Some(registered) = catalog.id(&infer.model).and_then(|id| catalog.get(id)) else {
            let _ = reply.send(Err(InferError::UnknownModel(infer.model)));
            return;
        };
        let (model, spec) = (registered.id, &registered.spec);
        if let Err(problem) = check_inputs(spec, &infer.inputs) {
            let _ = reply.send(Err(InferError::BadInput(problem)));
            return;
        }
        let now = self.now();
        let slo = infer.slo.unwrap_or(spec.slo);
        self.next_request += 1;
        let id = RequestId(self.next_request);
        let pending = Pending {
            model,
            inputs: infer.inputs,
            arrival: now,
            slo,
            reply,
        };
        self.pending.insert(id, pending);
        self.admitted += 1;
        let request = Request {
            id,
            model,
            arrival: now,
            slo,
        };
        self.parts.policy.admit(request, now, &mut self.plan);
        self.step(ctx);
    }

    /// Runs the policy and carries out its plan.
    fn step(&mut self, ctx: &mut Context<Self>) {
        let now = self.now();
        self.parts.policy.schedule(now, &mut self.plan);
        let mut plan = std::mem::take(&mut self.plan);
        for answer in plan.answers.drain(..) {
            self.answer(answer, now);
        }
        for action in plan.actions.drain(..) {
            self.dispatch(action);
        }
        self.plan = plan;
        self.outputs.clear();
        self.arm(ctx);
        if self.draining && self.pending.is_empty() {
            for done in self.drained.drain(..) {
                let _ = done.send(());
            }
        }
    }

    fn dispatch(&mut self, action: Action) {
        let requests = match &action.kind {
            ActionKind::Infer { requests } => requests.clone(),
            _ => Vec::new(),
        };
        let inputs = requests
            .iter()
            .filter_map(|r| self.pending.get(r).map(|p| Arc::clone(&p.inputs)))
            .collect();
        let executor = &self.parts.executors[action.device.0 as usize];
        executor.do_send(Execute {
            action: action.clone(),
            inputs,
        });
        self.sent.insert(action.id, Sent { action, requests });
    }

    fn answer(&mut self, answer: Answer, now: Nanos) {
        let Some(pending) = self.pending.remove(&answer.request) else {
            tracing::error!(request = ?answer.request, "policy answered an unknown request");
            return;
        };
        let (result, outcome, batch) = match answer.verdict {
            Verdict::Completed { late, .. } => match self.outputs.remove(&answer.request) {
                Some((outputs, timing)) => {
                    let emulated = self.parts.emulated[timing.device.0 as usize];
                    let ok = Inferred {
                        request: answer.request,
                        model: pending.model,
                        outputs,
                        emulated,
                        late,
                        timing: RequestTiming {
                            answered: now,
                            ..timing
                        },
                    };
                    let outcome = if late {
                        RequestOutcome::Late
                    } else {
                        RequestOutcome::Ok
                    };
                    (Ok(ok), outcome, Some(timing.batch))
                }
                None => {
                    let error =
                        crate::scheduler::ActionError::Device("batch returned no outputs".into());
                    (
                        Err(InferError::Failed(error)),
                        RequestOutcome::ExecutionFailed,
                        None,
                    )
                }
            },
            Verdict::Refused(reason) => (Err(InferError::Refused(reason)), reason.outcome(), None),
            Verdict::Failed(error) => (
                Err(InferError::Failed(error)),
                RequestOutcome::ExecutionFailed,
                None,
            ),
        };
        // The caller may have gone away; the request is answered all the same.
        let _ = pending.reply.send(result);
        self.answered += 1;
        self.parts.events.publish(|| {
            Event::RequestAnswered(events::RequestAnswered {
                request: answer.request,
                model: pending.model,
                arrival: pending.arrival,
                answered: now,
                slo: pending.slo,
                outcome,
                batch,
            })
        });
    }

    /// Keeps one timer armed for the policy's next wake-up.
    fn arm(&mut self, ctx: &mut Context<Self>) {
        let now = self.now();
        let Some(at) = self.parts.policy.next_wakeup(now) else {
            return;
        };
        if let Some((armed, handle)) = self.wakeup {
            if armed <= at && armed > now {
                return;
            }
            ctx.cancel_future(handle);
        }
        let handle = ctx.run_later(self.parts.clock.until(at), |act, ctx| {
            act.wakeup = None;
            act.step(ctx);
        });
        self.wakeup = Some((at, handle));
    }

    /// Applies an executor's report: outputs are kept for the answers the policy gives.
    fn report(&mut self, report: ActionReport, ctx: &mut Context<Self>) {
        let Some(sent) = self.sent.remove(&report.action) else {
            tracing::error!(action = ?report.action, "report of an unknown action");
            return;
        };
        if let (Ok(measured), Some(outputs)) = (&report.result, report.outputs) {
            self.stash_outputs(&sent, *measured, outputs);
        }
        self.parts.events.publish(|| {
            Event::ActionDone(events::ActionDone {
                action: sent.action.id,
                device: report.device,
                model: sent.action.model,
                kind: sent.action.kind.name(),
                batch: sent.requests.len() as u32,
                expected: sent.action.expected_duration,
                measured: report.result.as_ref().ok().copied(),
                error: report.result.as_ref().err().map(ToString::to_string),
            })
        });
        let outcome = Outcome {
            action: report.action,
            result: report.result,
        };
        let now = self.now();
        self.parts.policy.observe(outcome, now, &mut self.plan);
        self.step(ctx);
    }

    fn stash_outputs(
        &mut self,
        sent: &Sent,
        exec: crate::scheduler::Measured,
        outputs: BatchOutputs,
    ) {
        let batch = sent.requests.len() as u32;
        for (&request, outputs) in sent.requests.iter().zip(outputs) {
            let Some(pending) = self.pending.get(&request) else {
                continue;
            };
            let timing = RequestTiming {
                arrival: pending.arrival,
                deadline: pending.arrival + pending.slo,
                exec,
                answered: 0,
                batch,
                device: DeviceId(sent.action.device.0),
            };
            self.outputs.insert(request, (outputs, timing));
        }
    }
}

impl Controller {
    /// Registers a model while serving, through the one registry.
    fn register(&mut self, message: RegisterModel) -> Result<ModelId, RegisterError> {
        let candidate = Candidate {
            spec: message.spec,
            bytes: message.bytes,
            backends: message.backends,
        };
        let model = self
            .parts
            .registry
            .register(self.parts.policy.as_mut(), candidate)?;
        tracing::info!(model = %model.name(), id = model.id.0, "model registered while serving");
        Ok(model.id)
    }
}

impl Handler<RegisterModel> for Controller {
    type Result = Result<ModelId, RegisterError>;

    fn handle(&mut self, message: RegisterModel, _: &mut Context<Self>) -> Self::Result {
        self.register(message)
    }
}

impl Actor for Controller {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Requests are admitted or refused by the policy, not held back by a small mailbox.
        ctx.set_mailbox_capacity(super::MAILBOX);
    }
}

impl Handler<Infer> for Controller {
    type Result = ResponseFuture<InferResult>;

    fn handle(&mut self, infer: Infer, ctx: &mut Context<Self>) -> Self::Result {
        let (reply, answer) = oneshot::channel();
        let submit = Submit {
            model: infer.model,
            inputs: Arc::new(infer.inputs),
            slo: infer.slo,
            reply,
        };
        self.admit(submit, ctx);
        Box::pin(async move { answer.await.unwrap_or(Err(InferError::ShuttingDown)) })
    }
}

impl Handler<Submit> for Controller {
    type Result = ();

    fn handle(&mut self, submit: Submit, ctx: &mut Context<Self>) {
        self.admit(submit, ctx);
    }
}

impl Handler<ActionReport> for Controller {
    type Result = ();

    fn handle(&mut self, report: ActionReport, ctx: &mut Context<Self>) {
        self.report(report, ctx);
    }
}

impl Handler<SnapshotController> for Controller {
    type Result = MessageResult<SnapshotController>;

    fn handle(&mut self, _: SnapshotController, _: &mut Context<Self>) -> Self::Result {
        let now = self.now();
        MessageResult(ControllerSnapshot {
            now,
            pending: self.pending.len(),
            admitted: self.admitted,
            answered: self.answered,
            draining: self.draining,
            policy: self.parts.policy.snapshot(now),
        })
    }
}

impl Handler<Drain> for Controller {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Drain, _: &mut Context<Self>) -> Self::Result {
        self.draining = true;
        let (done, drained) = oneshot::channel();
        if self.pending.is_empty() {
            let _ = done.send(());
        } else {
            self.drained.push(done);
        }
        Box::pin(async move {
            let _ = drained.await;
        })
    }
}
