//! The controller's mirror of one device: its weight pages, which models are resident,
//! and the timeline of its two lanes.
//!
//! The mirror is updated when an action is *planned*, not when it is done, so the policy
//! never plans two things into the same pages or the same slice of time. Reports of INFERs
//! teach the device's [`Margins`]: its lag and how far runs overrun their estimates, which
//! replace the configured `expected_lag` and `buffer` once learned; with
//! `device_slowdown`, they also teach how much slower than its kind it runs ([`Runs`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

pub use super::estimate::{Expected, Planned};

use super::estimate::{Learn, Margins, Slowdown, SlowdownMeter};
use super::ids::IdMap;
use super::Measured;

use crate::model::{ActionId, ModelId};
use crate::time::Nanos;

/// Timing constants the lanes need.
#[derive(Clone, Copy, Debug)]
pub struct LaneTiming {
    /// Delay before an executor sees an action (the configured starting point until a
    /// device has learned its own, see [`DeviceMirror::timing`]).
    pub expected_lag: Nanos,
    /// Work overdue by more than this is assumed to have started this long ago.
    pub lag_allowance: Nanos,
}

/// An action sent on a lane and not yet reported.
#[derive(Debug)]
struct Pending {
    id: ActionId,
    /// What it was planned with.
    expected: Expected,
    /// When it was sent: it could not start before.
    sent: Nanos,
}

/// Planned work of one lane, in the order the executor will run it.
#[derive(Debug, Default)]
pub struct Lane {
    /// Sent and unreported actions, in order.
    pending: VecDeque<Pending>,
    /// When the head of `pending` started (or is expected to).
    head_start: Nanos,
    /// The planned duration of the head of `pending` (0 when empty): `free_at` is asked
    /// of every device several times per event, and this spares it the queue's buffer.
    head: Nanos,
    /// Sum of the planned durations in `pending`.
    planned: Nanos,
    /// When the last reported action ended: the next could not start before.
    last_end: Nanos,
}

impl Lane {
    /// Predicted time this lane runs out of work.
    pub fn free_at(&self, now: Nanos, timing: LaneTiming) -> Nanos {
        let soonest = now + timing.expected_lag;
        if self.pending.is_empty() {
            return soonest.max(self.head_start);
        }
        let head = self.head;
        let mut start = self.head_start;
        if start + head + timing.lag_allowance < now {
            // The head is long overdue: it must have started later than we thought.
            start = now - timing.lag_allowance;
        }
        (start + self.planned).max(soonest)
    }

    /// Appends an action sent at `sent` and planned to start at `start` (used if the lane
    /// was idle).
    pub fn push(&mut self, id: ActionId, expected: Expected, start: Nanos, sent: Nanos) {
        if self.pending.is_empty() {
            self.head_start = start;
            self.head = expected.estimate;
        }
        self.pending.push_back(Pending { id, expected, sent });
        self.planned += expected.estimate;
    }

    /// Forgets a reported action; the next one is assumed to start at `end`. Answers
    /// what it was planned with (`None`: not pending here).
    pub fn complete(&mut self, id: ActionId, end: Nanos) -> Option<Planned> {
        let at = self.pending.iter().position(|p| p.id == id)?;
        let done = self.pending.remove(at)?;
        self.planned -= done.expected.estimate;
        if at == 0 {
            self.head_start = end;
            self.head = self.pending.front().map_or(0, |p| p.expected.estimate);
        }
        let could_start = done.sent.max(self.last_end);
        self.last_end = self.last_end.max(end);
        Some(Planned {
            could_start,
            expected: done.expected,
        })
    }
}

/// A model's weights on this device.
#[derive(Clone, Copy, Debug)]
pub struct Residency {
    /// Load finished; INFER may be planned.
    pub ready: bool,
    /// Pages it holds (reserved from the moment the LOAD is planned).
    pub pages: u32,
    /// Last time a batch was planned for it, for LRU eviction.
    pub last_use: Nanos,
    /// INFERs planned and not yet reported; a model with any is never evicted.
    pub infers_in_flight: u32,
}

/// A strategy in a device's priority queue: a model and the latest time its most urgent
/// batch may start. Entries go stale when the model's queue changes and are skipped then.
pub type StrategyEntry = Reverse<(Nanos, ModelId)>;

/// Where a device's runs are estimated from: its kind's estimates, at its slowdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Runs {
    /// Index of the device kind.
    pub kind: usize,
    /// How many times longer than its kind the device runs now.
    pub slowdown: Slowdown,
}

impl Runs {
    /// A device of `kind` that runs as its kind.
    pub fn of_kind(kind: usize) -> Self {
        Self {
            kind,
            slowdown: Slowdown::NONE,
        }
    }
}

/// An INFER a device ran, as its slowdown meter holds it for its kind to learn: its model
/// and batch index (`None`: a late report, which its kind does not learn).
pub type RunOf = Option<(ModelId, usize)>;

/// Everything the policy tracks about one device.
#[derive(Debug)]
pub struct DeviceMirror {
    /// Index of the device kind, for estimates.
    pub kind: usize,
    /// Weight pages of the device.
    pub capacity: u32,
    /// Pages reserved by resident or loading models.
    pub used: u32,
    pub exec: Lane,
    pub load: Lane,
    pub residents: IdMap<ModelId, Residency>,
    /// Strategies of resident models, most urgent first.
    pub strategies: BinaryHeap<StrategyEntry>,
    /// A load pass that found nothing to do is not retried before this, unless the
    /// device's residency changes first: keeps overload from scanning every event.
    pub load_retry_at: Nanos,
    /// The last load pass failed only because models with INFERs in flight hold the pages
    /// it needs: the end of such an INFER is worth another look.
    pub load_blocked_by_flight: bool,
    /// An action on it went unreported past the watchdog's deadline: no new work until it
    /// reports again.
    pub suspect: bool,
    /// Taken out for good (its worker was lost): suspect forever, no memory.
    pub gone: bool,
    /// Its own delay before its executor sees an action (a remote worker's one-way trip,
    /// `Policy::set_lag`): a floor under the lag it learns.
    pub lag: Nanos,
    /// Its lag and overruns as its INFER reports show them (private: `learned_lag` is
    /// kept from them as they learn, see [`Self::margins`]).
    margins: Margins,
    /// The lag `margins` answer once warm, kept here when they learn: `timing` is read for
    /// every device several times per event, and the margins lie on other cache lines.
    learned_lag: Option<Nanos>,
    /// When its margins last learned from a report.
    taught_at: Nanos,
    /// How much slower than its kind its runs have been lately (`estimate::Slowdown`).
    slowdown: SlowdownMeter<RunOf>,
}

impl DeviceMirror {
    pub fn new(kind: usize, capacity: u32, margins: Margins) -> Self {
        Self {
            kind,
            capacity,
            used: 0,
            exec: Lane::default(),
            load: Lane::default(),
            residents: IdMap::default(),
            strategies: BinaryHeap::new(),
            load_retry_at: 0,
            load_blocked_by_flight: false,
            suspect: false,
            gone: false,
            lag: 0,
            learned_lag: margins.learned_lag(),
            margins,
            taught_at: 0,
            slowdown: SlowdownMeter::default(),
        }
    }

    /// Where its runs are estimated from: its kind, at its slowdown.
    pub fn runs(&self) -> Runs {
        Runs {
            kind: self.kind,
            slowdown: self.slowdown.get(),
        }
    }

    /// Learns its slowdown from `run`, an INFER that took `took` where its kind's quickest
    /// recent run of that batch took `quickest`; answers what its kind learns now
    /// (`estimate::SlowdownMeter::observe`).
    pub fn learn_slowdown(
        &mut self,
        run: (RunOf, Nanos),
        quickest: Nanos,
    ) -> impl Iterator<Item = Learn<RunOf>> + '_ {
        self.slowdown.observe(run, quickest)
    }

    /// Plans it as its kind again, forgetting its runs (it has no peer to be measured
    /// against any more, or the policy does not measure).
    pub fn forget_slowdown(&mut self) {
        self.slowdown.reset();
    }

    /// The lanes' timing on this device: its learned lag (the configured one until
    /// learned), never below the lag it was told (`Policy::set_lag`).
    pub fn timing(&self, base: LaneTiming) -> LaneTiming {
        LaneTiming {
            expected_lag: self.learned_lag.unwrap_or(base.expected_lag).max(self.lag),
            ..base
        }
    }

    /// Where the schedule-ahead window of this device's lanes ends: `ahead` past the
    /// soonest an action sent now could start there (now plus its lag). Measured from now
    /// instead, a lag beyond `ahead` (a remote worker far away, a lag learned on a busy
    /// machine) would keep every action off the device, and a device given nothing never
    /// reports the smaller lag that would let it back.
    pub fn horizon(&self, now: Nanos, base: LaneTiming, ahead: Nanos) -> Nanos {
        now + self.timing(base).expected_lag + ahead
    }

    /// What its reports taught it so far.
    pub fn margins(&self) -> &Margins {
        &self.margins
    }

    /// Margin for runs that overrun their estimates on this device: learned, or `seed`
    /// (the configured `buffer`) until then.
    pub fn buffer(&self, seed: Nanos) -> Nanos {
        self.margins.overrun(seed)
    }

    /// Applies the report of an action on its exec lane (`exec`) or load lane: the lane
    /// forgets it, and, with `learn`, a measured INFER teaches the margins. (LOADs fetch
    /// weights and are not what the margins protect: INFERs' deadlines.)
    pub fn reported(
        &mut self,
        (id, exec): (ActionId, bool),
        measured: Option<&Measured>,
        now: Nanos,
        learn: bool,
    ) {
        let end = measured.map_or(now, |m| m.end);
        let lane = if exec { &mut self.exec } else { &mut self.load };
        let planned = lane.complete(id, end);
        if let (true, true, Some(p), Some(m)) = (learn, exec, planned, measured) {
            self.margins.learn(p, m, now);
            self.learned_lag = self.margins.learned_lag();
            self.taught_at = now;
        }
    }

    /// Margins it has not learned from since `since` give way to `fresh` ones (the
    /// configured lag and buffer until it has reported enough again); answers whether
    /// learned ones were dropped.
    pub fn forget_margins_before(&mut self, since: Nanos, fresh: impl FnOnce() -> Margins) -> bool {
        if self.taught_at >= since || !self.margins.warm() {
            return false;
        }
        self.margins = fresh();
        self.learned_lag = self.margins.learned_lag();
        true
    }

    pub fn free_pages(&self) -> u32 {
        self.capacity - self.used
    }

    pub fn is_ready(&self, model: ModelId) -> bool {
        self.residents.get(&model).is_some_and(|r| r.ready)
    }

    /// Reserves pages for a load being planned.
    pub fn reserve(&mut self, model: ModelId, pages: u32, now: Nanos) {
        debug_assert!(pages <= self.free_pages());
        self.used += pages;
        self.load_retry_at = 0;
        let residency = Residency {
            ready: false,
            pages,
            last_use: now,
            infers_in_flight: 0,
        };
        self.residents.insert(model, residency);
    }

    /// Frees a model's pages (eviction planned, or a load that failed).
    pub fn release(&mut self, model: ModelId) {
        if let Some(r) = self.residents.remove(&model) {
            self.used -= r.pages;
        }
        self.load_retry_at = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: LaneTiming = LaneTiming {
        expected_lag: 1,
        lag_allowance: 10,
    };

    #[test]
    fn idle_lane_is_free_after_the_lag() {
        let lane = Lane::default();
        assert_eq!(lane.free_at(100, T), 101);
    }

    #[test]
    fn planned_work_pushes_free_time() {
        let mut lane = Lane::default();
        lane.push(ActionId(1), Expected::exact(50), 101, 100);
        lane.push(ActionId(2), Expected::exact(30), 151, 100);
        assert_eq!(lane.free_at(100, T), 181);
        let planned = lane.complete(ActionId(1), 140);
        let (could_start, expected) = (100, 50);
        assert_eq!(
            planned,
            Some(Planned {
                could_start,
                expected: Expected::exact(expected),
            })
        );
        assert_eq!(
            lane.free_at(140, T),
            170,
            "finished early: the rest moves up"
        );
    }

    #[test]
    fn overdue_work_is_assumed_started_lag_ago() {
        let mut lane = Lane::default();
        lane.push(ActionId(1), Expected::exact(50), 0, 0);
        assert_eq!(lane.free_at(200, T), 240);
    }

    #[test]
    fn an_action_could_start_once_sent_and_its_lane_free() {
        let mut lane = Lane::default();
        lane.push(ActionId(1), Expected::exact(50), 0, 0);
        lane.push(ActionId(2), Expected::exact(50), 50, 10);
        lane.push(ActionId(3), Expected::exact(50), 100, 200);
        let could = |p: Option<Planned>| p.map(|p| p.could_start);
        assert_eq!(could(lane.complete(ActionId(1), 60)), Some(0));
        assert_eq!(could(lane.complete(ActionId(2), 120)), Some(60), "behind 1");
        assert_eq!(
            could(lane.complete(ActionId(3), 260)),
            Some(200),
            "sent later"
        );
        assert_eq!(lane.complete(ActionId(3), 260), None, "reported once");
    }

    #[test]
    fn learned_lag_replaces_the_configured_one_but_not_the_told_one() {
        let mut device = DeviceMirror::new(0, 10, Margins::new(64, 100.0));
        assert_eq!(
            device.timing(T).expected_lag,
            1,
            "the configured one to begin"
        );
        for i in 0..100 {
            let id = ActionId(i);
            device.exec.push(id, Expected::exact(5), 1000 * i, 1000 * i);
            let measured = Measured {
                begin: 1000 * i,
                end: 1000 * i + 5,
                duration: 5,
            };
            device.reported((id, true), Some(&measured), 1000 * i + 5, true);
        }
        assert_eq!((device.timing(T).expected_lag, device.buffer(7)), (0, 0));
        device.lag = 4;
        assert_eq!(device.timing(T).expected_lag, 4, "a remote worker's trip");
    }

    #[test]
    fn memory_accounting() {
        let mut device = DeviceMirror::new(0, 10, Margins::new(8, 99.0));
        device.reserve(ModelId(3), 7, 0);
        assert_eq!(device.free_pages(), 3);
        assert!(!device.is_ready(ModelId(3)));
        device.release(ModelId(3));
        assert_eq!(device.free_pages(), 10);
    }
}
