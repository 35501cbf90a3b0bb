//! Adaptive shedding before reading: the edge lets through to reading and decoding at most
//! about [`LET_THROUGH`] times the requests of a model that the server recently went on to
//! accept (plus a [`FLOOR`]), and refuses the rest at once, before their bodies are read.
//!
//! Why: the admission view (`scheduler::view::judge`) cannot see all the policy sees (a
//! request's items, other models' work on a shared device, margins in hindsight), and under
//! ten times capacity most requests it lets through were still refused after their bodies
//! were read and decoded (by the policy at admission, or `timed_out` in its queue; the
//! overload bench counted three in four), so the one front-end core spent its time on
//! work that was thrown away while the refusals themselves waited behind it. This rule
//! measures what is actually accepted and sheds what exceeds it by a margin; at normal
//! load (nearly every request accepted) it refuses nothing.
//!
//! Pure: no clock, no I/O; `now` comes from the caller. Deterministic: the share to refuse
//! is taken exactly, by carrying the fraction from one request to the next, not drawn at
//! random.

use crate::time::Nanos;

/// Requests let through per request accepted, over the window: the margin above what is
/// served, so that a model whose load grows is not held at its old rate.
pub const LET_THROUGH: f64 = 2.0;

/// Requests counted as accepted in every window on top of those that were: a model with
/// little traffic is never shed, and one whose requests were all refused (cold, or behind
/// a burst) gets enough through to show it is accepting again; from there what gets
/// through doubles each bucket (about three buckets from nothing to half its capacity).
pub const FLOOR: f64 = 10.0;

/// One of the window's two halves; the window is the last one to two of them. Short, so
/// that the throttle follows a burst's end within a second.
pub const BUCKET: Nanos = 250_000_000;

/// Counts of one bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    /// Requests judged (shed or not).
    requests: u64,
    /// Of them, let through to reading.
    through: u64,
    /// Requests let through that were refused later (decoding, the policy). Not those
    /// whose body came too slowly: that is the client's pace, and counting it would let
    /// a few stalled uploads shed everyone else's requests.
    refused: u64,
}

/// One model's (or pipeline's) throttle.
#[derive(Clone, Debug, Default)]
pub struct Throttle {
    /// The previous bucket and the current one.
    counts: [Counts; 2],
    /// Index of the current bucket (`now / BUCKET`).
    index: u64,
    /// Share of a refusal owed: the fractions of past judgements, carried.
    owed: f64,
}

impl Throttle {
    /// Moves the window to `now`.
    fn roll(&mut self, now: Nanos) {
        let index = now / BUCKET;
        if index == self.index {
            return;
        }
        self.counts[0] = if index == self.index + 1 {
            self.counts[1]
        } else {
            Counts::default()
        };
        self.counts[1] = Counts::default();
        self.index = index;
    }

    /// The share of requests to refuse now: none while the requests judged are at most
    /// `LET_THROUGH` times those accepted (plus `FLOOR`), else the excess over them.
    pub fn share(&mut self, now: Nanos) -> f64 {
        self.roll(now);
        let [a, b] = self.counts;
        let requests = (a.requests + b.requests) as f64;
        let through = a.through + b.through;
        let accepted = through.saturating_sub(a.refused + b.refused) as f64;
        ((requests - LET_THROUGH * (accepted + FLOOR)) / (requests + 1.0)).clamp(0.0, 1.0)
    }

    /// Judges one request at `now`: `true` to refuse it before reading. A request let
    /// through is counted as such; its later refusal, if any, is told by
    /// [`Throttle::refused`].
    pub fn shed(&mut self, now: Nanos) -> bool {
        let share = self.share(now);
        self.counts[1].requests += 1;
        self.owed += share;
        if self.owed >= 1.0 {
            self.owed -= 1.0;
            return true;
        }
        self.counts[1].through += 1;
        false
    }

    /// A request let through was refused after all, at `now`.
    pub fn refused(&mut self, now: Nanos) {
        self.roll(now);
        self.counts[1].refused += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` requests at `now`, each refused later if `refused`; how many were shed.
    fn offer(t: &mut Throttle, now: Nanos, n: u32, refused: bool) -> u32 {
        let mut shed = 0;
        for _ in 0..n {
            if t.shed(now) {
                shed += 1;
            } else if refused {
                t.refused(now);
            }
        }
        shed
    }

    #[test]
    fn nothing_is_shed_while_requests_are_accepted() {
        let mut t = Throttle::default();
        for step in 0..20 {
            assert_eq!(offer(&mut t, step * BUCKET / 4, 1_000, false), 0);
        }
        assert_eq!(t.share(5 * BUCKET), 0.0);
    }

    /// Mutation that breaks it: `LET_THROUGH` counted on requests judged instead of those
    /// accepted (nothing is ever shed), or the shed requests counted as let through (the
    /// share stays near zero).
    #[test]
    fn under_overload_about_twice_the_accepted_get_through() {
        let mut t = Throttle::default();
        // 1,000 requests a bucket, of which the server accepts 100.
        let mut through = 0;
        for bucket in 0..10u64 {
            let now = bucket * BUCKET;
            let mut accepted = 0;
            for _ in 0..1_000 {
                if t.shed(now) {
                    continue;
                }
                if accepted < 100 {
                    accepted += 1;
                } else {
                    t.refused(now);
                }
                if bucket == 9 {
                    through += 1;
                }
            }
        }
        assert!((150..=260).contains(&through), "{through} let through");
    }

    /// Mutation that breaks it: `FLOOR` set to 0 (of twenty refused requests, half are
    /// shed).
    #[test]
    fn a_low_rate_is_never_shed_and_a_refused_model_recovers_in_a_few_buckets() {
        let mut t = Throttle::default();
        assert_eq!(offer(&mut t, 0, 20, true), 0, "twenty refused, none shed");
        // A model all of whose requests were refused, then accepting all of 500 a bucket.
        offer(&mut t, BUCKET, 1_000, true);
        let through = |t: &mut Throttle, bucket: u64| 500 - offer(t, bucket * BUCKET, 500, false);
        let first = through(&mut t, 2);
        assert!(first >= 10, "the floor gets some through: {first}");
        through(&mut t, 3);
        through(&mut t, 4);
        assert_eq!(through(&mut t, 5), 500, "all through by the fourth bucket");
    }

    /// Mutation that breaks it: the previous bucket kept when more than one has passed
    /// (a burst long over still sheds).
    #[test]
    fn the_window_forgets_a_burst_within_two_buckets() {
        let mut t = Throttle::default();
        offer(&mut t, 0, 1_000, true);
        assert!(t.share(BUCKET / 2) > 0.9, "everything was refused");
        assert!(t.share(BUCKET) > 0.9, "still in the window");
        assert_eq!(t.share(2 * BUCKET), 0.0, "forgotten");
        assert_eq!(offer(&mut t, 2 * BUCKET, 100, false), 0);
    }
}
