//! The Clockwork policy (after the INFER5 scheduler of the Clockwork paper).
//!
//! - Requests wait in per-model queues ordered by deadline. A model resident on a device
//!   offers strategies "run batch b now"; the latest start time of the one it would run
//!   (`front.deadline - estimate(b)`, b the batch its queue fills that serves the most per
//!   unit of device time) orders the model in that device's priority queue.
//! - While a device's exec lane has less than `schedule_ahead` of planned work, the most
//!   urgent resident model gets a batch: requests that can no longer finish in time are
//!   refused first, then the largest allowed batch that still meets the front deadline.
//! - A request that waits until even an immediate start could not finish it in time is
//!   refused as timed out, at that moment rather than at its deadline.
//! - Queued requests give their model load demand; a device with a quiet load lane loads
//!   the model with the most unserved demand, evicting idle models first, then the least
//!   recently used. Models also get as many replicas as their measured arrival rate needs
//!   (`placement.rs`), and registered models are loaded into free pages before any traffic.
//! - Estimates are sliding-window percentiles of measured durations, per device kind; a
//!   device that runs much slower than its kind is planned at its own pace, and its kind
//!   learns its runs scaled back (`estimate::Slowdown`, `estimates.rs`).

mod admit;
mod behind;
mod devices;
mod estimates;
mod floor;
mod hindsight;
mod horizon;
mod infer;
mod load;
mod params;
mod placement;
mod rate;
mod shared;
mod steps;
mod view;

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashSet};

use super::device::DeviceMirror;
use super::estimate::{Estimator, Margins};
use super::ids::IdMap;
use super::queue::{ModelQueue, Queued};
use super::{
    Action, ActionError, ActionKind, Answer, DeviceInfo, DeviceSnapshot, Measured, ModelInfo,
    Outcome, Plan, Policy, PolicySnapshot, Refusal, Request, Verdict,
};
use crate::config::PolicyConfig;
use crate::model::{ActionId, DeviceId, ModelId, ModelProfile, RequestId};
use crate::time::{nanos, Nanos};

/// Demand is counted in parts per million of one device.
const DEVICE: u64 = 1_000_000;

use estimates::seed_exec;
use params::Params;
use placement::RankKey;
use rate::RateMeter;

/// Planned duration of an UNLOAD: bookkeeping only.
const UNLOAD_ESTIMATE: Nanos = 10_000;

/// Everything the policy tracks about one model.
struct ModelState {
    pages: u32,
    /// Allowed batch sizes, ascending, none above `max_batch`.
    batches: Vec<u32>,
    /// Execution estimates per device kind, per index into `batches`.
    exec: Vec<Vec<Estimator>>,
    /// Weight-load estimates per device kind.
    load: Vec<Estimator>,
    /// Profile the estimates of a new device kind are seeded from.
    info: ModelInfo,
    queue: ModelQueue,
    /// Devices where it is ready.
    ready_on: Vec<DeviceId>,
    /// Devices where it is being loaded.
    loading: u32,
    /// Priority last pushed to the devices' strategy queues.
    priority: Option<Nanos>,
    /// Key under which it sits in the load ranking.
    rank: Option<RankKey>,
    /// The armed entry in the expiry queue, for its front request.
    expiry: Option<Nanos>,
    /// When its newest execution measurement was taken: estimates older than
    /// `estimate_max_age` go back to the profile before its requests are refused on them.
    measured_at: Nanos,
    /// Demand of requests refused because nobody held the model and no load could finish
    /// in time: it still asks for a load, for the requests that will follow.
    missed: u64,
    /// Its arrivals (admitted or refused at once), for the replicas its rate needs.
    rate: RateMeter,
    /// What its queue took in and gave out lately, for the other models' projections on
    /// the devices it shares (`shared.rs`).
    flow: shared::Flow,
    /// Replicas a planner asked for ahead of its traffic (`Policy::set_replica_floor`).
    floor: u32,
    /// Which of its admitted requests finished in time, by their slack (`hindsight.rs`).
    hindsight: hindsight::Hindsight,
}

impl ModelState {
    /// Its replicas ready or loading, at least 1: what its work is split over when other
    /// models reckon with it on one device (`shared.rs`, `horizon.rs`).
    fn replicas(&self) -> f64 {
        (self.ready_on.len() + self.loading as usize).max(1) as f64
    }
}

/// An action sent and not yet reported.
struct InFlight {
    device: DeviceId,
    model: ModelId,
    work: Work,
}

enum Work {
    Load,
    Unload,
    Infer { batch: usize, requests: Vec<Queued> },
}

/// The Clockwork scheduling policy.
pub struct ClockworkPolicy {
    params: Params,
    /// Device kinds seen, by name; estimates are indexed by position.
    kinds: Vec<String>,
    models: Vec<ModelState>,
    devices: Vec<DeviceMirror>,
    in_flight: IdMap<ActionId, InFlight>,
    next_action: u64,
    /// (time a model's front request may have become hopeless, model); one armed entry
    /// per waiting model, plus superseded ones that are skipped.
    expiries: BinaryHeap<Reverse<(Nanos, ModelId)>>,
    /// Models with unserved load demand, by that demand.
    load_ranking: BTreeSet<(RankKey, ModelId)>,
    queued: usize,
    /// Devices marked suspect by the watchdog (usually none).
    suspects: usize,
    /// The latest `now` the policy was given: rates are read at it when a model is
    /// re-ranked outside a call that names the time.
    now: Nanos,
    /// Scratch space for the order in which devices pick loads (`schedule_devices`), kept
    /// between calls so that planning allocates nothing per event.
    load_order: Vec<(Nanos, usize)>,
    /// Margin taken off every objective for runs longer than planned: the widest the
    /// devices still serving have learned (`buffer` until learned). A request is admitted
    /// before its device is chosen, so it gets the widest.
    buffer: Nanos,
    /// Every live device has learned its buffer: objectives then lose it whatever their
    /// size (with the configured one, an objective below `schedule_ahead + buffer` keeps
    /// that much, or nothing tight could ever run and be measured).
    learned: bool,
    /// When a device's margins last learned from a report (`refresh_margins`).
    taught_at: Nanos,
    /// Requests withdrawn while in a batch not yet reported (`Policy::withdraw`): if that
    /// batch does not run they are answered `Withdrawn`, not queued again (their root is
    /// answered: no more device time for it).
    withdrawn: HashSet<RequestId>,
    /// INFERs failed as overdue, whose late reports still teach their devices' slowdown.
    given_up: devices::GivenUp,
    /// Devices in service or out but not gone, by kind index: a device is planned at its
    /// own pace only beside a peer of its kind (`devices.rs`, `learn_run`).
    peers: Vec<u32>,
}

impl ClockworkPolicy {
    pub fn new(config: &PolicyConfig) -> Self {
        Self {
            params: Params::from(config),
            kinds: Vec::new(),
            models: Vec::new(),
            devices: Vec::new(),
            in_flight: IdMap::default(),
            next_action: 0,
            expiries: BinaryHeap::new(),
            load_ranking: BTreeSet::new(),
            queued: 0,
            suspects: 0,
            now: 0,
            load_order: Vec::new(),
            buffer: nanos(config.buffer),
            learned: false,
            taught_at: 0,
            withdrawn: HashSet::new(),
            given_up: devices::GivenUp::default(),
            peers: Vec::new(),
        }
    }

    /// The ablation: the same planning, but hopeless requests are served late instead of
    /// refused early (nothing times out, nothing is dropped before its batch).
    pub fn without_early_drop(mut self) -> Self {
        self.params.early_drop = false;
        self
    }

    /// Projects arrivals behind the other models' work due before them on each shared
    /// device too (`shared.rs`), whatever the configuration said.
    pub fn with_shared_arrival(mut self) -> Self {
        self.params.shared_arrival = true;
        self
    }

    fn kind_index(&mut self, kind: &str) -> usize {
        if let Some(i) = self.kinds.iter().position(|k| k == kind) {
            return i;
        }
        self.kinds.push(kind.to_owned());
        self.peers.push(0);
        let (window, percentile) = (self.params.window, self.params.percentile);
        for model in &mut self.models {
            let profile = model.info.profile_for(kind);
            model
                .exec
                .push(seed_exec(profile, &model.batches, window, percentile));
            model
                .load
                .push(Estimator::new(profile.load_latency, window, percentile));
        }
        self.kinds.len() - 1
    }

    fn next_id(&mut self) -> ActionId {
        self.next_action += 1;
        ActionId(self.next_action)
    }

    fn answer(plan: &mut Plan, requests: impl IntoIterator<Item = Queued>, verdict: Verdict) {
        for q in requests {
            plan.answers.push(Answer {
                request: q.id,
                verdict: verdict.clone(),
            });
        }
    }

    fn enqueue(&mut self, model: ModelId, item: Queued) {
        self.models[model.0 as usize].queue.push(item);
        self.queued += 1;
        self.queue_changed(model, None);
    }
}

impl Policy for ClockworkPolicy {
    fn add_model(&mut self, info: ModelInfo) -> ModelId {
        let id = ModelId(self.models.len() as u32);
        let mut batches: Vec<u32> = info
            .profile
            .batches
            .iter()
            .map(|b| b.batch)
            .filter(|&b| b >= 1 && b <= self.params.max_batch)
            .collect();
        batches.sort_unstable();
        batches.dedup();
        if batches.first() != Some(&1) {
            batches.insert(0, 1);
        }
        let (window, percentile) = (self.params.window, self.params.percentile);
        let profiles: Vec<&ModelProfile> = self.kinds.iter().map(|k| info.profile_for(k)).collect();
        let exec = profiles
            .iter()
            .map(|p| seed_exec(p, &batches, window, percentile))
            .collect();
        let load = profiles
            .iter()
            .map(|p| Estimator::new(p.load_latency, window, percentile))
            .collect();
        self.models.push(ModelState {
            pages: info.pages,
            exec,
            load,
            batches,
            info,
            queue: ModelQueue::default(),
            ready_on: Vec::new(),
            loading: 0,
            priority: None,
            rank: None,
            expiry: None,
            measured_at: 0,
            missed: 0,
            rate: RateMeter::default(),
            flow: shared::Flow::default(),
            floor: 0,
            hindsight: hindsight::Hindsight::new(self.params.hindsight_weight),
        });
        // Registered and on no device: a candidate for loading into free pages.
        self.rerank(id);
        id
    }

    fn add_device(&mut self, device: DeviceInfo) -> DeviceId {
        let kind = self.kind_index(&device.kind);
        self.peers[kind] += 1;
        let p = self.params;
        let margins = Margins::new(p.margin_window, p.margin_percentile);
        self.devices
            .push(DeviceMirror::new(kind, device.pages, margins));
        self.rewiden_buffer();
        DeviceId(self.devices.len() as u32 - 1)
    }

    fn admit(&mut self, request: Request, now: Nanos, plan: &mut Plan) {
        self.now = self.now.max(now);
        self.admit_request(request, now, plan);
    }

    fn observe(&mut self, outcome: Outcome, now: Nanos, plan: &mut Plan) {
        self.now = self.now.max(now);
        let Some(flight) = self.in_flight.remove(&outcome.action) else {
            return;
        };
        let outcome = outcome.received_at(now);
        let exec = matches!(flight.work, Work::Infer { .. });
        let measured = outcome.result.as_ref().ok();
        let learn = self.params.learn_margins;
        let device = &mut self.devices[flight.device.0 as usize];
        let taught = |d: &DeviceMirror| (d.margins().warm(), d.buffer(self.params.buffer));
        let before = taught(device);
        device.reported((outcome.action, exec), measured, now, learn);
        if learn && exec && measured.is_some() {
            self.taught_at = now;
        }
        if taught(device) != before {
            // Only a device's own buffer and warmth enter the widest (most reports
            // change neither).
            self.rewiden_buffer();
        }
        match flight.work {
            Work::Infer { .. } => self.observe_infer(outcome.action, flight, outcome.result, plan),
            Work::Load => self.observe_load(flight, outcome.result),
            Work::Unload => {}
        }
    }

    fn observe_late(&mut self, action: ActionId, run: &Measured) {
        self.learn_late(action, run);
    }

    fn set_replica_floor(&mut self, model: ModelId, replicas: u32) {
        let Some(m) = self.models.get_mut(model.0 as usize) else {
            return;
        };
        if m.floor != replicas {
            m.floor = replicas;
            self.rerank(model);
        }
    }

    fn set_suspect(&mut self, device: DeviceId, suspect: bool) {
        self.mark_suspect(device, suspect);
    }

    fn set_allowed(&mut self, model: ModelId, device: DeviceId, allowed: bool) {
        let devices = self.devices.len();
        self.models[model.0 as usize]
            .info
            .set_allowed(device, allowed, devices);
        self.rerank(model);
    }

    fn set_lag(&mut self, device: DeviceId, lag: Nanos) {
        self.devices[device.0 as usize].lag = lag;
    }

    fn remove_device(&mut self, device: DeviceId, now: Nanos, plan: &mut Plan) {
        self.remove(device, now, plan);
    }

    fn withdraw(&mut self, request: RequestId, model: ModelId, plan: &mut Plan) -> bool {
        let Some(item) = self.models[model.0 as usize].queue.remove(request) else {
            self.withdraw_in_flight(request);
            return false;
        };
        self.queued -= 1;
        self.queue_changed(model, None);
        Self::answer(plan, [item], Verdict::Refused(Refusal::Withdrawn));
        true
    }

    fn max_items(&self, model: ModelId) -> u32 {
        let m = &self.models[model.0 as usize];
        m.batches.last().copied().unwrap_or(1)
    }

    fn schedule(&mut self, now: Nanos, plan: &mut Plan) {
        self.now = self.now.max(now);
        self.expire(now, plan);
        self.schedule_devices(now, plan);
        self.prune_expiries();
    }

    fn next_wakeup(&self, now: Nanos) -> Option<Nanos> {
        self.wakeup(now)
    }

    fn view(&self, model: ModelId, now: Nanos) -> Option<super::view::ModelView> {
        self.model_view(model, now)
    }

    fn snapshot(&self, now: Nanos) -> PolicySnapshot {
        let lanes = self.params.lanes;
        PolicySnapshot {
            queued: self.queued,
            in_flight: self.in_flight.len(),
            devices: self
                .devices
                .iter()
                .map(|d| DeviceSnapshot {
                    pages_used: d.used,
                    pages: d.capacity,
                    models: d.residents.len(),
                    exec_free_at: d.exec.free_at(now, d.timing(lanes)),
                    load_free_at: d.load.free_at(now, d.timing(lanes)),
                    suspect: d.suspect,
                    gone: d.gone,
                    slowdown: d.runs().slowdown.thousandths(),
                })
                .collect(),
            ready_replicas: self
                .models
                .iter()
                .map(|m| m.ready_on.len() as u32)
                .collect(),
        }
    }
}

#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod placement_tests;
#[cfg(test)]
mod tests;
