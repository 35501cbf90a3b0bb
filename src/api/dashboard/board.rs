//! Pure: the dashboard's periodic snapshot. Per model, its answers so far (the numbers
//! `/metrics` shows), its goodput over the last minute, its queue and latency estimate;
//! only the top models by traffic, so thousands of models stay readable.

use std::collections::VecDeque;

use serde::Serialize;

use crate::model::ModelId;
use crate::outcome::{Class, Outcome};
use crate::scheduler::view::ModelView;
use crate::scheduler::DeviceSnapshot;
use crate::time::{Nanos, MS};

/// One second in [`Nanos`].
const SEC: Nanos = 1000 * MS;

/// How far back goodput and traffic are counted.
pub const WINDOW: Nanos = 60 * SEC;

/// Models a snapshot lists at most.
pub const TOP: usize = 20;

/// A model's answers so far, by class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Answers {
    /// Outputs within the objective.
    pub ok: u64,
    /// Outputs after it.
    pub late: u64,
    /// Valid requests declined.
    pub refused: u64,
    /// Requests rejected as wrong, or failed on a device.
    pub errors: u64,
}

impl Answers {
    /// Sums counts by outcome into classes.
    pub fn from_counts(counts: &[(Outcome, u64)]) -> Self {
        let mut a = Self::default();
        for &(outcome, n) in counts {
            let slot = match outcome.class() {
                Class::InTime => &mut a.ok,
                Class::Late => &mut a.late,
                Class::Refused => &mut a.refused,
                Class::Rejected | Class::Failed => &mut a.errors,
            };
            *slot += n;
        }
        a
    }

    fn total(&self) -> u64 {
        self.ok + self.late + self.refused + self.errors
    }
}

/// One model's row of the table beside the timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelRow {
    /// The page names bars and marks by it (events carry ids).
    pub id: ModelId,
    pub name: String,
    /// So far, the numbers of `clockwork_requests`.
    pub answers: Answers,
    /// Answers within the objective per second, over the last minute (or since the
    /// dashboard started, if that is shorter).
    pub goodput: f64,
    /// Answers of any kind over the same window: what "top by traffic" sorts by.
    pub traffic: u64,
    /// Requests waiting that can still be served (the policy's view).
    pub queued: u32,
    /// Devices holding it ready or loading it.
    pub replicas: u32,
    /// The policy's batch-1 execution estimate; 0 before it has one.
    pub estimate: Nanos,
}

/// What the page shows beside the timeline, refreshed about once a second.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Snapshot {
    /// The controller's clock when it was taken.
    pub now: Nanos,
    /// The controller's mirror of each device, by device id.
    pub devices: Vec<DeviceSnapshot>,
    /// The busiest models, most traffic first.
    pub models: Vec<ModelRow>,
    /// Models registered, listed or not.
    pub models_total: usize,
    /// Requests queued across every model.
    pub queued: usize,
    /// Goodput of every model together.
    pub goodput: f64,
}

/// Past answer counts of every model, to take rates over the window.
#[derive(Debug, Default)]
pub struct History {
    /// (when, each model's answers then), oldest first, spanning at most the window.
    samples: VecDeque<(Nanos, Vec<Answers>)>,
}

impl History {
    /// Records the counts at `now` and returns the oldest sample within the window
    /// before it (itself when it is the first).
    fn record(&mut self, now: Nanos, answers: Vec<Answers>) -> (Nanos, &[Answers]) {
        self.samples.push_back((now, answers));
        // Keep one sample at or before the window's start, so the rate spans all of it.
        while self
            .samples
            .get(1)
            .is_some_and(|(t, _)| now.saturating_sub(*t) >= WINDOW)
        {
            self.samples.pop_front();
        }
        let (at, old) = &self.samples[0];
        (*at, old)
    }
}

/// What the board reads at each refresh: the metrics' counts, the policy's views and
/// devices.
pub struct Inputs {
    pub now: Nanos,
    /// Each model's name and counts by outcome, by model id.
    pub counts: Vec<(String, Vec<(Outcome, u64)>)>,
    /// Each model's view, by model id (`None`: the policy has none).
    pub views: Vec<Option<ModelView>>,
    pub devices: Vec<DeviceSnapshot>,
    pub queued: usize,
}

/// Builds the snapshot at `inputs.now` and records its counts in `history`.
pub fn snapshot(history: &mut History, inputs: Inputs) -> Snapshot {
    let answers: Vec<Answers> = inputs
        .counts
        .iter()
        .map(|(_, c)| Answers::from_counts(c))
        .collect();
    let (since, old) = history.record(inputs.now, answers.clone());
    let seconds = inputs.now.saturating_sub(since) as f64 / SEC as f64;
    let mut rows: Vec<ModelRow> = inputs
        .counts
        .into_iter()
        .zip(&answers)
        .enumerate()
        .map(|(i, ((name, _), now))| {
            let then = old.get(i).copied().unwrap_or_default();
            let view = inputs.views.get(i).copied().flatten();
            ModelRow {
                id: ModelId(i as u32),
                name,
                answers: *now,
                goodput: rate(now.ok.saturating_sub(then.ok), seconds),
                traffic: now.total().saturating_sub(then.total()),
                queued: view.map_or(0, |v| v.queued),
                replicas: view.map_or(0, |v| v.replicas),
                estimate: view.map_or(0, |v| v.single),
            }
        })
        .collect();
    let goodput = rows.iter().map(|r| r.goodput).sum();
    let models_total = rows.len();
    top(&mut rows, TOP);
    Snapshot {
        now: inputs.now,
        devices: inputs.devices,
        models: rows,
        models_total,
        queued: inputs.queued,
        goodput,
    }
}

fn rate(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// Keeps the `n` rows of most traffic, most first; ties by the larger queue, then name.
pub fn top(rows: &mut Vec<ModelRow>, n: usize) {
    rows.sort_by(|a, b| {
        (b.traffic, b.queued)
            .cmp(&(a.traffic, a.queued))
            .then_with(|| a.name.cmp(&b.name))
    });
    rows.truncate(n);
}

#[cfg(test)]
#[path = "board_tests.rs"]
mod tests;
