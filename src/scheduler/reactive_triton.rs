//! The Triton-like variant of the reactive baseline (`PolicyName::Triton`): what Triton's
//! dynamic batcher and model instances amount to on emulated devices. Each idle device
//! runs the longest-waiting resident model at the largest batch its queue fills (no AIMD
//! limit; no queue delay: a batch starts as soon as a device is idle, so it only grows
//! while the devices are busy), each model keeps the replicas its floor asks for (fixed
//! instances, sized ahead for the mean load by whoever sets them), and a request whose
//! deadline passed while it waited is dropped (its per-model timeout) instead of run.

use super::{Model, ReactivePolicy};
use crate::model::{DeviceId, ModelId};
use crate::scheduler::{Answer, Plan, Refusal, Verdict};
use crate::time::Nanos;

impl ReactivePolicy {
    /// The Triton-like variant.
    pub fn triton(mut self) -> Self {
        self.triton = true;
        self
    }

    /// Drops every queued request whose deadline has passed (the timeout).
    pub(super) fn time_out(&mut self, now: Nanos, plan: &mut Plan) {
        for m in &mut self.models {
            let before = m.queue.len();
            m.queue.retain(|&(request, _, due, _)| {
                let keep = due > now;
                if !keep {
                    plan.answers.push(Answer {
                        request,
                        verdict: Verdict::Refused(Refusal::TimedOut),
                    });
                }
                keep
            });
            self.queued -= before - m.queue.len();
        }
    }

    /// Loads a replica of each model held by fewer devices than its floor, one per model
    /// at a time, on a device with an idle load lane, evicting only idle models above
    /// their own floors.
    pub(super) fn load_floors(&mut self, now: Nanos, plan: &mut Plan) {
        for model in 0..self.models.len() {
            let id = ModelId(model as u32);
            let m = &self.models[model];
            if m.loading || held(&self.devices_holding(id)) >= m.floor {
                continue;
            }
            let Some((device, victims)) = self.room_for(id) else {
                continue;
            };
            self.evict_and_load(device, id, victims, now, plan);
        }
    }

    fn devices_holding(&self, model: ModelId) -> Vec<usize> {
        (0..self.devices.len())
            .filter(|&d| self.devices[d].residents.contains_key(&model))
            .collect()
    }

    /// A device that does not hold `model`, may, has an idle load lane, and has room for
    /// it after evicting idle models held above their floors; the fewest residents first.
    fn room_for(&self, model: ModelId) -> Option<(DeviceId, Vec<ModelId>)> {
        let need = self.models[model.0 as usize].info.pages;
        let mut order: Vec<(usize, usize)> = (0..self.devices.len())
            .filter(|&d| {
                let dev = &self.devices[d];
                !dev.load_busy
                    && !dev.suspect
                    && !dev.residents.contains_key(&model)
                    && self.models[model.0 as usize]
                        .info
                        .allowed_on(DeviceId(d as u32))
            })
            .map(|d| (self.devices[d].residents.len(), d))
            .collect();
        order.sort_unstable();
        order.into_iter().find_map(|(_, d)| {
            let victims = self.spare_victims(d, need)?;
            Some((DeviceId(d as u32), victims))
        })
    }

    /// Idle residents of device `d` held above their floors, least recently used first,
    /// enough to free `need` pages.
    fn spare_victims(&self, d: usize, need: u32) -> Option<Vec<ModelId>> {
        self.idle_victims(d, need, |m| self.above_floor(m))
    }

    fn above_floor(&self, model: ModelId) -> bool {
        let m: &Model = &self.models[model.0 as usize];
        held(&self.devices_holding(model)) > m.floor
    }
}

fn held(devices: &[usize]) -> u32 {
    u32::try_from(devices.len()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use crate::model::{ModelId, RequestId};
    use crate::scheduler::{ActionKind, Plan, Policy, ReactivePolicy, Refusal, Request, Verdict};
    use crate::time::MS;

    fn policy(devices: usize) -> ReactivePolicy {
        super::super::tests::policy_on(devices).triton()
    }

    /// Mutation that breaks it: `load_floors` not called from `schedule`.
    #[test]
    fn floors_are_loaded_before_any_request() {
        let mut p = policy(3);
        p.set_replica_floor(ModelId(0), 2);
        let mut plan = Plan::default();
        for t in 0..3 {
            // One load per model at a time: the second after the first is done.
            p.schedule(t * 10 * MS, &mut plan);
            if let Some(load) = plan.actions.last() {
                let outcome = crate::scheduler::Outcome {
                    action: load.id,
                    result: Ok(crate::scheduler::Measured {
                        begin: t * 10 * MS,
                        end: t * 10 * MS + 7 * MS,
                        duration: 7 * MS,
                    }),
                };
                p.observe(outcome, t * 10 * MS + 7 * MS, &mut plan);
            }
        }
        let loads = plan.actions.iter().filter(|a| a.kind == ActionKind::Load);
        let devices: Vec<_> = loads.map(|a| a.device).collect();
        assert_eq!(devices.len(), 2, "{devices:?}");
        assert_ne!(devices[0], devices[1]);
    }

    /// Mutation that breaks it: `keep = due > now` written `true` (nothing times out).
    #[test]
    fn a_request_past_its_deadline_times_out_unrun() {
        let mut p = policy(1);
        let mut plan = Plan::default();
        let request = Request {
            id: RequestId(1),
            model: ModelId(0),
            arrival: 0,
            slo: 5 * MS,
            latest_finish: None,
            items: 1,
        };
        p.admit(request, 0, &mut plan);
        // The load (a miss) takes 7 ms: by then the request is past its deadline.
        p.schedule(6 * MS, &mut plan);
        assert_eq!(plan.answers.len(), 1);
        assert_eq!(plan.answers[0].verdict, Verdict::Refused(Refusal::TimedOut));
        assert_eq!(p.snapshot(6 * MS).queued, 0);
    }
}
