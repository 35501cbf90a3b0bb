//! Queued work of other models on a shared device, for the projection at arrival
//! (`admit.rs`).
//!
//! A device serves the queues of every model resident on it, most urgent first (the
//! strategy queues order models by their front's latest start). A request's own queue is
//! therefore not all that stands before it: the other resident models' requests due
//! EARLIER than it will be served first. Counting them (and only them: work due later is
//! served after it) lets a request on a busy shared device be refused the moment it
//! arrives instead of waiting most of its objective to time out.
//!
//! The count is meant to be optimistic: each other model's work is split evenly over its
//! replicas ready or loading (rounded down), costed at the most efficient batch its whole
//! queue fills, and its requests about to expire (that no start on this device could
//! finish) are left out; models past the first [`MAX_OTHERS`] residents are not counted.
//! It is not optimistic enough yet: it still counts queued work that the plan will drop or
//! skip (adaptive batch drop) rather than serve, and with it on the load sweep's goodput
//! fell past capacity (docs/EXPERIMENTS.md), so `ClockworkPolicy::with_shared_arrival`
//! turns it on and the default leaves it off.

use super::admit::efficient_batch;
use super::ClockworkPolicy;
use crate::model::ModelId;
use crate::scheduler::device::DeviceMirror;
use crate::time::Nanos;

/// Other resident models a projection looks at on one device: bounds the cost of an
/// arrival on a device that holds very many models (past them the count is only lower).
const MAX_OTHERS: usize = 64;

impl ClockworkPolicy {
    /// Device time on `device` that the queued requests of resident models other than
    /// `model`, due before `deadline`, still need when the device frees at `from`: each
    /// model's share (its items ahead, over its replicas ready or loading) at the cost per
    /// item, on this device's kind, of the most efficient batch its queue fills.
    pub(super) fn others_ahead(
        &self,
        device: &DeviceMirror,
        model: ModelId,
        deadline: Nanos,
        from: Nanos,
    ) -> Nanos {
        let mut work: Nanos = 0;
        // Models still loading here count too: their queues run here once loaded.
        let others = device.residents.keys().filter(|&&o| o != model);
        for &other in others.take(MAX_OTHERS) {
            let o = &self.models[other.0 as usize];
            if o.queue.front().is_none() {
                continue;
            }
            // Due before the new request; those that could not finish even if started
            // when the device frees will be refused, not served.
            let due = o.queue.items_before(deadline);
            if due == 0 {
                continue;
            }
            let expiring = o
                .queue
                .items_before(from.saturating_add(self.best_single(other)));
            let replicas = (o.ready_on.len() + o.loading as usize).max(1);
            let share = due.saturating_sub(expiring) / replicas;
            if share == 0 {
                continue;
            }
            // Its batches also take its requests due later: costed at the batch its whole
            // queue fills, not the smaller one the requests due first would.
            let fills = (o.queue.items().saturating_sub(expiring) / replicas).max(share);
            let batch = efficient_batch(o, device.kind, (fills, false), self.params.max_exec_time);
            let cost =
                (share as u128 * u128::from(batch.estimate) / batch.served.max(1) as u128) as Nanos;
            work = work.saturating_add(cost);
        }
        work
    }
}
