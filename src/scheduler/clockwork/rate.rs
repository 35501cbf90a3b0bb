//! Measured arrival rates, for placing replicas ahead of the requests that will come.
//!
//! A [`RateMeter`] counts a model's arrivals in buckets of [`BUCKET`] over a sliding
//! window of [`WINDOW`] and answers the mean rate over that window. Pure: it reads no
//! clock, only the `now` values the policy is given (which never go backwards).

use crate::time::Nanos;

/// Width of one bucket: 100 ms.
pub const BUCKET: Nanos = 100_000_000;

/// Buckets in the window.
const BUCKETS: usize = 20;

/// The window the rate is measured over (2 s): long enough that a model with a request
/// every second or so keeps a steady rate, short enough that a burst is seen within it.
pub const WINDOW: Nanos = BUCKET * BUCKETS as Nanos;

/// Arrivals of one model over the last [`WINDOW`].
#[derive(Clone, Debug, Default)]
pub struct RateMeter {
    /// Arrivals per bucket; bucket `i` (time `i * BUCKET` on) is at `i % BUCKETS`.
    counts: [u32; BUCKETS],
    /// The newest bucket written; older ones within the window are still valid.
    newest: u64,
    /// Sum of `counts`: the window's count while `now` is in the newest bucket (the usual
    /// case under traffic, where the rate is read on every queue change).
    total: u64,
}

impl RateMeter {
    /// Counts one arrival at `now`.
    pub fn record(&mut self, now: Nanos) {
        self.add(now, 1);
    }

    /// Counts `n` arrivals at `now`.
    pub fn add(&mut self, now: Nanos, n: u32) {
        let bucket = now / BUCKET;
        if bucket > self.newest {
            // Buckets skipped since the newest are empty: clear them (at most the window).
            let stale = (bucket - self.newest).min(BUCKETS as u64);
            for b in bucket + 1 - stale..=bucket {
                let slot = &mut self.counts[(b % BUCKETS as u64) as usize];
                self.total -= u64::from(*slot);
                *slot = 0;
            }
            self.newest = bucket;
        }
        let slot = &mut self.counts[(self.newest % BUCKETS as u64) as usize];
        let n = n.min(u32::MAX - *slot);
        *slot += n;
        self.total += u64::from(n);
    }

    /// Arrivals in the window that ends at `now`: the running total less the oldest
    /// buckets that have left the window since the newest arrival (no division per bucket:
    /// this is read on every queue change).
    pub fn count(&self, now: Nanos) -> u64 {
        let bucket = now / BUCKET;
        if bucket <= self.newest {
            return self.total;
        }
        let expired = bucket - self.newest;
        if expired >= BUCKETS as u64 {
            return 0;
        }
        // The ring holds buckets newest-19 ..= newest; the oldest sits just after newest.
        let mut slot = ((self.newest + 1) % BUCKETS as u64) as usize;
        let mut sum = self.total;
        for _ in 0..expired {
            sum -= u64::from(self.counts[slot]);
            slot = if slot + 1 == BUCKETS { 0 } else { slot + 1 };
        }
        sum
    }

    /// Whether any arrival is in the window that ends at `now`: the newest bucket holds
    /// one once any was recorded, so this is whether it is still in the window (no sum:
    /// eviction asks it of every idle resident, and [`Self::count`] walks the buckets that
    /// left the window, up to all of them for a model with sparse traffic).
    pub fn any(&self, now: Nanos) -> bool {
        self.total > 0 && now / BUCKET < self.newest + BUCKETS as u64
    }

    /// Mean arrivals per second over the window that ends at `now`: the count over the
    /// time its buckets span (the current bucket only as far as `now`, so a steady stream
    /// reads the same early and late in a bucket).
    pub fn per_second(&self, now: Nanos) -> f64 {
        let oldest = (now / BUCKET).saturating_sub(BUCKETS as u64 - 1);
        let span = (now - oldest * BUCKET).max(WINDOW - BUCKET);
        self.count(now) as f64 * 1e9 / span as f64
    }

    /// Mean arrivals per second over the last `buckets` buckets that end at `now` (at most
    /// the window's), spanned as in [`Self::per_second`]: a rate that sees the onset of a
    /// burst within a few buckets, where the window's mean takes most of the window.
    pub fn recent_per_second(&self, now: Nanos, buckets: usize) -> f64 {
        let buckets = buckets.clamp(1, BUCKETS) as u64;
        let current = now / BUCKET;
        let first = current.saturating_sub(buckets - 1);
        // Buckets newer than the newest written are empty; those older than the ring holds
        // have left it.
        let held = self.newest.saturating_sub(BUCKETS as u64 - 1);
        let count: u64 = (first.max(held)..=current.min(self.newest))
            .map(|b| u64::from(self.counts[(b % BUCKETS as u64) as usize]))
            .sum();
        let span = (now - first * BUCKET).max((buckets - 1) * BUCKET).max(1);
        count as f64 * 1e9 / span as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::MS;

    #[test]
    fn a_steady_stream_reads_as_its_rate() {
        let mut meter = RateMeter::default();
        // 50 per second for 3 s.
        let mut t = 0;
        while t < 3_000 * MS {
            meter.record(t);
            t += 20 * MS;
        }
        let rate = meter.per_second(t);
        assert!((rate - 50.0).abs() <= 1.0, "{rate}");
    }

    #[test]
    fn arrivals_leave_the_window_after_it_passes() {
        let mut meter = RateMeter::default();
        for i in 0..10 {
            meter.record(i * MS);
        }
        assert_eq!(meter.count(WINDOW - BUCKET), 10, "still inside the window");
        assert_eq!(meter.count(WINDOW), 0, "the first bucket has left it");
        assert_eq!(meter.count(10 * WINDOW), 0);
    }

    #[test]
    fn a_long_gap_clears_the_old_buckets() {
        let mut meter = RateMeter::default();
        meter.record(0);
        meter.record(5 * BUCKET);
        // A gap of more than the window, then one arrival: only it counts.
        let later = 5 * BUCKET + 3 * WINDOW;
        meter.record(later);
        assert_eq!(meter.count(later), 1);
        // A gap inside the window keeps what is still in it.
        meter.record(later + 4 * BUCKET);
        assert_eq!(meter.count(later + 4 * BUCKET), 2);
    }

    #[test]
    fn the_recent_rate_sees_a_burst_that_the_window_mean_lags() {
        let mut meter = RateMeter::default();
        // 100 per second for 3 s, then 1,000 per second for 0.4 s.
        let mut t = 0;
        while t < 3_000 * MS {
            meter.record(t);
            t += 10 * MS;
        }
        while t < 3_400 * MS {
            meter.record(t);
            t += MS;
        }
        let recent = meter.recent_per_second(t, 4);
        assert!((recent - 1_000.0).abs() <= 30.0, "{recent}");
        let window = meter.per_second(t);
        assert!(window < 400.0, "{window}");
        // Once arrivals stop, the recent rate falls to nothing within its buckets.
        assert_eq!(meter.recent_per_second(t + 4 * BUCKET, 4), 0.0);
    }

    /// The recent rate is the recount of the arrivals in its buckets over their span, for
    /// arrivals with gaps from a fraction of a bucket to more than the whole window.
    #[test]
    fn the_recent_rate_equals_a_recount() {
        let mut meter = RateMeter::default();
        let mut arrivals: Vec<Nanos> = Vec::new();
        let (mut t, mut x) = (0, 54_321u64);
        for _ in 0..3_000 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            t += (x >> 33) % (3 * WINDOW / 2) / 40 + (x >> 60) * BUCKET / 2;
            meter.record(t);
            arrivals.push(t);
            for (probe, buckets) in [(t, 1), (t + BUCKET / 3, 4), (t + 3 * BUCKET, 4), (t, 30)] {
                let b = buckets.min(BUCKETS) as u64;
                let first = (probe / BUCKET).saturating_sub(b - 1) * BUCKET;
                let recount = arrivals
                    .iter()
                    .filter(|&&a| a >= first && a <= probe)
                    .count();
                let span = (probe - first).max((b - 1) * BUCKET).max(1);
                let expected = recount as f64 * 1e9 / span as f64;
                let got = meter.recent_per_second(probe, buckets);
                assert!(
                    (got - expected).abs() < 1e-6,
                    "at {probe}: {got} vs {expected}"
                );
            }
        }
    }

    /// The running count agrees with counting the arrivals in the window one by one, for
    /// arrivals with gaps from a fraction of a bucket to more than the whole window.
    #[test]
    fn the_running_count_equals_a_recount() {
        let mut meter = RateMeter::default();
        let mut arrivals: Vec<Nanos> = Vec::new();
        let (mut t, mut x) = (0, 12_345u64);
        for _ in 0..5_000 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            t += (x >> 33) % (3 * WINDOW / 2) / 40 + (x >> 60) * BUCKET;
            meter.record(t);
            arrivals.push(t);
            for probe in [t, t + BUCKET / 2, t + 7 * BUCKET, t + WINDOW] {
                let first = (probe / BUCKET).saturating_sub(BUCKETS as u64 - 1) * BUCKET;
                let recount = arrivals
                    .iter()
                    .filter(|&&a| a >= first && a <= probe)
                    .count();
                assert_eq!(meter.count(probe), recount as u64, "at {probe}");
            }
        }
    }
}
