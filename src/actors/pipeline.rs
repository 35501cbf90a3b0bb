//! The pipeline actor: one per registered pipeline, with one [`StageActor`] per stage.
//! It owns the root requests in flight, each a pure [`Run`] (`crate::pipeline::run`):
//! it starts a run on a root request, hands each run's sub-requests to their stage actors
//! (which talk to the controller), feeds their answers back, withdraws a failed root's
//! outstanding sub-requests, and answers each root exactly once. It decides nothing about
//! when or where models run: the controller stays the only place that does. With a
//! [`Backlog`] it hands each new run the projected wait at every stage (read from the
//! admission table), so that the first stage's request carries an R_v that sees the
//! queues below it (earliest-stage drop, decided by the policy), and it refuses at arrival
//! a root that its stages cannot finish in time behind those queues and the work the
//! roots already in flight will still bring them (`pipeline::inflow`).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use actix::prelude::*;
use tokio::sync::oneshot;

use super::messages::{Edge, GroupId, Root, SetReplicaFloor};
use super::pipeline_stage::{StageActor, StageDone, StageParts, StageWork, WithdrawRoot};
use super::Controller;
use crate::events::{self, Event, EventBus};
use crate::outcome::Outcome;
use crate::pipeline::budget::{Budget, Proportional};
use crate::pipeline::inflow::{beyond, Inflow, Made};
use crate::pipeline::run::{Answered, Failure, Missing, Run, Step};
use crate::pipeline::Pipeline;
use crate::slopt::systems::{DropRule, Tuned};
use crate::slopt::tuning::Tuning;
use crate::tally::Tally;
use crate::tensor::{check_tensors, Tensor};
use crate::time::{Clock, Nanos};

mod backlog;
pub use backlog::Backlog;

/// Root request ids, unique across pipelines and runtimes: they are the controller's
/// group ids, and nothing else reads them (the fan-out seed is the root's number within
/// its pipeline, so that a process running several runtimes, as `simulate` does for each
/// policy, draws the same fan-outs in each).
static NEXT_GROUP: AtomicU64 = AtomicU64::new(1);

/// A pipeline's root request.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RunPipeline {
    /// The pipeline's inputs (one item each).
    pub inputs: Vec<Tensor>,
    /// End-to-end objective; the pipeline's own if `None`.
    pub slo: Option<Nanos>,
    /// Where its time started; `None`: when the pipeline actor takes it.
    pub edge: Option<Edge>,
    /// Who counts its answer in the metrics, for a caller that may answer its client
    /// otherwise (the front end; `tally.rs`); `None`: this actor's event.
    pub tally: Option<Tally>,
    /// Receives the one answer.
    pub reply: oneshot::Sender<PipelineResult>,
}

/// A root request's outputs.
#[derive(Debug, Clone)]
pub struct PipelineAnswer {
    /// Its number within its pipeline, from 1 in arrival order: the seed of its emulated
    /// fan-outs.
    pub root: u64,
    /// The pipeline's outputs, in declared order.
    pub outputs: Vec<Tensor>,
    /// Rows left out (with `partial_results`).
    pub missing: Vec<Missing>,
    /// Answered after its end-to-end deadline.
    pub late: bool,
    /// Some stage's device only emulated its model.
    pub emulated: bool,
    /// When the actor answered: where the caller's way back (encoding, the hop to its
    /// HTTP worker) starts, which the front end learns.
    pub answered: Nanos,
}

/// The one answer to a [`RunPipeline`]: outputs, or why not (the failing sub-request's
/// outcome and message, or `bad_input` for the root's own inputs).
pub type PipelineResult = Result<PipelineAnswer, Failure>;

/// A root request in flight.
struct InFlight {
    run: Run,
    /// The root's number within the pipeline (the seed of its emulated fan-outs).
    number: u64,
    reply: oneshot::Sender<PipelineResult>,
    /// Handed on in its answer's event.
    tally: Option<Tally>,
    arrival: Nanos,
    due: Nanos,
    emulated: bool,
    /// The stages it has made requests to (for `Inflow`).
    made: Made,
}

/// One registered pipeline's actor.
pub struct PipelineActor {
    pipeline: Arc<Pipeline>,
    name: Arc<str>,
    stage_names: Vec<Arc<str>>,
    budget: Arc<dyn Budget>,
    /// SLOpt planning, for a pipeline declared with `budget = "tuned"`.
    tuning: Option<Tuning>,
    clock: Clock,
    events: EventBus,
    stages: Vec<Addr<StageActor>>,
    runs: HashMap<u64, InFlight>,
    /// Roots taken so far: the next one's number, less one.
    taken: u64,
    /// Where the tuned plan's replica targets go (`SetReplicaFloor`).
    controller: Addr<Controller>,
    /// The plan's replica targets, per stage, last sent as floors.
    floors: Vec<u32>,
    /// Where the stages' queues are read for the earliest-stage drop; `None`: not judged.
    backlog: Option<Backlog>,
    /// What the roots in flight will still bring to each stage (counted with a backlog).
    inflow: Inflow,
    /// What the policy is told a sub-request's latest useful finish is.
    drop: DropRule,
}

impl PipelineActor {
    /// Starts the pipeline actor and its stage actors on the current arbiter.
    pub fn launch(
        pipeline: Arc<Pipeline>,
        controller: Addr<Controller>,
        clock: Clock,
        events: EventBus,
    ) -> Addr<PipelineActor> {
        Self::launch_with(pipeline, controller, clock, events, None)
    }

    /// As `launch`, judging roots at their first stage by the `backlog` of the stages
    /// below (earliest-stage drop).
    pub fn launch_with(
        pipeline: Arc<Pipeline>,
        controller: Addr<Controller>,
        clock: Clock,
        events: EventBus,
        backlog: Option<Backlog>,
    ) -> Addr<PipelineActor> {
        PipelineActor::create(move |ctx| {
            let mut actor = Self::build(pipeline, controller, clock, events, ctx);
            actor.backlog = backlog;
            actor
        })
    }

    /// Judges roots at their first stage by the `backlog` of the stages below.
    pub fn with_backlog(mut self, backlog: Backlog) -> Self {
        self.backlog = Some(backlog);
        self
    }

    /// The actor, its stage actors started beside it.
    pub fn build(
        pipeline: Arc<Pipeline>,
        controller: Addr<Controller>,
        clock: Clock,
        events: EventBus,
        ctx: &mut Context<Self>,
    ) -> Self {
        {
            let name: Arc<str> = pipeline.name.as_str().into();
            let stage_names: Vec<Arc<str>> = pipeline
                .stages
                .iter()
                .map(|s| s.name.as_str().into())
                .collect();
            let stages = pipeline
                .stages
                .iter()
                .zip(&stage_names)
                .map(|(s, stage)| {
                    StageActor::new(StageParts {
                        pipeline: Arc::clone(&name),
                        stage: Arc::clone(stage),
                        model: s.model.clone(),
                        controller: controller.clone(),
                        done: ctx.address().recipient(),
                        clock,
                        events: events.clone(),
                    })
                    .start()
                })
                .collect();
            let inflow = Inflow::new(&pipeline);
            PipelineActor {
                pipeline,
                name,
                stage_names,
                budget: Arc::new(Proportional),
                tuning: None,
                clock,
                events,
                stages,
                runs: HashMap::new(),
                taken: 0,
                controller,
                floors: Vec::new(),
                backlog: None,
                inflow,
                drop: DropRule::Adaptive { earliest: true },
            }
        }
    }

    /// Plans with SLOpt (`crate::slopt`): stage deadlines from the tuned plan, fed by
    /// the roots' arrivals and the fan-outs. `profiles`: each stage model's batch
    /// latencies, in stage order.
    pub fn tuned(self, profiles: Vec<Vec<crate::model::BatchLatency>>) -> Self {
        self.tuned_with(profiles, Tuned::slopt(), None)
    }

    /// Plans as `tuned` says (a baseline's or an ablation's planning); `offline`: the
    /// roots' rate known ahead, for the planners that plan on a sample of the trace.
    pub fn tuned_with(
        mut self,
        profiles: Vec<Vec<crate::model::BatchLatency>>,
        tuned: Tuned,
        offline: Option<f64>,
    ) -> Self {
        let tuning = Tuning::with(&self.pipeline, profiles, tuned, offline);
        self.budget = tuning.budget();
        self.tuning = Some(tuning);
        self
    }

    /// Tells the policy each sub-request's latest useful finish by `drop` (default: the
    /// adaptive batch drop's R_v).
    pub fn with_drop(mut self, drop: DropRule) -> Self {
        self.drop = drop;
        self
    }

    /// Tells the controller the tuned plan's replica targets when they changed, summed per
    /// model (two stages may run the same model), so that placement loads them ahead of
    /// the stages' traffic.
    fn send_floors(&mut self) {
        let Some(tuning) = &self.tuning else {
            return;
        };
        // Unchanged most of the time: the plan moves at most once a second.
        let targets = tuning.planner().targets();
        if targets == self.floors.as_slice() {
            return;
        }
        for model in floor_models(&self.pipeline) {
            let stages = self.pipeline.stages.iter().zip(targets);
            let of_model = stages.filter(|(s, _)| s.model == model);
            let replicas = of_model.map(|(_, &n)| n).sum();
            self.controller.do_send(SetReplicaFloor { model, replicas });
        }
        self.floors = targets.to_vec();
    }

    /// Carries out one step of root `id`'s run.
    fn apply(&mut self, id: u64, step: Step) {
        if let Some(flight) = self.runs.get_mut(&id) {
            for &(stage, count) in &step.fan_outs {
                self.inflow.fanned(stage, count);
                self.inflow.made(&mut flight.made, stage);
            }
            for sub in &step.submit {
                self.inflow.made(&mut flight.made, sub.stage);
            }
        }
        let Some(flight) = self.runs.get(&id) else {
            return;
        };
        let root = Root {
            deadline: flight.run.deadline(),
            group: GroupId(id),
            downstream: 0,
        };
        let now = self.clock.now();
        for (stage, count) in step.fan_outs {
            if let Some(tuning) = &mut self.tuning {
                tuning.on_fan_out(stage, count, now);
            }
            let (pipeline, stage) = (Arc::clone(&self.name), Arc::clone(&self.stage_names[stage]));
            self.events.publish(|| {
                Event::FanOut(events::FanOut {
                    pipeline,
                    stage,
                    count,
                })
            });
        }
        for sub in step.submit {
            self.stages[sub.stage].do_send(StageWork {
                root: Root {
                    downstream: self
                        .drop
                        .downstream(root.deadline, sub.deadline, sub.downstream),
                    ..root
                },
                sub: sub.sub,
                inputs: sub.inputs,
                deadline: sub.deadline,
            });
        }
        // Through the stage actors that made them, after them: see `pipeline_stage`.
        let stages: BTreeSet<usize> = step
            .withdraw
            .iter()
            .filter_map(|&s| flight.run.stage_of(s))
            .collect();
        for stage in stages {
            self.stages[stage].do_send(WithdrawRoot(root));
        }
        if let Some(answer) = step.answer {
            if let Some(flight) = self.runs.remove(&id) {
                self.inflow.finished(flight.made);
                self.answer(flight, answer);
            }
        }
    }

    fn answer(&self, flight: InFlight, answer: crate::pipeline::run::RootResult) {
        let now = self.clock.now();
        let late = now > flight.due;
        let (result, outcome, missing) = match answer {
            Ok(joined) => {
                let missing = joined.missing.len();
                let ok = PipelineAnswer {
                    root: flight.number,
                    outputs: joined.outputs,
                    missing: joined.missing,
                    late,
                    emulated: flight.emulated,
                    answered: now,
                };
                let outcome = if late { Outcome::Late } else { Outcome::Ok };
                (Ok(ok), outcome, missing)
            }
            Err(failure) => {
                let outcome = failure.outcome;
                (Err(failure), outcome, 0)
            }
        };
        let _ = flight.reply.send(result);
        let pipeline = Arc::clone(&self.name);
        self.events.publish(|| {
            Event::PipelineAnswered(events::PipelineAnswered {
                pipeline,
                arrival: flight.arrival,
                answered: now,
                deadline: flight.due,
                outcome,
                missing,
                tally: flight.tally,
            })
        });
    }
}

impl Actor for PipelineActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(super::MAILBOX);
    }
}

impl Handler<RunPipeline> for PipelineActor {
    type Result = ();

    fn handle(&mut self, request: RunPipeline, _: &mut Context<Self>) {
        if let Err(problem) = check_tensors(&self.pipeline.inputs, &request.inputs) {
            let failure = Failure {
                outcome: Outcome::BadInput,
                message: problem,
            };
            let _ = request.reply.send(Err(failure));
            return;
        }
        let now = self.clock.now();
        let edge = request.edge.unwrap_or(Edge {
            arrival: now,
            reserve: 0,
        });
        let arrival = edge.arrival.min(now);
        let due = arrival.saturating_add(request.slo.unwrap_or(self.pipeline.slo));
        let id = NEXT_GROUP.fetch_add(1, Ordering::Relaxed);
        self.taken += 1;
        if let Some(Err(e)) = self.tuning.as_mut().map(|t| t.on_root(now)) {
            tracing::debug!(pipeline = %self.name, error = %e, "no plan fits; keeping the last");
        }
        self.send_floors();
        // The stages plan to finish early enough for the caller's work after the answer.
        let deadline = due.saturating_sub(edge.reserve);
        let run = Run::new(
            Arc::clone(&self.pipeline),
            Arc::clone(&self.budget),
            self.taken,
            deadline,
        );
        let (run, hopeless) = match &self.backlog {
            Some(backlog) => {
                let (waits, to_come) = backlog.costs(now, &self.inflow);
                let hopeless = beyond(&self.pipeline, now, deadline, (&waits, &to_come));
                (run.with_costs(waits), hopeless)
            }
            None => (run, false),
        };
        let flight = InFlight {
            run,
            number: self.taken,
            reply: request.reply,
            tally: request.tally,
            arrival,
            due,
            emulated: false,
            made: Made::default(),
        };
        if hopeless {
            let failure = Failure {
                outcome: Outcome::DeadlineUnreachable,
                message: "the pipeline's stages cannot finish it within its objective \
                          behind the roots already in flight"
                    .into(),
            };
            self.answer(flight, Err(failure));
            return;
        }
        // Counted after its own costs: its requests are not ahead of themselves.
        let flight = InFlight {
            made: self.inflow.started(),
            ..flight
        };
        self.runs.insert(id, flight);
        let step = match self.runs.get_mut(&id) {
            Some(flight) => flight.run.start(request.inputs, now),
            None => return,
        };
        self.apply(id, step);
    }
}

impl Handler<StageDone> for PipelineActor {
    type Result = ();

    fn handle(&mut self, done: StageDone, _: &mut Context<Self>) {
        let id = done.root.group.0;
        let now = self.clock.now();
        let Some(flight) = self.runs.get_mut(&id) else {
            // The root was answered already; its late sub-requests are dropped.
            return;
        };
        let stage = flight.run.stage_of(done.sub).unwrap_or(0);
        let result = match done.result {
            Ok(inferred) => {
                flight.emulated |= inferred.emulated;
                Ok(Answered {
                    outputs: inferred.outputs,
                    emulated: inferred.emulated,
                })
            }
            Err(error) => Err(Failure {
                outcome: error.kind(),
                message: format!("stage '{}': {error}", self.stage_names[stage]),
            }),
        };
        let step = flight.run.on_answer(done.sub, result, now);
        self.apply(id, step);
    }
}

/// The distinct models of a pipeline's stages, in stage order.
fn floor_models(pipeline: &Pipeline) -> Vec<String> {
    let mut models: Vec<String> = Vec::new();
    for stage in &pipeline.stages {
        if !models.contains(&stage.model) {
            models.push(stage.model.clone());
        }
    }
    models
}
