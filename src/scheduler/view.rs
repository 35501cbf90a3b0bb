//! Admission at the edge: what a policy publishes about each model after its steps, and
//! the pure rule that refuses a request before its body is even read.
//!
//! The HTTP front end must not spend work (reading, decoding) on a request its model cannot
//! serve in time, and it must decide without a round trip to the controller. So the
//! controller copies a small [`ModelView`] of each model it touched into a shared table
//! after every step, and the front end asks [`judge`] with it. The rule is optimistic on
//! purpose: it refuses only when even the best case (every ready replica working on this
//! model alone, at its most efficient batch size) finishes too late. Anything it lets
//! through is still decided by the policy after admission, so an optimistic view costs
//! some decoding, never a late answer; a pessimistic one would turn servable requests away.

use crate::time::{Nanos, MS};

/// One second in [`Nanos`]: `Retry-After` counts whole seconds.
const SECOND: Nanos = 1_000 * MS;

/// What the edge needs to know about one model to refuse its requests early.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelView {
    /// Devices that hold it ready and may take work; 0: cold (only the policy can judge a
    /// load, and a refusal there also asks for one).
    pub replicas: u32,
    /// Soonest an exec lane of a ready replica runs out of planned work.
    pub free_at: Nanos,
    /// Waiting requests that can still be served (deadline not yet hopeless): a new
    /// request waits behind them.
    pub queued: u32,
    /// Most optimistic batch-1 execution estimate.
    pub single: Nanos,
    /// Allowed batch sizes (the first `batches` entries, ascending) and their most
    /// optimistic estimates: the queue drains at the best throughput among the batches
    /// that still fit a request's remaining time, not at the largest batch's.
    pub batch_sizes: [u32; MAX_BATCHES],
    pub batch_times: [Nanos; MAX_BATCHES],
    pub batches: usize,
    /// When the view was taken (the controller's clock).
    pub at: Nanos,
}

/// The edge's verdict on a request not yet read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Read and decode it; the policy decides the rest.
    Admit,
    /// It cannot finish by its deadline: refuse now, and suggest when to retry.
    Refuse {
        /// When the work ahead of it should be done, from now (at least one second, as
        /// `Retry-After` counts whole seconds).
        retry_after: Nanos,
    },
}

/// Batch sizes a view carries (the policy allows powers of two up to 16: five).
pub const MAX_BATCHES: usize = 8;

/// How old a view may be before the edge stops trusting it: a model nothing happened to
/// for this long has had its backlog drained or expired.
pub const STALE_AFTER: Nanos = SECOND;

impl ModelView {
    /// Soonest the request could finish if admitted `now` and ready to run at `ready`
    /// (after its own front-end work), with `budget` of time left after `ready`: the device
    /// time of everything queued plus itself, spread over the replicas at the best
    /// throughput among the batch sizes whose run fits the budget (batch 1 if none does),
    /// never less than one batch-1 run.
    pub fn soonest_finish(&self, ready: Nanos, budget: Nanos) -> Option<Nanos> {
        if self.replicas == 0 {
            return None;
        }
        let (mut size, mut time) = (1u64, self.single);
        let n = self.batches.min(MAX_BATCHES);
        for (&s, &t) in self.batch_sizes[..n].iter().zip(&self.batch_times[..n]) {
            // Cheaper per request (t / s < time / size) and short enough to be of use.
            if t <= budget && u128::from(t) * u128::from(size) < u128::from(time) * u128::from(s) {
                (size, time) = (u64::from(s), t);
            }
        }
        let items = u64::from(self.queued) + 1;
        let per_round = size * u64::from(self.replicas);
        let share = items.saturating_mul(time).div_ceil(per_round);
        Some(ready.max(self.free_at) + share.max(self.single))
    }
}

/// Decides whether a request of the model `view` describes, arriving with `deadline`
/// (from the edge, less the time its answer needs to be encoded) and needing `front` more
/// front-end time before the policy can plan it, is worth reading at `now`.
pub fn judge(view: Option<&ModelView>, now: Nanos, front: Nanos, deadline: Nanos) -> Admission {
    let Some(view) = view.filter(|v| now.saturating_sub(v.at) < STALE_AFTER) else {
        return Admission::Admit;
    };
    let ready = now.saturating_add(front);
    let Some(finish) = view.soonest_finish(ready, deadline.saturating_sub(ready)) else {
        return Admission::Admit;
    };
    if finish <= deadline {
        return Admission::Admit;
    }
    let backlog = finish.saturating_sub(now);
    Admission::Refuse {
        retry_after: backlog.max(SECOND),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(queued: u32) -> ModelView {
        ModelView {
            replicas: 1,
            free_at: 0,
            queued,
            single: 2 * MS,
            batch_sizes: [1, 8, 0, 0, 0, 0, 0, 0],
            batch_times: [2 * MS, 8 * MS, 0, 0, 0, 0, 0, 0],
            batches: 2,
            at: 0,
        }
    }

    #[test]
    fn an_idle_model_admits() {
        assert_eq!(judge(Some(&view(0)), 0, MS, 100 * MS), Admission::Admit);
    }

    #[test]
    fn a_backlog_longer_than_the_objective_refuses() {
        // 99 queued + 1 = 100 requests at 1 ms each (batch of 8 in 8 ms): 100 ms of work.
        let deep = view(99);
        assert_eq!(deep.soonest_finish(0, Nanos::MAX), Some(100 * MS));
        assert_eq!(judge(Some(&deep), 0, 0, 100 * MS), Admission::Admit);
        assert_eq!(
            judge(Some(&deep), 0, MS, 100 * MS),
            Admission::Refuse {
                retry_after: SECOND
            },
            "1 ms of front-end work tips it over"
        );
    }

    /// A batch too long for the time left does not count towards draining the queue:
    /// 99 requests at batch 8 (1 ms each) fit 100 ms, at batch 1 (2 ms each) they do not.
    #[test]
    fn only_batches_that_fit_the_time_left_drain_the_queue() {
        let deep = view(99);
        assert_eq!(deep.soonest_finish(0, Nanos::MAX), Some(100 * MS));
        assert_eq!(
            deep.soonest_finish(0, 7 * MS),
            Some(200 * MS),
            "batch 8 takes 8 ms"
        );
        assert_eq!(judge(Some(&deep), 0, 0, 150 * MS), Admission::Admit);
        let short = ModelView {
            batch_times: [2 * MS, 200 * MS, 0, 0, 0, 0, 0, 0],
            ..deep
        };
        assert!(matches!(
            judge(Some(&short), 0, 0, 150 * MS),
            Admission::Refuse { .. }
        ));
    }

    #[test]
    fn replicas_share_the_backlog() {
        let mut two = view(99);
        two.replicas = 2;
        assert_eq!(two.soonest_finish(0, Nanos::MAX), Some(50 * MS));
    }

    #[test]
    fn one_request_takes_at_least_a_single_run() {
        let mut v = view(0);
        v.free_at = 10 * MS;
        assert_eq!(
            v.soonest_finish(0, Nanos::MAX),
            Some(12 * MS),
            "lane busy, then batch 1"
        );
        assert_eq!(
            v.soonest_finish(20 * MS, Nanos::MAX),
            Some(22 * MS),
            "front end later still"
        );
    }

    #[test]
    fn cold_stale_or_unknown_models_are_left_to_the_policy() {
        let mut cold = view(1000);
        cold.replicas = 0;
        assert_eq!(judge(Some(&cold), 0, 0, MS), Admission::Admit);
        assert_eq!(judge(None, 0, 0, 0), Admission::Admit);
        let old = view(1000);
        assert_eq!(judge(Some(&old), STALE_AFTER, 0, MS), Admission::Admit);
        assert!(matches!(
            judge(Some(&old), STALE_AFTER - 1, 0, STALE_AFTER),
            Admission::Refuse { .. }
        ));
    }

    #[test]
    fn retry_after_is_the_backlog_and_at_least_a_second() {
        let huge = view(8 * 1000 - 1); // 8000 requests: 8 s of work
        assert_eq!(
            judge(Some(&huge), 0, 0, 100 * MS),
            Admission::Refuse {
                retry_after: 8 * SECOND
            }
        );
    }
}
