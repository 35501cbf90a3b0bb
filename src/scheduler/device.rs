//! The controller's mirror of one device: its weight pages, which models are resident,
//! and the timeline of its two lanes.
//!
//! The mirror is updated when an action is *planned*, not when it is done, so the policy
//! never plans two things into the same pages or the same slice of time.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::ids::IdMap;

use crate::model::{ActionId, ModelId};
use crate::time::Nanos;

/// Timing constants the lanes need.
#[derive(Clone, Copy, Debug)]
pub struct LaneTiming {
    /// Delay before an executor sees an action.
    pub expected_lag: Nanos,
    /// Work overdue by more than this is assumed to have started this long ago.
    pub lag_allowance: Nanos,
}

/// Planned work of one lane, in the order the executor will run it.
#[derive(Debug, Default)]
pub struct Lane {
    /// Sent and unreported actions with the duration they were planned with.
    pending: VecDeque<(ActionId, Nanos)>,
    /// When the head of `pending` started (or is expected to).
    head_start: Nanos,
    /// Sum of the planned durations in `pending`.
    planned: Nanos,
}

impl Lane {
    /// Predicted time this lane runs out of work.
    pub fn free_at(&self, now: Nanos, timing: LaneTiming) -> Nanos {
        let soonest = now + timing.expected_lag;
        let Some(&(_, head)) = self.pending.front() else {
            return soonest.max(self.head_start);
        };
        let mut start = self.head_start;
        if start + head + timing.lag_allowance < now {
            // The head is long overdue: it must have started later than we thought.
            start = now - timing.lag_allowance;
        }
        (start + self.planned).max(soonest)
    }

    /// Appends an action planned to start at `start` (used if the lane was idle).
    pub fn push(&mut self, id: ActionId, expected: Nanos, start: Nanos) {
        if self.pending.is_empty() {
            self.head_start = start;
        }
        self.pending.push_back((id, expected));
        self.planned += expected;
    }

    /// Forgets a reported action; the next one is assumed to start at `end`.
    pub fn complete(&mut self, id: ActionId, end: Nanos) {
        let Some(at) = self.pending.iter().position(|&(a, _)| a == id) else {
            return;
        };
        if let Some((_, expected)) = self.pending.remove(at) {
            self.planned -= expected;
        }
        if at == 0 {
            self.head_start = end;
        }
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
    /// `Policy::set_lag`), if longer than the configured `expected_lag`.
    pub lag: Nanos,
}

impl DeviceMirror {
    pub fn new(kind: usize, capacity: u32) -> Self {
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
        }
    }

    /// The lanes' timing on this device: the configured one, with its own lag if longer.
    pub fn timing(&self, base: LaneTiming) -> LaneTiming {
        LaneTiming {
            expected_lag: base.expected_lag.max(self.lag),
            ..base
        }
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
        lane.push(ActionId(1), 50, 101);
        lane.push(ActionId(2), 30, 151);
        assert_eq!(lane.free_at(100, T), 181);
        lane.complete(ActionId(1), 140);
        assert_eq!(
            lane.free_at(140, T),
            170,
            "finished early: the rest moves up"
        );
    }

    #[test]
    fn overdue_work_is_assumed_started_lag_ago() {
        let mut lane = Lane::default();
        lane.push(ActionId(1), 50, 0);
        assert_eq!(lane.free_at(200, T), 240);
    }

    #[test]
    fn memory_accounting() {
        let mut device = DeviceMirror::new(0, 10);
        device.reserve(ModelId(3), 7, 0);
        assert_eq!(device.free_pages(), 3);
        assert!(!device.is_ready(ModelId(3)));
        device.release(ModelId(3));
        assert_eq!(device.free_pages(), 10);
    }
}
