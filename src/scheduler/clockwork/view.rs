//! The [`ModelView`] the Clockwork policy publishes for admission at the edge: read from
//! its mirror of the devices, its queues and its estimates, changing nothing.

use super::admit::{efficient_batch, Projection};
use super::ClockworkPolicy;
use crate::model::ModelId;
use crate::scheduler::device::Runs;
use crate::scheduler::view::ModelView;
use crate::time::{Nanos, MS};

/// How far the view projects a model's queue: beyond any objective a request has.
const HORIZON: Nanos = 60_000 * MS;

impl ClockworkPolicy {
    /// The model as the edge should see it at `now` (see `crate::scheduler::view`): the
    /// projection is the one the policy refuses arrivals with (`admit.rs`), for one item
    /// behind every waiting one (the edge has not read how many a request carries).
    pub(super) fn model_view(&self, model: ModelId, now: Nanos) -> Option<ModelView> {
        let m = self.models.get(model.0 as usize)?;
        let single = self.best_single(model);
        // Bounded: a projection past any objective says all the edge needs to know.
        let horizon = now.saturating_add(HORIZON);
        let projection = self.projected_finish(model, now, (horizon, 1, None), horizon);
        // With the margin the policy would keep, so that the edge does not decode what
        // the policy then refuses.
        let finish = projection.map(|p| p.finish.saturating_add(p.margin));
        // Requests that could no longer finish even alone are about to time out: their
        // items are not ahead of a new one.
        let hopeless = m.queue.items_before(now.saturating_add(single));
        let runs = m
            .ready_on
            .first()
            .map_or(Runs::of_kind(0), |d| self.devices[d.0 as usize].runs());
        let largest = m.batches.last().map_or(1, |&b| b as usize);
        let full = efficient_batch(m, runs, (largest, false), self.params.max_exec_time);
        let per_item = full.mean / full.served.max(1) as Nanos;
        Some(ModelView {
            replicas: if finish.is_some() {
                m.ready_on.len().max(1) as u32
            } else {
                0
            },
            queued: (m.queue.items() - hopeless).try_into().unwrap_or(u32::MAX),
            single,
            finish: finish.unwrap_or(now),
            per_item: projection.map_or(per_item, |p| with_drift(per_item, p, now)),
            buffer: self.objective_buffer(),
            at: now,
        })
    }
}

/// `work` with the share of the projection's wait that its drift margin is: the margin is
/// the replicas' drift over the time to the finish, so each request more ahead keeps its
/// share too (without it, past capacity the edge let through requests that the policy
/// then refused by a fraction of a millisecond, after their bodies were read and decoded).
/// A projection with no wait left keeps no margin on it.
fn with_drift(work: Nanos, projection: Projection, now: Nanos) -> Nanos {
    let wait = projection.finish.saturating_sub(now);
    if wait == 0 {
        return work;
    }
    let share = u128::from(work) * u128::from(projection.margin) / u128::from(wait);
    work.saturating_add(share.try_into().unwrap_or(Nanos::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mutation that breaks it: the work returned without the share (the requests ahead
    /// counted at the bare estimate while the projection keeps a margin on its own).
    #[test]
    fn each_request_ahead_keeps_the_drift_share_of_its_work() {
        let projection = Projection {
            finish: 100 * MS,
            margin: 20 * MS,
        };
        // A margin of 20 ms over an 80 ms wait: a quarter.
        assert_eq!(with_drift(4 * MS, projection, 20 * MS), 5 * MS);
        let none = Projection {
            margin: 0,
            ..projection
        };
        assert_eq!(with_drift(4 * MS, none, 20 * MS), 4 * MS);
        // No wait left: nothing kept on it (not a share of zero).
        assert_eq!(with_drift(4 * MS, projection, 100 * MS), 4 * MS);
    }
}
