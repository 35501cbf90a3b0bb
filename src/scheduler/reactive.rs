//! The `reactive` baseline: how a Clipper-like system serves many models.
//!
//! - Each model has a FIFO queue. When a device's exec lane goes idle, it runs the model
//!   whose oldest request has waited longest, with a batch no larger than the model's
//!   adaptive limit (Clipper's AIMD: +1 after a batch whose processing time fit the
//!   objective, -10% after one that did not).
//! - A request for a model no device holds triggers a load on a miss, evicting the least
//!   recently used models.
//! - Nothing is planned ahead and nothing is refused: every request is served, however
//!   late. It exists to be compared with Clockwork on the same arrivals.
//!
//! Its Triton-like variant (`triton`, see `reactive_triton.rs`) batches up to the largest
//! batch, keeps the replica floors it is given and drops a request whose deadline passed
//! while it waited (Triton's per-model timeout).

use std::collections::VecDeque;

use super::ids::IdMap;
use super::{
    cover, Action, ActionKind, Answer, DeviceInfo, DeviceSnapshot, ModelInfo, Outcome, Plan,
    Policy, PolicySnapshot, Refusal, Request, Verdict,
};
use crate::config::PolicyConfig;
use crate::model::{ActionId, DeviceId, ModelId, RequestId};
use crate::scheduler::estimate::Slowdown;
use crate::time::Nanos;

/// A waiting request: id, arrival and when its answer is due.
type Waiting = (RequestId, Nanos, Nanos, u32);

struct Model {
    info: ModelInfo,
    /// Allowed batch sizes, ascending.
    batches: Vec<u32>,
    queue: VecDeque<Waiting>,
    /// AIMD batch-size limit.
    limit: f64,
    /// A load of it is queued or running somewhere.
    loading: bool,
    /// Replicas to hold whatever its traffic (Triton-like: fixed, sized ahead).
    floor: u32,
}

#[derive(Default)]
struct Device {
    pages: u32,
    used: u32,
    /// Resident models: (ready, last use, INFERs in flight).
    residents: IdMap<ModelId, (bool, Nanos, u32)>,
    exec_busy: bool,
    load_busy: bool,
    /// When the running INFER is expected to end (its start plus its profiled time).
    exec_until: Nanos,
    /// When the load lane's queued UNLOADs and LOAD are expected to end.
    load_until: Nanos,
    /// The watchdog found an action on it overdue: nothing new goes to it.
    suspect: bool,
    /// Taken out for good (its worker was lost).
    gone: bool,
}

impl Device {
    /// Predicted time a lane runs out of work: now if idle, else the expected end of
    /// what it runs (now if that is overdue).
    fn free_at(busy: bool, until: Nanos, now: Nanos) -> Nanos {
        if busy {
            until.max(now)
        } else {
            now
        }
    }
}

enum Work {
    Load,
    Unload,
    Infer(Vec<Waiting>),
}

/// The reactive baseline policy.
pub struct ReactivePolicy {
    max_batch: u32,
    models: Vec<Model>,
    devices: Vec<Device>,
    in_flight: IdMap<ActionId, (DeviceId, ModelId, Work)>,
    /// Models that had a request while no device held them, in order of the miss.
    misses: VecDeque<ModelId>,
    next_action: u64,
    queued: usize,
    /// The Triton-like variant: full batches, floors, the timeout.
    triton: bool,
}

impl ReactivePolicy {
    pub fn new(config: &PolicyConfig) -> Self {
        Self {
            max_batch: config.max_batch,
            models: Vec::new(),
            devices: Vec::new(),
            in_flight: IdMap::default(),
            misses: VecDeque::new(),
            next_action: 0,
            queued: 0,
            triton: false,
        }
    }

    fn send(
        &mut self,
        plan: &mut Plan,
        device: DeviceId,
        model: ModelId,
        kind: ActionKind,
        work: Work,
        now: Nanos,
    ) {
        self.next_action += 1;
        let id = ActionId(self.next_action);
        let expected_duration = match &kind {
            ActionKind::Infer { .. } => {
                let m = &self.models[model.0 as usize];
                let items = match &work {
                    Work::Infer(taken) => taken.iter().map(|w| w.3).sum(),
                    _ => 1,
                };
                let padded = cover(&m.batches, items).map_or(items, |b| m.batches[b]);
                m.info.profile.latency(padded).unwrap_or(0)
            }
            ActionKind::Load => self.models[model.0 as usize].info.profile.load_latency,
            ActionKind::Unload | ActionKind::Probe => 0,
        };
        let d = &mut self.devices[device.0 as usize];
        if kind.is_load_lane() {
            // UNLOADs and the LOAD they make room for queue one after another.
            d.load_until = d.load_until.max(now) + expected_duration;
        } else {
            d.exec_until = now + expected_duration;
        }
        plan.actions.push(Action {
            id,
            device,
            model,
            earliest: now,
            latest: Nanos::MAX,
            expected_duration,
            kind,
        });
        self.in_flight.insert(id, (device, model, work));
    }

    /// Runs the longest-waiting resident model on an idle device.
    fn run_batch(&mut self, device: DeviceId, now: Nanos, plan: &mut Plan) {
        let d = &self.devices[device.0 as usize];
        let oldest = d
            .residents
            .iter()
            .filter(|(_, r)| r.0)
            .filter_map(|(&m, _)| self.models[m.0 as usize].queue.front().map(|w| (w.1, m)))
            .min();
        let Some((_, model)) = oldest else {
            return;
        };
        let m = &mut self.models[model.0 as usize];
        let limit = if self.triton {
            self.max_batch
        } else {
            m.limit as u32
        };
        let cap = limit.clamp(1, self.max_batch);
        let mut room = m
            .batches
            .iter()
            .rev()
            .find(|&&b| b <= cap)
            .copied()
            .unwrap_or(1);
        // FIFO in whole requests: the oldest always goes (in the batch its items need),
        // then those behind it while their items fit.
        let front = m.queue.front().map_or(1, |w| w.3);
        room = room.max(cover(&m.batches, front).map_or(front, |b| m.batches[b]));
        let mut count = 0;
        for w in &m.queue {
            if w.3 > room {
                break;
            }
            room -= w.3;
            count += 1;
        }
        let taken: Vec<Waiting> = m.queue.drain(..count).collect();
        self.queued -= taken.len();
        let requests = taken.iter().map(|w| w.0).collect();
        let d = &mut self.devices[device.0 as usize];
        d.exec_busy = true;
        if let Some(r) = d.residents.get_mut(&model) {
            r.1 = now;
            r.2 += 1;
        }
        self.send(
            plan,
            device,
            model,
            ActionKind::Infer { requests },
            Work::Infer(taken),
            now,
        );
    }

    fn finish_infer(
        &mut self,
        device: DeviceId,
        model: ModelId,
        taken: Vec<Waiting>,
        outcome: Outcome,
        plan: &mut Plan,
    ) {
        let d = &mut self.devices[device.0 as usize];
        d.exec_busy = false;
        if let Some(r) = d.residents.get_mut(&model) {
            r.2 = r.2.saturating_sub(1);
        }
        let m = &mut self.models[model.0 as usize];
        match outcome.result {
            Ok(measured) => {
                // Clipper's AIMD looks at the batch's processing time against the
                // objective (queueing is not the batch size's fault): +1 while it fits,
                // -10% when it does not.
                let objective = taken.iter().map(|w| w.2 - w.1).min().unwrap_or(0);
                m.limit = if measured.duration <= objective {
                    m.limit + 1.0
                } else {
                    (m.limit * 0.9).max(1.0)
                };
                m.limit = m.limit.min(f64::from(self.max_batch));
                for (id, _, due, _) in taken {
                    let late = measured.end > due;
                    let verdict = Verdict::Completed {
                        action: outcome.action,
                        late,
                    };
                    plan.answers.push(Answer {
                        request: id,
                        verdict,
                    });
                }
            }
            Err(error) => {
                for (id, _, _, _) in taken {
                    plan.answers.push(Answer {
                        request: id,
                        verdict: Verdict::Failed(error.clone()),
                    });
                }
            }
        }
    }
}

#[path = "reactive_load.rs"]
mod load;
#[path = "reactive_triton.rs"]
mod triton;

fn m_pages(models: &[Model], model: ModelId) -> u32 {
    models[model.0 as usize].info.pages
}

impl Policy for ReactivePolicy {
    fn add_model(&mut self, info: ModelInfo) -> ModelId {
        let mut batches: Vec<u32> = info
            .profile
            .batches
            .iter()
            .map(|b| b.batch)
            .filter(|&b| b >= 1)
            .collect();
        batches.sort_unstable();
        if batches.first() != Some(&1) {
            batches.insert(0, 1);
        }
        self.models.push(Model {
            info,
            batches,
            queue: VecDeque::new(),
            limit: 1.0,
            loading: false,
            floor: 0,
        });
        ModelId(self.models.len() as u32 - 1)
    }

    fn add_device(&mut self, device: DeviceInfo) -> DeviceId {
        self.devices.push(Device {
            pages: device.pages,
            ..Device::default()
        });
        DeviceId(self.devices.len() as u32 - 1)
    }

    fn admit(&mut self, request: Request, _now: Nanos, plan: &mut Plan) {
        // The controller admits only models it added (see `Policy::admit`), and no more
        // items than it runs in one batch: a larger request could never run.
        if request.items() > self.max_items(request.model) {
            plan.answers.push(Answer {
                request: request.id,
                verdict: Verdict::Refused(Refusal::DeadlineUnreachable),
            });
            return;
        }
        let m = &mut self.models[request.model.0 as usize];
        m.queue.push_back((
            request.id,
            request.arrival,
            request.deadline(),
            request.items(),
        ));
        self.queued += 1;
        if m.queue.len() == 1 && !m.loading {
            self.misses.push_back(request.model);
        }
    }

    fn withdraw(&mut self, request: RequestId, model: ModelId, plan: &mut Plan) -> bool {
        let queue = &mut self.models[model.0 as usize].queue;
        let Some(at) = queue.iter().position(|w| w.0 == request) else {
            return false;
        };
        queue.remove(at);
        self.queued -= 1;
        plan.answers.push(Answer {
            request,
            verdict: Verdict::Refused(Refusal::Withdrawn),
        });
        true
    }

    fn observe(&mut self, outcome: Outcome, now: Nanos, plan: &mut Plan) {
        let Some((device, model, work)) = self.in_flight.remove(&outcome.action) else {
            return;
        };
        let outcome = outcome.received_at(now);
        match work {
            Work::Infer(taken) => self.finish_infer(device, model, taken, outcome, plan),
            Work::Unload => {}
            Work::Load => {
                let d = &mut self.devices[device.0 as usize];
                d.load_busy = false;
                self.models[model.0 as usize].loading = false;
                if outcome.result.is_ok() {
                    if let Some(r) = d.residents.get_mut(&model) {
                        r.0 = true;
                    }
                } else if d.residents.remove(&model).is_some() {
                    d.used -= m_pages(&self.models, model);
                    self.misses.push_back(model);
                }
            }
        }
    }

    fn max_items(&self, model: ModelId) -> u32 {
        let m = &self.models[model.0 as usize];
        let allowed = m.batches.iter().rev().find(|&&b| b <= self.max_batch);
        allowed.copied().unwrap_or(1)
    }

    fn set_replica_floor(&mut self, model: ModelId, replicas: u32) {
        if self.triton {
            self.models[model.0 as usize].floor = replicas;
        }
    }

    fn schedule(&mut self, now: Nanos, plan: &mut Plan) {
        if self.triton {
            self.time_out(now, plan);
            self.load_floors(now, plan);
        }
        for d in 0..self.devices.len() {
            if !self.devices[d].exec_busy && !self.devices[d].suspect {
                self.run_batch(DeviceId(d as u32), now, plan);
            }
        }
        if self.misses.is_empty() {
            return;
        }
        // A miss goes to the device holding the fewest models, to spread the load.
        let mut order: Vec<(usize, usize)> = (0..self.devices.len())
            .filter(|&d| !self.devices[d].load_busy && !self.devices[d].suspect)
            .map(|d| (self.devices[d].residents.len(), d))
            .collect();
        order.sort_unstable();
        for (_, d) in order {
            self.load_missed(DeviceId(d as u32), now, plan);
        }
    }

    fn set_suspect(&mut self, device: DeviceId, suspect: bool) {
        let d = &mut self.devices[device.0 as usize];
        d.suspect = suspect || d.gone;
    }

    fn set_allowed(&mut self, model: ModelId, device: DeviceId, allowed: bool) {
        let devices = self.devices.len();
        self.models[model.0 as usize]
            .info
            .set_allowed(device, allowed, devices);
    }

    fn remove_device(&mut self, device: DeviceId, _now: Nanos, _plan: &mut Plan) {
        let d = &mut self.devices[device.0 as usize];
        if d.gone {
            return;
        }
        let mut orphans: Vec<ModelId> = d.residents.keys().copied().collect();
        *d = Device {
            suspect: true,
            gone: true,
            ..Device::default()
        };
        let mut lost: Vec<ActionId> = self
            .in_flight
            .iter()
            .filter(|(_, f)| f.0 == device)
            .map(|(&id, _)| id)
            .collect();
        lost.sort_unstable();
        for action in lost {
            let Some((_, model, work)) = self.in_flight.remove(&action) else {
                continue;
            };
            let m = &mut self.models[model.0 as usize];
            match work {
                // The baseline never refuses: its requests go back to the front, to be
                // served elsewhere (late, if it must).
                Work::Infer(taken) => {
                    self.queued += taken.len();
                    for waiting in taken.into_iter().rev() {
                        m.queue.push_front(waiting);
                    }
                }
                Work::Load => m.loading = false,
                Work::Unload => {}
            }
            orphans.push(model);
        }
        // Models it held with requests waiting need a load elsewhere.
        orphans.sort_unstable();
        orphans.dedup();
        for model in orphans {
            let m = &self.models[model.0 as usize];
            if !m.queue.is_empty() && !m.loading && !self.misses.contains(&model) {
                self.misses.push_back(model);
            }
        }
    }

    fn next_wakeup(&self, _now: Nanos) -> Option<Nanos> {
        // Purely reactive: only arrivals and reports move it.
        None
    }

    fn snapshot(&self, now: Nanos) -> PolicySnapshot {
        PolicySnapshot {
            queued: self.queued,
            in_flight: self.in_flight.len(),
            devices: self
                .devices
                .iter()
                .map(|d| DeviceSnapshot {
                    pages_used: d.used,
                    pages: d.pages,
                    models: d.residents.len(),
                    exec_free_at: Device::free_at(d.exec_busy, d.exec_until, now),
                    load_free_at: Device::free_at(d.load_busy, d.load_until, now),
                    suspect: d.suspect,
                    gone: d.gone,
                    // Planned from its kind's estimates alone.
                    slowdown: Slowdown::NONE.thousandths(),
                })
                .collect(),
            ready_replicas: self.ready_replicas(),
        }
    }
}

#[cfg(test)]
#[path = "reactive_tests.rs"]
mod tests;
