//! Admission in hindsight: how much later than projected its admitted requests finished.
//!
//! Admission projects when a new request would finish (`admit.rs`) from the model's own
//! queue and an expectation of the other models' work on its devices (`shared.rs`). The
//! expectation is a mean: under overload on a shared device, requests admitted with a
//! few ms to spare were then overtaken by other models' arrivals due sooner, waited most
//! of their objective and were refused as timed out (in the zoo-like mix of
//! `tests/policy_overload.rs`, a fifth of those admitted with under 10 ms to spare, and
//! most of the dear model's whatever their slack). A refusal after waiting is the slow
//! kind that admission exists to avoid.
//!
//! So each model learns its projections' error like any other estimate: every admitted
//! request is measured against its projection when it leaves the queue: served, by the
//! end of its batch; refused after waiting, by the soonest it could still have finished
//! (a lower bound). A high percentile of the recent errors ([`Hindsight::keep`]) is kept
//! before the objective at the next admissions. Where projections hold (light load, a
//! device of its own), the errors are zero and so is the margin.
//!
//! A margin wide enough refuses every request at arrival, and a model that admits
//! nothing learns nothing: it would keep the margin of its worst moment for good. So once
//! nothing was learned for [`FORGET`], one request is admitted without it (a trial, like a
//! circuit breaker's half-open state): served as projected, the old errors are forgotten;
//! late or refused, its error is learned and the next trial waits another [`FORGET`].
//! Under an overload that leaves a model no room, that costs at most one request refused
//! after waiting per [`FORGET`] and its objective; after one, the model is back within
//! [`FORGET`] and a run.

use std::collections::VecDeque;

use crate::model::RequestId;
use crate::time::Nanos;

/// Admitted requests the margin is learned over: at 5x overload on the zoo-like mix,
/// about a quarter of a second of one model's admissions.
const WINDOW: usize = 200;

/// Misses in the window that the margin lets be: it is the error of the next larger one
/// (the 99th percentile of the window, by nearest rank), so that about one admitted
/// request in a hundred may still wait to be refused, and one slow moment on an idle
/// model keeps no margin at all.
const LET_BE: usize = WINDOW / 100;

/// With nothing learned for this long, one request is admitted without the margin.
pub(super) const FORGET: Nanos = 200_000_000;

/// One model's projection errors.
#[derive(Clone, Debug, Default)]
pub(super) struct Hindsight {
    /// The last [`WINDOW`] admitted requests' errors, oldest first: how much later than
    /// projected each finished if it finished after its latest useful finish (a miss),
    /// else 0. Missing entries count as 0 (a model starts with no margin).
    recent: VecDeque<Nanos>,
    /// The window's misses (its non-zero errors), ascending: few, but for a model that
    /// misses a lot.
    misses: Vec<Nanos>,
    /// When a request was last learned from, or a trial admitted.
    learned_at: Nanos,
    /// The request admitted without the margin, not yet learned from.
    trial: Option<Trial>,
}

/// A request admitted without the margin: its id, and its latest useful finish (past it,
/// a trial never learned from, withdrawn or failed, counts as lost).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Trial {
    id: RequestId,
    latest: Nanos,
}

/// What admission keeps before a request's latest finish, besides its projection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Keep {
    pub(super) margin: Nanos,
    /// The request is a trial: admitted, it must be told ([`Hindsight::admitted`]).
    pub(super) trial: bool,
}

/// How an admitted request left the queue, against what admission projected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Outcome {
    /// When admission projected it to finish (0: admitted without a projection).
    pub(super) projected: Nanos,
    /// When it finished (refused: the soonest it could still have finished).
    pub(super) finish: Nanos,
    /// Its latest useful finish.
    pub(super) latest: Nanos,
}

impl Hindsight {
    /// What a request arriving at `now` keeps.
    pub(super) fn keep(&self, now: Nanos) -> Keep {
        let margin = self.margin();
        let pending = self.trial.is_some_and(|t| t.latest >= now);
        let trial = margin > 0 && !pending && now.saturating_sub(self.learned_at) >= FORGET;
        Keep {
            margin: if trial { 0 } else { margin },
            trial,
        }
    }

    /// The error that all but [`LET_BE`] of the window's stay within.
    fn margin(&self) -> Nanos {
        let n = self.misses.len();
        if n > LET_BE {
            self.misses[n - 1 - LET_BE]
        } else {
            0
        }
    }

    /// The request `id` (latest useful finish `latest`) was admitted at `now` as a trial.
    pub(super) fn admitted(&mut self, id: RequestId, latest: Nanos, now: Nanos) {
        self.trial = Some(Trial { id, latest });
        self.learned_at = now;
    }

    /// Request `id` left the queue as `outcome` says, learned at `now`. Requests
    /// admitted without a projection teach nothing.
    pub(super) fn learn(&mut self, id: RequestId, outcome: Outcome, now: Nanos) {
        if outcome.projected == 0 {
            return;
        }
        let error = if outcome.finish > outcome.latest {
            outcome.finish.saturating_sub(outcome.projected).max(1)
        } else {
            0
        };
        let trial = self.trial.is_some_and(|t| t.id == id);
        if trial {
            self.trial = None;
        }
        if trial && error == 0 {
            // Admitted without the margin and served in time: the margin was the past's.
            self.recent.clear();
            self.misses.clear();
        } else {
            self.push(error);
        }
        self.learned_at = now;
    }

    /// Adds an error to the window.
    fn push(&mut self, error: Nanos) {
        if self.recent.len() == WINDOW {
            let old = self.recent.pop_front().unwrap_or(0);
            if old > 0 {
                let at = self.misses.partition_point(|&m| m < old);
                self.misses.remove(at);
            }
        }
        self.recent.push_back(error);
        if error > 0 {
            let at = self.misses.partition_point(|&m| m < error);
            self.misses.insert(at, error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    /// Requests projected at 100 ms, latest finish 110 ms, finished `100 + e` ms.
    fn learned(errors: &[Nanos]) -> Hindsight {
        let mut h = Hindsight::default();
        for (i, &e) in errors.iter().enumerate() {
            let outcome = Outcome {
                projected: 100 * MS,
                finish: 100 * MS + e,
                latest: 110 * MS,
            };
            h.learn(RequestId(i as u64), outcome, MS);
        }
        h
    }

    #[test]
    fn projections_that_hold_keep_no_margin() {
        let h = learned(&[0; 300]);
        assert_eq!(
            h.keep(2 * MS),
            Keep {
                margin: 0,
                trial: false
            }
        );
        // Later than projected but in time is no miss; nor are a few misses.
        assert_eq!(learned(&[9 * MS; 300]).keep(2 * MS).margin, 0);
        assert_eq!(learned(&[40 * MS, 50 * MS]).keep(2 * MS).margin, 0);
    }

    #[test]
    fn the_margin_lets_one_miss_in_a_hundred_be() {
        let mut errors = vec![0; 190];
        errors.extend((1..=10).map(|i| (10 + i) * MS));
        let h = learned(&errors);
        // Ten misses of 11..20 ms in 200: all but the two largest stay within 18 ms.
        assert_eq!(
            h.keep(2 * MS),
            Keep {
                margin: 18 * MS,
                trial: false
            }
        );
        // Two hundred more that hold push them out of the window.
        let mut errors = errors.clone();
        errors.extend([0; WINDOW]);
        assert_eq!(learned(&errors).keep(2 * MS).margin, 0);
        // Requests admitted without a projection teach nothing.
        let mut h = learned(&[40 * MS; 3]);
        let blind = Outcome {
            projected: 0,
            finish: 500 * MS,
            latest: 110 * MS,
        };
        h.learn(RequestId(9), blind, MS);
        assert_eq!(h.keep(2 * MS).margin, 40 * MS);
    }

    /// A model whose last three requests missed by 40 ms, trying one at `at`.
    fn on_trial() -> (Hindsight, Nanos) {
        let mut h = learned(&[40 * MS; 3]);
        assert_eq!(h.keep(MS + FORGET - 1).margin, 40 * MS);
        let at = MS + FORGET;
        assert_eq!(
            h.keep(at),
            Keep {
                margin: 0,
                trial: true
            }
        );
        h.admitted(RequestId(7), at + 50 * MS, at);
        (h, at)
    }

    #[test]
    fn a_model_that_learns_nothing_tries_one_request_without_the_margin() {
        let (mut h, at) = on_trial();
        // One trial at a time: the others keep the margin while it is pending.
        assert_eq!(h.keep(at + 40 * MS).margin, 40 * MS, "pending");
        // Served in time: the past's errors are forgotten.
        let served = Outcome {
            projected: at + 10 * MS,
            finish: at + 30 * MS,
            latest: at + 50 * MS,
        };
        h.learn(RequestId(7), served, at + 30 * MS);
        assert_eq!(
            h.keep(at + 31 * MS),
            Keep {
                margin: 0,
                trial: false
            }
        );
    }

    #[test]
    fn a_trial_that_misses_keeps_the_margin_for_another_while() {
        let (mut h, at) = on_trial();
        let refused = Outcome {
            projected: at + 10 * MS,
            finish: at + 60 * MS,
            latest: at + 50 * MS,
        };
        let then = at + 50 * MS;
        h.learn(RequestId(7), refused, then);
        assert_eq!(h.keep(then + FORGET - 1).margin, 40 * MS);
        assert!(h.keep(then + FORGET).trial);
    }

    #[test]
    fn a_trial_never_learned_from_is_lost_past_its_latest_finish() {
        let (h, at) = on_trial();
        // Withdrawn, or failed: never learned from. Past its latest finish, another trial.
        assert!(!h.keep(at + 50 * MS).trial);
        assert!(h.keep(at + FORGET + 1).trial);
    }
}
