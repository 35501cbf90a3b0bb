//! Other models' work on a shared device, for the projection at arrival (`admit.rs`).
//!
//! A device serves the queues of every model resident on it, most urgent first (the
//! strategy queues order models by their front's latest start). A request's own queue is
//! therefore not all that stands before it: the other resident models' requests due
//! EARLIER than it will be served first, those queued now and those that will arrive
//! while it waits with objectives short enough to be due before it (a model of 50 ms
//! objectives overtakes, for 150 ms, a request of 200 ms). Counting them (and only them:
//! work due later is served after it) lets a request on a busy shared device be refused
//! the moment it arrives instead of waiting most of its objective to time out.
//!
//! Each other model's count is an expectation, from what it was seen to do over the last
//! two seconds ([`super::rate::WINDOW`]): the requests to come arrive at the rate it
//! admits them, with the time to their deadline its last direct one had; of its
//! requests (queued or to come), only the share it took into batches is counted, since
//! under overload the rest will time out rather than run (counted whole, that work held
//! the simulator's load sweep below its goodput past capacity, refusing at arrival what the
//! device would have served). The work is split evenly over the model's replicas ready or
//! loading and costed per item at the most efficient batch its queue and the requests it
//! will admit before the new one's deadline fill; its requests about to expire (that no
//! start on this device could finish) are left out; models past the first [`MAX_OTHERS`]
//! residents are not counted. A pipeline's sub-request is judged by its own queue only
//! (`admit.rs`). On by default (`PolicyConfig::shared_arrival`).

use super::admit::efficient_batch;
use super::rate::RateMeter;
use super::ClockworkPolicy;
use crate::config::DriftMargin;
use crate::model::ModelId;
use crate::scheduler::device::DeviceMirror;
use crate::time::Nanos;

/// Other resident models a projection looks at on one device: bounds the cost of an
/// arrival on a device that holds very many models (past them the count is only lower).
pub(super) const MAX_OTHERS: usize = 64;

/// What a model's queue took in and gave out over the last [`super::rate::WINDOW`], for
/// the other models' projections on the devices it shares ([`ClockworkPolicy::others_ahead`]).
#[derive(Clone, Debug, Default)]
pub(super) struct Flow {
    /// Requests admitted.
    admitted: RateMeter,
    /// The time its last direct request had from its arrival to its internal deadline.
    objective: Nanos,
    /// Requests taken into batches.
    planned: RateMeter,
    /// Requests refused after they were admitted: they waited until no batch could
    /// finish them.
    dropped: RateMeter,
}

/// What [`Flow`] counted over its window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Counts {
    /// Requests admitted (its arrivals less these were refused at arrival).
    pub(super) admitted: u64,
    /// Requests taken into batches: served, unless a run failed or overran.
    pub(super) planned: u64,
    /// Requests refused after waiting.
    pub(super) dropped: u64,
}

impl Flow {
    /// A request was admitted at `now`; `objective`, a direct request's time from arrival
    /// to its internal deadline (a pipeline's sub-request has only what its root left,
    /// which says nothing of the requests to come).
    pub(super) fn admitted(&mut self, now: Nanos, objective: Option<Nanos>) {
        self.admitted.record(now);
        if let Some(objective) = objective {
            self.objective = objective;
        }
    }

    /// `n` of its requests were taken into a batch at `now`.
    pub(super) fn planned(&mut self, now: Nanos, n: usize) {
        self.planned.add(now, n.try_into().unwrap_or(u32::MAX));
    }

    /// `n` of its requests were refused at `now` after waiting.
    pub(super) fn dropped(&mut self, now: Nanos, n: usize) {
        self.dropped.add(now, n.try_into().unwrap_or(u32::MAX));
    }

    /// Requests admitted, taken into batches and refused after waiting over the window
    /// that ends at `now`.
    pub(super) fn counts(&self, now: Nanos) -> Counts {
        Counts {
            admitted: self.admitted.count(now),
            planned: self.planned.count(now),
            dropped: self.dropped.count(now),
        }
    }

    /// The time its last direct request had from its arrival to its internal deadline
    /// (0 before any).
    pub(super) fn objective(&self) -> Nanos {
        self.objective
    }

    /// Of what left its queue, the share served rather than refused after waiting (1
    /// while nothing has left it).
    fn served(&self, now: Nanos) -> f64 {
        let (planned, dropped) = (self.planned.count(now), self.dropped.count(now));
        match planned + dropped {
            0 => 1.0,
            left => planned as f64 / left as f64,
        }
    }
}

impl ClockworkPolicy {
    /// Device time on `device` that resident models other than `model` will take before
    /// a request due at `deadline` arriving at `now` when the device frees at `from`
    /// (`window`): their queued requests due before it, and (estimated from each model's
    /// admitted rate and its requests' time to their deadlines) those still to come that
    /// will be due before it. Each model's share (over its replicas ready or loading) is
    /// costed per item, on this device's kind, at the most efficient batch its queue and
    /// the requests to come fill.
    pub(super) fn others_ahead(
        &self,
        device: &DeviceMirror,
        model: ModelId,
        (now, from, deadline): (Nanos, Nanos, Nanos),
    ) -> Nanos {
        let mut work = 0.0;
        // Models still loading here count too: their queues run here once loaded.
        let others = device.residents.keys().filter(|&&o| o != model);
        for &other in others.take(MAX_OTHERS) {
            let o = &self.models[other.0 as usize];
            // Due before the new request; those that could not finish even if started
            // when the device frees will be refused, not served.
            let due = o.queue.items_before(deadline);
            let expiring = o
                .queue
                .items_before(from.saturating_add(self.best_single(other)));
            // Under overload some of its queue will time out rather than run.
            let served = o.flow.served(now);
            // Requests to come that it will serve and that will be due before the new
            // one: those it admits before `deadline - objective`.
            let (rate, objective) = (o.flow.admitted.per_second(now) * served, o.flow.objective);
            let coming = deadline.saturating_sub(now.saturating_add(objective));
            let to_come = if objective == 0 {
                0.0
            } else {
                rate * coming as f64 / 1e9
            };
            let replicas = o.replicas();
            let queued = due.saturating_sub(expiring) as f64 * served;
            let share = (queued + to_come) / replicas;
            if share <= 0.0 {
                continue;
            }
            // Its batches also take its requests due later, queued or still to come
            // before the new request's deadline: costed at the batch they all fill, not
            // the smaller one the requests due first would.
            let later = rate * deadline.saturating_sub(now) as f64 / 1e9;
            let filling = o.queue.items().saturating_sub(expiring) as f64 * served + later;
            let fills = (filling / replicas).max(share).ceil() as usize;
            let batch =
                efficient_batch(o, device.runs(), (fills, false), self.params.max_exec_time);
            work += share * batch.estimate as f64 / batch.served.max(1) as f64;
        }
        work.min(Nanos::MAX as f64) as Nanos
    }

    /// Whether a request of `model` arriving at `now` keeps its replicas' drift as a
    /// margin (`PolicyConfig::drift_margin`): with `Alone`, only while no other model
    /// resident on a device that holds it has requests queued or had any arrive within
    /// the rate window. On a device shared by busy models the margin moved service from
    /// the tight objectives to the looser ones (docs/EXPERIMENTS.md, "The drift margin
    /// where a model is alone"); alone, it only keeps the model's own queue inside what
    /// the device's slow spells leave.
    pub(super) fn keeps_drift_margin(&self, model: ModelId, now: Nanos) -> bool {
        match self.params.drift_margin {
            DriftMargin::Off => false,
            DriftMargin::Always => true,
            DriftMargin::Alone => self.models[model.0 as usize].ready_on.iter().all(|d| {
                let others = self.devices[d.0 as usize].residents.keys();
                others.filter(|&&o| o != model).all(|&o| {
                    let o = &self.models[o.0 as usize];
                    o.queue.is_empty() && !o.rate.any(now)
                })
            }),
        }
    }
}
