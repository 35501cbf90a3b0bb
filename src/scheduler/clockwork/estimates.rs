//! The estimates the plan reads: a model's runs on a device kind (the high percentile
//! a run is checked at, and the mean sizes are compared by), on one device at its
//! slowdown (`estimate::Slowdown`), and the most pessimistic and optimistic over kinds.

use super::ClockworkPolicy;
use crate::model::{ModelId, ModelProfile};
use crate::scheduler::cover;
use crate::scheduler::device::Runs;
use crate::scheduler::estimate::Estimator;
use crate::time::Nanos;

/// The execution estimators of one device kind, seeded from that kind's `profile`.
pub(super) fn seed_exec(
    profile: &ModelProfile,
    batches: &[u32],
    window: usize,
    percentile: f64,
) -> Vec<Estimator> {
    batches
        .iter()
        .map(|&b| Estimator::new(profile.latency(b).unwrap_or(0), window, percentile))
        .collect()
}

impl ClockworkPolicy {
    /// Execution estimate of `model` at batch index `b` on device kind `kind`.
    pub(super) fn exec_estimate(&self, model: ModelId, kind: usize, b: usize) -> Nanos {
        self.models[model.0 as usize].exec[kind][b].get()
    }

    /// What a batch-`b` run costs on average on `kind`: the mean of its window. Sizes are
    /// compared by it (which serves the most per unit of device time), while whether a run
    /// finishes in time is judged by the estimate: a size's few slow runs raise its high
    /// percentile for a whole window, and compared by that it lost to a size never
    /// measured since its profile, which can be far from what the device now does
    /// (docs/EXPERIMENTS.md, "Sizes compared by their means").
    pub(super) fn exec_mean(&self, model: ModelId, kind: usize, b: usize) -> Nanos {
        self.models[model.0 as usize].exec[kind][b].mean()
    }

    /// Execution estimate of `model` at batch index `b` on `device`: its kind's, at the
    /// device's slowdown (`estimate::Slowdown`).
    pub(super) fn run_estimate(&self, model: ModelId, device: Runs, b: usize) -> Nanos {
        device
            .slowdown
            .scale(self.exec_estimate(model, device.kind, b))
    }

    /// What a batch-`b` run costs on average on `device` (see [`Self::exec_mean`]).
    pub(super) fn run_mean(&self, model: ModelId, device: Runs, b: usize) -> Nanos {
        device.slowdown.scale(self.exec_mean(model, device.kind, b))
    }

    /// The most pessimistic batch-`b` mean over device kinds (see [`Self::exec_mean`]).
    pub(super) fn worst_mean(&self, model: ModelId, b: usize) -> Nanos {
        let m = &self.models[model.0 as usize];
        m.exec.iter().map(|k| k[b].mean()).max().unwrap_or(0)
    }

    /// The most pessimistic batch-`b` estimate over device kinds, used for priorities
    /// that every device of any kind compares.
    pub(super) fn worst_estimate(&self, model: ModelId, b: usize) -> Nanos {
        let m = &self.models[model.0 as usize];
        m.exec.iter().map(|k| k[b].get()).max().unwrap_or(0)
    }

    /// The most optimistic batch-1 estimate: if even this cannot finish in time, nothing can.
    pub(super) fn best_single(&self, model: ModelId) -> Nanos {
        let m = &self.models[model.0 as usize];
        m.exec.iter().map(|k| k[0].get()).min().unwrap_or(0)
    }

    /// The most optimistic estimate of the batch a request of `items` items runs in
    /// alone (the smallest allowed size that holds it): if even this cannot finish it in
    /// time, nothing can.
    pub(super) fn best_alone(&self, model: ModelId, items: u32) -> Nanos {
        let m = &self.models[model.0 as usize];
        let b = cover(&m.batches, items).unwrap_or(m.batches.len() - 1);
        m.exec.iter().map(|k| k[b].get()).min().unwrap_or(0)
    }
}
