//! Admission in hindsight: which admitted requests finished in time, by how much they
//! had to spare.
//!
//! Admission projects when a new request would finish (`admit.rs`) from the model's own
//! queue and an expectation of the other models' work on its devices (`shared.rs`). The
//! expectation is a mean: under overload on a shared device, requests admitted with a
//! few ms to spare were then overtaken by other models' arrivals due sooner, waited most
//! of their objective and were refused as timed out (in the zoo-like mix of
//! `tests/mix_support`, a fifth of those admitted with under 10 ms to spare, and
//! most of the dear model's whatever their slack). A refusal after waiting is the slow
//! kind that admission exists to avoid.
//!
//! So each model learns, like any other estimate, how its projections fared: every
//! admitted request is seen when it leaves the queue, with the time its projection left
//! it to spare (its slack) and whether it finished by its latest useful finish (served,
//! by the end of its batch; refused after waiting, a miss). [`solve`] finds the margin
//! below which the requests seen missed more than they were served, a miss weighing
//! [`Hindsight::new`]'s `weight` times a request served in time, and admission refuses
//! at arrival a request with less slack than that. So it refuses only where refusing
//! loses fewer served requests than it saves refusals after waiting, by the weight; where
//! projections hold (light load, a device of its own) there are no misses and no margin.
//! An earlier rule kept the 99th percentile of the misses' errors instead; it refused
//! nearly all of a tight model whose every slack sometimes missed (docs/EXPERIMENTS.md,
//! "Admission in hindsight").
//!
//! A margin refuses every request below it, and what is refused teaches nothing: a
//! model could keep the margin of its worst moment for good. So once nothing was learned
//! for [`FORGET`], one request is admitted without it (a trial, like a circuit breaker's
//! half-open state): served in time, the old window is forgotten; a miss is learned and
//! the next trial waits another [`FORGET`]. Under an overload that leaves a model no
//! room, that costs at most one request refused after waiting per [`FORGET`] and its
//! objective; after one, the model is back within [`FORGET`] and a run.
//!
//! Each refusal is right on its own, but together they can hold a model whose admitted
//! requests mostly miss (long runs, a loose objective, overtaken by everyone) to a few
//! percent of its requests; below a floor of its arrivals served it is admitted without
//! the margin (`floor.rs`, `PolicyConfig::hindsight_floor`).
//!
//! And a request that would time out is dropped before it runs: refusing it at arrival
//! saves no device time, so what the margin refuses that would have been served is a
//! plain loss where nothing queues long enough to be overtaken. At objectives of a few
//! runs (twice a batch-1 run, the SLO sweep) that cost up to 11% of goodput; a request
//! whose objective is under `PolicyConfig::hindsight_min_runs` of its own runs is judged
//! without the margin (`admit.rs::judge_queue`).

use std::collections::VecDeque;

use crate::model::RequestId;
use crate::time::Nanos;

/// Admitted requests the margin is learned over: at 5x overload on the zoo-like mix,
/// about a quarter of a second of one model's admissions.
const WINDOW: usize = 200;

/// With nothing learned for this long, one request is admitted without the margin.
pub(super) const FORGET: Nanos = 200_000_000;

/// An admitted request as it left the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    /// Its latest useful finish less its projected finish, at admission.
    slack: Nanos,
    /// It did not finish by its latest useful finish.
    missed: bool,
}

/// The margin that the requests seen, by ascending slack, say is worth keeping: of the
/// margins that refuse each request with less slack than one of them, the one where the
/// misses it refuses, each weighing `weight`, most outweigh the requests served in time
/// it refuses, each weighing 1; 0 unless that is by more than one miss (a slow moment on
/// an idle model keeps nothing).
fn solve(by_slack: &[Seen], weight: u32) -> Nanos {
    let weight = i64::from(weight);
    let (mut score, mut best, mut margin) = (0i64, weight, 0);
    for (i, seen) in by_slack.iter().enumerate() {
        score += if seen.missed { weight } else { -1 };
        let last_of_its_slack = by_slack.get(i + 1).is_none_or(|n| n.slack > seen.slack);
        if last_of_its_slack && score > best {
            best = score;
            margin = seen.slack + 1;
        }
    }
    margin
}

/// One model's admissions in hindsight.
#[derive(Clone, Debug)]
pub(super) struct Hindsight {
    /// How many requests served in time a miss weighs (`PolicyConfig::hindsight_weight`).
    weight: u32,
    /// The last [`WINDOW`] admitted requests seen, oldest first.
    recent: VecDeque<Seen>,
    /// The same, by ascending slack: what [`solve`] reads.
    by_slack: Vec<Seen>,
    /// What [`solve`] last said.
    margin: Nanos,
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
    /// Kept before the latest finish, besides the projection (0 for a trial).
    pub(super) margin: Nanos,
    /// The request is a trial: admitted, it must be told ([`Hindsight::admitted`]).
    pub(super) trial: bool,
}

/// How an admitted request left the queue, against what admission projected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Left {
    /// When admission projected it to finish (0: admitted without a projection).
    pub(super) projected: Nanos,
    /// Its latest useful finish.
    pub(super) latest: Nanos,
    /// It finished by `latest` (a request refused after waiting did not).
    pub(super) in_time: bool,
}

impl Hindsight {
    /// A model with nothing seen, a miss weighing `weight` requests served in time.
    pub(super) fn new(weight: u32) -> Self {
        Self {
            weight: weight.max(1),
            recent: VecDeque::with_capacity(WINDOW),
            by_slack: Vec::with_capacity(WINDOW),
            margin: 0,
            learned_at: 0,
            trial: None,
        }
    }

    /// What a request arriving at `now` keeps.
    pub(super) fn keep(&self, now: Nanos) -> Keep {
        let pending = self.trial.is_some_and(|t| t.latest >= now);
        let trial = self.margin > 0 && !pending && now.saturating_sub(self.learned_at) >= FORGET;
        Keep {
            margin: if trial { 0 } else { self.margin },
            trial,
        }
    }

    /// The request `id` (latest useful finish `latest`) was admitted at `now` as a trial.
    pub(super) fn admitted(&mut self, id: RequestId, latest: Nanos, now: Nanos) {
        self.trial = Some(Trial { id, latest });
        self.learned_at = now;
    }

    /// Request `id` left the queue as `outcome` says, learned at `now`. Requests
    /// admitted without a projection teach nothing.
    pub(super) fn learn(&mut self, id: RequestId, outcome: Left, now: Nanos) {
        if outcome.projected == 0 {
            return;
        }
        let seen = Seen {
            slack: outcome.latest.saturating_sub(outcome.projected),
            missed: !outcome.in_time,
        };
        let trial = self.trial.is_some_and(|t| t.id == id);
        if trial {
            self.trial = None;
        }
        if trial && !seen.missed {
            // Admitted without the margin and served in time: the margin was the past's.
            self.recent.clear();
            self.by_slack.clear();
            self.margin = 0;
        } else {
            self.push(seen);
        }
        self.learned_at = now;
    }

    /// Adds a request seen to the window.
    fn push(&mut self, seen: Seen) {
        if self.recent.len() == WINDOW {
            if let Some(old) = self.recent.pop_front() {
                let at = self.by_slack.partition_point(|s| s.slack < old.slack);
                if let Some(k) = self.by_slack[at..].iter().position(|s| *s == old) {
                    self.by_slack.remove(at + k);
                }
            }
        }
        self.recent.push_back(seen);
        let at = self.by_slack.partition_point(|s| s.slack <= seen.slack);
        self.by_slack.insert(at, seen);
        self.margin = solve(&self.by_slack, self.weight);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    /// Requests with latest finish 100 ms, by slack in ms and missed, seen in order.
    fn learned(seen: &[(Nanos, bool)]) -> Hindsight {
        let mut h = Hindsight::new(1);
        for (i, &(slack, missed)) in seen.iter().enumerate() {
            let outcome = Left {
                projected: (100 - slack) * MS,
                latest: 100 * MS,
                in_time: !missed,
            };
            h.learn(RequestId(i as u64), outcome, MS);
        }
        h
    }

    #[test]
    fn projections_that_hold_keep_no_margin() {
        let h = learned(&[(5, false); 300]);
        assert_eq!(
            h.keep(2 * MS),
            Keep {
                margin: 0,
                trial: false
            }
        );
        // One miss is no margin; nor are misses that those served in time outnumber.
        assert_eq!(learned(&[(1, true)]).keep(2 * MS).margin, 0);
        let mixed: Vec<_> = (0..100).map(|i| (i % 10, i % 3 == 0)).collect();
        assert_eq!(learned(&mixed).keep(2 * MS).margin, 0);
    }

    #[test]
    fn the_margin_refuses_where_misses_outweigh_requests_served() {
        // Below 10 ms of slack, 2 misses in 3; above, none.
        let mut seen: Vec<_> = (0..90).map(|i| (i % 10, i % 3 != 0)).collect();
        seen.extend((0..100).map(|i| (10 + i % 20, false)));
        assert_eq!(learned(&seen).keep(2 * MS).margin, 9 * MS + 1);
        // A miss weighing 2 of those served: the same misses now outweigh them further up.
        let by_slack: Vec<Seen> = [(3, true), (5, false), (8, true), (20, false)]
            .into_iter()
            .map(|(slack, missed)| Seen { slack, missed })
            .collect();
        assert_eq!(solve(&by_slack, 1), 0);
        assert_eq!(solve(&by_slack, 2), 9);
        // Two hundred more that hold push them out of the window.
        let mut seen = seen.clone();
        seen.extend([(5, false); WINDOW]);
        assert_eq!(learned(&seen).keep(2 * MS).margin, 0);
        // Requests admitted without a projection teach nothing.
        let mut h = learned(&[(3, true); 3]);
        let blind = Left {
            projected: 0,
            latest: 110 * MS,
            in_time: false,
        };
        h.learn(RequestId(9), blind, MS);
        assert_eq!(h.keep(2 * MS).margin, 3 * MS + 1);
    }

    /// A model whose last three requests missed with 40 ms to spare, trying one at `at`.
    fn on_trial() -> (Hindsight, Nanos) {
        let mut h = learned(&[(40, true); 3]);
        assert_eq!(h.keep(MS + FORGET - 1).margin, 40 * MS + 1);
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
        assert_eq!(h.keep(at + 40 * MS).margin, 40 * MS + 1, "pending");
        // Served in time: the past's misses are forgotten.
        let served = Left {
            projected: at + 10 * MS,
            latest: at + 50 * MS,
            in_time: true,
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
        let refused = Left {
            projected: at + 10 * MS,
            latest: at + 50 * MS,
            in_time: false,
        };
        let then = at + 50 * MS;
        h.learn(RequestId(7), refused, then);
        assert_eq!(h.keep(then + FORGET - 1).margin, 40 * MS + 1);
        assert!(h.keep(then + FORGET).trial);
    }

    #[test]
    fn a_trial_never_learned_from_is_lost_past_its_latest_finish() {
        let (h, at) = on_trial();
        // Withdrawn, or failed: never learned from. Past its latest finish, another trial.
        assert!(!h.keep(at + 50 * MS).trial);
        assert!(h.keep(at + FORGET + 1).trial);
    }

    /// What a margin refuses, scored by brute force: each refused miss `weight`, each
    /// refused request served in time -1.
    fn score(seen: &[Seen], margin: Nanos, weight: i64) -> i64 {
        let refused = seen.iter().filter(|s| s.slack < margin);
        refused.map(|s| if s.missed { weight } else { -1 }).sum()
    }

    proptest::proptest! {
        /// `solve` keeps the margin that refuses the most misses net of what was
        /// served, against every margin tried by brute force (0 where none beats one
        /// miss). Mutation that breaks it: a margin taken inside a run of equal slacks
        /// (`last_of_its_slack` dropped).
        #[test]
        fn solve_keeps_the_best_margin(
            seen in proptest::collection::vec((0u64..20, proptest::bool::ANY), 0..60),
            weight in 1u32..5,
        ) {
            let mut seen: Vec<Seen> =
                seen.into_iter().map(|(slack, missed)| Seen { slack, missed }).collect();
            seen.sort_by_key(|s| s.slack);
            let w = i64::from(weight);
            let margin = solve(&seen, weight);
            let best = (0..=21).map(|m| score(&seen, m, w)).max().unwrap_or(0);
            if best > w {
                proptest::prop_assert_eq!(score(&seen, margin, w), best);
                // The least margin of that score: nothing refused that need not be.
                let least = (0..=21).find(|&m| score(&seen, m, w) == best);
                proptest::prop_assert_eq!(Some(margin), least);
            } else {
                proptest::prop_assert_eq!(margin, 0);
            }
        }
    }
}
