//! One trace minute too busy to hold: its arrivals made one at a time, in time order, in
//! memory that grows with its models, not with its count.
//!
//! A replayed minute places each model's `k` arrivals uniformly at random in it
//! (`trace.rs`). Held whole, a minute costs tens of bytes per arrival, and a hostile (or
//! merely huge) count of four billion asks for hundreds of gigabytes. Here each model's
//! arrivals are drawn as the order statistics of `k` uniforms, one after another (the next
//! of `n` still to come lies at `u + (1 - u)(1 - V^(1/n))` after the last at `u`, with `V`
//! uniform), and a heap hands out the earliest next arrival of any model: the same
//! distribution as sorting all of them, its labels a random interleaving.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand::rngs::StdRng;
use rand::Rng;

use super::Arrival;
use crate::time::Nanos;

/// A model's next arrival in the minute; ordered, and equal, by time, then model.
#[derive(Clone, Copy, Debug)]
struct Next {
    /// When (the stream's clock), ordered first.
    at: Nanos,
    model: u32,
    /// Its place in the minute, in [0, 1).
    u: f64,
    /// The model's arrivals still to come after it.
    left: u64,
}

impl PartialEq for Next {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl Eq for Next {}

impl Ord for Next {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.model).cmp(&(other.at, other.model))
    }
}

impl PartialOrd for Next {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The arrivals of one minute, streamed (see the module docs).
#[derive(Debug)]
pub(super) struct BusyMinute {
    /// Where the minute starts, and how long it is (the stream's clock, nanoseconds).
    start: f64,
    length: f64,
    /// Each model's next arrival, earliest first.
    next: BinaryHeap<Reverse<Next>>,
}

impl BusyMinute {
    /// The minute from `start`, `length` long, with `counts` arrivals of each model.
    pub(super) fn new(
        (start, length): (f64, f64),
        counts: impl IntoIterator<Item = (u32, u64)>,
        rng: &mut StdRng,
    ) -> Self {
        let mut minute = Self {
            start,
            length,
            next: BinaryHeap::new(),
        };
        for (model, k) in counts {
            minute.push(model, 0.0, k, rng);
        }
        minute
    }

    /// Queues `model`'s next of `n` arrivals still to come after its last at `u`.
    fn push(&mut self, model: u32, u: f64, n: u64, rng: &mut StdRng) {
        if n == 0 {
            return;
        }
        // `1 - V` is uniform on (0, 1]: never a zero to the power.
        let v: f64 = 1.0 - rng.random::<f64>();
        let u = u + (1.0 - u) * (1.0 - v.powf(1.0 / n as f64));
        let next = Next {
            at: (self.start + u * self.length) as Nanos,
            model,
            u,
            left: n - 1,
        };
        self.next.push(Reverse(next));
    }

    /// The minute's next arrival, or `None` once all are out.
    pub(super) fn next(&mut self, rng: &mut StdRng) -> Option<Arrival> {
        let Reverse(next) = self.next.pop()?;
        self.push(next.model, next.u, next.left, rng);
        Some(Arrival {
            at: next.at,
            model: next.model,
            slo: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// Mutation that breaks it: each model's arrivals drawn as independent uniforms (not
    /// in order: times go backwards), or the next of `n` drawn with the exponent `1 / 2n`
    /// (the arrivals bunch in the minute's first half).
    #[test]
    fn arrivals_come_in_time_order_spread_over_the_minute_with_each_models_count() {
        let mut rng = StdRng::seed_from_u64(7);
        let counts = [(0, 30_000), (1, 10_000), (2, 0), (3, 1)];
        let mut minute = BusyMinute::new((1e9, 60e9), counts, &mut rng);
        let mut per_model = [0u64; 4];
        let mut halves = [0u64; 2];
        let mut last = 0;
        while let Some(a) = minute.next(&mut rng) {
            assert!(a.at >= last, "{} after {last}", a.at);
            assert!((1_000_000_000..61_000_000_000).contains(&a.at), "{}", a.at);
            last = a.at;
            per_model[a.model as usize] += 1;
            halves[usize::from(a.at >= 31_000_000_000)] += 1;
        }
        assert_eq!(per_model, [30_000, 10_000, 0, 1]);
        // Uniform: each half of the minute holds about half (sd about 100).
        assert!(halves[0].abs_diff(halves[1]) < 1_000, "{halves:?}");
    }

    /// A count of four billion is streamed in memory of its models: the first arrivals
    /// come at once, at the minute's very start.
    #[test]
    fn a_huge_count_streams() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut minute = BusyMinute::new((0.0, 60e9), [(0, u64::from(u32::MAX))], &mut rng);
        let first: Vec<Arrival> = std::iter::from_fn(|| minute.next(&mut rng))
            .take(1_000)
            .collect();
        assert_eq!(first.len(), 1_000);
        // A thousand of four billion spread over 60 s: within the first few microseconds.
        assert!(first[999].at < 1_000_000, "{}", first[999].at);
    }
}
