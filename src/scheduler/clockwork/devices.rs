//! The devices' side of the Clockwork policy: the margins each device has learned, how
//! much slower than its kind each runs (`estimate::Slowdown`), and what happens when a
//! device turns suspect or leaves.

use std::collections::VecDeque;

use super::ClockworkPolicy;
use crate::model::{ActionId, DeviceId, ModelId};
use crate::scheduler::device::RunOf;
use crate::scheduler::estimate::{Learn, Margins};
use crate::scheduler::{ActionError, Measured, Outcome, Plan, Policy};
use crate::time::Nanos;

/// INFERs failed as overdue kept for their late reports: a device that turned several
/// times slower runs past the watchdog's deadline, and only its late reports say how much
/// slower (`estimate::Slowdown`). Late reports come within a run or two; the oldest are
/// forgotten past this many (a device that never reports again leaves nothing behind).
const GIVEN_UP_KEPT: usize = 64;

/// (action, device, model, batch index) of INFERs failed as overdue, oldest first.
#[derive(Debug, Default)]
pub(super) struct GivenUp(VecDeque<(ActionId, DeviceId, ModelId, usize)>);

impl GivenUp {
    /// Keeps `action`, an INFER of `model` at batch index `batch` on `device`.
    pub(super) fn remember(
        &mut self,
        action: ActionId,
        device: DeviceId,
        model: ModelId,
        batch: usize,
    ) {
        if self.0.len() == GIVEN_UP_KEPT {
            self.0.pop_front();
        }
        self.0.push_back((action, device, model, batch));
    }

    /// Forgets `action`, answering where it ran.
    fn take(&mut self, action: ActionId) -> Option<(DeviceId, ModelId, usize)> {
        let at = self.0.iter().position(|g| g.0 == action)?;
        self.0.remove(at).map(|(_, d, m, b)| (d, m, b))
    }
}

impl ClockworkPolicy {
    /// `Policy::observe_late`: an INFER failed as overdue ran `run` after all; its device
    /// learns its slowdown from it (its kind's estimates do not: they learn runs reported
    /// in time, as before).
    pub(super) fn learn_late(&mut self, action: ActionId, run: &Measured) {
        let Some((device, model, batch)) = self.given_up.take(action) else {
            return;
        };
        if self.measures_pace(device) && self.shared_with_a_peer(device, model) {
            self.learn_runs(device, (model, batch), (None, run.duration));
        }
    }

    /// Whether `device` learns its slowdown: with `device_slowdown`, beside a peer of its
    /// kind. A device alone of its kind has nobody to be slower than: its kind's windows
    /// are its own runs, already its pace. (Measured against its own quickest runs, a cpu
    /// device on a noisy host was planned at its pace of the last three runs over and
    /// over, and answered more requests late: docs/EXPERIMENTS.md, "A device planned at
    /// its own pace".)
    fn measures_pace(&self, device: DeviceId) -> bool {
        let kind = self.devices[device.0 as usize].kind;
        self.params.device_slowdown && self.peers[kind] >= 2
    }

    /// Whether a peer of `device`'s kind holds `model` too, so that the model's windows
    /// hold runs of both: a window of the device's own runs alone says nothing of how it
    /// compares (its quickest run is its own), and measured against one, a slow device
    /// looked as quick as its kind at every such run and flapped between the two paces.
    fn shared_with_a_peer(&self, device: DeviceId, model: ModelId) -> bool {
        let kind = self.devices[device.0 as usize].kind;
        let ready = &self.models[model.0 as usize].ready_on;
        ready
            .iter()
            .any(|&o| o != device && self.devices[o.0 as usize].kind == kind)
    }

    /// Learns an INFER of `model` at batch index `batch` that `device` ran in time: its
    /// kind learns the run as its kind would have run it (`estimate::SlowdownMeter`), so
    /// that a device slower than its kind is planned at its own pace, and its peers at
    /// theirs. Only runs of models a peer holds too teach the slowdown.
    pub(super) fn learn_run(
        &mut self,
        device: DeviceId,
        (model, batch): (ModelId, usize),
        took: Nanos,
    ) {
        let kind = self.devices[device.0 as usize].kind;
        let took = if !self.measures_pace(device) {
            // Its peers left (or the policy never measures): planned as its kind.
            self.devices[device.0 as usize].forget_slowdown();
            took
        } else if self.shared_with_a_peer(device, model) {
            return self.learn_runs(device, (model, batch), (Some((model, batch)), took));
        } else {
            self.devices[device.0 as usize]
                .runs()
                .slowdown
                .unscale(took)
        };
        self.models[model.0 as usize].exec[kind][batch].observe(took);
    }

    /// `device`'s slowdown learns `run` (of `model` at batch index `batch`, against its
    /// kind's quickest recent run of it); its kind learns what the slowdown answers.
    fn learn_runs(
        &mut self,
        device: DeviceId,
        (model, batch): (ModelId, usize),
        run: (RunOf, Nanos),
    ) {
        let d = &mut self.devices[device.0 as usize];
        let kind = d.kind;
        let quickest = self.models[model.0 as usize].exec[kind][batch].least();
        for learn in d.learn_slowdown(run, quickest) {
            match learn {
                Learn::Observe(Some((model, batch)), took) => {
                    self.models[model.0 as usize].exec[kind][batch].observe(took);
                }
                Learn::Revise(Some((model, batch)), was, took) => {
                    self.models[model.0 as usize].exec[kind][batch].revise(was, took);
                }
                // A late report: its kind learns nothing of it.
                Learn::Observe(None, _) | Learn::Revise(None, ..) => {}
            }
        }
    }

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
        let kind = self.devices[device.0 as usize].kind;
        self.peers[kind] = self.peers[kind].saturating_sub(1);
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
