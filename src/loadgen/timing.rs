//! Where an answer's time went: inside the server (its `Server-Timing: edge;dur=`, from
//! the request's head parsed to its answer encoded) or outside it (the client's own
//! queues, the network, the kernels' buffers, the HTTP parsing on both sides). Under
//! overload a refusal that takes 100 ms at the client may have taken 20 us in the server;
//! only the two numbers side by side say which side to make faster.
//!
//! Kept by the load generator beside its report (which has client-side latencies only)
//! and written as `server_timing.json`.

use std::collections::BTreeMap;
use std::path::Path;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::outcome::Outcome;
use crate::report::LatencyMs;

/// The `edge` duration of a `Server-Timing` header value, in microseconds (`None` when
/// the header has no well-formed `edge;dur=`).
pub fn edge_micros(value: &str) -> Option<u64> {
    let metric = value.split(',').map(str::trim).find(|m| {
        m.split(';')
            .next()
            .is_some_and(|name| name.trim() == "edge")
    })?;
    let dur = metric
        .split(';')
        .map(str::trim)
        .find_map(|p| p.strip_prefix("dur="))?;
    let ms: f64 = dur.parse().ok()?;
    (ms.is_finite() && ms >= 0.0).then(|| (ms * 1e3).round() as u64)
}

/// Microsecond latencies from 1 us to an hour.
struct Micros(Histogram<u64>);

impl Micros {
    fn new() -> Self {
        let histogram = Histogram::new_with_bounds(1, 3_600_000_000, 3)
            .unwrap_or_else(|_| unreachable!("constant, valid bounds"));
        Self(histogram)
    }

    fn record(&mut self, micros: u64) {
        self.0.saturating_record(micros.clamp(1, self.0.high()));
    }

    fn percentiles(&self) -> Option<LatencyMs> {
        if self.0.is_empty() {
            return None;
        }
        let at = |q: f64| self.0.value_at_quantile(q) as f64 / 1e3;
        Some(LatencyMs {
            p50: at(0.5),
            p99: at(0.99),
            p999: at(0.999),
            p9999: at(0.9999),
            max: self.0.max() as f64 / 1e3,
        })
    }
}

/// One kind of answer's times: at the client, in the server, and outside it (the
/// client's time less the server's).
struct Split {
    count: u64,
    client: Micros,
    inside: Micros,
    outside: Micros,
}

impl Split {
    fn new() -> Self {
        Self {
            count: 0,
            client: Micros::new(),
            inside: Micros::new(),
            outside: Micros::new(),
        }
    }

    fn record(&mut self, client: u64, server: u64) {
        self.count += 1;
        self.client.record(client);
        self.inside.record(server);
        self.outside.record(client.saturating_sub(server));
    }

    fn summary(&self) -> SplitSummary {
        SplitSummary {
            count: self.count,
            client_ms: self.client.percentiles(),
            server_ms: self.inside.percentiles(),
            outside_server_ms: self.outside.percentiles(),
        }
    }
}

/// Successes' and refusals' times in the server and outside it, refusals by outcome: a
/// refusal at the edge (`deadline_unreachable`) is meant to come back at once, one
/// admitted and dropped from its queue (`timed_out`) only by its deadline.
struct Kinds {
    successes: Split,
    refusals: BTreeMap<Outcome, Split>,
}

impl Kinds {
    fn new() -> Self {
        Self {
            successes: Split::new(),
            refusals: BTreeMap::new(),
        }
    }

    /// The split that keeps answers of `outcome`, if any does.
    fn split(&mut self, outcome: Outcome) -> Option<&mut Split> {
        if outcome.is_success() {
            Some(&mut self.successes)
        } else if outcome.is_refusal() {
            Some(self.refusals.entry(outcome).or_insert_with(Split::new))
        } else {
            None
        }
    }

    fn summary(&self) -> KindsSummary {
        KindsSummary {
            successes: self.successes.summary(),
            refusals: (self.refusals.iter())
                .map(|(outcome, split)| (outcome.as_str(), split.summary()))
                .collect(),
        }
    }
}

/// The run's answers by kind, all together and by model: under overload the whole's p99
/// is often one model's (a large body read in several of the server's turns), and only
/// the split says which.
pub struct ServerTiming {
    all: Kinds,
    /// By model or pipeline name.
    models: BTreeMap<String, Kinds>,
    /// Answers without a readable `Server-Timing: edge`.
    untimed: u64,
}

/// What `server_timing.json` holds for one kind of answer.
#[derive(Debug, Serialize)]
pub struct SplitSummary {
    /// Answers of this kind that named their server time.
    pub count: u64,
    /// Their time at the client, from sending to the answer read.
    pub client_ms: Option<LatencyMs>,
    /// Their `Server-Timing: edge` (`None`: no such answer).
    pub server_ms: Option<LatencyMs>,
    /// Their time at the client less their time in the server.
    pub outside_server_ms: Option<LatencyMs>,
}

/// Successes and refusals (by outcome: `deadline_unreachable`, `timed_out`, ...).
#[derive(Debug, Serialize)]
pub struct KindsSummary {
    pub successes: SplitSummary,
    pub refusals: BTreeMap<&'static str, SplitSummary>,
}

/// The whole of `server_timing.json`: every answer's kinds, then each model's.
#[derive(Debug, Serialize)]
pub struct TimingSummary {
    pub successes: SplitSummary,
    pub refusals: BTreeMap<&'static str, SplitSummary>,
    /// The same by model or pipeline.
    pub models: BTreeMap<String, KindsSummary>,
    /// Answers (of any kind) without a readable `Server-Timing: edge`.
    pub untimed: u64,
}

impl Default for ServerTiming {
    fn default() -> Self {
        Self {
            all: Kinds::new(),
            models: BTreeMap::new(),
            untimed: 0,
        }
    }
}

impl ServerTiming {
    /// An answer of `model` with `outcome` that took `client` us at the client and, if it
    /// said, `server` us in the server (answers other than successes and refusals are not
    /// kept).
    pub fn record(&mut self, model: &str, outcome: Outcome, client: u64, server: Option<u64>) {
        let Some(split) = self.all.split(outcome) else {
            return;
        };
        let Some(server) = server else {
            self.untimed += 1;
            return;
        };
        split.record(client, server);
        // Looked up by `&str`: a model's name is copied once, at its first answer.
        if !self.models.contains_key(model) {
            self.models.insert(model.to_owned(), Kinds::new());
        }
        if let Some(split) = (self.models.get_mut(model)).and_then(|k| k.split(outcome)) {
            split.record(client, server);
        }
    }

    pub fn summary(&self) -> TimingSummary {
        let all = self.all.summary();
        TimingSummary {
            successes: all.successes,
            refusals: all.refusals,
            models: (self.models.iter())
                .map(|(model, kinds)| (model.clone(), kinds.summary()))
                .collect(),
            untimed: self.untimed,
        }
    }

    /// Writes `server_timing.json` into `dir`.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(&self.summary()).map_err(std::io::Error::other)?;
        std::fs::write(dir.join("server_timing.json"), text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_edge_duration_is_read_from_the_header() {
        assert_eq!(edge_micros("edge;dur=1.250"), Some(1_250));
        assert_eq!(edge_micros("edge;dur=0.020, exec;dur=3.000"), Some(20));
        assert_eq!(edge_micros("exec;dur=3, edge; dur=2"), Some(2_000));
        assert_eq!(edge_micros("exec;dur=3"), None);
        assert_eq!(edge_micros("edgy;dur=3"), None);
        assert_eq!(edge_micros("edge;dur=-1"), None);
        assert_eq!(edge_micros("edge"), None);
    }

    /// Mutation that breaks it: `outside` recorded as the client's whole time (the
    /// outside p50 reads 10 ms, not 9.98), or refusals kept together whatever their
    /// outcome (the edge's p99 reads the timed-out ones' 100 ms).
    #[test]
    fn refusals_are_split_by_outcome_and_into_inside_and_outside_the_server() {
        let mut timing = ServerTiming::default();
        for _ in 0..100 {
            timing.record("a", Outcome::DeadlineUnreachable, 10_000, Some(20));
        }
        timing.record("b", Outcome::TimedOut, 100_000, Some(100_000));
        timing.record("a", Outcome::Ok, 5_000, Some(4_000));
        timing.record("a", Outcome::DeadlineUnreachable, 7_000, None);
        timing.record("a", Outcome::BadInput, 7_000, Some(1));
        let s = timing.summary();
        let edge = &s.refusals["deadline_unreachable"];
        assert_eq!((edge.count, s.successes.count, s.untimed), (100, 1, 1));
        assert_eq!(s.refusals["timed_out"].count, 1);
        assert_eq!(s.refusals.len(), 2, "bad input is no refusal");
        let inside = edge.server_ms.clone().expect("timed refusals");
        assert!((inside.p99 - 0.020).abs() < 1e-3, "{inside:?}");
        let outside = edge.outside_server_ms.clone().expect("timed refusals");
        assert!((outside.p50 - 9.98).abs() < 0.01, "{outside:?}");
        assert!(s.successes.server_ms.is_some());
    }

    /// Mutation that breaks it: every answer kept under the first model named (`b`'s
    /// time-out lands in `a`).
    #[test]
    fn each_model_keeps_its_own_answers() {
        let mut timing = ServerTiming::default();
        for _ in 0..10 {
            timing.record("a", Outcome::DeadlineUnreachable, 10_000, Some(20));
        }
        timing.record("b", Outcome::TimedOut, 100_000, Some(100_000));
        timing.record("b", Outcome::DeadlineUnreachable, 3_000, Some(2_000));
        timing.record("a", Outcome::Ok, 5_000, Some(4_000));
        timing.record("a", Outcome::DeadlineUnreachable, 7_000, None);
        let s = timing.summary();
        assert_eq!(s.models.len(), 2, "{:?}", s.models.keys());
        let (a, b) = (&s.models["a"], &s.models["b"]);
        assert_eq!(a.refusals["deadline_unreachable"].count, 10);
        assert_eq!(a.successes.count, 1);
        assert!(
            !a.refusals.contains_key("timed_out"),
            "{:?}",
            a.refusals.keys()
        );
        assert_eq!(b.refusals["timed_out"].count, 1);
        assert_eq!(b.successes.count, 0);
        let inside = b.refusals["deadline_unreachable"].server_ms.clone();
        assert!((inside.expect("timed").p99 - 2.0).abs() < 0.01);
        assert_eq!(
            s.refusals["deadline_unreachable"].count, 11,
            "all models together"
        );
    }
}
