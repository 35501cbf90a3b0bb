//! Latency estimates learned from measurements.
//!
//! An [`Estimator`] keeps the last `window` measured durations of one thing (a model at one
//! batch size on one kind of device, or a model's weight load) and answers a high
//! percentile of them. It starts from a profiled seed, so the first decisions are informed.
//!
//! Measurements also grow old: the policy sends the estimates of a model that has not been
//! measured for a while back to their seeds ([`Estimator::reseed`]). Without that, a burst
//! of slow runs (a busy host) can raise an estimate past every objective; then every
//! request is refused, nothing runs, and nothing is ever measured to bring it down.
//!
//! [`Margins`] learns, per device, how far reality strays from the plan: how long an action
//! waits after it could start (the dispatch lag), and how much later than planned its
//! answers are known (the run's overrun of the estimate it was planned with, plus the trip
//! of its report back). The policy plans with these instead of fixed constants, so that a
//! device with exact timing is planned up to its limit while a noisy one keeps a margin.
//! It also learns the device's [`Drift`], how far stretches of runs fall behind their
//! means, which admission may keep as a margin (`PolicyConfig::drift_margin`), and its
//! [`Slowdown`]: how many times longer than its kind it runs now, if much longer.

use std::collections::VecDeque;

mod drift;
mod slowdown;

use crate::protocol::Measured;
use crate::time::{Nanos, LONGEST};
pub use drift::{Drift, DRIFT_RUNS};
pub use slowdown::{Learn, Slowdown, SlowdownMeter};

/// Sliding-window percentile of measured durations.
#[derive(Clone, Debug)]
pub struct Estimator {
    /// The most recent measurements in arrival order (the seed until the first arrives).
    recent: VecDeque<Nanos>,
    /// The same values, sorted, so a percentile is an index.
    sorted: Vec<Nanos>,
    /// Whether `recent` still holds only the seed.
    seeded: bool,
    /// Capacity of the window.
    window: usize,
    /// Rank within the sorted window that is the estimate, as a fraction in `0..=1`.
    quantile: f64,
    /// The estimate for the current window: read far more often than measurements come
    /// (every planning step reads several), so it is kept rather than recomputed.
    current: Nanos,
    /// Index of `current` in `sorted`: it changes only with the window's size, so a full
    /// window keeps it.
    rank: usize,
    /// The smallest and the largest value in the window, kept beside the estimate: when
    /// they are equal, a full window that is given that value again stays as it is, and its
    /// buffers are not even read (an emulated device's exact timing measures the same
    /// duration run after run; those reads were most of the cost of a report).
    least: Nanos,
    most: Nanos,
    /// The sum of the window's values, for its mean: what a queue of runs adds up to is
    /// their mean times their count far more closely than their high percentile is.
    sum: u128,
}

impl Estimator {
    /// An estimator seeded with a profiled duration.
    pub fn new(seed: Nanos, window: usize, percentile: f64) -> Self {
        let seed = seed.min(LONGEST);
        Self {
            recent: VecDeque::from([seed]),
            sorted: vec![seed],
            seeded: true,
            window: window.max(1),
            quantile: (percentile / 100.0).clamp(0.0, 1.0),
            current: seed,
            rank: 0,
            least: seed,
            most: seed,
            sum: u128::from(seed),
        }
    }

    /// The mean of the window (the seed until the first measurement).
    pub fn mean(&self) -> Nanos {
        (self.sum / self.recent.len().max(1) as u128) as Nanos
    }

    /// The current estimate.
    pub fn get(&self) -> Nanos {
        self.current
    }

    /// The percentile of the window, after it changed.
    fn update(&mut self) {
        let rank = (self.quantile * (self.sorted.len() - 1) as f64).ceil() as usize;
        self.rank = rank.min(self.sorted.len() - 1);
        self.settle();
    }

    /// The kept values, after the sorted window changed.
    fn settle(&mut self) {
        self.current = self.sorted[self.rank];
        self.least = self.sorted[0];
        self.most = self.sorted[self.sorted.len() - 1];
    }

    /// The smallest value in the window: a best case (the seed until the first measurement).
    pub fn least(&self) -> Nanos {
        self.least
    }

    /// The second largest value in the window (the only one while it holds one): a high
    /// case that one outlier alone does not set.
    pub fn runner_up(&self) -> Nanos {
        let n = self.sorted.len();
        self.sorted[n.saturating_sub(2)]
    }

    /// The window's median (the upper one of an even count): a typical value that one
    /// outlier hardly moves, where the mean follows it by its size over the window.
    pub fn median(&self) -> Nanos {
        self.sorted[self.sorted.len() / 2]
    }

    /// Forgets every measurement and starts again from `seed`; answers whether it held
    /// measurements (a seed alone is left as it is).
    pub fn reseed(&mut self, seed: Nanos) -> bool {
        if self.seeded {
            return false;
        }
        let seed = seed.min(LONGEST);
        self.recent.clear();
        self.recent.push_back(seed);
        self.sorted.clear();
        self.sorted.push(seed);
        self.seeded = true;
        self.current = seed;
        self.rank = 0;
        self.least = seed;
        self.most = seed;
        self.sum = u128::from(seed);
        true
    }

    /// Adds a measurement; the seed is forgotten at the first one. Like a seed, it counts
    /// as at most [`LONGEST`]: a device (or a remote worker) reporting a run of centuries
    /// must not overflow the plans built on it.
    pub fn observe(&mut self, measured: Nanos) {
        let measured = measured.min(LONGEST);
        let full = !self.seeded && self.recent.len() == self.window;
        if full && self.least == measured && self.most == measured {
            // Every value in the window is this one: one leaving and one coming change
            // nothing, not even the order of `recent`.
            return;
        }
        if self.seeded || full {
            self.seeded = false;
            if let Some(old) = self.recent.pop_front() {
                self.recent.push_back(measured);
                self.sum = self.sum - u128::from(old) + u128::from(measured);
                // A full window (or the seed) trades one value for another: the size and
                // so the rank stay, and only the values between the two move. A device
                // with exact timing reports the same margin sample again and again, and
                // then nothing moves at all (a removal and an insertion each moved up to
                // the whole window, twice per report for the margins' windows of 256).
                replace_sorted(&mut self.sorted, old, measured);
                self.settle();
                return;
            }
        }
        self.recent.push_back(measured);
        self.sum += u128::from(measured);
        let at = self.sorted.partition_point(|&v| v < measured);
        self.sorted.insert(at, measured);
        self.update();
    }
}

impl Estimator {
    /// Revises the latest measurement of `old` in the window to `new` (a run found later
    /// to have been slowed by its device, `Slowdown`); answers whether it was there (it
    /// may have left the window, or the estimator been reseeded).
    pub fn revise(&mut self, old: Nanos, new: Nanos) -> bool {
        if self.seeded {
            return false;
        }
        let (old, new) = (old.min(LONGEST), new.min(LONGEST));
        let Some(at) = self.recent.iter().rposition(|&v| v == old) else {
            return false;
        };
        self.recent[at] = new;
        self.sum = self.sum - u128::from(old) + u128::from(new);
        replace_sorted(&mut self.sorted, old, new);
        self.settle();
        true
    }
}

/// Replaces one `old` in the ascending `sorted` by `new`, keeping it ascending. `old` is
/// always there (`sorted` holds what `recent` holds); were it not, the largest would go.
fn replace_sorted(sorted: &mut [Nanos], old: Nanos, new: Nanos) {
    if old == new {
        return;
    }
    let Some(last) = sorted.len().checked_sub(1) else {
        return;
    };
    let at = sorted.binary_search(&old).unwrap_or(last);
    if new > old {
        // The values after `at` below `new` move one place down, `new` goes after them.
        let to = at + sorted[at + 1..].partition_point(|&v| v < new);
        sorted[at..=to].rotate_left(1);
        sorted[to] = new;
    } else {
        // The values before `at` from `new` on move one place up, `new` goes before them.
        let to = sorted[..at].partition_point(|&v| v < new);
        sorted[to..=at].rotate_right(1);
        sorted[to] = new;
    }
}

/// Samples a [`Spread`] needs before its percentile replaces the configured starting
/// point: a few lucky runs must not strip a device of its margin.
pub const WARM_UP: usize = 32;

/// A high percentile of recent non-negative deviations (lags, overruns), answering a
/// caller's starting point until [`WARM_UP`] samples have been seen.
#[derive(Clone, Debug)]
pub struct Spread {
    recent: Estimator,
    /// Samples seen, up to `WARM_UP` (no need to count further).
    seen: usize,
}

impl Spread {
    pub fn new(window: usize, percentile: f64) -> Self {
        Self {
            recent: Estimator::new(0, window, percentile),
            seen: 0,
        }
    }

    /// Whether enough samples are in for the percentile to replace the seed.
    pub fn warm(&self) -> bool {
        self.seen >= WARM_UP
    }

    /// The learned percentile, or `seed` while too few samples are in.
    pub fn get(&self, seed: Nanos) -> Nanos {
        if !self.warm() {
            seed
        } else {
            self.recent.get()
        }
    }

    pub fn observe(&mut self, sample: Nanos) {
        self.recent.observe(sample);
        self.seen = (self.seen + 1).min(WARM_UP);
    }
}

/// What an action is expected to take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expected {
    /// The duration it is planned with (a high percentile of its recent runs).
    pub estimate: Nanos,
    /// What its runs take on average: admission projects queues at it, so the device's
    /// drift is measured against it.
    pub mean: Nanos,
}

impl Expected {
    /// An action whose estimate is all there is to expect (loads, unloads).
    pub fn exact(duration: Nanos) -> Self {
        Self {
            estimate: duration,
            mean: duration,
        }
    }
}

/// What a reported action had been planned with, for learning its device's margins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planned {
    /// When it could have started at the soonest: sent, and the lane's previous action
    /// reported done.
    pub could_start: Nanos,
    /// What it was expected to take when it was planned.
    pub expected: Expected,
}

/// Percentile of the lag that planning expects. Not the largest: a late start is caught
/// by the action's `latest` (the executor refuses it and the policy plans again), while a
/// lag expected too long delays every plan on the device, and one spike of a busy host
/// (tens of milliseconds) would do so for a whole window.
pub const LAG_PERCENTILE: f64 = 90.0;

/// What one device's reports taught about its timing (see the module doc).
#[derive(Clone, Debug)]
pub struct Margins {
    /// From the moment an action could start (sent, and its lane free) to its start.
    lag: Spread,
    /// Measured run time over the estimate it was planned with (0 when within it), plus
    /// the time its report took to come back.
    overrun: Spread,
    /// How far stretches of runs fall behind their means.
    drift: Drift,
}

impl Margins {
    pub fn new(window: usize, percentile: f64) -> Self {
        Self {
            lag: Spread::new(window, LAG_PERCENTILE.min(percentile)),
            overrun: Spread::new(window, percentile),
            drift: Drift::new(window),
        }
    }

    /// Learns from one run reported at `now`, planned as `planned`.
    pub fn learn(&mut self, planned: Planned, run: &Measured, now: Nanos) {
        self.lag
            .observe(run.begin.saturating_sub(planned.could_start));
        let took = run.end.saturating_sub(run.begin);
        let trip = now.saturating_sub(run.end);
        self.overrun
            .observe(took.saturating_sub(planned.expected.estimate) + trip);
        self.drift.observe(took, planned.expected.mean);
    }

    /// Whether the overrun margin is learned (the lag warms with it: both learn from the
    /// same reports).
    pub fn warm(&self) -> bool {
        self.overrun.warm()
    }

    /// Expected delay before an action starts, `seed` until learned.
    pub fn lag(&self, seed: Nanos) -> Nanos {
        self.lag.get(seed)
    }

    /// The learned lag, `None` until learned (`lag(seed)` is this or `seed`).
    pub fn learned_lag(&self) -> Option<Nanos> {
        self.lag.warm().then(|| self.lag(0))
    }

    /// Margin to keep before a deadline for runs longer than planned, `seed` until learned.
    pub fn overrun(&self, seed: Nanos) -> Nanos {
        self.overrun.get(seed)
    }

    /// Margin to keep before a deadline for a queue of runs expected to take `queued`,
    /// against their falling behind their means.
    pub fn drift(&self, queued: Nanos) -> Nanos {
        self.drift.margin(queued)
    }
}

#[cfg(test)]
mod tests;
