//! Pure: one dashboard client's coalescer. It folds the runtime's events into the next
//! frame and decides when a frame may leave, so that a client costs the controller
//! nothing and its browser gets a bounded batch at a bounded rate.
//!
//! An action becomes a bar on its device's lane: planned when it is sent (from the later
//! of its `earliest` and the end of the work planned before it on that lane, for its
//! expected duration), then measured when it reports. Both in one frame merge into one
//! bar (the page replaces a bar by its action id). Answers that are late or refused
//! become marks. Past the bounds the oldest are dropped, and counted.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;

use super::board::Snapshot;
use crate::events::{ActionDone, ActionPlanned, Event, RequestAnswered};
use crate::model::{ActionId, DeviceId, ModelId};
use crate::outcome::Outcome;
use crate::protocol::ActionTag;
use crate::time::{Nanos, MS};

/// Bounds and pace of a client's frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Least time between two frames (100 ms: ten frames a second at most).
    pub interval: Nanos,
    /// Bars one frame carries at most.
    pub bars: usize,
    /// Marks one frame carries at most.
    pub marks: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            interval: 100 * MS,
            bars: 512,
            marks: 256,
        }
    }
}

/// Which of a device's two lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Lane {
    /// INFER.
    Exec,
    /// LOAD and UNLOAD.
    Load,
}

impl Lane {
    fn of(kind: ActionTag) -> Self {
        if kind.is_load_lane() {
            Lane::Load
        } else {
            Lane::Exec
        }
    }
}

/// One action drawn from `begin` to `end` on its device's lane.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Bar {
    /// The page keys bars by it: a later bar of the same action replaces the earlier.
    pub action: ActionId,
    /// The row it is drawn in.
    pub device: DeviceId,
    /// The lane of that row.
    pub lane: Lane,
    /// LOAD, UNLOAD or INFER, for its colour and label.
    pub kind: ActionTag,
    /// Whose work it is, for its label.
    pub model: ModelId,
    /// Requests in the batch (0 for LOAD and UNLOAD), shown in the bar's label.
    pub batch: u32,
    pub begin: Nanos,
    pub end: Nanos,
    /// False while the bar is the plan; true once the executor reported what it measured.
    pub measured: bool,
    /// Why it did not run, if it reported a failure (the page draws it as failed).
    pub error: Option<String>,
}

/// An answer worth a mark: late, refused or failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Mark {
    /// Whose request it was, for the mark's label.
    pub model: ModelId,
    /// When it was answered (the mark's place on the time axis).
    pub at: Nanos,
    pub outcome: Outcome,
}

/// What one frame carries.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Frame {
    /// The controller's clock when the frame left: the page's "now".
    pub now: Nanos,
    pub bars: Vec<Bar>,
    pub marks: Vec<Mark>,
    /// Bars and marks left out of this frame because it was full.
    pub dropped: u64,
    /// Events this client fell too far behind to see.
    pub lost: u64,
    /// The latest snapshot, if it changed since the last frame.
    #[serde(serialize_with = "shared")]
    pub snapshot: Option<Arc<Snapshot>>,
}

/// A shared snapshot, serialised as itself.
fn shared<S: serde::Serializer>(snapshot: &Option<Arc<Snapshot>>, s: S) -> Result<S::Ok, S::Error> {
    snapshot.as_deref().serialize(s)
}

/// A lane's planned work, for where a newly planned action should start.
#[derive(Clone, Copy, Debug, Default)]
struct Cursor {
    /// When the last action planned on it is expected to end.
    end: Nanos,
    /// Actions planned and not reported.
    outstanding: u32,
}

/// One client's state between frames.
#[derive(Debug, Default)]
pub struct Coalescer {
    limits: Limits,
    /// When the last frame left; `None` before the first.
    last: Option<Nanos>,
    bars: BTreeMap<ActionId, Bar>,
    marks: VecDeque<Mark>,
    dropped: u64,
    lost: u64,
    snapshot: Option<Arc<Snapshot>>,
    lanes: BTreeMap<(DeviceId, Lane), Cursor>,
}

impl Coalescer {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// Folds one event into the next frame.
    pub fn push(&mut self, event: &Event) {
        match event {
            Event::ActionPlanned(p) => self.planned(p),
            Event::ActionDone(d) => self.done(d),
            Event::RequestAnswered(a) => self.answered(a),
            Event::PipelineAnswered(_)
            | Event::StageAnswered(_)
            | Event::FanOut(_)
            | Event::DeviceHealth(_)
            | Event::Probed(_) => {}
        }
    }

    /// Counts events the client's subscription lost.
    pub fn lost(&mut self, events: u64) {
        self.lost += events;
    }

    /// The snapshot the next frame carries (a later one replaces it).
    pub fn snapshot(&mut self, snapshot: Arc<Snapshot>) {
        self.snapshot = Some(snapshot);
    }

    fn planned(&mut self, p: &ActionPlanned) {
        let lane = Lane::of(p.kind);
        let cursor = self.lanes.entry((p.device, lane)).or_default();
        let begin = p.earliest.max(cursor.end);
        let end = begin.saturating_add(p.expected);
        *cursor = Cursor {
            end,
            outstanding: cursor.outstanding + 1,
        };
        self.bar(Bar {
            action: p.action,
            device: p.device,
            lane,
            kind: p.kind,
            model: p.model,
            batch: p.batch,
            begin,
            end,
            measured: false,
            error: None,
        });
    }

    fn done(&mut self, d: &ActionDone) {
        let lane = Lane::of(d.kind);
        let cursor = self.lanes.entry((d.device, lane)).or_default();
        cursor.outstanding = cursor.outstanding.saturating_sub(1);
        if let (0, Some(m)) = (cursor.outstanding, d.measured) {
            // Nothing more is planned on the lane: the next action starts from its own
            // `earliest` or the end of this one, not from what was planned for this one.
            cursor.end = m.end;
        }
        let planned = self.bars.get(&d.action);
        let (begin, end) = match (d.measured, planned) {
            (Some(m), _) => (m.begin, m.end),
            (None, Some(p)) => (p.begin, p.end),
            // A failure whose plan left in an earlier frame: the page keeps that bar's
            // times; these are only a fallback.
            (None, None) => (cursor.end, cursor.end),
        };
        self.bar(Bar {
            action: d.action,
            device: d.device,
            lane,
            kind: d.kind,
            model: d.model,
            batch: d.batch,
            begin,
            end,
            measured: d.measured.is_some(),
            error: d.error.as_ref().map(|e| e.to_string()),
        });
    }

    fn answered(&mut self, a: &RequestAnswered) {
        if a.outcome == Outcome::Ok {
            return;
        }
        if self.marks.len() == self.limits.marks {
            self.marks.pop_front();
            self.dropped += 1;
        }
        self.marks.push_back(Mark {
            model: a.model,
            at: a.answered,
            outcome: a.outcome,
        });
    }

    /// Adds or replaces the bar of its action, dropping the oldest past the bound.
    fn bar(&mut self, bar: Bar) {
        let fresh = !self.bars.contains_key(&bar.action);
        if fresh && self.bars.len() == self.limits.bars {
            self.bars.pop_first();
            self.dropped += 1;
        }
        self.bars.insert(bar.action, bar);
    }

    /// Whether there is anything to send.
    fn is_empty(&self) -> bool {
        self.bars.is_empty()
            && self.marks.is_empty()
            && self.snapshot.is_none()
            && self.dropped == 0
            && self.lost == 0
    }

    /// The next frame, if one may leave at `now` (the interval since the last has passed)
    /// and there is something to send; the coalescer starts afresh after it.
    pub fn take(&mut self, now: Nanos) -> Option<Frame> {
        let due = self
            .last
            .is_none_or(|last| now >= last.saturating_add(self.limits.interval));
        if !due || self.is_empty() {
            return None;
        }
        self.last = Some(now);
        Some(Frame {
            now,
            bars: std::mem::take(&mut self.bars).into_values().collect(),
            marks: self.marks.drain(..).collect(),
            dropped: std::mem::take(&mut self.dropped),
            lost: std::mem::take(&mut self.lost),
            snapshot: self.snapshot.take(),
        })
    }
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
