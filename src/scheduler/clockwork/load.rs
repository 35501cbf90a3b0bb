//! Weight loading and eviction: which model a device loads next (by the ranking of
//! `placement.rs`), and whom it evicts for it.

use super::placement::{RankKey, Want};
use super::{ClockworkPolicy, InFlight, Work, DEVICE, UNLOAD_ESTIMATE};
use crate::model::{DeviceId, ModelId};
use crate::scheduler::device::Expected;
use crate::scheduler::{ActionError, ActionKind, Measured, Plan};
use crate::time::Nanos;

/// How many ranked models a device looks at before giving up on a load this round.
const CANDIDATES: usize = 16;

/// Least wait before a device that found nothing to load looks again.
const LOAD_RETRY: Nanos = 1_000_000;

impl ClockworkPolicy {
    /// Demand no replica serves yet: queued demand less one device per replica.
    pub(super) fn unserved(&self, model: ModelId) -> u64 {
        let m = &self.models[model.0 as usize];
        let replicas = u64::from(self.replicas(model));
        (m.queue.demand() + m.missed).saturating_sub(replicas * DEVICE)
    }

    /// Moves the model to its place in the load ranking.
    pub(super) fn rerank(&mut self, model: ModelId) {
        let rank = self.want(model);
        let m = &mut self.models[model.0 as usize];
        if rank == m.rank {
            return;
        }
        if let Some(old) = m.rank {
            self.load_ranking.remove(&(old, model));
        }
        let newly_queued =
            rank.is_some_and(|r| r.0 == Want::Queued) && m.rank.is_none_or(|r| r.0 != Want::Queued);
        if let Some(new) = rank {
            self.load_ranking.insert((new, model));
        }
        m.rank = rank;
        if newly_queued {
            // Requests now wait for a load: worth a look at once, even on devices that
            // just found nothing (say, only models wanted by rate or for preloading).
            for d in &mut self.devices {
                d.load_retry_at = 0;
            }
        }
    }

    /// If the device's load lane is quiet, loads the top-ranked model that is not on it
    /// yet and that would help: some queued request could still use it, its rate needs
    /// another replica, or (no traffic yet) it fits in free pages.
    pub(super) fn schedule_load(&mut self, device: DeviceId, now: Nanos, plan: &mut Plan) {
        let d = &self.devices[device.0 as usize];
        if now < d.load_retry_at {
            return;
        }
        let (lanes, ahead) = (self.params.lanes, self.params.schedule_ahead);
        let start = d.load.free_at(now, d.timing(lanes));
        if start >= d.horizon(now, lanes, ahead) {
            return;
        }
        let mut stale = Vec::new();
        let candidate = self
            .load_ranking
            .iter()
            .rev()
            .take(CANDIDATES)
            .find(|&&(rank, model)| {
                // Rates decay without events: a rank by rate may be out of date (its
                // amount always is a little; that only moves it in the ranking). Queued
                // demand and preloads change only with events, which re-rank them.
                if rank.0 == Want::Rate && self.want(model).map(|r| r.0) != Some(rank.0) {
                    stale.push(model);
                    return false;
                }
                self.helps(device, model, rank, start)
            })
            .map(|&(rank, model)| (rank.0, model));
        for model in stale {
            self.rerank(model);
        }
        let victims =
            candidate.and_then(|(want, model)| Some((model, self.victims(device, model, want)?)));
        let Some((model, victims)) = victims else {
            let busy = candidate.is_some() && self.busy_pages(device) > 0;
            let d = &mut self.devices[device.0 as usize];
            d.load_retry_at = now + self.params.lanes.expected_lag.max(LOAD_RETRY);
            d.load_blocked_by_flight = busy;
            return;
        };
        for victim in victims {
            self.plan_unload(device, victim, now, plan);
        }
        self.plan_load(device, model, start, now, plan);
    }

    /// Whether loading `model` (ranked `rank`) on `device`, its load lane free at `start`,
    /// would help.
    fn helps(&self, device: DeviceId, model: ModelId, rank: RankKey, start: Nanos) -> bool {
        let d = &self.devices[device.0 as usize];
        let m = &self.models[model.0 as usize];
        // Cheap tests before the residency lookup: on a full device every preload
        // candidate fails the first (this runs for each candidate of each load pass).
        if m.pages > d.capacity
            || !m.info.allowed_on(device)
            || (rank.0 == Want::Preload && m.pages > d.free_pages())
            || d.residents.contains_key(&model)
        {
            return false;
        }
        match rank.0 {
            Want::Preload | Want::Rate => true,
            Want::Queued => {
                // A load helps if a queued request can still use it, if requests were
                // refused for want of it (objectives too tight to wait for any load), or
                // if the model's rate needs another replica anyway.
                let ready = start + m.load[d.kind].get() + self.run_estimate(model, d.runs(), 0);
                !self.params.early_drop
                    || m.missed > 0
                    || m.queue.back().is_some_and(|q| ready <= q.deadline)
                    || self.short_of_rate(model)
            }
        }
    }

    /// Models to evict from `device` to make room for `model`: idle ones first, then the
    /// least recently used whose demand is smaller than the newcomer's; for a model wanted
    /// only by its rate, only models with more replicas than their own rate needs; none
    /// for a preload. `None` if that is not enough room.
    fn victims(&self, device: DeviceId, model: ModelId, want: Want) -> Option<Vec<ModelId>> {
        let d = &self.devices[device.0 as usize];
        let needed = self.models[model.0 as usize].pages;
        if d.free_pages() >= needed {
            return Some(Vec::new());
        }
        let claim = match want {
            Want::Preload => return None,
            // Anything with queued demand outranks a claim by rate alone.
            Want::Rate => 1,
            Want::Queued => self.unserved(model),
        };
        let by_rate = want == Want::Rate;
        let mut free = d.free_pages();
        let mut victims = Vec::new();
        // Usually one victim makes room: find minima in place rather than collect and sort
        // the whole device (this runs often under load).
        while free < needed {
            let (victim, pages) = self.next_victim(device, claim, by_rate, &victims)?;
            free += pages;
            victims.push(victim);
        }
        Some(victims)
    }

    /// The first model to evict from `device` after `chosen`, and its pages. Eviction
    /// order: no queued demand first, then least recently used; never a model with INFERs
    /// in flight or at least `claim` demand, nor (`by_rate`) one without surplus replicas.
    /// The costly surplus test is made only for a resident that would come first (under
    /// overload, where loads by rate are many, it was most of the policy's time), and the
    /// demand read only for one that might.
    fn next_victim(
        &self,
        device: DeviceId,
        claim: u64,
        by_rate: bool,
        chosen: &[ModelId],
    ) -> Option<(ModelId, u32)> {
        let d = &self.devices[device.0 as usize];
        let mut best: Option<((bool, Nanos, ModelId), u32)> = None;
        for (&m, r) in &d.residents {
            if !r.ready || r.infers_in_flight > 0 || chosen.contains(&m) {
                continue;
            }
            // Whether it could come first at all, before its demand is read (a model's
            // state is another cache line per resident): with no demand its key is least.
            if best.is_some_and(|(b, _)| b <= (false, r.last_use, m)) {
                continue;
            }
            let demand = self.models[m.0 as usize].queue.demand();
            let key = (demand > 0, r.last_use, m);
            if demand >= claim || best.is_some_and(|(b, _)| b <= key) {
                continue;
            }
            if by_rate && !self.surplus(m) {
                continue;
            }
            best = Some((key, r.pages));
        }
        best.map(|((_, _, m), pages)| (m, pages))
    }

    /// Pages held by models with INFERs in flight (not evictable until they finish).
    fn busy_pages(&self, device: DeviceId) -> u32 {
        let d = &self.devices[device.0 as usize];
        d.residents
            .values()
            .filter(|r| r.infers_in_flight > 0)
            .map(|r| r.pages)
            .sum()
    }

    fn plan_unload(&mut self, device: DeviceId, model: ModelId, now: Nanos, plan: &mut Plan) {
        self.forget_residency(device, model);
        let d = &self.devices[device.0 as usize];
        let start = d.load.free_at(now, d.timing(self.params.lanes));
        let action = self.action(
            device,
            model,
            (now, Nanos::MAX, UNLOAD_ESTIMATE),
            ActionKind::Unload,
        );
        self.devices[device.0 as usize].load.push(
            action.id,
            Expected::exact(UNLOAD_ESTIMATE),
            start,
            now,
        );
        self.send(plan, action, Work::Unload);
    }

    fn plan_load(
        &mut self,
        device: DeviceId,
        model: ModelId,
        start: Nanos,
        now: Nanos,
        plan: &mut Plan,
    ) {
        let kind = self.devices[device.0 as usize].kind;
        let m = &mut self.models[model.0 as usize];
        let expected = m.load[kind].get();
        let pages = m.pages;
        m.loading += 1;
        m.missed = 0;
        self.rerank(model);
        let p = self.params;
        let latest = (now + p.lanes.expected_lag + p.schedule_ahead).max(start + p.schedule_ahead);
        let action = self.action(device, model, (now, latest, expected), ActionKind::Load);
        let d = &mut self.devices[device.0 as usize];
        d.reserve(model, pages, now);
        d.load
            .push(action.id, Expected::exact(expected), start, now);
        self.send(plan, action, Work::Load);
    }

    /// Applies the report of a LOAD.
    pub(super) fn observe_load(&mut self, flight: InFlight, result: Result<Measured, ActionError>) {
        let (device, model) = (flight.device, flight.model);
        let kind = self.devices[device.0 as usize].kind;
        let m = &mut self.models[model.0 as usize];
        m.loading = m.loading.saturating_sub(1);
        match result {
            Ok(measured) => {
                m.load[kind].observe(measured.duration);
                m.ready_on.push(device);
                if let Some(r) = self.devices[device.0 as usize].residents.get_mut(&model) {
                    r.ready = true;
                }
                // Make sure the new replica has the model's strategy.
                self.queue_changed(model, Some(device));
            }
            Err(_) => {
                self.devices[device.0 as usize].release(model);
                self.rerank(model);
            }
        }
    }

    /// Drops the model from the device in the mirror (eviction planned, or the executor
    /// reported that it does not hold it).
    pub(super) fn forget_residency(&mut self, device: DeviceId, model: ModelId) {
        self.devices[device.0 as usize].release(model);
        let m = &mut self.models[model.0 as usize];
        m.ready_on.retain(|&d| d != device);
        self.rerank(model);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PolicyConfig;
    use crate::gpu::profiles;
    use crate::model::RequestId;
    use crate::scheduler::queue::Queued;
    use crate::scheduler::{DeviceInfo, ModelInfo, Policy};
    use crate::time::MS;
    use proptest::prelude::*;

    proptest! {
        /// The eviction search answers the least key (no queued demand first, then least
        /// recently used, then id) among the ready residents with nothing in flight and
        /// demand below the claim, in whatever order the device's map holds them: the
        /// reads it leaves out must not change its answer.
        #[test]
        fn next_victim_is_the_least_eligible_resident(
            residents in proptest::collection::vec(
                (any::<bool>(), 0u32..2, 0u64..6, 0u64..3), 1..24),
            claim in 1u64..4,
        ) {
            let mut policy = ClockworkPolicy::new(&PolicyConfig::default());
            let (kind, pages) = ("v100".into(), 10_000);
            policy.add_device(DeviceInfo { kind, pages });
            let spec = profiles::model("resnet50", "r", 100 * MS).expect("built-in profile");
            for (i, &(ready, in_flight, last_use, demand)) in residents.iter().enumerate() {
                let profile = spec.profile.clone();
                let info = ModelInfo { pages: 1, profile, by_kind: Vec::new(), devices: None };
                let model = policy.add_model(info);
                let d = &mut policy.devices[0];
                d.reserve(model, 1, last_use);
                let r = d.residents.get_mut(&model).expect("just reserved");
                (r.ready, r.infers_in_flight) = (ready, in_flight);
                for k in 0..demand {
                    let id = RequestId(10 * i as u64 + k);
                    let q = Queued { id, deadline: 1, latest: 1, due: 1, demand: 1, items: 1, alone: false, projected: 0 };
                    policy.models[i].queue.push(q);
                }
            }
            let least = residents
                .iter()
                .enumerate()
                .filter(|(_, &(ready, in_flight, _, demand))| {
                    ready && in_flight == 0 && demand < claim
                })
                .map(|(i, &(_, _, last_use, demand))| (demand > 0, last_use, i as u32))
                .min()
                .map(|(_, _, i)| (ModelId(i), 1));
            prop_assert_eq!(policy.next_victim(DeviceId(0), claim, false, &[]), least);
        }
    }
}
