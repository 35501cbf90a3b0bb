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

use super::admission::AdmissionTable;
use super::health::{Health, HealthRule};
use super::messages::{
    ActionReport, ControllerSnapshot, Drain, Edge, Execute, GroupId, Infer, InferError,
    InferResult, Inferred, RegisterError, RegisterModel, RequestTiming, SetReplicaFloor,
    SnapshotController, Submit, Withdraw,
};
use super::registry::{Candidate, Registry};
use super::watchdog::{GivenUp, Settled, Watchdog};
use crate::events::{self, Event, EventBus};
use crate::gpu::BatchOutputs;
use crate::model::{ActionId, DeviceId, ModelId, RequestId};
use crate::outcome::Outcome as RequestOutcome;
use crate::scheduler::ids::IdMap;
use crate::scheduler::{
    Action, ActionError, ActionKind, Answer, Outcome, Plan, Policy, Request, Verdict,
};
use crate::tally::Tally;
use crate::tensor::{check_inputs, split_items, Tensor};
use crate::time::{Clock, Nanos};

/// Action ids the controller gives its own repair actions (the policy's count up from 1).
const REPAIR_IDS: u64 = 1 << 63;

/// A request waiting for its answer.
struct Pending {
    model: ModelId,
    /// Each item's inputs, in item order (devices run items).
    inputs: Vec<Arc<Vec<Tensor>>>,
    arrival: Nanos,
    slo: Nanos,
    /// The pipeline root's group it belongs to, if any.
    group: Option<GroupId>,
    /// Who counts its answer, when its caller may answer otherwise (`tally.rs`).
    tally: Option<Tally>,
    reply: oneshot::Sender<InferResult>,
}

/// An action sent and not reported, as the controller needs to remember it.
struct Sent {
    action: Action,
    /// Items of each of [`Sent::requests`]: their outputs follow one another, item by item.
    items: Vec<u32>,
}

impl Sent {
    /// For an INFER, its requests in batch order (to match outputs); read from the action
    /// itself (a copy of the list was one more allocation per batch).
    fn requests(&self) -> &[RequestId] {
        match &self.action.kind {
            ActionKind::Infer { requests } => requests,
            _ => &[],
        }
    }
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
    pub settings: ControllerSettings,
    /// Where it publishes each model's view for the HTTP front end after its steps.
    pub admission: Arc<AdmissionTable>,
}

/// The controller's own time limits (not the policy's).
#[derive(Clone, Copy, Debug)]
pub struct ControllerSettings {
    /// Least time an action is given beyond its latest start and its estimate before the
    /// watchdog fails it and suspects its device (see [`super::watchdog`]).
    pub watchdog_grace: Nanos,
    /// How long a `Drain` waits for admitted requests; those still unanswered then are
    /// answered `shutting_down`.
    pub shutdown_grace: Nanos,
    /// Devices that must have joined before the controller says it is ready
    /// (`[cluster] wait_for_devices`; its own devices count).
    pub wait_for_devices: usize,
    /// Which failures take a device out and when it is probed (see [`super::health`]).
    pub health: HealthRule,
}

impl Default for ControllerSettings {
    fn default() -> Self {
        Self {
            watchdog_grace: 100 * crate::time::MS,
            shutdown_grace: 10_000 * crate::time::MS,
            wait_for_devices: 0,
            health: HealthRule::default(),
        }
    }
}

/// The controller actor.
pub struct Controller {
    parts: ControllerParts,
    pending: IdMap<RequestId, Pending>,
    sent: IdMap<ActionId, Sent>,
    next_request: u64,
    /// Reused buffer for the policy's decisions.
    plan: Plan,
    /// Outputs of reported batches, per request, until that request is answered (the
    /// policy may answer it in a later step than the report).
    outputs: IdMap<RequestId, (Vec<Tensor>, RequestTiming)>,
    /// Deadlines of the actions in flight, and the suspect devices.
    watchdog: Watchdog,
    /// Devices taken out by failures or crashes, and when to probe them.
    health: Health,
    /// Probes in flight: the device each one tests.
    probes: IdMap<ActionId, DeviceId>,
    /// Models that failed on a batch's inputs: the first failure of each is a warning,
    /// the others (a client may send such values at any rate) are logged at debug.
    failed_on_inputs: std::collections::BTreeSet<ModelId>,
    /// Devices the policy was told are out of service (suspect), and the cause last
    /// published for each.
    out: std::collections::BTreeMap<DeviceId, events::OutCause>,
    /// When a `Drain` gives up waiting and answers what is left.
    drain_deadline: Option<Nanos>,
    /// Repair actions sent so far (for their ids).
    next_repair: u64,
    /// The armed wake-up: (when, timer).
    wakeup: Option<(Nanos, SpawnHandle)>,
    admitted: u64,
    answered: u64,
    /// Passes of the policy (`step`), for the snapshot.
    steps: u64,
    draining: bool,
    drained: Vec<oneshot::Sender<()>>,
    /// Models whose view may have changed since the last step published them.
    touched: Vec<ModelId>,
    /// Requests pending per group (pipeline root), for `Withdraw`.
    groups: std::collections::HashMap<GroupId, Vec<RequestId>>,
    /// Devices serving now: its own and those of the workers connected.
    live_devices: usize,
    /// Devices that left for good (their worker was lost).
    gone: std::collections::BTreeSet<DeviceId>,
}

impl Controller {
    pub fn new(parts: ControllerParts) -> Self {
        let watchdog = Watchdog::new(parts.settings.watchdog_grace);
        let live_devices = parts.executors.len();
        let health = Health::new(parts.settings.health);
        Self {
            live_devices,
            gone: std::collections::BTreeSet::new(),
            parts,
            pending: IdMap::default(),
            sent: IdMap::default(),
            next_request: 0,
            plan: Plan::default(),
            outputs: IdMap::default(),
            watchdog,
            health,
            probes: IdMap::default(),
            failed_on_inputs: Default::default(),
            out: Default::default(),
            drain_deadline: None,
            next_repair: 0,
            wakeup: None,
            admitted: 0,
            answered: 0,
            steps: 0,
            draining: false,
            drained: Vec::new(),
            touched: Vec::new(),
            groups: std::collections::HashMap::new(),
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
        let max = self.parts.policy.max_items(model);
        let inputs = match items_of(spec, infer.inputs, infer.items, max) {
            Ok(inputs) => inputs,
            Err(problem) => {
                let _ = reply.send(Err(InferError::BadInput(problem)));
                return;
            }
        };
        let now = self.now();
        let mut slo = infer.slo.unwrap_or(spec.slo);
        let edge = infer.edge.unwrap_or(Edge {
            arrival: now,
            reserve: 0,
        });
        // The clock never runs backwards, but an edge stamp from elsewhere might.
        let arrival = edge.arrival.min(now);
        if let Some(root) = infer.root {
            // A pipeline's stage never plans past its root's end-to-end deadline.
            slo = slo.min(root.deadline.saturating_sub(arrival));
        }
        self.next_request += 1;
        let id = RequestId(self.next_request);
        let group = infer.root.map(|r| r.group);
        if let Some(group) = group {
            self.groups.entry(group).or_default().push(id);
        }
        let items = inputs.len() as u32;
        let pending = Pending {
            model,
            inputs,
            arrival,
            slo,
            group,
            tally: infer.tally,
            reply,
        };
        self.pending.insert(id, pending);
        self.admitted += 1;
        // The policy plans to finish early enough for the caller's own work after it;
        // a request already hopeless is refused by the policy's rules, which compare
        // `now` with the edge's arrival.
        let request = Request {
            id,
            model,
            arrival,
            slo: slo.saturating_sub(edge.reserve),
            latest_finish: infer.root.map(|r| r.deadline.saturating_sub(r.downstream)),
            items,
        };
        self.touched.push(model);
        self.parts.policy.admit(request, now, &mut self.plan);
        self.step_at(now, ctx);
    }

    /// Runs the policy and carries out its plan.
    fn step(&mut self, ctx: &mut Context<Self>) {
        self.step_at(self.now(), ctx);
    }

    /// [`Controller::step`] at `now`, read by a caller that read the clock just before:
    /// on some virtual machines every read is a system call, and a request's admission and
    /// its report each read it three times.
    fn step_at(&mut self, now: Nanos, ctx: &mut Context<Self>) {
        self.steps += 1;
        self.fail_overdue(now);
        self.send_probes(now);
        self.parts.policy.schedule(now, &mut self.plan);
        let mut plan = std::mem::take(&mut self.plan);
        for answer in plan.answers.drain(..) {
            self.answer(answer, now);
        }
        for action in plan.actions.drain(..) {
            self.dispatch(action);
        }
        self.plan = plan;
        let admission = Arc::clone(&self.parts.admission);
        admission.refresh(self.parts.policy.as_ref(), &mut self.touched, now);
        if self.drain_deadline.is_some_and(|at| at <= now) {
            self.abandon_pending(now);
        }
        self.arm_at(now, ctx);
        if self.draining && self.pending.is_empty() {
            for done in self.drained.drain(..) {
                let _ = done.send(());
            }
        }
    }

    fn dispatch(&mut self, action: Action) {
        self.touched.push(action.model);
        let requests: &[RequestId] = match &action.kind {
            ActionKind::Infer { requests } => requests,
            _ => &[],
        };
        // Devices run items: each request's, one after another.
        let mut items = Vec::with_capacity(requests.len());
        let mut inputs = Vec::with_capacity(requests.len());
        for request in requests {
            let pending = self.pending.get(request);
            items.push(pending.map_or(1, |p| p.inputs.len() as u32));
            inputs.extend(
                pending
                    .into_iter()
                    .flat_map(|p| p.inputs.iter().map(Arc::clone)),
            );
        }
        let batch = requests.len() as u32;
        self.parts.events.publish(|| {
            Event::ActionPlanned(events::ActionPlanned {
                action: action.id,
                device: action.device,
                model: action.model,
                kind: action.kind.tag(),
                batch,
                earliest: action.earliest,
                latest: action.latest,
                expected: action.expected_duration,
            })
        });
        let executor = &self.parts.executors[action.device.0 as usize];
        executor.do_send(Execute {
            action: action.clone(),
            inputs,
        });
        self.watchdog.watch(&action);
        self.sent.insert(action.id, Sent { action, items });
    }

    fn answer(&mut self, answer: Answer, now: Nanos) {
        let Some(pending) = self.pending.remove(&answer.request) else {
            // After a drain's deadline the controller answered it already.
            tracing::debug!(request = ?answer.request, "answer for a request no longer pending");
            return;
        };
        self.touched.push(pending.model);
        let outputs = self.outputs.remove(&answer.request);
        let (result, outcome, batch) = match answer.verdict {
            Verdict::Completed { late, .. } => match outputs {
                Some((outputs, timing)) => {
                    // Late as its caller sees it: the policy judges the batch's end, but
                    // the answer leaves the controller after the report has come back. (A
                    // pipeline's sub-request is judged by its root, at the root's answer.)
                    let late = late
                        || (pending.group.is_none()
                            && now > pending.arrival.saturating_add(pending.slo));
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
        self.deliver(answer.request, pending, (result, outcome, batch), now);
    }

    /// Sends a request its one answer and publishes it.
    fn deliver(
        &mut self,
        request: RequestId,
        pending: Pending,
        answer: (InferResult, RequestOutcome, Option<u32>),
        now: Nanos,
    ) {
        let (result, outcome, batch) = answer;
        if let Some(group) = pending.group {
            if let Some(members) = self.groups.get_mut(&group) {
                members.retain(|&r| r != request);
                if members.is_empty() {
                    self.groups.remove(&group);
                }
            }
        }
        let ran = result.as_ref().ok().map(|inferred| inferred.timing.exec);
        self.answered += 1;
        let items = pending.inputs.len() as u32;
        // Published before the answer is sent: a client that has its answer finds it in
        // the metrics it reads next (they fold the events in on each read).
        self.parts.events.publish(|| {
            Event::RequestAnswered(events::RequestAnswered {
                request,
                model: pending.model,
                arrival: pending.arrival,
                answered: now,
                slo: pending.slo,
                outcome,
                batch,
                items,
                ran,
                tally: pending.tally,
            })
        });
        // The caller may have gone away; the request is answered all the same.
        let _ = pending.reply.send(result);
    }

    /// Keeps one timer armed for the policy's next wake-up.
    fn arm(&mut self, ctx: &mut Context<Self>) {
        self.arm_at(self.now(), ctx);
    }

    /// [`Controller::arm`] at `now`.
    fn arm_at(&mut self, now: Nanos, ctx: &mut Context<Self>) {
        let at = [
            self.parts.policy.next_wakeup(now),
            self.watchdog.next_deadline(),
            self.health.next_probe(),
            self.drain_deadline,
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(at) = at.map(|at| at.max(now + 1)) else {
            return;
        };
        if let Some((armed, handle)) = self.wakeup {
            if armed <= at && armed > now {
                return;
            }
            ctx.cancel_future(handle);
        }
        let handle = ctx.run_later(self.parts.clock.until(at), |act, ctx| {
            // A timer cancelled while already due can still fire in the same turn (actix
            // reaps cancelled futures lazily). Only the armed one may step: a stale one
            // that stepped would forget the armed timer without cancelling it, and both
            // would live on, re-arming themselves at every wake-up (under overload the
            // controller stepped tens of times per instant, once per such timer).
            if act.wakeup.map(|(_, armed)| armed) != Some(ctx.handle()) {
                return;
            }
            act.wakeup = None;
            act.step(ctx);
        });
        self.wakeup = Some((at, handle));
    }
}

mod cluster;
mod handlers;
mod reports;

pub use cluster::{DeviceLag, Join, JoiningDevice, Leave};

/// A request's inputs as each item's, checked against the model: `items` (0 taken as 1)
/// must not pass `max`, the most the policy runs in one batch, nor 1 for a model without
/// a batch dimension.
fn items_of(
    spec: &crate::model::ModelSpec,
    inputs: Arc<Vec<Tensor>>,
    items: u32,
    max: u32,
) -> Result<Vec<Arc<Vec<Tensor>>>, String> {
    let items = items.max(1);
    if items == 1 {
        check_inputs(spec, &inputs)?;
        return Ok(vec![inputs]);
    }
    if !spec.batched {
        return Err(format!(
            "the request carries {items} items; model '{}' has no batch dimension and takes one item per request",
            spec.name
        ));
    }
    if items > max {
        return Err(format!(
            "the request carries {items} items; model '{}' runs at most {max} items in a batch",
            spec.name
        ));
    }
    let each = split_items(&inputs, items as usize)?;
    each.into_iter()
        .map(|item| check_inputs(spec, &item).map(|()| Arc::new(item)))
        .collect()
}
