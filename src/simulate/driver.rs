//! One policy's run: a virtual-time actor system, the workload driver and the recorder.
//! The driver sends each arrival to a model through the controller, or, in a pipeline
//! run, as a root request to the pipeline actor.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use super::listener::Listener;
use super::pipelines::PipelineArgs;
use super::{SimulateArgs, SimulateError};
use crate::actors::messages::{Edge, Submit};
use crate::actors::pipeline::{Backlog, PipelineActor, RunPipeline};
use crate::actors::{Controller, Runtime, RuntimeBuilder};
use crate::config::Config;
use crate::events::Event;
use crate::model::{ModelId, TensorSpec};
use crate::outcome::Outcome;
use crate::pipeline::{validate, FanOut, Pipeline, PipelineFile, StageModel};
use crate::report::{Answered, PolicyReport, Recorder, StageOutline};
use crate::slopt::systems::Parts;
use crate::tensor::Tensor;
use crate::time::{virtual_system, Clock, Nanos, MS};
use crate::workload::{self, Arrival, ClosedLoop, WorkloadKind};

/// Goodput-over-time buckets in a report.
const BUCKETS: u64 = 120;
/// Length of the device timeline excerpt.
const TIMELINE: Nanos = 200 * MS;

/// Where the driver's requests go.
#[derive(Clone)]
enum Target {
    /// Workload model `k` is the `k`-th of these, through the controller.
    Models(Rc<Vec<String>>, actix::Addr<Controller>),
    /// Every arrival is a root request of this pipeline.
    Pipeline(actix::Addr<PipelineActor>),
}

/// An answer still to come, as the report counts it.
type Answer = Pin<Box<dyn Future<Output = Outcome>>>;

/// What every request task needs.
#[derive(Clone)]
struct Sender {
    clock: Clock,
    target: Target,
    /// One item of the model's (or pipeline's) inputs, shared by every request.
    inputs: Arc<Vec<Tensor>>,
    default_slo: Nanos,
    recorder: Rc<RefCell<Recorder>>,
    /// Requests sent and not yet recorded.
    outstanding: Rc<Cell<u64>>,
}

impl Sender {
    /// Sends one request now (the message is in the controller's mailbox when this
    /// returns, so nothing sent later can overtake it) and returns the future that records
    /// its answer.
    fn request(&self, arrival: Arrival) -> impl Future<Output = ()> + 'static {
        self.recorder.borrow_mut().offered(arrival.at);
        self.outstanding.set(self.outstanding.get() + 1);
        let slo = Some(arrival.slo.unwrap_or(self.default_slo));
        let answer = self.send(arrival.at, arrival.model, slo);
        let this = self.clone();
        async move {
            let how = Answered::Known(answer.await);
            let now = this.clock.now();
            this.recorder.borrow_mut().answered(arrival.at, now, how);
            this.outstanding.set(this.outstanding.get() - 1);
        }
    }

    /// Sends workload model `model`'s request now. Its deadline runs from `at`, when the
    /// workload says it arrived, as the recorder measures it (the controller may read
    /// its mailbox later).
    fn send(&self, at: Nanos, model: u32, slo: Option<Nanos>) -> Answer {
        let edge = Some(Edge {
            arrival: at,
            reserve: 0,
        });
        // An answer channel dropped unanswered means the runtime stopped first: counted
        // as refused for shutting down.
        let stopped = Outcome::ShuttingDown;
        match &self.target {
            Target::Models(names, controller) => {
                let (reply, answer) = tokio::sync::oneshot::channel();
                controller.do_send(Submit {
                    model: names[model as usize].clone(),
                    inputs: Arc::clone(&self.inputs),
                    items: 1,
                    slo,
                    edge,
                    root: None,
                    tally: None,
                    reply,
                });
                Box::pin(async move {
                    match answer.await {
                        Ok(Ok(ok)) if ok.late => Outcome::Late,
                        Ok(Ok(_)) => Outcome::Ok,
                        Ok(Err(error)) => error.kind(),
                        Err(_) => stopped,
                    }
                })
            }
            Target::Pipeline(pipeline) => {
                let (reply, answer) = tokio::sync::oneshot::channel();
                pipeline.do_send(RunPipeline {
                    inputs: self.inputs.to_vec(),
                    slo,
                    edge,
                    tally: None,
                    reply,
                });
                Box::pin(async move {
                    match answer.await {
                        Ok(Ok(ok)) if ok.late => Outcome::Late,
                        Ok(Ok(_)) => Outcome::Ok,
                        Ok(Err(failure)) => failure.outcome,
                        Err(_) => stopped,
                    }
                })
            }
        }
    }
}

/// Zero-filled inputs of one item of these tensors (variable dimensions taken as 1).
fn zero_inputs(specs: &[TensorSpec]) -> Vec<Tensor> {
    specs.iter().map(Tensor::zeros).collect()
}

/// Checks the built-in pipeline's declaration against the registered stage models and
/// starts its actors, as a repository pipeline is served.
fn launch(
    args: &PipelineArgs,
    slo: Nanos,
    parts: &Parts,
    root_rate: f64,
    runtime: &Runtime,
) -> Result<(Arc<Pipeline>, actix::Addr<PipelineActor>), SimulateError> {
    let name = args.which.to_string();
    let bad = |why: String| SimulateError::Pipeline(name.clone(), why);
    let file = PipelineFile::parse(&args.declaration(slo)).map_err(bad)?;
    let lookup = |model: &str, version: Option<u64>| {
        let spec = runtime
            .models
            .iter()
            .find(|m| m.name == model && version.is_none_or(|v| v == m.version))?;
        Some(StageModel {
            version: spec.version,
            inputs: spec.inputs.clone(),
            outputs: spec.outputs.clone(),
            single: spec.profile.latency(1)?,
        })
    };
    let pipeline = validate(&name, &file.pipeline, lookup).map_err(|e| bad(e.to_string()))?;
    let pipeline = Arc::new(pipeline);
    let profiles = parts.tuning.map(|_| {
        let profile = |model: &str| {
            let m = runtime.models.iter().find(|m| m.name == model);
            m.map(|m| m.profile.batches.clone()).unwrap_or_default()
        };
        pipeline.stages.iter().map(|s| profile(&s.model)).collect()
    });
    // The registry gives dense ids in registration order, which `runtime.models` keeps.
    let backlog = Backlog::new(&pipeline, Arc::clone(&runtime.admission), |model| {
        let at = runtime.models.iter().position(|m| m.name == model)?;
        Some(ModelId(u32::try_from(at).ok()?))
    });
    let (p, runtime, parts) = (Arc::clone(&pipeline), runtime, *parts);
    let actor = actix::Actor::create(|ctx| {
        let clock = runtime.clock;
        let actor = PipelineActor::build(
            p,
            runtime.controller.clone(),
            clock,
            runtime.events.clone(),
            ctx,
        )
        .with_drop(parts.drop);
        let actor = if parts.drop.earliest() {
            actor.with_backlog(backlog)
        } else {
            actor
        };
        match (profiles, parts.tuning) {
            (Some(profiles), Some(tuned)) => actor.tuned_with(profiles, tuned, Some(root_rate)),
            _ => actor,
        }
    });
    Ok((pipeline, actor))
}

/// The stages of a pipeline as the report names them.
fn outlines(pipeline: &Pipeline) -> Vec<StageOutline> {
    pipeline
        .stages
        .iter()
        .map(|s| StageOutline {
            stage: s.name.clone(),
            model: s.model.clone(),
            fanned: s.fan_out != FanOut::One,
        })
        .collect()
}

fn progress(args: &SimulateArgs, policy: &str) -> ProgressBar {
    if !args.progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(args.params.duration / MS);
    let style = ProgressStyle::with_template(
        "{prefix:>18} [{bar:40}] {percent:>3}% simulated, {elapsed} wall",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style.progress_chars("=> "));
    bar.set_prefix(policy.to_owned());
    bar
}

/// Runs one policy on the workload in virtual time.
pub fn run_policy(
    args: &SimulateArgs,
    policy: &str,
    config: &Config,
    parts: &Parts,
) -> Result<PolicyReport, SimulateError> {
    let started = Instant::now();
    let system = virtual_system()?;
    let recorder = system.block_on(simulate(args, policy, config, parts))?;
    Ok(recorder.finish(policy, started.elapsed().as_secs_f64()))
}

async fn simulate(
    args: &SimulateArgs,
    policy: &str,
    config: &Config,
    parts: &Parts,
) -> Result<Recorder, SimulateError> {
    let clock = Clock::start_virtual();
    let runtime = RuntimeBuilder::from_config(clock, config)?.start()?;
    let recorder = Rc::new(RefCell::new(Recorder::new(
        args.params.duration,
        BUCKETS,
        TIMELINE,
    )));
    let listener = {
        let recorder = Rc::clone(&recorder);
        Listener::spawn(runtime.events_from_start(), move |event| match event {
            Event::ActionDone(done) => recorder.borrow_mut().action(&done),
            Event::FanOut(f) => {
                let count = u32::try_from(f.count).unwrap_or(u32::MAX);
                recorder.borrow_mut().fan_out(&f.stage, count)
            }
            Event::StageAnswered(a) => recorder
                .borrow_mut()
                .stage_answered(&a.stage, a.latency, a.outcome),
            _ => {}
        })
    };
    let (target, inputs) = match &args.pipeline {
        None => {
            let names = runtime.models.iter().map(|m| m.name.clone()).collect();
            let target = Target::Models(Rc::new(names), runtime.controller.clone());
            (target, zero_inputs(&runtime.models[0].inputs))
        }
        Some(pipeline_args) => {
            let (slo, rate) = (args.params.slo, args.params.rate);
            let (pipeline, actor) = launch(pipeline_args, slo, parts, rate, &runtime)?;
            let stages = outlines(&pipeline);
            recorder
                .borrow_mut()
                .pipeline(&pipeline.name, args.params.slo, stages);
            (Target::Pipeline(actor), zero_inputs(&pipeline.inputs))
        }
    };
    let sender = Sender {
        clock,
        target,
        inputs: Arc::new(inputs),
        default_slo: args.params.slo,
        recorder: Rc::clone(&recorder),
        outstanding: Rc::new(Cell::new(0)),
    };
    let bar = progress(args, policy);
    if args.workload == WorkloadKind::Closed {
        closed_loop(args, &sender, &bar).await;
    } else {
        open_loop(args, &sender, &bar).await?;
    }
    if args.pipeline.is_some() {
        // Root requests make sub-requests after their arrival; a drain would refuse
        // those. Each root ends by its deadline: wait for them all (in virtual time).
        while sender.outstanding.get() > 0 {
            clock.sleep_until(clock.now() + MS).await;
        }
    }
    runtime.shutdown().await;
    while sender.outstanding.get() > 0 {
        tokio::task::yield_now().await;
    }
    // Every action has been reported by now; the listener takes the events still queued.
    let lost = listener.finish().await;
    bar.finish_and_clear();
    if lost > 0 {
        return Err(SimulateError::EventsLost(lost));
    }
    // Every task that held the recorder is done; take it out whole.
    let empty = Recorder::new(args.params.duration, BUCKETS, TIMELINE);
    Ok(recorder.replace(empty))
}

/// Sends each arrival at its time, without waiting for answers.
async fn open_loop(
    args: &SimulateArgs,
    sender: &Sender,
    bar: &ProgressBar,
) -> Result<(), SimulateError> {
    let mut stream = workload::open(&args.workload, &args.params)?;
    let mut sent = 0u64;
    while let Some(arrival) = stream.next_arrival() {
        if arrival.at > sender.clock.now() {
            sender.clock.sleep_until(arrival.at).await;
        }
        actix_rt::spawn(sender.request(arrival));
        sent += 1;
        if sent.is_multiple_of(4096) {
            bar.set_position(arrival.at / MS);
        }
    }
    Ok(())
}

/// `clients` clients, each sending its next request `think` after its last answer.
async fn closed_loop(args: &SimulateArgs, sender: &Sender, bar: &ProgressBar) {
    let plan = Rc::new(RefCell::new(ClosedLoop::new(
        args.clients,
        args.think,
        &args.params,
    )));
    let duration = args.params.duration;
    let clients: Vec<_> = (0..args.clients)
        .map(|client| {
            let (plan, sender, bar) = (Rc::clone(&plan), sender.clone(), bar.clone());
            actix_rt::spawn(async move {
                loop {
                    let now = sender.clock.now();
                    if now >= duration {
                        break;
                    }
                    let arrival = plan.borrow_mut().next_request(client, now);
                    sender.request(arrival).await;
                    if client == 0 {
                        bar.set_position(now / MS);
                    }
                    let think = plan.borrow().think();
                    sender.clock.sleep_until(sender.clock.now() + think).await;
                }
            })
        })
        .collect();
    for client in clients {
        // A client task only ends by finishing its loop.
        let _ = client.await;
    }
}
