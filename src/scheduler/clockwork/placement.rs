//! How many replicas each model wants, and why: the order of the load ranking.
//!
//! Three reasons, in rank order:
//! 1. `Queued`: requests wait (or were refused cold) that its replicas cannot serve soon
//!    (Clockwork's demand, `ClockworkPolicy::unserved`).
//! 2. `Rate`: its measured arrival rate needs more replicas than it has: its offered
//!    device load (rate times per-request device time at the batch that rate fills)
//!    over the target utilisation, at least one while it has traffic, at most the devices
//!    allowed to hold it; or a planner's floor asks for more (`set_replica_floor`: the
//!    rate it foresees). Worth a LOAD even if the LOAD outlasts every objective: it is
//!    for the requests that will come.
//! 3. `Preload`: registered, no traffic in the window and on no device: loaded into free
//!    pages only (never by eviction), so that a model is servable before its first request.

use std::cmp::Reverse;

use super::{ClockworkPolicy, DEVICE};
use crate::model::ModelId;
use crate::time::Nanos;

/// Why a model wants another replica; a later variant ranks higher.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Want {
    /// On no device and no traffic: load into free pages while memory allows.
    Preload,
    /// Fewer replicas than its arrival rate needs.
    Rate,
    /// Queued demand its replicas do not serve.
    Queued,
}

/// Place in the load ranking: the reason, then how much (millionths of a device), then
/// the earlier front deadline (so equal cold models are loaded in the order their
/// requests came, not by id; models with no queue by id, lowest first).
pub type RankKey = (Want, u64, Reverse<Nanos>);

impl ClockworkPolicy {
    /// Replicas that count: ready on a healthy device, or loading.
    pub(super) fn replicas(&self, model: ModelId) -> u32 {
        let m = &self.models[model.0 as usize];
        // Almost always no device is suspect: skip the lookups then (this runs on every
        // queue change).
        let healthy = match self.suspects {
            0 => m.ready_on.len(),
            _ => m
                .ready_on
                .iter()
                .filter(|d| !self.devices[d.0 as usize].suspect)
                .count(),
        };
        healthy as u32 + m.loading
    }

    /// Offered device load of the model at `now`, in devices at the target utilisation:
    /// arrival rate times per-request device time at the largest allowed batch that the
    /// rate fills while that batch runs (what a device serving it alone would form).
    fn offered(&self, model: ModelId, now: Nanos) -> f64 {
        let m = &self.models[model.0 as usize];
        let rate = m.rate.per_second(now);
        if rate <= 0.0 {
            return 0.0;
        }
        let mut per_request = self.worst_estimate(model, 0) as f64;
        for (b, &size) in m.batches.iter().enumerate().skip(1) {
            let est = self.worst_estimate(model, b);
            if est <= self.params.max_exec_time && f64::from(size) <= rate * est as f64 / 1e9 {
                per_request = est as f64 / f64::from(size);
            }
        }
        rate * per_request / 1e9 / self.params.target_utilisation
    }

    /// Replicas the model's arrival rate needs at `now`: 0 without traffic, else at least
    /// 1 and at most the devices allowed to hold it.
    pub(super) fn needed(&self, model: ModelId, now: Nanos) -> u32 {
        self.needed_for(model, self.offered(model, now))
    }

    /// Replicas an offered load (from [`Self::offered`]) needs, and at least the model's
    /// floor; never more than the devices allowed to hold it.
    fn needed_for(&self, model: ModelId, offered: f64) -> u32 {
        let m = &self.models[model.0 as usize];
        let allowed = m.info.devices.as_ref().map_or(self.devices.len(), Vec::len);
        let by_rate = if offered > 0.0 {
            (offered.ceil() as u32).max(1)
        } else {
            0
        };
        by_rate.max(m.floor).min(allowed.max(1) as u32)
    }

    /// Why and how much the model wants another replica now, if it does.
    pub(super) fn want(&self, model: ModelId) -> Option<RankKey> {
        let now = self.now;
        let m = &self.models[model.0 as usize];
        let front = m.queue.front().map_or(0, |q| q.deadline);
        let unserved = self.unserved(model);
        if unserved > 0 {
            return Some((Want::Queued, unserved, Reverse(front)));
        }
        let replicas = self.replicas(model);
        let floor = self.needed_for(model, 0.0);
        if replicas < floor {
            let short = u64::from(floor - replicas) * DEVICE;
            return Some((Want::Rate, short, Reverse(front)));
        }
        let rate = m.rate.per_second(now);
        if rate > 0.0 {
            // Skip the full computation when even the bound fits (this runs on every queue
            // change).
            if replicas >= 1 && self.batch_one_fits(model, rate, replicas) {
                return None;
            }
            let offered = self.offered(model, now);
            if offered > 0.0 {
                let needed = self.needed_for(model, offered);
                let short = (offered - f64::from(replicas)) * DEVICE as f64;
                return (needed > replicas).then_some((
                    Want::Rate,
                    short.max(1.0) as u64,
                    Reverse(front),
                ));
            }
        }
        let idle = replicas == 0 && m.ready_on.is_empty() && m.queue.front().is_none();
        idle.then_some((Want::Preload, 0, Reverse(Nanos::from(model.0))))
    }

    /// Whether `replicas` would serve `rate` even at batch 1. Batch 1 costs the most per
    /// request, so this bounds the offered load from above: when it holds, the rate needs
    /// no more replicas, without the full computation of [`Self::offered`].
    fn batch_one_fits(&self, model: ModelId, rate: f64, replicas: u32) -> bool {
        let bound = rate * self.worst_estimate(model, 0) as f64 / 1e9;
        bound / self.params.target_utilisation <= f64::from(replicas)
    }

    /// Whether the model has fewer replicas than its arrival rate needs now.
    pub(super) fn short_of_rate(&self, model: ModelId) -> bool {
        let replicas = self.replicas(model);
        if replicas < self.needed_for(model, 0.0) {
            return true;
        }
        let m = &self.models[model.0 as usize];
        let rate = m.rate.per_second(self.now);
        if rate <= 0.0 {
            return false;
        }
        if replicas == 0 {
            return true;
        }
        if self.batch_one_fits(model, rate, replicas) {
            return false;
        }
        replicas < self.needed(model, self.now)
    }

    /// Whether evicting the model leaves it with the replicas its rate needs (so it may
    /// make room for a model that is only wanted by rate).
    pub(super) fn surplus(&self, model: ModelId) -> bool {
        let m = &self.models[model.0 as usize];
        if m.queue.demand() > 0 {
            return false;
        }
        let replicas = self.replicas(model);
        if replicas <= m.floor {
            return false;
        }
        // Cheap answers first (eviction asks this of every idle resident): no traffic in
        // the window needs no replica; traffic needs at least one.
        if !m.rate.any(self.now) {
            return replicas > 0;
        }
        replicas > 1 && replicas > self.needed(model, self.now)
    }
}
