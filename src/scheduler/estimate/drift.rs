//! A device's drift: how far stretches of its runs fall behind the means they were
//! planned at. Admission may keep it as a margin (`PolicyConfig::drift_margin`,
//! `scheduler/clockwork/admit.rs`); [`super::Margins`] learns it beside the lag
//! and the overrun (a child of `estimate`, whose `Spread` it keeps its percentile in).

use std::collections::VecDeque;

use super::Spread;
use crate::time::{Nanos, LONGEST};

/// Consecutive runs a device's drift is summed over: about the batches a request waits
/// behind when its model's queue is full (a 100 ms objective over runs of about 12 ms).
pub const DRIFT_RUNS: usize = 8;

/// Percentile of the recent drifts that admission keeps as a margin: one queue in a
/// hundred may still drift further (its last requests then time out, as without it). The
/// 90th cut no time-outs under overload (docs/EXPERIMENTS.md, "The drift margin").
pub const DRIFT_PERCENTILE: f64 = 99.0;

/// Parts per million: a drift is a share of the time its runs should have taken.
pub const PPM: u64 = 1_000_000;

/// How much longer than their means [`DRIFT_RUNS`] consecutive runs of a device took, as a
/// share of those means (parts per million), a high percentile over the recent such
/// stretches. Admission projects the queue ahead of a request at the runs' means
/// (`scheduler/clockwork/admit.rs`); a device whose runs drift in slow spells (a cpu core
/// shared with other work) falls behind that projection for several runs at once, which
/// the window of the last runs cannot foresee, and the requests admitted last, projected
/// to finish just inside their objective, time out. A share, so that the margin grows
/// with the queue it protects: a request behind one run keeps little, one behind a full
/// queue keeps much. A device with exact timing never drifts: its margin stays 0.
#[derive(Clone, Debug)]
pub struct Drift {
    /// The last runs' (time over their mean, negative when under; the mean), oldest first.
    recent: VecDeque<(i64, u64)>,
    /// Their sums.
    over: i64,
    means: u64,
    /// The shares over full stretches, clamped at 0.
    shares: Spread,
}

impl Drift {
    pub fn new(window: usize) -> Self {
        Self {
            recent: VecDeque::with_capacity(DRIFT_RUNS),
            over: 0,
            means: 0,
            shares: Spread::new(window, DRIFT_PERCENTILE),
        }
    }

    /// Learns from a run that took `took` where its runs take `mean` on average.
    /// Both count as at most [`LONGEST`], as estimates do: the sums of a stretch then
    /// never overflow, whatever a device reports.
    pub fn observe(&mut self, took: Nanos, mean: Nanos) {
        let (took, mean) = (took.min(LONGEST), mean.min(LONGEST));
        let over = took as i64 - mean as i64;
        if self.recent.len() == DRIFT_RUNS {
            let (o, m) = self.recent.pop_front().unwrap_or((0, 0));
            self.over -= o;
            self.means -= m;
        }
        self.recent.push_back((over, mean));
        self.over += over;
        self.means += mean;
        if self.recent.len() == DRIFT_RUNS {
            let over = u128::from(self.over.max(0).unsigned_abs());
            let share = over * u128::from(PPM) / u128::from(self.means.max(1));
            self.shares
                .observe(u64::try_from(share).unwrap_or(u64::MAX));
        }
    }

    /// The margin to keep for a queue of runs expected to take `queued`: 0 until enough
    /// stretches are in.
    pub fn margin(&self, queued: Nanos) -> Nanos {
        let share = u128::from(queued) * u128::from(self.shares.get(0)) / u128::from(PPM);
        Nanos::try_from(share).unwrap_or(Nanos::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_the_share_stretches_of_runs_fell_behind_their_means() {
        let mut d = Drift::new(64);
        // Runs alternating 3 over and 3 under their mean never drift.
        for i in 0..100 {
            d.observe(if i % 2 == 0 { 13 } else { 7 }, 10);
        }
        assert_eq!(d.margin(1000), 0, "noise that evens out is no drift");
        // A slow spell: four runs 5 over each, in a stretch of eight runs of mean 10.
        for i in 0..8 {
            d.observe(if i < 4 { 15 } else { 10 }, 10);
        }
        assert_eq!(d.margin(1000), 250, "20 over 80: a quarter of the queue");
        assert_eq!(d.margin(100), 25, "the margin grows with the queue");
        let mut exact = Drift::new(64);
        for _ in 0..100 {
            exact.observe(10, 10);
        }
        assert_eq!(exact.margin(1000), 0, "exact timing: no margin");
    }

    #[test]
    fn runs_reported_as_taking_centuries_count_as_an_hour() {
        let mut d = Drift::new(64);
        // A run under its mean, then runs whose sum passes what an i64 holds: the sums
        // must still take the first one back out when it leaves the stretch.
        d.observe(0, 10);
        for _ in 0..64 {
            d.observe(Nanos::MAX, 10);
        }
        // Every stretch an hour over its mean at each run: a share of 3.6e17 parts per
        // million, which its window (an `Estimator`) holds to `LONGEST` like any value.
        assert_eq!(d.margin(PPM), LONGEST);
    }
}
