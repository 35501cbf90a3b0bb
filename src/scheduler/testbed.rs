//! A discrete-event stand-in for executors, for exercising a policy without actors.
//!
//! Each device is the executor core (`crate::protocol::core`, the same rules the executor
//! actor follows) with durations taken from the models' profiles times a factor, so a test
//! can give the policy exact or wrong estimates. The testbed checks the policy's promises
//! as it goes and reports what it saw, including the LOADs a device had to refuse (for
//! want of pages, or of weights already there) that a policy mirroring the devices right
//! never sends. Property tests and the policy benchmark run on it; the real actors have
//! their own tests.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::hash::BuildHasherDefault;

use super::ids::{IdHasher, IdMap};

use super::{Action, ActionError, ActionKind, Measured, Outcome, Plan, Policy, Request, Verdict};
use crate::model::{ModelProfile, RequestId};
use crate::protocol::core::{ExecutorCore, Lane, Step};
use crate::time::Nanos;

mod device_time;
mod driver;
use driver::Stream;
pub use driver::{Driver, Reaction, Report};

/// Rounds at one instant after which the testbed calls the run a livelock: the policy
/// keeps planning work that is refused at once and never lets time pass. A healthy run
/// takes a handful of rounds per instant (an action started, a refusal observed).
const STALL_LIMIT: u32 = 10_000;

/// One emulated device.
#[derive(Debug)]
struct Device {
    core: ExecutorCore<Action>,
    /// Per lane: the action running and what it will report.
    running: [Option<(Action, Measured)>; 2],
    /// Per lane: the earliest pending `Start` event, so a lane is not woken twice.
    armed: [Option<Nanos>; 2],
    /// Taken away (`Testbed::remove_at`): it reports nothing more.
    removed: bool,
}

/// Lanes travel in events by index (events are ordered, lanes need not be).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Start {
        device: usize,
        lane: usize,
    },
    End {
        device: usize,
        lane: usize,
    },
    /// The device vanishes (its worker was lost) and the policy is told.
    Remove {
        device: usize,
    },
}

/// Executors in memory around a policy.
pub struct Testbed<P> {
    pub policy: P,
    now: Nanos,
    devices: Vec<Device>,
    /// True behaviour of each model: what the devices take, whatever the policy believes.
    truth: Vec<(u32, ModelProfile)>,
    /// Multiplier of true durations over the profiles.
    factor: f64,
    /// Relative spread of each action's duration around that (a noisy device).
    spread: f64,
    /// Slow spells: (period, length, factor): an action that begins within the first
    /// `length` of a `period` takes `factor` times longer (a host busy with other work).
    spells: Option<(Nanos, Nanos, f64)>,
    /// What the first reports of runs claim they took, whatever they took (a remote
    /// worker whose clock is wrong), in the order the runs begin: the duration, and the
    /// end that far after the start. Later reports tell the truth.
    claimed: VecDeque<Nanos>,
    /// Requests whose inputs the model fails on: a batch holding one reports
    /// `ActionError::Model`, and a request answered with that error that is not one of
    /// these is a violation (it failed for another's inputs).
    poisoned: HashSet<u64, BuildHasherDefault<IdHasher>>,
    max_batch: usize,
    events: BinaryHeap<Reverse<(Nanos, u64, Event)>>,
    seq: u64,
    /// Requests admitted and not yet answered: a second answer finds its request gone.
    /// Only the waiting ones are kept, so the set stays as small as the backlog (a set of
    /// every answer grew with the run and cost the policy benchmark a tenth of its time).
    unanswered: HashSet<u64, BuildHasherDefault<IdHasher>>,
    /// Items of each admitted request, until it is put in a batch (a second batch of it
    /// is a split request).
    items: IdMap<u64, u32>,
    /// Items of each request in a batch that started: given back if its device is removed
    /// mid-run (the policy then re-plans the request, which is no split).
    running_items: IdMap<u64, u32>,
    report: Report,
    plan: Plan,
}

impl<P: Policy> Testbed<P> {
    /// `devices` gives each device's pages; `models` each model's pages and true profile.
    pub fn new(
        policy: P,
        devices: &[u32],
        models: Vec<(u32, ModelProfile)>,
        max_batch: usize,
    ) -> Self {
        let devices = devices
            .iter()
            .map(|&pages| Device {
                core: ExecutorCore::new(pages),
                running: [None, None],
                armed: [None, None],
                removed: false,
            })
            .collect();
        Self {
            policy,
            now: 0,
            devices,
            truth: models,
            factor: 1.0,
            spread: 0.0,
            spells: None,
            claimed: Default::default(),
            poisoned: HashSet::default(),
            max_batch,
            events: BinaryHeap::new(),
            seq: 0,
            unanswered: HashSet::default(),
            items: IdMap::default(),
            running_items: IdMap::default(),
            report: Report::default(),
            plan: Plan::default(),
        }
    }

    /// Makes the first reports claim that their actions took `claimed` (in the order
    /// they begin), however long they took.
    pub fn with_claimed_durations(mut self, claimed: Vec<Nanos>) -> Self {
        self.claimed = claimed.into();
        self
    }

    /// Makes the model fail on the inputs of `requests`: every batch holding one of them
    /// reports `ActionError::Model` when it ends.
    pub fn with_poisoned(mut self, requests: impl IntoIterator<Item = RequestId>) -> Self {
        self.poisoned = requests.into_iter().map(|r| r.0).collect();
        self
    }

    /// Makes every action take `factor` times its profiled duration.
    pub fn with_factor(mut self, factor: f64) -> Self {
        self.factor = factor;
        self
    }

    /// Makes every action take up to `spread` times its duration more or less, at random
    /// but the same for the same action id: a noisy device, still reproducible.
    pub fn with_spread(mut self, spread: f64) -> Self {
        self.spread = spread;
        self
    }

    /// Makes every action that begins within the first `length` of each `period` take
    /// `factor` times longer: slow spells that last several runs, which a window of the
    /// last runs does not foresee.
    pub fn with_slow_spells(mut self, period: Nanos, length: Nanos, factor: f64) -> Self {
        self.spells = Some((period.max(1), length, factor));
        self
    }

    /// Takes `device` away at `at`, as a lost worker: what runs on it never reports, and
    /// the policy is told to remove it (`Policy::remove_device`). An action planned on it
    /// after that is a violation.
    pub fn remove_at(mut self, device: usize, at: Nanos) -> Self {
        self.at(at, Event::Remove { device });
        self
    }

    /// Feeds the arrivals (sorted by arrival) and runs until everything is answered.
    pub fn run(&mut self, arrivals: impl IntoIterator<Item = Request>) -> Report {
        self.run_driven(&mut Stream(arrivals.into_iter().peekable()))
    }

    /// Runs with requests made by `driver` until everything is answered.
    pub fn run_driven(&mut self, driver: &mut dyn Driver) -> Report {
        let mut stalled = 0;
        loop {
            let next_arrival = driver.next_arrival();
            let next_event = self.events.peek().map(|Reverse((t, _, _))| *t);
            let wake = self.policy.next_wakeup(self.now);
            let Some(t) = [next_arrival, next_event, wake].into_iter().flatten().min() else {
                break;
            };
            if next_arrival.is_none() && next_event.is_none() && self.unanswered.is_empty() {
                break;
            }
            stalled = if t <= self.now { stalled + 1 } else { 0 };
            if stalled > STALL_LIMIT {
                let now = self.now;
                self.violation(format!("livelock: no progress past {now} ns"));
                break;
            }
            self.now = self.now.max(t);
            for r in driver.arrivals(self.now, &self.policy) {
                let before = self.plan.answers.len();
                self.admit(r);
                let refused = self.plan.answers[before..]
                    .iter()
                    .filter(|a| a.request == r.id && matches!(a.verdict, Verdict::Refused(_)));
                self.report.refused_on_arrival += refused.count();
            }
            while self
                .events
                .peek()
                .is_some_and(|Reverse((t, _, _))| *t <= self.now)
            {
                if let Some(Reverse((_, _, event))) = self.events.pop() {
                    self.handle(event);
                }
            }
            self.policy.schedule(self.now, &mut self.plan);
            self.dispatch(driver);
        }
        let unanswered = self.unanswered.len();
        if unanswered > 0 {
            self.violation(format!("{unanswered} requests never answered"));
        }
        std::mem::take(&mut self.report)
    }

    fn violation(&mut self, what: String) {
        if self.report.violations.len() < 20 {
            self.report.violations.push(what);
        }
    }

    fn at(&mut self, t: Nanos, event: Event) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, event)));
    }

    /// Carries out the plan, and what the driver makes of its answers, until it is empty.
    fn dispatch(&mut self, driver: &mut dyn Driver) {
        while !self.plan.is_empty() {
            let plan = std::mem::take(&mut self.plan);
            let mut reacted = false;
            // A batch planned in the same step as an answer was decided with it, not
            // after it: the driver hears of the batch first.
            self.carry_out(plan.actions, driver);
            for answer in plan.answers {
                let reaction = driver.answered(answer.request, &answer.verdict, self.now);
                self.record(answer.request.0, &answer.verdict);
                for (request, model) in reaction.withdraw {
                    self.policy.withdraw(request, model, &mut self.plan);
                }
                for r in reaction.submit {
                    reacted = true;
                    self.admit(r);
                }
            }
            if reacted {
                self.policy.schedule(self.now, &mut self.plan);
            }
        }
    }

    fn carry_out(&mut self, actions: Vec<Action>, driver: &mut dyn Driver) {
        for action in actions {
            if let ActionKind::Infer { requests } = &action.kind {
                driver.planned(requests, self.now);
            }
            self.report.actions += 1;
            let device = action.device.0 as usize;
            if self.devices[device].removed {
                self.violation(format!(
                    "action {} planned on removed device {device}",
                    action.id.0
                ));
                continue;
            }
            let lane = self.devices[device].core.submit(action);
            self.arm(device, lane, self.now);
        }
    }

    /// Wakes `lane` of `device` at `at`, unless it is already woken no later.
    fn arm(&mut self, device: usize, lane: Lane, at: Nanos) {
        let armed = &mut self.devices[device].armed[lane.index()];
        if armed.is_some_and(|a| a <= at) {
            return;
        }
        *armed = Some(at);
        let lane = lane.index();
        self.at(at, Event::Start { device, lane });
    }

    /// Hands a request to the policy.
    fn admit(&mut self, r: Request) {
        self.report.admitted += 1;
        self.unanswered.insert(r.id.0);
        self.items.insert(r.id.0, r.items());
        self.policy.admit(r, self.now, &mut self.plan);
    }

    fn record(&mut self, request: u64, verdict: &Verdict) {
        match verdict {
            Verdict::Completed { late, .. } => {
                self.report.completed += 1;
                self.report.late += usize::from(*late);
            }
            Verdict::Refused(r) => {
                *self.report.refused.entry(r.outcome().as_str()).or_default() += 1
            }
            Verdict::Failed(error) => {
                self.report.failed += 1;
                let innocent = !self.poisoned.contains(&request);
                if innocent && matches!(error, ActionError::Model(_)) {
                    self.violation(format!(
                        "request {request} failed for another request's inputs"
                    ));
                }
            }
        }
        if !self.unanswered.remove(&request) {
            self.violation(format!(
                "request {request} answered twice (or never admitted)"
            ));
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Start { device, .. } | Event::End { device, .. }
                if self.devices[device].removed => {}
            Event::Remove { device } => {
                self.devices[device].removed = true;
                self.give_back_items(device);
                let id = crate::model::DeviceId(device as u32);
                self.policy.remove_device(id, self.now, &mut self.plan);
            }
            Event::Start { device, lane } => {
                let armed = &mut self.devices[device].armed[lane];
                if armed.is_some_and(|a| a <= self.now) {
                    *armed = None;
                }
                self.pump(device, Lane::ALL[lane]);
            }
            Event::End { device, lane } => {
                let Some((action, measured)) = self.devices[device].running[lane].take() else {
                    return;
                };
                let failed = self.fails(&action);
                self.devices[device].core.finish(&action, !failed);
                match action.kind {
                    ActionKind::Load => self.report.loads += 1,
                    ActionKind::Unload => self.report.unloads += 1,
                    // No policy plans one: the controller's health rule sends them.
                    ActionKind::Probe => {}
                    ActionKind::Infer { ref requests } => {
                        for r in requests {
                            let n = self.running_items.remove(&r.0);
                            // A failed batch's requests may be batched again.
                            if let (true, Some(n)) = (failed, n) {
                                self.items.insert(r.0, n);
                            }
                        }
                    }
                }
                let result = match failed {
                    true => Err(ActionError::Model("poisoned inputs".into())),
                    false => Ok(measured),
                };
                self.observe(&action, result);
                self.pump(device, Lane::ALL[lane]);
            }
        }
    }

    /// Whether `action` is a batch holding a poisoned request.
    fn fails(&self, action: &Action) -> bool {
        match &action.kind {
            ActionKind::Infer { requests } => requests.iter().any(|r| self.poisoned.contains(&r.0)),
            _ => false,
        }
    }

    /// The batches running on a removed device will never end: their requests may be
    /// batched again.
    fn give_back_items(&mut self, device: usize) {
        for running in &mut self.devices[device].running {
            if let Some((action, _)) = running.take() {
                if let ActionKind::Infer { requests } = &action.kind {
                    for r in requests {
                        if let Some(n) = self.running_items.remove(&r.0) {
                            self.items.insert(r.0, n);
                        }
                    }
                }
            }
        }
    }

    /// Starts or refuses what the lane has due, or wakes it when something will be.
    fn pump(&mut self, device: usize, lane: Lane) {
        loop {
            match self.devices[device].core.next(lane, self.now) {
                Step::Idle => return,
                Step::WaitUntil(at) => return self.arm(device, lane, at),
                Step::Refuse(action, error) => self.refuse(&action, error),
                Step::Start(action) => self.begin(device, lane, action),
            }
        }
    }

    fn refuse(&mut self, action: &Action, error: ActionError) {
        match error {
            ActionError::NoFreePages => self.report.loads_without_pages += 1,
            ActionError::AlreadyResident => self.report.duplicate_loads += 1,
            _ => {}
        }
        self.observe(action, Err(error));
    }

    fn observe(&mut self, action: &Action, result: Result<Measured, ActionError>) {
        let outcome = Outcome {
            action: action.id,
            result,
        };
        self.policy.observe(outcome, self.now, &mut self.plan);
    }
}
