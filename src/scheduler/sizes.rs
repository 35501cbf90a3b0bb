//! The execution estimates of one model on one kind of device: one [`Estimator`] per
//! allowed batch size, read on one footing.
//!
//! The policy compares sizes with each other (which batch serves the most per unit of
//! device time), but each size's estimate comes from its own runs, and a size that runs
//! rarely keeps an old measurement (or its profiled seed) while the sizes that run all the
//! time follow the device as it is now. When the device has slowed down (a busy host, a
//! cache shared with a front end decoding large bodies), the rare size then looks cheap
//! only because it was last measured in better times: the edge bench saw a cpu device pick
//! a batch of 4 estimated at 65 ms while batch 1 was estimated at 44 ms, run it for 112 ms,
//! and let the requests queued behind it time out at a fraction of its capacity.
//!
//! So a size whose newest measurement is older than a window's worth of the model's runs
//! (stale) is read as at least its seed scaled by how the fresher smaller sizes measure
//! against their own seeds (the profile keeps the sizes' relative costs, the fresh runs say
//! how the device runs now), and at least at its seed. Only upwards: a stale size never
//! looks cheaper than it was measured, and a size measured recently is read as measured. On
//! a device whose runs match their profile (the simulator's) nothing changes.

use super::Estimator;
use crate::time::Nanos;

/// The estimators of one model's batch sizes on one kind of device.
#[derive(Clone, Debug)]
pub struct SizeEstimates {
    /// One per allowed batch size, ascending.
    sizes: Vec<Estimator>,
    /// Each size's profiled seed: what relates one size's cost to another's.
    seeds: Vec<Nanos>,
    /// Runs measured so far, over every size.
    runs: u64,
    /// For each size, `runs` after its newest measurement (or its seed).
    newest: Vec<u64>,
    /// Runs of other sizes after which a size's own newest measurement is stale: the
    /// estimators' window, how far back a fresh estimate looks.
    stale_after: u64,
    /// What `get` answers, kept: read on every planning step, changed only by a report.
    effective: Vec<Nanos>,
}

impl SizeEstimates {
    /// Estimators seeded with `seeds` (one per size, ascending), each over the last
    /// `window` runs at `percentile`.
    pub fn new(seeds: Vec<Nanos>, window: usize, percentile: f64) -> Self {
        let sizes = seeds
            .iter()
            .map(|&s| Estimator::new(s, window, percentile))
            .collect();
        let mut estimates = Self {
            sizes,
            newest: vec![0; seeds.len()],
            effective: seeds.clone(),
            seeds,
            runs: 0,
            stale_after: window.max(1) as u64,
        };
        estimates.settle();
        estimates
    }

    /// The estimate of batch index `b`.
    pub fn get(&self, b: usize) -> Nanos {
        self.effective[b]
    }

    /// Batch sizes it holds.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.sizes.len()
    }

    /// The estimates, smallest batch first.
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = Nanos> + '_ {
        self.effective.iter().copied()
    }

    /// The mean of batch index `b`'s window, raised in proportion when its estimate is
    /// (see the module doc).
    pub fn mean(&self, b: usize) -> Nanos {
        let (own, effective) = (self.sizes[b].get(), self.effective[b]);
        let mean = self.sizes[b].mean();
        if effective <= own || own == 0 {
            return mean;
        }
        (u128::from(mean) * u128::from(effective) / u128::from(own)) as Nanos
    }

    /// Adds a run of batch index `b` that took `measured`.
    pub fn observe(&mut self, b: usize, measured: Nanos) {
        self.sizes[b].observe(measured);
        self.runs += 1;
        self.newest[b] = self.runs;
        self.settle();
    }

    /// Sends every size back to `seed(b)`, its profiled duration now; answers whether any
    /// held measurements.
    pub fn reseed(&mut self, seed: impl Fn(usize) -> Nanos) -> bool {
        let mut changed = false;
        for (b, size) in self.sizes.iter_mut().enumerate() {
            self.seeds[b] = seed(b);
            changed |= size.reseed(self.seeds[b]);
            self.newest[b] = self.runs;
        }
        self.settle();
        changed
    }

    fn stale(&self, b: usize) -> bool {
        self.runs - self.newest[b] > self.stale_after
    }

    /// Recomputes `effective` after a size changed.
    fn settle(&mut self) {
        // The highest ratio of a fresh smaller size's estimate to its seed, as (estimate,
        // seed); from 1:1, so that a stale size is read at least at its seed too.
        let mut ratio: (u128, u128) = (1, 1);
        for b in 0..self.sizes.len() {
            let own = self.sizes[b].get();
            self.effective[b] = if self.stale(b) {
                let scaled = u128::from(self.seeds[b]) * ratio.0 / ratio.1;
                own.max(scaled.min(u128::from(Nanos::MAX)) as Nanos)
            } else {
                own
            };
            let seed = u128::from(self.seeds[b]);
            if !self.stale(b) && seed > 0 && u128::from(own) * ratio.1 > ratio.0 * seed {
                ratio = (u128::from(own), seed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Nanos = 1_000_000;

    /// Batch 1, 2, 4 seeded at 13, 26, 57 ms, a window of 20 at the 90th percentile.
    fn cpu_like() -> SizeEstimates {
        SizeEstimates::new(vec![13 * MS, 26 * MS, 57 * MS], 20, 90.0)
    }

    #[test]
    fn a_size_left_behind_follows_the_fresh_ones_up() {
        let mut e = cpu_like();
        e.observe(2, 60 * MS);
        // The device slows down to three times its profile; only batch 1 runs.
        for _ in 0..30 {
            e.observe(0, 39 * MS);
        }
        assert_eq!(e.get(0), 39 * MS);
        // Batch 4 was last measured 30 runs ago: read at its seed times 3, so batch 1
        // stays the cheaper per request (4 / 171 < 1 / 39).
        assert_eq!(e.get(2), 171 * MS);
        assert_eq!(e.get(1), 78 * MS);
        assert_eq!(e.mean(2), 171 * MS);
        // Measured again, it is read as measured.
        e.observe(2, 100 * MS);
        assert_eq!(e.get(2), 100 * MS);
    }

    #[test]
    fn a_device_faster_than_its_profile_leaves_the_seeds_alone() {
        let mut e = cpu_like();
        for _ in 0..30 {
            e.observe(0, 10 * MS);
        }
        assert_eq!(e.iter().collect::<Vec<_>>(), [10 * MS, 26 * MS, 57 * MS]);
    }

    #[test]
    fn reseeding_makes_every_size_fresh_again() {
        let mut e = cpu_like();
        for _ in 0..30 {
            e.observe(0, 39 * MS);
        }
        assert!(e.reseed(|b| [13, 26, 57][b] * MS));
        assert_eq!(e.iter().collect::<Vec<_>>(), [13 * MS, 26 * MS, 57 * MS]);
    }

    proptest! {
        /// Whatever ran, a size is never read below what its own estimator says, a fresh
        /// size is read exactly as measured, and a stale one is at least its seed scaled by
        /// every fresh smaller size's ratio to its seed.
        #[test]
        fn estimates_are_never_below_the_measured_or_the_fresh_ratio(
            seeds in proptest::collection::vec(1..100u64, 1..5),
            runs in proptest::collection::vec((0..5usize, 1..400u64), 0..120),
        ) {
            let seeds: Vec<Nanos> = seeds.iter().map(|s| s * MS).collect();
            let mut e = SizeEstimates::new(seeds.clone(), 20, 90.0);
            for (b, ms) in runs {
                e.observe(b % seeds.len(), ms * MS);
            }
            for b in 0..seeds.len() {
                let own = e.sizes[b].get();
                prop_assert!(e.get(b) >= own);
                if !e.stale(b) {
                    prop_assert_eq!(e.get(b), own);
                    continue;
                }
                for s in (0..b).filter(|&s| !e.stale(s)) {
                    let floor = u128::from(seeds[b]) * u128::from(e.sizes[s].get())
                        / u128::from(seeds[s]);
                    prop_assert!(u128::from(e.get(b)) >= floor, "size {b} below size {s}'s ratio");
                }
            }
        }
    }
}
