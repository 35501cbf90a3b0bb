//! Admission's promise to the requests already queued (`PolicyConfig::protect_admitted`).
//!
//! A model's queue is in deadline order, so a request due sooner than some already
//! queued (a tighter objective of its own, or a model's direct request beside a pipeline's
//! sub-requests, whose stage deadlines are later) goes ahead of them, and every one of them
//! then finishes later by its run. Under overload that pushes the ones admitted last past
//! their latest useful finish: they wait most of their objective and are refused as timed
//! out, which is exactly the late refusal that admission exists to avoid. So before a
//! request is queued ahead of others, the projection (`admit.rs`) runs on through the
//! queue behind it, and the request is refused at once if one of them would then miss its
//! latest finish while it would have made it without the newcomer.
//!
//! A model whose requests all share one objective never has a request behind a new one
//! (they arrive in deadline order): the check costs one comparison there, and the
//! simulator's single-objective workloads do not move.

use super::admit::{efficient_batch, Newcomer, Rules};
use super::{ClockworkPolicy, ModelState};
use crate::model::ModelId;
use crate::scheduler::device::Runs;
use crate::scheduler::queue::Queued;
use crate::time::Nanos;

/// Requests behind a new one that the check follows; past them it stops (and admits):
/// bounds the cost of an arrival ahead of a very long queue.
const MAX_BEHIND: usize = 256;

impl ClockworkPolicy {
    /// Whether `new`, queued now for `model`, leaves every request behind it (due later)
    /// finishing by its latest useful finish as admission projects the queue: each
    /// replica taking the next most efficient batch when it frees, the batches at their
    /// means (with `queue_at_mean`) and each checked at its estimate. A request that
    /// misses even without the newcomer (its finish with it more than the newcomer's own
    /// run past its latest) does not count against it: it is lost either way.
    pub(super) fn keeps_those_behind(&self, model: ModelId, now: Nanos, new: Newcomer) -> bool {
        let m = &self.models[model.0 as usize];
        let ahead = m.queue.count_before(new.deadline.saturating_add(1));
        if ahead == m.queue.len() {
            return true;
        }
        let others = new.shared.then_some(new.deadline);
        let Some(mut replicas) = self.replicas_free(model, now, others) else {
            return true;
        };
        // The requests at the front that no replica can finish any more are refused, not
        // served (as in the projection).
        let base = replicas.base.saturating_add(self.best_single(model));
        let expiring = m.queue.count_before(base).min(ahead);
        let rules = Rules {
            bound: Nanos::MAX,
            max_exec: self.params.max_exec_time,
            at_mean: self.params.queue_at_mean,
        };
        let order = Order {
            ahead: m.queue.iter_from(expiring).take(ahead - expiring),
            behind: m.queue.iter_from(ahead).take(MAX_BEHIND),
        };
        run_behind(m, replicas.free(), order, new, rules)
    }
}

/// The queue as the check runs it: the requests served before the newcomer, and those
/// after it.
struct Order<A, B> {
    ahead: A,
    behind: B,
}

/// Runs the queue in `order` with `new`'s items between its two parts on the replicas
/// `free`; `false` as soon as a request behind misses its latest finish by less than
/// `new.alone` (it made it without the newcomer), `true` once every one behind is checked.
fn run_behind<'q>(
    m: &ModelState,
    free: &mut [(Nanos, Runs)],
    order: Order<impl Iterator<Item = &'q Queued>, impl Iterator<Item = &'q Queued> + Clone>,
    new: Newcomer,
    rules: Rules,
) -> bool {
    let ahead: usize = order.ahead.map(|q| q.items as usize).sum();
    let after: usize = order.behind.clone().map(|q| q.items as usize).sum();
    let mut remaining = ahead + new.items as usize + after;
    // Whole requests of several items leave batches short of their size (see `drain`).
    let pad = new.items > 1 || m.queue.items() > m.queue.len();
    // Items served so far, and where the next request behind starts among them.
    let (mut served, mut starts) = (0, ahead + new.items as usize);
    let mut behind = order.behind.peekable();
    while behind.peek().is_some() {
        let Some((i, at)) = free.iter().enumerate().min_by_key(|(_, f)| f.0) else {
            return true;
        };
        let at = at.0;
        let batch = efficient_batch(m, free[i].1, (remaining, pad), rules.max_exec);
        let finish = at.saturating_add(batch.estimate);
        served += batch.served;
        // Every request behind that starts within this batch finishes with it.
        while let Some(q) = behind.next_if(|_| starts < served) {
            if q.latest < finish && q.latest.saturating_add(new.alone) >= finish {
                return false;
            }
            starts += q.items as usize;
        }
        free[i].0 = at.saturating_add(if rules.at_mean {
            batch.mean
        } else {
            batch.estimate
        });
        remaining = remaining.saturating_sub(batch.served);
        if remaining == 0 {
            break;
        }
    }
    true
}
