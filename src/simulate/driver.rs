//! One policy's run: a virtual-time actor system, the workload driver and the recorder.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use super::listener::Listener;
use super::{SimulateArgs, SimulateError};
use crate::actors::messages::Submit;
use crate::actors::{Controller, RuntimeBuilder};
use crate::config::Config;
use crate::events::Event;
use crate::outcome::Outcome;
use crate::report::{Answered, PolicyReport, Recorder};
use crate::tensor::Tensor;
use crate::time::{virtual_system, Clock, Nanos, MS};
use crate::workload::{self, Arrival, ClosedLoop, WorkloadKind};

/// Goodput-over-time buckets in a report.
const BUCKETS: u64 = 120;
/// Length of the device timeline excerpt.
const TIMELINE: Nanos = 200 * MS;

/// What every request task needs.
#[derive(Clone)]
struct Sender {
    clock: Clock,
    controller: actix::Addr<Controller>,
    /// Model names, by index.
    names: Rc<Vec<String>>,
    /// One item of the model's inputs, shared by every request.
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
    fn request(&self, arrival: Arrival) -> impl std::future::Future<Output = ()> + 'static {
        self.recorder.borrow_mut().offered(arrival.at);
        self.outstanding.set(self.outstanding.get() + 1);
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.controller.do_send(Submit {
            model: self.names[arrival.model as usize].clone(),
            inputs: Arc::clone(&self.inputs),
            slo: Some(arrival.slo.unwrap_or(self.default_slo)),
            edge: None,
            root: None,
            reply,
        });
        let this = self.clone();
        async move {
            let how = match answer.await {
                Ok(Ok(ok)) if ok.late => Answered::Known(Outcome::Late),
                Ok(Ok(_)) => Answered::Known(Outcome::Ok),
                Ok(Err(error)) => Answered::Known(error.kind()),
                // The controller stopped before answering: count it as refused.
                Err(_) => Answered::Known(Outcome::ShuttingDown),
            };
            let now = this.clock.now();
            this.recorder.borrow_mut().answered(arrival.at, now, how);
            this.outstanding.set(this.outstanding.get() - 1);
        }
    }
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
) -> Result<PolicyReport, SimulateError> {
    let started = Instant::now();
    let system = virtual_system()?;
    let recorder = system.block_on(simulate(args, policy, config))?;
    Ok(recorder.finish(policy, started.elapsed().as_secs_f64()))
}

async fn simulate(
    args: &SimulateArgs,
    policy: &str,
    config: &Config,
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
        Listener::spawn(runtime.events.subscribe(), move |event| match event {
            Event::ActionDone(done) => recorder.borrow_mut().action(&done),
            _ => {}
        })
    };
    let spec = &runtime.models[0];
    let inputs = spec
        .inputs
        .iter()
        .map(|t| {
            let shape: Vec<usize> = t
                .shape
                .iter()
                .map(|&d| usize::try_from(d).unwrap_or(1))
                .collect();
            let bytes = shape.iter().product::<usize>() * t.datatype.size().unwrap_or(1);
            Tensor {
                name: t.name.clone(),
                datatype: t.datatype,
                shape,
                data: vec![0u8; bytes].into(),
            }
        })
        .collect();
    let sender = Sender {
        clock,
        controller: runtime.controller.clone(),
        names: Rc::new(runtime.models.iter().map(|m| m.name.clone()).collect()),
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
        if sent % 4096 == 0 {
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
