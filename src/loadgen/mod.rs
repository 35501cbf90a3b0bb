//! `clockwork loadgen`: the simulator's workloads sent over real HTTP to a running server,
//! timed on the client side, reported in the format of `clockwork simulate` so that a
//! simulated run and a real one can be compared line by line.
//!
//! Open-loop kinds (`poisson`, `fixed`, `bursty`, `ramp`, `maf...`) send each arrival at
//! its time whatever the server does; `closed` keeps `clients` requests in flight, each
//! client sending its next request `think` after its previous answer. Workload model `k`
//! is the `k`-th model named with `--model`, or else the server's `k`-th ready model
//! (repository index order); a pipeline is sent to like a model. Device-side numbers of the
//! report (loads, batches, prediction error) are not visible to a client and stay zero;
//! the server's `/metrics` has them.

mod answer;
mod client;
mod h1;
pub mod timing;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use actix_web::rt::task::JoinHandle;
use indicatif::{ProgressBar, ProgressStyle};

pub use answer::{NoAnswer, Reply, Sent, NO_ANSWER};
pub use client::{client, prepare, ready_models, ClientError, Prepared};
pub use h1::{send, Transport};

use crate::report::{Recorder, Report};
use crate::time::Nanos;
use crate::workload::{self, Arrival, ClosedLoop, WorkloadKind, WorkloadParams};

/// What to send, where, and for how long.
#[derive(Clone, Debug)]
pub struct LoadgenArgs {
    /// Base URL of the server, e.g. `http://127.0.0.1:8000`.
    pub url: String,
    /// The models (or pipelines) to send to, workload model `k` being the `k`-th; empty:
    /// every ready one, in repository index order.
    pub models: Vec<String>,
    pub workload: WorkloadKind,
    /// Workload parameters; `models` is set from the server's ready models.
    pub params: WorkloadParams,
    /// Closed loop: clients and think time.
    pub clients: u32,
    pub think: Nanos,
    /// Client-side timeout of one request.
    pub timeout: Duration,
    /// Requests outstanding at most (and connections open at most): an arrival beyond
    /// them is counted `client_overflow` and not sent, so that an open-loop run measures
    /// the server, not a queue inside this client.
    pub max_in_flight: usize,
    /// Where report.json, report.md and the plots go.
    pub out: PathBuf,
    /// Shows a progress bar on stderr.
    pub progress: bool,
    /// The command line, for the report.
    pub command: String,
}

/// Why a load run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("the server at {0} has no ready model")]
    NoModels(String),
    #[error("'{0}' is not a ready model or pipeline of the server (ready: {1})")]
    NotReady(String, String),
    #[error(transparent)]
    Workload(#[from] workload::WorkloadError),
    #[error(transparent)]
    Report(#[from] crate::report::ReportError),
}

/// Results as they come in, shared by the tasks of one run (single-threaded).
struct Tally {
    recorder: Recorder,
    sent: u64,
    ok: u64,
    not_ok: u64,
    /// Requests sent and not yet answered.
    in_flight: usize,
    /// Answers' time in the server against their time here.
    timing: timing::ServerTiming,
}

type Shared = Rc<RefCell<Tally>>;

fn since(start: Instant) -> Nanos {
    start.elapsed().as_nanos() as Nanos
}

fn record(tally: &Shared, model: &str, arrival: Nanos, answered: Nanos, reply: Reply) {
    let mut t = tally.borrow_mut();
    t.in_flight = t.in_flight.saturating_sub(1);
    match &reply.sent {
        Sent::Answered(outcome) if outcome.is_success() => t.ok += 1,
        _ => t.not_ok += 1,
    }
    if let Sent::Answered(outcome) = reply.sent {
        let client = answered.saturating_sub(arrival) / 1_000;
        t.timing.record(model, outcome, client, reply.server_us);
    }
    t.recorder.answered(arrival, answered, reply.sent.into());
}

/// What every task of a run shares: the client, the prepared requests, the tally and the
/// run's start (cheap to clone: reference counts and an instant).
#[derive(Clone)]
struct Sender {
    /// How the inference requests go out (the index and metadata went through awc).
    http: Rc<Transport>,
    requests: Rc<Vec<Prepared>>,
    tally: Shared,
    start: Instant,
    /// `LoadgenArgs::max_in_flight`.
    max_in_flight: usize,
}

/// Counts an arrival as offered now: its time and number, or `None` (counted
/// `client_overflow`) when `max_in_flight` requests are outstanding already.
fn admit(sender: &Sender) -> Option<(Nanos, u64)> {
    let at = since(sender.start);
    let mut t = sender.tally.borrow_mut();
    t.sent += 1;
    t.recorder.offered(at);
    if t.in_flight >= sender.max_in_flight {
        t.not_ok += 1;
        let overflow = Sent::NoAnswer(NoAnswer::Overflow);
        t.recorder.answered(at, at, overflow.into());
        return None;
    }
    t.in_flight += 1;
    Some((at, t.sent))
}

/// Sends the `n`-th request, admitted at `at`, and records its answer.
async fn one(sender: Sender, arrival: Arrival, at: Nanos, n: u64) {
    let request = &sender.requests[arrival.model as usize % sender.requests.len()];
    let reply = send(&sender.http, request, arrival.slo, n).await;
    record(
        &sender.tally,
        &request.model,
        at,
        since(sender.start),
        reply,
    );
}

/// Runs the workload against the server and writes the report; must run inside an actix
/// system (the HTTP client is actix's).
pub async fn run(args: LoadgenArgs) -> Result<Report, LoadgenError> {
    let http = Rc::new(client(args.timeout, args.max_in_flight));
    let base = args.url.trim_end_matches('/').to_owned();
    let ready = ready_models(&http, &base).await?;
    if ready.is_empty() {
        return Err(LoadgenError::NoModels(base));
    }
    if let Some(missing) = args.models.iter().find(|m| !ready.contains(m)) {
        return Err(LoadgenError::NotReady(missing.clone(), ready.join(", ")));
    }
    let names = if args.models.is_empty() {
        ready
    } else {
        args.models.clone()
    };
    let mut requests = Vec::new();
    for (k, name) in names.iter().enumerate() {
        let seed = args.params.seed.wrapping_add(k as u64);
        requests.push(prepare(&http, &base, name, seed).await?);
    }
    let mut params = args.params.clone();
    params.models = names.len() as u32;
    let duration = params.duration;
    let sender = Sender {
        http: Rc::new(Transport::for_base(&base, args.timeout, (*http).clone())),
        requests: Rc::new(requests),
        tally: Rc::new(RefCell::new(Tally {
            recorder: Recorder::new(duration, 60, duration.min(1_000_000_000)),
            sent: 0,
            ok: 0,
            not_ok: 0,
            in_flight: 0,
            timing: timing::ServerTiming::default(),
        })),
        start: Instant::now(),
        max_in_flight: args.max_in_flight.max(1),
    };
    let bar = progress(args.progress, duration);
    let tasks = if args.workload == WorkloadKind::Closed {
        closed_loop(&sender, &args, &params)
    } else {
        open_loop(&sender, &args.workload, &params, bar.as_ref()).await?
    };
    // Let the answers of the last requests come in, showing progress meanwhile (the
    // open loop's requests are counted, not kept: a handle per request held every
    // finished request's task in memory until the end).
    let busy = |tasks: &[JoinHandle<()>]| {
        sender.tally.borrow().in_flight > 0 || tasks.iter().any(|t| !t.is_finished())
    };
    while busy(&tasks) {
        if let Some(bar) = &bar {
            update(bar, &sender.tally, sender.start);
        }
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let report = finish(&sender, &args, &params, base, &names);
    crate::report::write_all(&args.out, &report)?;
    let written = sender.tally.borrow().timing.write(&args.out);
    if let Err(error) = written {
        tracing::warn!(%error, "cannot write server_timing.json");
    }
    Ok(report)
}

/// Starts the closed-loop clients; each sends its next request `think` after its
/// previous answer until the run's duration is over.
fn closed_loop(
    sender: &Sender,
    args: &LoadgenArgs,
    params: &WorkloadParams,
) -> Vec<JoinHandle<()>> {
    let picker = Rc::new(RefCell::new(ClosedLoop::new(
        args.clients,
        args.think,
        params,
    )));
    let (duration, think) = (params.duration, Duration::from_nanos(args.think));
    (0..args.clients)
        .map(|id| {
            let (sender, picker) = (sender.clone(), picker.clone());
            actix_web::rt::spawn(async move {
                while since(sender.start) < duration {
                    let arrival = picker.borrow_mut().next_request(id, since(sender.start));
                    if let Some((at, n)) = admit(&sender) {
                        one(sender.clone(), arrival, at, n).await;
                    }
                    actix_web::rt::time::sleep(think).await;
                }
            })
        })
        .collect()
}

/// Sends every arrival of an open-loop workload at its time, whatever the server does.
async fn open_loop(
    sender: &Sender,
    kind: &WorkloadKind,
    params: &WorkloadParams,
    bar: Option<&ProgressBar>,
) -> Result<Vec<JoinHandle<()>>, LoadgenError> {
    let mut stream = workload::open(kind, params)?;
    while let Some(arrival) = stream.next_arrival() {
        let wait = arrival.at.saturating_sub(since(sender.start));
        if wait > 0 {
            actix_web::rt::time::sleep(Duration::from_nanos(wait)).await;
        }
        // Only a request that is sent gets a task; its handle is dropped (the task runs
        // on, detached) and `in_flight` says when all have answered.
        if let Some((at, n)) = admit(sender) {
            drop(actix_web::rt::spawn(one(sender.clone(), arrival, at, n)));
        }
        if let Some(bar) = bar {
            update(bar, &sender.tally, sender.start);
        }
    }
    Ok(Vec::new())
}

/// The report of a finished run: the tally's numbers and the run's setup.
fn finish(
    sender: &Sender,
    args: &LoadgenArgs,
    params: &WorkloadParams,
    base: String,
    models: &[String],
) -> Report {
    let wall_s = sender.start.elapsed().as_secs_f64();
    let empty = Recorder::new(1, 1, 1);
    let recorder = std::mem::replace(&mut sender.tally.borrow_mut().recorder, empty);
    let policy = recorder.finish("server", wall_s);
    let setup = BTreeMap::from([
        ("url".to_owned(), base),
        ("workload".to_owned(), args.workload.to_string()),
        ("models".to_owned(), models.join(", ")),
        ("rate".to_owned(), params.rate.to_string()),
        (
            "duration_s".to_owned(),
            (params.duration as f64 / 1e9).to_string(),
        ),
        (
            "clock".to_owned(),
            "real time, client-side latencies".to_owned(),
        ),
    ]);
    Report {
        command: args.command.clone(),
        setup,
        policies: vec![policy],
    }
}

fn progress(show: bool, duration: Nanos) -> Option<ProgressBar> {
    if !show {
        return None;
    }
    let bar = ProgressBar::new(duration / 1_000_000_000);
    let style = ProgressStyle::with_template("{bar:40} {pos}/{len} s {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    Some(bar)
}

fn update(bar: &ProgressBar, tally: &Shared, start: Instant) {
    bar.set_position(start.elapsed().as_secs());
    let t = tally.borrow();
    bar.set_message(format!("sent {} ok {} not ok {}", t.sent, t.ok, t.not_ok));
}
