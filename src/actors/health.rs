//! The health rule: which failures take a device out of service, and how it comes back.
//! Pure bookkeeping the controller drives beside the [`Watchdog`](super::watchdog), which
//! keeps the rule for a device that hangs (no report by an action's deadline).
//!
//! - A crash ([`ActionError::Crashed`]: the device's code panicked, or its thread is gone)
//!   takes the device out at once: its state after a panic is unknown.
//! - `strikes` failures in a row ([`ActionError::Device`], a LOAD's included), each within
//!   `window` of the first, take it out. A lone failure is noise that the policy already
//!   handles (the batch's requests are answered, the LOAD placed again); three in a row
//!   within a second are what a broken device does (by chance at a 20 % failure rate, 1 in
//!   125 runs of three), and they bound what a broken device costs to three batches.
//!   Scheduling refusals (`TooLate`, `NotResident`, ...) say nothing of health, nor does
//!   a model failing on a batch's inputs ([`ActionError::Model`]: a client's values, not
//!   the device; the policy runs that batch's requests again alone); any action that
//!   succeeds resets the count.
//! - An out device gets no work (the policy treats it as suspect), so no report would
//!   ever bring it back: after a backoff the controller sends it a probe of real work
//!   (`ActionKind::Probe`) naming the model of its last failed or hung action
//!   ([`Health::blame`]): one item of zeros through that model if it is resident, else
//!   the model loaded into free pages, run and unloaded again (so a device whose LOADs
//!   fail, or that holds nothing to run, fails it), else through the resident model of
//!   lowest id; with nothing named and nothing resident, an UNLOAD of a model no registry
//!   gives, [`PROBE_MODEL`], which changes nothing. A probe that succeeds brings it back
//!   (a model failing on the zeros, `ActionError::Model`, counts as success: the device
//!   ran it); one that fails doubles the backoff, up to `max_backoff`. The backoff also
//!   doubles each time the device is taken out again before one of its planned actions
//!   succeeded, up to `max_relapse_backoff` (a minute): a device that passes probes but
//!   fails its work (its LOADs fail while its memory is too full for the probe's own
//!   LOAD) is retried ever less often, at most three failed batches a minute once it has
//!   relapsed ten times.
//! - A hang is the watchdog's (an action with no report by its deadline): the device is
//!   suspect until it reports again, and a late report brings it back. A device that runs
//!   several times slower than its estimates hangs that way over and over, back at each
//!   late report and given work that will be late again. So the hangs are counted too:
//!   `strikes` of them in a row, with no action run at its normal pace between them
//!   (within [`SLOW_FACTOR`] times its estimate: a slow success neither counts nor
//!   clears the run), and the late report that would end the last one keeps the device
//!   out instead ([`OutCause::Slow`]), probed back after a backoff like a failing one.
//!   Hangs are rare (the watchdog allows twice an action's estimate and a grace), so
//!   their run has no window: only a run at normal pace ends it.
//!
//! No actix, no clock reads: the controller passes `now`.

use std::collections::BTreeMap;

use crate::events::OutCause;
use crate::model::{DeviceId, ModelId};
use crate::protocol::ActionError;
use crate::time::{Nanos, MS};

/// How many times its estimate an action may take and still count as run at its normal
/// pace, the pace that ends a run of hangs.
pub const SLOW_FACTOR: u64 = 2;

/// The model of a probe that names none: the executor runs the resident model of lowest
/// id, or with none resident unloads this one (no registry gives this id, so it never
/// touches weights).
pub const PROBE_MODEL: ModelId = ModelId(u32::MAX);

/// The rule's numbers.
#[derive(Clone, Copy, Debug)]
pub struct HealthRule {
    /// Failures in a row that take a device out.
    pub strikes: u32,
    /// How close together they must come, from the first of the run.
    pub window: Nanos,
    /// Wait before the first probe of a device taken out.
    pub backoff: Nanos,
    /// Longest wait between probes.
    pub max_backoff: Nanos,
    /// Longest wait before the first probe of a device taken out again before one of its
    /// planned actions succeeded (a relapse: it passes probes but fails its work, and
    /// each return costs up to `strikes` failed batches, whose requests are answered with
    /// the error). Longer than `max_backoff`, so that such a device costs a few batches a
    /// minute rather than every few seconds, and still comes back when it recovers.
    pub max_relapse_backoff: Nanos,
}

impl Default for HealthRule {
    fn default() -> Self {
        Self {
            strikes: 3,
            window: 1_000 * MS,
            backoff: 100 * MS,
            max_backoff: 5_000 * MS,
            max_relapse_backoff: 60_000 * MS,
        }
    }
}

/// How an action that succeeded ran against its estimate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// Within [`SLOW_FACTOR`] times its estimate.
    Normal,
    /// Slower: not a failure, and not a sign that a slow device recovered either.
    Slow,
}

impl Pace {
    /// The pace of an action estimated at `expected` that took `measured`.
    pub fn of(measured: Nanos, expected: Nanos) -> Self {
        if measured <= expected.saturating_mul(SLOW_FACTOR) {
            Self::Normal
        } else {
            Self::Slow
        }
    }
}

/// What a report did to a device's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing the controller must act on.
    Same,
    /// The device is now out.
    Out(OutCause),
    /// The device is back in service.
    Back,
}

#[derive(Clone, Debug, Default)]
struct Device {
    /// Start of the current run of failures, and its length.
    run: Option<(Nanos, u32)>,
    /// Hangs (actions the watchdog gave up on while the device was in service) since one
    /// of its planned actions last ran at its normal pace.
    hangs: u32,
    out: Option<Out>,
    /// Times taken out since one of its planned actions last succeeded.
    episodes: u32,
    /// The model of its last planned action that failed or hung: what its probes try.
    blamed: Option<ModelId>,
}

#[derive(Clone, Copy, Debug)]
struct Out {
    cause: OutCause,
    /// When the next probe is due; `None` while one is in flight.
    probe_at: Option<Nanos>,
    /// The wait that led to the current probe.
    backoff: Nanos,
}

/// Health of every device.
#[derive(Debug, Default)]
pub struct Health {
    rule: HealthRule,
    devices: BTreeMap<DeviceId, Device>,
}

impl Health {
    pub fn new(rule: HealthRule) -> Self {
        Self {
            rule,
            devices: BTreeMap::new(),
        }
    }

    /// A planned action of `device` reported `result` in time at `now`.
    pub fn reported(
        &mut self,
        device: DeviceId,
        result: Result<Pace, &ActionError>,
        now: Nanos,
    ) -> Change {
        let rule = self.rule;
        let d = self.devices.entry(device).or_default();
        let cause = match result {
            Ok(pace) => {
                d.run = None;
                if pace == Pace::Normal {
                    d.hangs = 0;
                    if d.out.is_none() {
                        d.episodes = 0;
                    }
                }
                return Change::Same;
            }
            Err(ActionError::Crashed(_)) => OutCause::Crashed,
            Err(ActionError::Device(_)) => {
                let (first, n) = match d.run {
                    Some((first, n)) if now.saturating_sub(first) <= rule.window => (first, n + 1),
                    _ => (now, 1),
                };
                d.run = Some((first, n));
                if n < rule.strikes {
                    return Change::Same;
                }
                OutCause::Failing
            }
            Err(_) => return Change::Same,
        };
        d.run = None;
        Self::take_out(rule, d, cause, now)
    }

    /// A planned action of `device` on `model` failed or hung: its probes try that model
    /// (run if resident, else loaded and run), so that a device whose LOADs fail, or
    /// that holds nothing to run, fails them too.
    pub fn blame(&mut self, device: DeviceId, model: ModelId) {
        self.devices.entry(device).or_default().blamed = Some(model);
    }

    /// The model a probe of `device` names: the one last blamed, else [`PROBE_MODEL`]
    /// (the executor then runs whatever is resident).
    pub fn probe_model(&self, device: DeviceId) -> ModelId {
        self.devices
            .get(&device)
            .and_then(|d| d.blamed)
            .unwrap_or(PROBE_MODEL)
    }

    /// The watchdog gave up on an action of `device`, in service until then.
    pub fn hung(&mut self, device: DeviceId) {
        let d = self.devices.entry(device).or_default();
        d.hangs = d.hangs.saturating_add(1);
    }

    /// A late report of `device` (of an action the watchdog gave up on) came at `now`:
    /// the end of its hang, unless it hung `strikes` times in a row, when it stays out.
    pub fn revived(&mut self, device: DeviceId, now: Nanos) -> Change {
        let rule = self.rule;
        let d = self.devices.entry(device).or_default();
        if d.hangs < rule.strikes {
            return Change::Same;
        }
        Self::take_out(rule, d, OutCause::Slow, now)
    }

    /// Takes `d` out for `cause` at `now`, its first probe after a backoff that doubles
    /// with each time it was taken out since it last served, up to `max_relapse_backoff`
    /// (unless it is out already).
    fn take_out(rule: HealthRule, d: &mut Device, cause: OutCause, now: Nanos) -> Change {
        if d.out.is_some() {
            return Change::Same;
        }
        let cap = if d.episodes == 0 {
            rule.max_backoff
        } else {
            rule.max_relapse_backoff.max(rule.max_backoff)
        };
        let backoff = rule
            .backoff
            .saturating_mul(1 << d.episodes.min(16))
            .min(cap);
        d.episodes += 1;
        d.out = Some(Out {
            cause,
            probe_at: Some(now.saturating_add(backoff)),
            backoff,
        });
        Change::Out(cause)
    }

    /// The devices whose probe is due at `now`; each is marked as probing.
    pub fn probes_due(&mut self, now: Nanos) -> Vec<DeviceId> {
        let mut due = Vec::new();
        for (&device, d) in &mut self.devices {
            if let Some(out) = d
                .out
                .as_mut()
                .filter(|o| o.probe_at.is_some_and(|t| t <= now))
            {
                out.probe_at = None;
                due.push(device);
            }
        }
        due
    }

    /// A probe of `device` reported: back in service, or probed again later.
    pub fn probed(&mut self, device: DeviceId, ok: bool, now: Nanos) -> Change {
        let max = self.rule.max_backoff;
        let Some(d) = self.devices.get_mut(&device) else {
            return Change::Same;
        };
        let Some(out) = d.out.as_mut() else {
            return Change::Same;
        };
        if ok {
            d.out = None;
            return Change::Back;
        }
        // A relapse's longer wait is kept, not cut back to `max_backoff`.
        out.backoff = out.backoff.saturating_mul(2).min(max.max(out.backoff));
        out.probe_at = Some(now.saturating_add(out.backoff));
        Change::Same
    }

    /// When the next probe is due, for the controller's timer.
    pub fn next_probe(&self) -> Option<Nanos> {
        self.devices
            .values()
            .filter_map(|d| d.out.and_then(|o| o.probe_at))
            .min()
    }

    /// `device` left for good (a remote worker's): no probe is due for it any more.
    pub fn forget(&mut self, device: DeviceId) {
        self.devices.remove(&device);
    }

    /// Whether `device` is out of service.
    pub fn is_out(&self, device: DeviceId) -> bool {
        self.devices.get(&device).is_some_and(|d| d.out.is_some())
    }

    /// Why `device` is out, if it is.
    pub fn cause(&self, device: DeviceId) -> Option<OutCause> {
        self.devices
            .get(&device)
            .and_then(|d| d.out.map(|o| o.cause))
    }
}

#[cfg(test)]
#[path = "health_tests.rs"]
mod tests;
