//! Admission at the edge: what a policy publishes about each model after its steps, and
//! the pure rule that refuses a request before its body is even read.
//!
//! The HTTP front end must not spend work (reading, decoding) on a request its model cannot
//! serve in time, and it must decide without a round trip to the controller. So the
//! controller copies a small [`ModelView`] of each model it touched into a shared table
//! after every step, and the front end asks [`judge`] with it. The view carries the
//! policy's own projection of when one more request would finish behind the model's queue
//! (the rule that refuses at arrival, `scheduler/clockwork/admit.rs`), so the edge refuses
//! before reading what the policy would refuse after decoding; the requests the edge let
//! through and the policy has not got yet (being read or decoded) count ahead of a new one
//! ([`ModelView::behind`]). It judges by the policy's own rule: the projection with the
//! drift margin the policy keeps on it (on the requests ahead too), against the objective
//! less the policy's buffer for estimate error ([`Buffer`]), the same internal deadline.
//! Anything it lets through is decided again by the policy, so an optimistic view costs a
//! read, a decoding and a refusal tens of milliseconds after arrival; a pessimistic one
//! would turn servable requests away, so the view leaves out what it cannot know (the
//! request's items, other models' work on a shared device, a margin in hindsight).

use crate::time::{Nanos, MS};

/// One second in [`Nanos`]: `Retry-After` counts whole seconds.
const SECOND: Nanos = 1_000 * MS;

/// What the edge needs to know about one model to refuse its requests early.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelView {
    /// Devices that hold it ready (or are loading it) and may take work; 0: cold (only the
    /// policy can judge a load, and a refusal there also asks for one).
    pub replicas: u32,
    /// Items of the waiting requests that can still be served (deadline not yet
    /// hopeless), for snapshots and logs.
    pub queued: u32,
    /// Batch-1 execution estimate: a request finishes no sooner than this after it is
    /// ready to run.
    pub single: Nanos,
    /// When one more request of one item, queued at `at` behind every waiting one, would
    /// finish as the policy projects it.
    pub finish: Nanos,
    /// Device time per item when its queue is long: the mean of the most efficient batch a
    /// full queue fills, over the items it serves (what more requests to come will cost),
    /// with the share of it the policy keeps as drift margin (the margin grows with the
    /// queue: a request behind more work keeps more).
    pub per_item: Nanos,
    /// What the policy takes off a request's objective for estimate error: its internal
    /// deadline, which its projection must meet.
    pub buffer: Buffer,
    /// When the view was taken (the controller's clock).
    pub at: Nanos,
}

/// The margin for estimate error a policy takes off every objective: an arrival is
/// admitted only if its projection finishes by its objective less [`Buffer::kept_off`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Buffer {
    /// The margin (learned from the devices' reports).
    pub width: Nanos,
    /// What an objective keeps at least, until every device has learned its margins: with
    /// the configured buffer, a tight objective would otherwise leave nothing to run and
    /// be measured. 0 once learned.
    pub floor: Nanos,
}

impl Buffer {
    /// How much of `objective` the policy keeps off: the width, but never so much that
    /// less than the floor (or the whole objective, if shorter) is left.
    pub fn kept_off(&self, objective: Nanos) -> Nanos {
        let window = objective
            .saturating_sub(self.width)
            .max(self.floor.min(objective));
        objective - window
    }
}

/// A request's objective as the edge works to it: arrival, and deadline (the arrival plus
/// the objective less the time its answer needs after the batch, as the policy gets it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Due {
    /// When its head was read: its objective runs from here, and the policy's buffer is
    /// a share of that objective ([`Buffer::kept_off`]).
    pub arrival: Nanos,
    /// When its answer must be ready after the batch: the arrival plus the objective, less
    /// the reserve for the way back that the policy is given too.
    pub deadline: Nanos,
}

impl Due {
    /// The internal deadline the policy judges the request's arrival against.
    pub fn internal(&self, buffer: Buffer) -> Nanos {
        let objective = self.deadline.saturating_sub(self.arrival);
        self.deadline - buffer.kept_off(objective)
    }
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

/// How old a view may be before the edge stops trusting it: a model nothing happened to
/// for this long has had its backlog drained or expired.
pub const STALE_AFTER: Nanos = SECOND;

impl ModelView {
    /// The view at `now` with `requests` more ahead of the next one: requests the edge
    /// let through that the policy has not got yet (being read or decoded), each of one
    /// item at the model's device time per item, shared by its replicas. They run after
    /// the queue, and after `now` (the view may be older than they are). The policy's
    /// projection cannot see them; without them, under overload, the edge let through
    /// many times what the queue could take, and their bodies were read and decoded to be
    /// refused.
    pub fn behind(mut self, requests: u32, now: Nanos) -> Self {
        if requests == 0 {
            return self;
        }
        let work =
            u64::from(requests).saturating_mul(self.per_item) / u64::from(self.replicas.max(1));
        let after = self.finish.max(now.saturating_add(self.single));
        self.finish = after.saturating_add(work);
        self
    }

    /// Soonest the request could finish if it is ready to run at `ready` (after its own
    /// front-end work): behind the queue, and never sooner than one batch-1 run.
    pub fn soonest_finish(&self, ready: Nanos) -> Option<Nanos> {
        if self.replicas == 0 {
            return None;
        }
        Some(self.finish.max(ready.saturating_add(self.single)))
    }
}

/// How long a request of the model `view` describes, made at `now`, is projected to take
/// until it is answered: behind the model's queue, and never less than one batch-1 run.
/// `None`: nothing is known (no view, a stale one, or a cold model). A pipeline judges
/// its roots' downstream time with it (earliest-stage drop, `pipeline::run`).
pub fn projected_wait(view: Option<&ModelView>, now: Nanos) -> Option<Nanos> {
    let view = view.filter(|v| now.saturating_sub(v.at) < STALE_AFTER)?;
    Some(view.soonest_finish(now)?.saturating_sub(now))
}

/// Decides whether a request of the model `view` describes, `due` as it says, and needing
/// `front` more front-end time before the policy can plan it, is worth reading at `now`:
/// whether the projection finishes by the policy's internal deadline.
pub fn judge(view: Option<&ModelView>, now: Nanos, front: Nanos, due: Due) -> Admission {
    let Some(view) = view.filter(|v| now.saturating_sub(v.at) < STALE_AFTER) else {
        return Admission::Admit;
    };
    let Some(finish) = view.soonest_finish(now.saturating_add(front)) else {
        return Admission::Admit;
    };
    if finish <= due.internal(view.buffer) {
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

    fn view(finish: Nanos) -> ModelView {
        ModelView {
            replicas: 1,
            queued: 3,
            single: 2 * MS,
            finish,
            per_item: MS,
            buffer: Buffer::default(),
            at: 0,
        }
    }

    /// Due by `deadline`, arrived at 0.
    fn due(deadline: Nanos) -> Due {
        Due {
            arrival: 0,
            deadline,
        }
    }

    #[test]
    fn an_idle_model_admits() {
        assert_eq!(
            judge(Some(&view(2 * MS)), 0, MS, due(100 * MS)),
            Admission::Admit
        );
    }

    #[test]
    fn a_backlog_longer_than_the_objective_refuses() {
        let deep = view(100 * MS);
        assert_eq!(judge(Some(&deep), 0, 0, due(100 * MS)), Admission::Admit);
        assert_eq!(
            judge(Some(&deep), 0, 0, due(100 * MS - 1)),
            Admission::Refuse {
                retry_after: SECOND
            },
            "one nanosecond short"
        );
    }

    #[test]
    fn front_end_work_counts_when_the_queue_is_short() {
        let v = view(10 * MS);
        assert_eq!(v.soonest_finish(0), Some(10 * MS), "behind the queue");
        assert_eq!(
            v.soonest_finish(20 * MS),
            Some(22 * MS),
            "ready later still"
        );
        assert_eq!(
            judge(Some(&v), 0, 20 * MS, due(21 * MS)),
            Admission::Refuse {
                retry_after: SECOND
            }
        );
        assert_eq!(judge(Some(&v), 0, 20 * MS, due(22 * MS)), Admission::Admit);
    }

    #[test]
    fn cold_stale_or_unknown_models_are_left_to_the_policy() {
        let mut cold = view(10 * SECOND);
        cold.replicas = 0;
        assert_eq!(judge(Some(&cold), 0, 0, due(MS)), Admission::Admit);
        assert_eq!(judge(None, 0, 0, due(0)), Admission::Admit);
        let old = view(10 * SECOND);
        assert_eq!(judge(Some(&old), STALE_AFTER, 0, due(MS)), Admission::Admit);
        assert!(matches!(
            judge(Some(&old), STALE_AFTER - 1, 0, due(STALE_AFTER)),
            Admission::Refuse { .. }
        ));
    }

    /// Mutation that breaks it: `behind` leaving the view as it is, not sharing the work
    /// between replicas, or adding it to a view's finish that is already past.
    #[test]
    fn requests_let_through_count_ahead_of_the_next() {
        let v = view(10 * MS); // one item costs 1 ms, a batch-1 run 2 ms
        assert_eq!(v.behind(0, 0), v);
        assert_eq!(v.behind(4, 0).finish, 14 * MS);
        let two = ModelView { replicas: 2, ..v };
        assert_eq!(two.behind(4, 0).finish, 12 * MS, "two replicas share them");
        assert_eq!(judge(Some(&v), 0, 0, due(12 * MS)), Admission::Admit);
        assert!(matches!(
            judge(Some(&v.behind(4, 0)), 0, 0, due(12 * MS)),
            Admission::Refuse { .. }
        ));
        // A view taken 50 ms ago of a queue that has drained since: they run from now.
        assert_eq!(v.behind(4, 50 * MS).finish, 56 * MS);
    }

    #[test]
    fn retry_after_is_the_backlog_and_at_least_a_second() {
        assert_eq!(
            judge(Some(&view(8 * SECOND)), 0, 0, due(100 * MS)),
            Admission::Refuse {
                retry_after: 8 * SECOND
            }
        );
    }

    #[test]
    fn the_buffer_is_kept_off_the_objective_down_to_its_floor() {
        let learned = Buffer {
            width: 5 * MS,
            floor: 0,
        };
        assert_eq!(learned.kept_off(100 * MS), 5 * MS);
        assert_eq!(learned.kept_off(3 * MS), 3 * MS, "all of a shorter one");
        let seeded = Buffer {
            width: 5 * MS,
            floor: 10 * MS,
        };
        assert_eq!(seeded.kept_off(100 * MS), 5 * MS);
        assert_eq!(seeded.kept_off(12 * MS), 2 * MS, "10 ms left");
        assert_eq!(seeded.kept_off(6 * MS), 0, "the whole objective left");
        let due = Due {
            arrival: 50 * MS,
            deadline: 150 * MS,
        };
        assert_eq!(due.internal(learned), 145 * MS);
    }

    /// Mutation that breaks it: `judge` comparing the projection with the deadline itself
    /// (the policy's buffer not kept: the edge lets through what the policy refuses).
    #[test]
    fn the_edge_judges_by_the_policys_internal_deadline() {
        let buffered = ModelView {
            buffer: Buffer {
                width: 5 * MS,
                floor: 0,
            },
            ..view(96 * MS)
        };
        assert!(matches!(
            judge(Some(&buffered), 0, 0, due(100 * MS)),
            Admission::Refuse { .. }
        ));
        assert_eq!(
            judge(Some(&buffered), 0, 0, due(101 * MS)),
            Admission::Admit
        );
    }
}
