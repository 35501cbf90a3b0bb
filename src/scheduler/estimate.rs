//! Latency estimates learned from measurements.
//!
//! An [`Estimator`] keeps the last `window` measured durations of one thing (a model at one
//! batch size on one kind of device, or a model's weight load) and answers a high
//! percentile of them. It starts from a profiled seed, so the first decisions are informed.

use crate::time::Nanos;

/// Sliding-window percentile of measured durations.
#[derive(Clone, Debug)]
pub struct Estimator {
    /// Ring buffer of the most recent measurements (the seed until the first arrives).
    samples: Vec<Nanos>,
    /// Next slot to overwrite once the ring is full.
    next: usize,
    /// Capacity of the ring.
    window: usize,
    /// Rank within the sorted window that is the estimate, as a fraction in `0..=1`.
    quantile: f64,
    /// Cached answer, recomputed on every update (updates are rare next to reads).
    estimate: Nanos,
}

impl Estimator {
    /// An estimator seeded with a profiled duration.
    pub fn new(seed: Nanos, window: usize, percentile: f64) -> Self {
        Self {
            samples: vec![seed],
            next: 0,
            window: window.max(1),
            quantile: (percentile / 100.0).clamp(0.0, 1.0),
            estimate: seed,
        }
    }

    /// The current estimate.
    pub fn get(&self) -> Nanos {
        self.estimate
    }

    /// Adds a measurement; the seed is forgotten at the first one.
    pub fn observe(&mut self, measured: Nanos) {
        if self.samples.len() == 1 && self.next == 0 {
            // Still holding only the seed: the first measurement replaces it.
            self.samples[0] = measured;
            self.next = 1 % self.window;
        } else if self.samples.len() < self.window {
            self.samples.push(measured);
            self.next = self.samples.len() % self.window;
        } else {
            self.samples[self.next] = measured;
            self.next = (self.next + 1) % self.window;
        }
        self.estimate = self.percentile();
    }

    fn percentile(&self) -> Nanos {
        let mut sorted = self.samples.clone();
        sorted.sort_unstable();
        let rank = (self.quantile * (sorted.len() - 1) as f64).ceil() as usize;
        sorted[rank.min(sorted.len() - 1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
