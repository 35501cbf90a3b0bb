//! Latency estimates learned from measurements.
//!
//! An [`Estimator`] keeps the last `window` measured durations of one thing (a model at one
//! batch size on one kind of device, or a model's weight load) and answers a high
//! percentile of them. It starts from a profiled seed, so the first decisions are informed.
//!
//! Measurements also grow old: an estimate whose newest measurement is older than a
//! maximum age can be sent back to its seed ([`Estimator::expire_stale`]). Without that, a
//! burst of slow runs (a busy host) can raise an estimate past every objective; then every
//! request is refused, nothing runs, and nothing is ever measured to bring it down.

use std::collections::VecDeque;

use crate::time::Nanos;

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
    /// The profiled value it started from, and returns to when its measurements are stale.
    seed: Nanos,
    /// When the newest measurement was taken (0 until one comes with a time).
    last: Nanos,
}

impl Estimator {
    /// An estimator seeded with a profiled duration.
    pub fn new(seed: Nanos, window: usize, percentile: f64) -> Self {
        Self {
            recent: VecDeque::from([seed]),
            sorted: vec![seed],
            seeded: true,
            window: window.max(1),
            quantile: (percentile / 100.0).clamp(0.0, 1.0),
            seed,
            last: 0,
        }
    }

    /// The current estimate.
    pub fn get(&self) -> Nanos {
        let rank = (self.quantile * (self.sorted.len() - 1) as f64).ceil() as usize;
        self.sorted[rank.min(self.sorted.len() - 1)]
    }

    /// Adds a measurement taken at `at` (the work's end): what [`Self::expire_stale`] ages.
    pub fn observe_at(&mut self, measured: Nanos, at: Nanos) {
        self.observe(measured);
        self.last = self.last.max(at);
    }

    /// Goes back to the seed if the newest measurement is older than `max_age` at `now`;
    /// answers whether it did.
    pub fn expire_stale(&mut self, now: Nanos, max_age: Nanos) -> bool {
        if self.seeded || now.saturating_sub(self.last) <= max_age {
            return false;
        }
        self.recent.clear();
        self.recent.push_back(self.seed);
        self.sorted.clear();
        self.sorted.push(self.seed);
        self.seeded = true;
        true
    }

    /// Adds a measurement; the seed is forgotten at the first one.
    pub fn observe(&mut self, measured: Nanos) {
        if self.seeded || self.recent.len() == self.window {
            self.seeded = false;
            if let Some(old) = self.recent.pop_front() {
                if let Ok(at) = self.sorted.binary_search(&old) {
                    self.sorted.remove(at);
                }
            }
        }
        self.recent.push_back(measured);
        let at = self.sorted.partition_point(|&v| v < measured);
        self.sorted.insert(at, measured);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_measurements_give_way_to_the_seed() {
        let mut e = Estimator::new(10, 4, 99.0);
        e.observe_at(500, 1_000);
        assert_eq!(e.get(), 500);
        assert!(
            !e.expire_stale(1_100, 100),
            "not older than the maximum age"
        );
        assert_eq!(e.get(), 500);
        assert!(e.expire_stale(1_101, 100));
        assert_eq!(e.get(), 10);
        assert!(!e.expire_stale(5_000, 100), "a seed does not age");
        e.observe_at(20, 6_000);
        assert_eq!(e.get(), 20, "the seed is forgotten at the next measurement");
    }

    #[test]
    fn seed_until_first_measurement() {
        let mut e = Estimator::new(100, 4, 99.0);
        assert_eq!(e.get(), 100);
        e.observe(40);
        assert_eq!(e.get(), 40);
    }

    #[test]
    fn window_forgets_old_measurements() {
        let mut e = Estimator::new(0, 3, 100.0);
        for m in [50, 10, 10, 10] {
            e.observe(m);
        }
        assert_eq!(e.get(), 10, "50 fell out of a window of 3");
    }

    #[test]
    fn percentile_picks_rank() {
        let mut e = Estimator::new(0, 5, 50.0);
        for m in [5, 1, 4, 2, 3] {
            e.observe(m);
        }
        assert_eq!(e.get(), 3);
        let mut max = Estimator::new(0, 10, 99.0);
        for m in 1..=10 {
            max.observe(m);
        }
        assert_eq!(max.get(), 10, "p99 of 10 samples is their max");
    }
}
