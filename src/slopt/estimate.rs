//! Cascade workload estimation: the request rate every stage of a pipeline will see,
//! known the moment root requests arrive rather than when their sub-requests reach it.
//!
//! Downstream load is caused by upstream load: a stage `v` below `u` receives, per
//! request `u` completes, a fan-out count with mean `m` and variance `s2`. So the rate at
//! `v` follows from the root rate and the fan-outs along the path, with no lag beyond
//! the root's own rate window. [`Cascade`] keeps the root rate ([`RateWindow`], in the
//! caller's time) and one [`FanOutStats`] per edge (the last [`FAN_OUT_WINDOW`]
//! completions of the parent), and gives per stage the expected rate and an upper bound
//! for provisioning over a horizon `H` (see [`Cascade::estimate`]).
//!
//! The baseline an estimator is compared against counts arrivals at `v` itself: a
//! [`RateWindow`] fed at `v`, which lags by its window plus the upstream latency.

use std::collections::VecDeque;

use super::SECOND;
use crate::pipeline::{EmulatedFanOut, Pipeline};
use crate::time::Nanos;

/// How many completions of the parent each edge's fan-out statistics cover.
pub const FAN_OUT_WINDOW: usize = 1000;

/// Completions seen before the observed fan-out replaces the seed: fewer give a
/// variance too noisy to provision on.
pub const MIN_OBSERVED: usize = 30;

/// The standard normal's 99th percentile: the upper bound's one-sided confidence.
pub const Z_99: f64 = 2.326;

/// Default provisioning horizon `H`: the bound covers the load of any such interval.
pub const DEFAULT_HORIZON: Nanos = SECOND;

/// Default window of the root rate.
pub const DEFAULT_WINDOW: Nanos = SECOND;

/// One edge's fan-out (requests at the child per completion of the parent) over the
/// parent's last [`FAN_OUT_WINDOW`] completions, seeded from the declaration.
#[derive(Clone, Debug)]
pub struct FanOutStats {
    counts: VecDeque<u32>,
    /// Exact running sums of the counts in the window and of their squares.
    sum: u64,
    sum_sq: u64,
    seed: EmulatedFanOut,
}

impl FanOutStats {
    /// Statistics that answer `seed` (the declaration's `emulated_fan_out`, or a fan-out
    /// of exactly one) until [`MIN_OBSERVED`] completions are seen.
    pub fn seeded(seed: Option<EmulatedFanOut>) -> Self {
        Self {
            counts: VecDeque::new(),
            sum: 0,
            sum_sq: 0,
            seed: seed.unwrap_or(EmulatedFanOut {
                mean: 1.0,
                variance: 0.0,
            }),
        }
    }

    /// One completion of the parent that made `count` requests at the child.
    pub fn record(&mut self, count: u32) {
        if self.counts.len() == FAN_OUT_WINDOW {
            if let Some(old) = self.counts.pop_front() {
                self.sum -= u64::from(old);
                self.sum_sq -= u64::from(old) * u64::from(old);
            }
        }
        self.counts.push_back(count);
        self.sum += u64::from(count);
        self.sum_sq += u64::from(count) * u64::from(count);
    }

    fn observed(&self) -> bool {
        self.counts.len() >= MIN_OBSERVED
    }

    /// Mean fan-out `m`.
    pub fn mean(&self) -> f64 {
        if !self.observed() {
            return self.seed.mean.max(0.0);
        }
        self.sum as f64 / self.counts.len() as f64
    }

    /// Fan-out variance `s2` (of the window as a population).
    pub fn variance(&self) -> f64 {
        if !self.observed() {
            return self.seed.variance.max(0.0);
        }
        let n = self.counts.len() as f64;
        let m = self.sum as f64 / n;
        (self.sum_sq as f64 / n - m * m).max(0.0)
    }

    /// The fan-out's 99th percentile: the window's order statistic, or from the seed
    /// `mean + Z_99 * sd` (a normal approximation) before enough are seen.
    pub fn p99(&self) -> f64 {
        if !self.observed() {
            return self.mean() + Z_99 * self.variance().sqrt();
        }
        let mut sorted: Vec<u32> = self.counts.iter().copied().collect();
        sorted.sort_unstable();
        let rank = (sorted.len() * 99).div_ceil(100).max(1) - 1;
        f64::from(sorted[rank])
    }
}

/// Events per second over a sliding window, in the caller's time.
#[derive(Clone, Debug)]
pub struct RateWindow {
    window: Nanos,
    times: VecDeque<Nanos>,
}

impl RateWindow {
    /// A window of `window` nanoseconds (at least one).
    pub fn new(window: Nanos) -> Self {
        Self {
            window: window.max(1),
            times: VecDeque::new(),
        }
    }

    /// An event at `now` (times never go back).
    pub fn record(&mut self, now: Nanos) {
        self.times.push_back(now);
        self.forget(now);
    }

    /// Events per second in `(now - window, now]`.
    pub fn rate(&mut self, now: Nanos) -> f64 {
        self.forget(now);
        self.times.len() as f64 * SECOND as f64 / self.window as f64
    }

    fn forget(&mut self, now: Nanos) {
        while self
            .times
            .front()
            .is_some_and(|&t| t.saturating_add(self.window) <= now)
        {
            self.times.pop_front();
        }
    }
}

/// The rate one stage is expected to see.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StageRate {
    /// Expected requests per second: the root rate times the fan-out means on its path.
    pub mean: f64,
    /// Requests per second that any interval of the horizon exceeds with about 1%
    /// probability: what to provision for.
    pub upper: f64,
}

/// The cascade estimator of one pipeline.
#[derive(Clone, Debug)]
pub struct Cascade {
    parents: Vec<Option<usize>>,
    /// Per stage, the fan-out of the edge from its parent (unused at root stages).
    edges: Vec<FanOutStats>,
    roots: RateWindow,
    horizon: Nanos,
}

impl Cascade {
    /// The estimator of `pipeline`: fan-outs seeded from its `emulated_fan_out`.
    pub fn new(pipeline: &Pipeline, window: Nanos, horizon: Nanos) -> Self {
        let parents = pipeline.stages.iter().map(|s| s.parent).collect();
        let seeds = pipeline.stages.iter().map(|s| s.emulated_fan_out).collect();
        Self::from_tree(parents, seeds, window, horizon)
    }

    /// The estimator of a tree given by each stage's parent (parents before children)
    /// and its edge's seed.
    pub fn from_tree(
        parents: Vec<Option<usize>>,
        seeds: Vec<Option<EmulatedFanOut>>,
        window: Nanos,
        horizon: Nanos,
    ) -> Self {
        Self {
            parents,
            edges: seeds.into_iter().map(FanOutStats::seeded).collect(),
            roots: RateWindow::new(window),
            horizon: horizon.max(1),
        }
    }

    /// A root request arrived at `now`.
    pub fn on_root(&mut self, now: Nanos) {
        self.roots.record(now);
    }

    /// One completion of `stage`'s parent made `count` requests at `stage`.
    pub fn on_fan_out(&mut self, stage: usize, count: u32) {
        if let Some(edge) = self.edges.get_mut(stage) {
            edge.record(count);
        }
    }

    /// The edge statistics into `stage`.
    pub fn edge(&self, stage: usize) -> Option<&FanOutStats> {
        self.edges.get(stage)
    }

    /// Per stage, the expected rate and its upper bound at `now`.
    ///
    /// With `Y_v` the requests one root makes at `v`, `M_v = E[Y_v]` and
    /// `Q_v = E[Y_v^2]` follow down the tree (`Y_v` is a sum of `Y_u` fan-outs):
    /// `M_v = M_u m`, `Q_v = M_u s2 + Q_u m^2`, with `M = Q = 1` at root stages. For
    /// Poisson roots at rate `r` the count at `v` over `H` has mean `r M_v H` and
    /// variance `r Q_v H`, so the bound is `r M_v + Z_99 sqrt(r Q_v / H)`. One level
    /// down this is the issue's `rate(u) m + z sqrt(rate(u) (s2 + m^2) / H)`; deeper, it
    /// is the bound of the true compound count rather than bounds stacked on bounds.
    pub fn estimate(&mut self, now: Nanos) -> Vec<StageRate> {
        let rate = self.roots.rate(now);
        self.at_rate(rate)
    }

    /// As [`Cascade::estimate`], for roots at `rate` per second (a rate known ahead, as
    /// an offline planner has it from a sample of the trace).
    pub fn at_rate(&self, rate: f64) -> Vec<StageRate> {
        let h = self.horizon as f64 / SECOND as f64;
        let mut moments: Vec<(f64, f64)> = Vec::with_capacity(self.parents.len());
        for (v, parent) in self.parents.iter().enumerate() {
            let (m_u, q_u) = parent.map_or((1.0, 1.0), |u| moments[u]);
            let m_v = match parent {
                None => (1.0, 1.0),
                Some(_) => {
                    let (m, s2) = (self.edges[v].mean(), self.edges[v].variance());
                    (m_u * m, m_u * s2 + q_u * m * m)
                }
            };
            moments.push(m_v);
        }
        moments
            .into_iter()
            .map(|(m, q)| StageRate {
                mean: rate * m,
                upper: rate * m + Z_99 * (rate * q / h).sqrt(),
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "estimate_tests.rs"]
mod tests;
