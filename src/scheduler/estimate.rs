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
    /// The estimate for the current window: read far more often than measurements come
    /// (every planning step reads several), so it is kept rather than recomputed.
    current: Nanos,
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
            current: seed,
        }
    }

    /// The current estimate.
    pub fn get(&self) -> Nanos {
        self.current
    }

    /// The percentile of the window, after it changed.
    fn update(&mut self) {
        let rank = (self.quantile * (self.sorted.len() - 1) as f64).ceil() as usize;
        self.current = self.sorted[rank.min(self.sorted.len() - 1)];
    }

    /// The smallest value in the window: a best case (the seed until the first measurement).
    pub fn least(&self) -> Nanos {
        self.sorted[0]
    }

    /// Forgets every measurement and starts again from `seed`; answers whether it held
    /// measurements (a seed alone is left as it is).
    pub fn reseed(&mut self, seed: Nanos) -> bool {
        if self.seeded {
            return false;
        }
        self.recent.clear();
        self.recent.push_back(seed);
        self.sorted.clear();
        self.sorted.push(seed);
        self.seeded = true;
        self.current = seed;
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
        self.update();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reseeding_forgets_measurements() {
        let mut e = Estimator::new(10, 4, 99.0);
        assert!(!e.reseed(10), "a seed alone is left as it is");
        e.observe(500);
        assert_eq!(e.get(), 500);
        assert!(e.reseed(10));
        assert_eq!(e.get(), 10);
        e.observe(20);
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
