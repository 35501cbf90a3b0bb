//! The devices' side of the Clockwork policy: the margins each device has learned, and
//! what happens when a device turns suspect or leaves.

use super::ClockworkPolicy;
use crate::model::{ActionId, DeviceId, ModelId};
use crate::scheduler::estimate::Margins;
use crate::scheduler::{ActionError, Outcome, Plan, Policy};
use crate::time::Nanos;

impl ClockworkPolicy {
    /// What the policy plans with on `device` (its learned values, or the configured
    /// ones until learned): (expected lag, overrun margin). The margin taken off objectives
    /// is the widest of these over the devices.
    pub fn margins(&self, device: DeviceId) -> (Nanos, Nanos) {
        let d = &self.devices[device.0 as usize];
        let lag = d.timing(self.params.lanes).expected_lag;
        (lag, d.buffer(self.params.buffer))
    }

    /// Takes the widest learned buffer again, after a device learned or left.
    pub(super) fn rewiden_buffer(&mut self) {
        let seed = self.params.buffer;
        let live = || self.devices.iter().filter(|d| !d.gone);
        self.learned = live().all(|d| d.margins().warm()) && live().next().is_some();
        self.buffer = live().map(|d| d.buffer(seed)).max().unwrap_or(seed);
    }

    /// Margins a slow spell left behind must not refuse work for good: a device given no
    /// work (every request refused on the buffer it learned) never reports the smaller
    /// margins that would let work back. So when no device has learned from a report for
    /// `estimate_max_age` (what makes an estimate stale too), each device whose margins
    /// are that old goes back to the configured lag and buffer until it has learned
    /// again. Called only when a request's objective leaves no room for even its model's
    /// quickest run besides the buffer: an idle spell alone keeps what was learned (on a
    /// noisy device the seeds are narrower than what it learned). Answers whether any
    /// device forgot.
    pub(super) fn refresh_margins(&mut self, now: Nanos) -> bool {
        let since = now.saturating_sub(self.params.estimate_max_age);
        if self.taught_at >= since || !self.params.learn_margins {
            return false;
        }
        let (window, percentile) = (self.params.margin_window, self.params.margin_percentile);
        let mut forgot = false;
        for d in self.devices.iter_mut().filter(|d| !d.gone) {
            forgot |= d.forget_margins_before(since, || Margins::new(window, percentile));
        }
        if forgot {
            self.rewiden_buffer();
        }
        forgot
    }

    /// `Policy::set_suspect`.
    pub(super) fn mark_suspect(&mut self, device: DeviceId, suspect: bool) {
        let d = &mut self.devices[device.0 as usize];
        if d.suspect == suspect || d.gone {
            return;
        }
        d.suspect = suspect;
        if suspect {
            self.suspects += 1;
        } else {
            self.suspects -= 1;
        }
        d.load_retry_at = 0;
        // Replicas on a suspect device do not count against their models' demand, so the
        // load pass places them elsewhere.
        let resident: Vec<ModelId> = d.residents.keys().copied().collect();
        for model in resident {
            self.rerank(model);
            self.queue_changed(model, None);
        }
    }

    /// `Policy::remove_device`: its memory and timeline dropped, its in-flight actions
    /// failed (their requests planned again where they can still finish).
    pub(super) fn remove(&mut self, device: DeviceId, now: Nanos, plan: &mut Plan) {
        self.now = self.now.max(now);
        if self.devices[device.0 as usize].gone {
            return;
        }
        self.mark_suspect(device, true);
        self.devices[device.0 as usize].gone = true;
        self.rewiden_buffer();
        let mut lost: Vec<ActionId> = self
            .in_flight
            .iter()
            .filter(|(_, f)| f.device == device)
            .map(|(&id, _)| id)
            .collect();
        lost.sort_unstable();
        for action in lost {
            let result = Err(ActionError::Overdue);
            self.observe(Outcome { action, result }, now, plan);
        }
        let resident: Vec<ModelId> = self.devices[device.0 as usize]
            .residents
            .keys()
            .copied()
            .collect();
        for model in resident {
            self.forget_residency(device, model);
            self.queue_changed(model, None);
        }
        self.devices[device.0 as usize].capacity = 0;
    }
}
