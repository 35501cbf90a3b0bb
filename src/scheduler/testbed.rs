//! A discrete-event stand-in for executors, for exercising a policy without actors.
//!
//! Devices here follow the executor contract (lanes in `earliest` order, refusal after
//! `latest`, residency and page checks) with durations taken from the models' profiles
//! times a factor, so a test can give the policy exact or wrong estimates. The testbed
//! checks the policy's promises as it goes and reports what it saw. Property tests and the
//! policy benchmark run on it; the real actors have their own tests.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use super::ids::IdMap;

use super::{Action, ActionError, ActionKind, Measured, Outcome, Plan, Policy, Request, Verdict};
use crate::model::{ActionId, ModelId, ModelProfile};
use crate::time::Nanos;

/// One emulated device.
#[derive(Debug, Default)]
struct Device {
    capacity: u32,
    used: u32,
    /// Resident models and whether their load has finished.
    resident: IdMap<ModelId, bool>,
    /// Per lane (0 = exec, 1 = load): waiting actions by (earliest, id), and busy flag.
    queues: [BTreeMap<(Nanos, ActionId), Action>; 2],
    busy: [bool; 2],
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Start {
        device: usize,
        lane: usize,
    },
    End {
        device: usize,
        lane: usize,
        action: ActionId,
    },
}

/// What a run saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub admitted: usize,
    pub completed: usize,
    pub late: usize,
    pub refused: BTreeMap<&'static str, usize>,
    pub failed: usize,
    pub actions: usize,
    pub batches: usize,
    pub batched_requests: usize,
    pub loads: usize,
    pub unloads: usize,
    /// Broken promises; empty if the policy kept them all.
    pub violations: Vec<String>,
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
    max_batch: usize,
    events: BinaryHeap<Reverse<(Nanos, u64, Event)>>,
    seq: u64,
    running: IdMap<ActionId, (Action, Result<Measured, ActionError>)>,
    answered: IdMap<u64, Verdict>,
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
            .map(|&capacity| Device {
                capacity,
                ..Device::default()
            })
            .collect();
        Self {
            policy,
            now: 0,
            devices,
            truth: models,
            factor: 1.0,
            max_batch,
            events: BinaryHeap::new(),
            seq: 0,
            running: IdMap::default(),
            answered: IdMap::default(),
            report: Report::default(),
            plan: Plan::default(),
        }
    }

    /// Makes every action take `factor` times its profiled duration.
    pub fn with_factor(mut self, factor: f64) -> Self {
        self.factor = factor;
        self
    }

    /// Feeds the arrivals (sorted by arrival) and runs until everything is answered.
    pub fn run(&mut self, arrivals: impl IntoIterator<Item = Request>) -> Report {
        let mut arrivals = arrivals.into_iter().peekable();
        loop {
            let next_arrival = arrivals.peek().map(|r| r.arrival);
            let next_event = self.events.peek().map(|Reverse((t, _, _))| *t);
            let wake = self.policy.next_wakeup(self.now);
            let Some(t) = [next_arrival, next_event, wake].into_iter().flatten().min() else {
                break;
            };
            if next_arrival.is_none()
                && next_event.is_none()
                && self.report.admitted == self.answered.len()
            {
                break;
            }
            self.now = self.now.max(t);
            while let Some(r) = arrivals.next_if(|r| r.arrival <= self.now) {
                self.report.admitted += 1;
                self.policy.admit(r, self.now, &mut self.plan);
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
            self.dispatch();
        }
        let unanswered = self.report.admitted - self.answered.len();
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

    fn dispatch(&mut self) {
        let mut plan = std::mem::take(&mut self.plan);
        for answer in plan.answers.drain(..) {
            self.record(answer.request.0, answer.verdict);
        }
        for action in plan.actions.drain(..) {
            self.report.actions += 1;
            let lane = usize::from(action.kind.is_load_lane());
            let device = action.device.0 as usize;
            self.devices[device].queues[lane].insert((action.earliest, action.id), action);
            if !self.devices[device].busy[lane] {
                self.devices[device].busy[lane] = true;
                self.at(self.now, Event::Start { device, lane });
            }
        }
        self.plan = plan;
    }

    fn record(&mut self, request: u64, verdict: Verdict) {
        match &verdict {
            Verdict::Completed { late, .. } => {
                self.report.completed += 1;
                self.report.late += usize::from(*late);
            }
            Verdict::Refused(r) => {
                *self.report.refused.entry(r.outcome().as_str()).or_default() += 1
            }
            Verdict::Failed(_) => self.report.failed += 1,
        }
        if self.answered.insert(request, verdict).is_some() {
            self.violation(format!("request {request} answered twice"));
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Start { device, lane } => self.start(device, lane),
            Event::End {
                device,
                lane,
                action,
            } => {
                let Some((action, result)) = self.running.remove(&action) else {
                    return;
                };
                self.finish(device, &action, &result);
                self.policy.observe(
                    Outcome {
                        action: action.id,
                        result,
                    },
                    self.now,
                    &mut self.plan,
                );
                self.at(self.now, Event::Start { device, lane });
            }
        }
    }

    fn start(&mut self, device: usize, lane: usize) {
        let Some((&(earliest, id), _)) = self.devices[device].queues[lane].first_key_value() else {
            self.devices[device].busy[lane] = false;
            return;
        };
        if earliest > self.now {
            self.at(earliest, Event::Start { device, lane });
            return;
        }
        let Some(action) = self.devices[device].queues[lane].remove(&(earliest, id)) else {
            return;
        };
        let result = self.begin(device, &action).map(|duration| Measured {
            begin: self.now,
            end: self.now + duration,
            duration,
        });
        let end = result.as_ref().map_or(self.now, |m| m.end);
        self.running.insert(id, (action, result));
        self.at(
            end,
            Event::End {
                device,
                lane,
                action: id,
            },
        );
    }

    /// Checks and starts an action as an executor would; returns its true duration.
    fn begin(&mut self, device: usize, action: &Action) -> Result<Nanos, ActionError> {
        if self.now > action.latest {
            return Err(ActionError::TooLate);
        }
        let model = action.model.0 as usize;
        let (pages, profile) = &self.truth[model];
        let factor = self.factor;
        let scaled = |t: Nanos| (t as f64 * factor).round() as Nanos;
        let d = &mut self.devices[device];
        match &action.kind {
            ActionKind::Load => {
                if d.used + pages > d.capacity || d.resident.contains_key(&action.model) {
                    return Err(ActionError::NoFreePages);
                }
                d.used += pages;
                d.resident.insert(action.model, false);
                Ok(scaled(profile.load_latency))
            }
            ActionKind::Unload => {
                if d.resident.remove(&action.model).is_some() {
                    d.used -= pages;
                }
                Ok(0)
            }
            ActionKind::Infer { requests } => {
                if d.resident.get(&action.model) != Some(&true) {
                    return Err(ActionError::NotResident);
                }
                let batch = requests.len();
                let latency = profile.latency(batch as u32);
                if latency.is_none() || batch > self.max_batch {
                    self.violation(format!("batch of {batch} for model {model} is not allowed"));
                }
                self.report.batches += 1;
                self.report.batched_requests += batch;
                Ok(scaled(latency.unwrap_or(0)))
            }
        }
    }

    fn finish(&mut self, device: usize, action: &Action, result: &Result<Measured, ActionError>) {
        let (used, capacity) = (self.devices[device].used, self.devices[device].capacity);
        if used > capacity {
            self.violation(format!(
                "device {device} holds {used} pages over its capacity"
            ));
        }
        let d = &mut self.devices[device];
        if result.is_err() {
            return;
        }
        match action.kind {
            ActionKind::Load => {
                d.resident.insert(action.model, true);
                self.report.loads += 1;
            }
            ActionKind::Unload => self.report.unloads += 1,
            ActionKind::Infer { .. } => {}
        }
    }
}
