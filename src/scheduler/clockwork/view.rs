//! The [`ModelView`] the Clockwork policy publishes for admission at the edge: read from
//! its mirror of the devices, its queues and its estimates, changing nothing.

use super::ClockworkPolicy;
use crate::model::ModelId;
use crate::scheduler::view::{ModelView, MAX_BATCHES};
use crate::time::Nanos;

impl ClockworkPolicy {
    /// The model as the edge should see it at `now` (see `crate::scheduler::view`).
    pub(super) fn model_view(&self, model: ModelId, now: Nanos) -> Option<ModelView> {
        let m = self.models.get(model.0 as usize)?;
        let lanes = self.params.lanes;
        let ready = m
            .ready_on
            .iter()
            .map(|d| &self.devices[d.0 as usize])
            .filter(|d| !d.suspect);
        let (mut replicas, mut free_at) = (0u32, Nanos::MAX);
        for device in ready {
            replicas += 1;
            free_at = free_at.min(device.exec.free_at(now, lanes));
        }
        let best = |b: usize| m.exec.iter().map(|k| k[b].get()).min().unwrap_or(0);
        let batches = m.batches.len().min(MAX_BATCHES);
        let single = best(0);
        // Requests that could no longer finish even alone are about to time out: they
        // are not ahead of a new one.
        let hopeless = m.queue.count_before(now.saturating_add(single));
        Some(ModelView {
            replicas,
            free_at: if replicas == 0 { now } else { free_at },
            queued: (m.queue.len() - hopeless).try_into().unwrap_or(u32::MAX),
            single,
            batch_sizes: std::array::from_fn(|b| m.batches.get(b).copied().unwrap_or(0)),
            batch_times: std::array::from_fn(|b| if b < batches { best(b) } else { 0 }),
            batches,
            at: now,
        })
    }
}
