//! The watchdog for actions in flight: pure bookkeeping the controller drives.
//!
//! An executor reports every action it is sent, but a device thread can hang (a driver
//! call that never returns) or a worker can vanish, and then its actions never report.
//! Without a watchdog their requests would never be answered and the device's timeline
//! would stay wrong forever. So every action sent gets a deadline by which its report
//! must have come: `latest + expected_duration + max(grace, expected_duration)` (it may
//! start as late as `latest` and take up to twice its estimate plus a grace before it is
//! given up on). When a deadline passes, the controller fails the action as
//! [`ActionError::Overdue`](crate::scheduler::ActionError::Overdue), marks its device
//! suspect (the policy plans nothing more there) and keeps the device suspect until the
//! device reports anything again. A report that comes after its action was given up on
//! is not applied twice: [`Watchdog::settle`] says it is late.
//!
//! No actix, no clock reads: the controller passes `now`.

use std::collections::BTreeSet;

use crate::model::{ActionId, DeviceId, ModelId};
use crate::scheduler::ids::IdMap;
use crate::scheduler::{Action, ActionKind};
use crate::time::Nanos;

/// What the watchdog remembers of an action it gave up on, to recognise its late report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GivenUp {
    pub device: DeviceId,
    pub model: ModelId,
    /// It was a LOAD: if it succeeds late, the device holds weights the policy no longer
    /// counts, and the controller evicts them again.
    pub load: bool,
}

/// What a report means to the watchdog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// The action was still watched: apply its report.
    InTime,
    /// The action was already failed as overdue: its report is only a sign of life.
    Late(GivenUp),
    /// Not an action the watchdog knows.
    Unknown,
}

/// Deadlines of the actions in flight, and the devices under suspicion.
#[derive(Debug)]
pub struct Watchdog {
    /// Least time an action is given beyond its latest start and its estimate.
    grace: Nanos,
    /// (deadline, action), earliest first.
    deadlines: BTreeSet<(Nanos, ActionId)>,
    /// Deadline of each watched action, and what to remember if it is given up on.
    watched: IdMap<ActionId, (Nanos, GivenUp)>,
    /// Actions failed as overdue whose report has not come yet.
    given_up: IdMap<ActionId, GivenUp>,
    /// Devices with an overdue action that have not reported since.
    suspects: BTreeSet<DeviceId>,
}

impl Watchdog {
    pub fn new(grace: Nanos) -> Self {
        Self {
            grace,
            deadlines: BTreeSet::new(),
            watched: IdMap::default(),
            given_up: IdMap::default(),
            suspects: BTreeSet::new(),
        }
    }

    /// When the report of `action` must have come.
    pub fn deadline(&self, action: &Action) -> Nanos {
        let expected = action.expected_duration;
        action
            .latest
            .saturating_add(expected)
            .saturating_add(self.grace.max(expected))
    }

    /// Starts watching an action that was just sent.
    pub fn watch(&mut self, action: &Action) {
        let deadline = self.deadline(action);
        self.deadlines.insert((deadline, action.id));
        let load = matches!(action.kind, ActionKind::Load);
        let given_up = GivenUp {
            device: action.device,
            model: action.model,
            load,
        };
        self.watched.insert(action.id, (deadline, given_up));
    }

    /// A report of `action` from `device` came: stop watching it. Any report clears the
    /// device's suspicion (it is alive); the answer says whether to apply the report.
    pub fn settle(&mut self, action: ActionId, device: DeviceId) -> Settled {
        self.suspects.remove(&device);
        if let Some((deadline, _)) = self.watched.remove(&action) {
            self.deadlines.remove(&(deadline, action));
            return Settled::InTime;
        }
        match self.given_up.remove(&action) {
            Some(given_up) => Settled::Late(given_up),
            None => Settled::Unknown,
        }
    }

    /// Takes the actions whose deadline is at or before `now`, in deadline order, and
    /// marks their devices suspect. The caller fails each one.
    pub fn overdue(&mut self, now: Nanos) -> Vec<(ActionId, DeviceId)> {
        let mut due = Vec::new();
        while let Some(&(deadline, action)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_first();
            let Some((_, given_up)) = self.watched.remove(&action) else {
                continue;
            };
            self.given_up.insert(action, given_up);
            self.suspects.insert(given_up.device);
            due.push((action, given_up.device));
        }
        due
    }

    /// The next deadline, for the controller's timer.
    pub fn next_deadline(&self) -> Option<Nanos> {
        self.deadlines.first().map(|&(deadline, _)| deadline)
    }

    /// Whether `device` has an overdue action and has not reported since.
    pub fn is_suspect(&self, device: DeviceId) -> bool {
        self.suspects.contains(&device)
    }

    /// Actions being watched.
    pub fn watching(&self) -> usize {
        self.watched.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(id: u64, device: u32, latest: Nanos, expected: Nanos) -> Action {
        Action {
            id: ActionId(id),
            device: DeviceId(device),
            model: ModelId(0),
            earliest: 0,
            latest,
            expected_duration: expected,
            kind: ActionKind::Infer { requests: vec![] },
        }
    }

    #[test]
    fn deadline_allows_a_late_start_and_twice_the_estimate() {
        let dog = Watchdog::new(100);
        assert_eq!(dog.deadline(&action(1, 0, 1_000, 50)), 1_000 + 50 + 100);
        assert_eq!(dog.deadline(&action(1, 0, 1_000, 500)), 1_000 + 500 + 500);
        assert_eq!(dog.deadline(&action(1, 0, Nanos::MAX, 5)), Nanos::MAX);
    }

    #[test]
    fn only_overdue_actions_are_given_up_and_their_device_is_suspect() {
        let mut dog = Watchdog::new(100);
        dog.watch(&action(1, 0, 1_000, 50)); // due 1150
        dog.watch(&action(2, 1, 2_000, 50)); // due 2150
        assert_eq!(dog.next_deadline(), Some(1_150));
        assert!(dog.overdue(1_149).is_empty());
        assert_eq!(dog.overdue(1_150), vec![(ActionId(1), DeviceId(0))]);
        assert!(dog.is_suspect(DeviceId(0)));
        assert!(!dog.is_suspect(DeviceId(1)));
        assert_eq!(dog.next_deadline(), Some(2_150));
        assert_eq!(dog.watching(), 1);
    }

    #[test]
    fn a_report_in_time_is_applied_and_a_late_one_is_recognised() {
        let mut dog = Watchdog::new(100);
        dog.watch(&action(1, 0, 1_000, 50));
        let mut load = action(2, 0, 1_000, 50);
        load.kind = ActionKind::Load;
        dog.watch(&load);
        assert_eq!(dog.settle(ActionId(1), DeviceId(0)), Settled::InTime);
        assert_eq!(dog.overdue(5_000), vec![(ActionId(2), DeviceId(0))]);
        assert!(dog.is_suspect(DeviceId(0)));
        let late = dog.settle(ActionId(2), DeviceId(0));
        assert_eq!(
            late,
            Settled::Late(GivenUp {
                device: DeviceId(0),
                model: ModelId(0),
                load: true
            })
        );
        assert!(
            !dog.is_suspect(DeviceId(0)),
            "a report clears the suspicion"
        );
        assert_eq!(dog.settle(ActionId(2), DeviceId(0)), Settled::Unknown);
        assert_eq!(dog.next_deadline(), None);
    }
}
