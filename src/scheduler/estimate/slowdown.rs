//! A device's slowdown: how many times longer than the other devices of its kind it runs
//! now, so that the policy plans a slow device at its own pace instead of at its kind's.
//!
//! Estimates are kept per device kind: every device of a kind learns into, and is planned
//! from, the same windows. A device that turns slow (a throttled GPU, a cpu core another
//! process took, the fault layer's `slow` window) then runs past every plan made for it,
//! hangs by the watchdog's reckoning again and again, and is taken out; meanwhile its slow
//! runs raise the estimates of its healthy peers. Measured against its kind, a device
//! whose last [`SLOWDOWN_RUNS`] runs all took at least [`SLOWDOWN_FLOOR`] times its
//! kind's quickest recent run is planned at the least of those ratios (its estimates
//! scaled up), and what it measures is scaled back down before its kind learns it: the
//! runs of the streak that showed it, which its kind had learned as measured, are revised
//! ([`Learn::Revise`]). It keeps serving at the pace it has, and its peers keep theirs.
//!
//! Why the kind's quickest run and not its mean: the streak's own runs, learned as
//! measured until the streak is long enough to count, raise the mean they are compared
//! with, and a device 8 times slower looked 3 times slower by its third run. A window's
//! quickest run moves only once the whole window is slow. Why runs are learned as
//! measured at once and revised later, not held back: a lone slow run is the tail the
//! kind's high percentile must cover from the next plan on.
//!
//! Below the floor a device is planned as its kind: the margins (`Margins`) and the high
//! percentile already cover runs somewhat longer than planned, and noise must not move
//! plans. The least of the last runs, not their mean: one run at the kind's pace is
//! enough to plan the device as its kind again, so a recovered device is never held back
//! by its slow spell.
//!
//! Pure: no clock reads; the policy passes each run and its kind's quickest.

use crate::time::Nanos;

/// Runs in a row that must all be slow before a device is planned slower than its kind:
/// a lone slow run is the tail its kind's high percentile already covers.
pub const SLOWDOWN_RUNS: usize = 3;

/// How many times its kind's quickest recent run, in thousandths, a run must take to
/// count as slow: twice, past the spread of a device with steady timing. A cpu core on a
/// busy host runs that slow in stretches of its own (docs/EXPERIMENTS.md, "A device
/// planned at its own pace"), which is why `PolicyConfig::device_slowdown` is off by
/// default.
pub const SLOWDOWN_FLOOR: u32 = 2_000;

/// The most a device is planned slower, in thousandths: past it, its runs would fit no
/// objective anyway, and a hang's late report must not stand for its pace.
pub const SLOWDOWN_MAX: u32 = 64_000;

/// A factor on a device kind's estimates, in thousandths ([`Slowdown::NONE`] is 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slowdown(u32);

impl Slowdown {
    /// The device runs as its kind.
    pub const NONE: Slowdown = Slowdown(1_000);

    /// A factor of `thousandths` / 1000, kept within 1 and [`SLOWDOWN_MAX`].
    pub fn from_thousandths(thousandths: u32) -> Self {
        Self(thousandths.clamp(Self::NONE.0, SLOWDOWN_MAX))
    }

    /// The factor in thousandths.
    pub fn thousandths(self) -> u32 {
        self.0
    }

    /// What an action its kind is expected to run in `duration` takes on this device.
    pub fn scale(self, duration: Nanos) -> Nanos {
        if self == Self::NONE {
            return duration;
        }
        let scaled = u128::from(duration) * u128::from(self.0) / 1_000;
        Nanos::try_from(scaled).unwrap_or(Nanos::MAX)
    }

    /// What a run this device measured at `duration` would have taken on its kind.
    pub fn unscale(self, duration: Nanos) -> Nanos {
        if self == Self::NONE {
            return duration;
        }
        let unscaled = u128::from(duration) * 1_000 / u128::from(self.0.max(1));
        Nanos::try_from(unscaled).unwrap_or(Nanos::MAX)
    }
}

/// What a device's kind learns from one of its runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Learn<T> {
    /// A new run `T` that took this long on its kind.
    Observe(T, Nanos),
    /// A run `T` it learned as measured (the first duration) took this long on its kind
    /// (the second): its device turned out slower than its kind.
    Revise(T, Nanos, Nanos),
}

/// Learns one device's [`Slowdown`] from its runs (see the module doc).
///
/// `T` says what a run was (the policy's model and batch), handed back with what its
/// kind should learn of it.
#[derive(Clone, Debug)]
pub struct SlowdownMeter<T> {
    /// The last runs' ratios to their kind's quickest, in thousandths, oldest overwritten.
    recent: [u32; SLOWDOWN_RUNS],
    /// Runs seen, up to [`SLOWDOWN_RUNS`].
    seen: usize,
    /// Where the next ratio goes in `recent`.
    next: usize,
    /// The slowdown the last runs say.
    current: Slowdown,
    /// The runs of the current slow streak, as measured, while it is too short to count.
    streak: Vec<(T, Nanos)>,
}

impl<T> Default for SlowdownMeter<T> {
    fn default() -> Self {
        Self {
            recent: [0; SLOWDOWN_RUNS],
            seen: 0,
            next: 0,
            current: Slowdown::NONE,
            streak: Vec::with_capacity(SLOWDOWN_RUNS),
        }
    }
}

impl<T: Copy> SlowdownMeter<T> {
    /// The slowdown to plan the device with.
    pub fn get(&self) -> Slowdown {
        self.current
    }

    /// Forgets every run: the device is planned as its kind until it shows a new streak.
    pub fn reset(&mut self) {
        self.seen = 0;
        self.current = Slowdown::NONE;
        self.streak.clear();
    }

    /// Learns from a run `what` that took `took` where its kind's quickest recent run of
    /// that batch took `quickest`. Answers what its kind learns now: the run, as its kind
    /// would have run it; and, when this run makes a streak long enough to count, the
    /// revisions of the streak's earlier runs.
    pub fn observe(
        &mut self,
        (what, took): (T, Nanos),
        quickest: Nanos,
    ) -> impl Iterator<Item = Learn<T>> + '_ {
        let ratio = u128::from(took) * 1_000 / u128::from(quickest.max(1));
        let ratio = u32::try_from(ratio).unwrap_or(u32::MAX).min(SLOWDOWN_MAX);
        self.recent[self.next] = ratio;
        self.next = (self.next + 1) % SLOWDOWN_RUNS;
        self.seen = (self.seen + 1).min(SLOWDOWN_RUNS);
        let least = self.recent.iter().copied().min().unwrap_or(0);
        self.current = if self.seen == SLOWDOWN_RUNS && least >= SLOWDOWN_FLOOR {
            Slowdown::from_thousandths(least)
        } else {
            Slowdown::NONE
        };
        let slowdown = self.current;
        let revised = if slowdown == Slowdown::NONE {
            if ratio >= SLOWDOWN_FLOOR {
                self.streak.push((what, took));
            } else {
                self.streak.clear();
            }
            self.streak.len()
        } else {
            0
        };
        // Drained in place: a report allocates nothing.
        let revisions = self
            .streak
            .drain(revised..)
            .map(move |(what, took)| Learn::Revise(what, took, slowdown.unscale(took)));
        revisions.chain(std::iter::once(Learn::Observe(
            what,
            slowdown.unscale(took),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slowdowns a meter says for runs of these ratios to their kind's quickest
    /// (x10).
    fn slowdowns(ratios: &[u64]) -> Vec<u32> {
        let mut meter = SlowdownMeter::default();
        ratios
            .iter()
            .map(|&r| {
                meter.observe(((), r * 100), 1_000).for_each(drop);
                meter.get().thousandths()
            })
            .collect()
    }

    #[test]
    fn a_device_is_slow_only_after_runs_in_a_row_past_the_floor() {
        assert_eq!(
            slowdowns(&[30, 40, 35, 19, 80, 80, 80, 10]),
            // One slow run is a tail; then the least of three; 19 is under the floor and
            // stays among the last three; one run at pace ends it.
            [1_000, 1_000, 3_000, 1_000, 1_000, 1_000, 8_000, 1_000]
        );
    }

    #[test]
    fn a_slow_streak_is_learned_as_measured_then_revised() {
        use Learn::{Observe, Revise};
        let mut meter = SlowdownMeter::default();
        let mut run = |what: u32, took: Nanos| meter.observe((what, took), 10).collect::<Vec<_>>();
        assert_eq!(run(0, 10), [Observe(0, 10)], "at pace");
        assert_eq!(run(1, 40), [Observe(1, 40)], "slow: a tail so far");
        assert_eq!(run(2, 10), [Observe(2, 10)], "it was a tail");
        assert_eq!(run(3, 30), [Observe(3, 30)]);
        assert_eq!(run(4, 40), [Observe(4, 40)]);
        assert_eq!(
            run(5, 35),
            [Revise(3, 30, 10), Revise(4, 40, 13), Observe(5, 11)],
            "a slow device (3x): its streak as its kind would have run it"
        );
        assert_eq!(
            run(6, 60),
            [Observe(6, 17)],
            "still slow (3.5x): scaled at once"
        );
        assert_eq!(run(7, 10), [Observe(7, 10)], "back at pace");
    }

    #[test]
    fn a_hang_does_not_stand_for_a_pace() {
        let mut meter = SlowdownMeter::default();
        for _ in 0..SLOWDOWN_RUNS {
            meter.observe(((), Nanos::MAX), 1).for_each(drop);
        }
        assert_eq!(meter.get(), Slowdown(SLOWDOWN_MAX));
        assert_eq!(meter.get().scale(1_000), 64_000);
    }

    proptest::proptest! {
        /// Scaling and scaling back loses at most a nanosecond per thousandth of rounding,
        /// and a slow device's runs are never planned shorter than its kind's.
        #[test]
        fn scaling_round_trips(thousandths in SLOWDOWN_FLOOR..=SLOWDOWN_MAX, d in 0u64..1 << 40) {
            let s = Slowdown(thousandths);
            proptest::prop_assert!(s.scale(d) >= d);
            let back = s.unscale(s.scale(d));
            proptest::prop_assert!(back <= d && d - back <= 1, "{d} came back as {back}");
            proptest::prop_assert_eq!(Slowdown::NONE.scale(d), d);
            proptest::prop_assert_eq!(Slowdown::NONE.unscale(d), d);
        }
    }
}
