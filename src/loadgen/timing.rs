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
pub struct ServerTiming {
    successes: Split,
    refusals: BTreeMap<Outcome, Split>,
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

/// The whole of `server_timing.json`.
#[derive(Debug, Serialize)]
pub struct TimingSummary {
    pub successes: SplitSummary,
    /// By outcome (`deadline_unreachable`, `timed_out`, ...).
    pub refusals: BTreeMap<&'static str, SplitSummary>,
    /// Answers (of any kind) without a readable `Server-Timing: edge`.
    pub untimed: u64,
}

impl Default for ServerTiming {
    fn default() -> Self {
        Self {
            successes: Split::new(),
            refusals: BTreeMap::new(),
            untimed: 0,
        }
    }
}

impl ServerTiming {
    /// An answer with `outcome` that took `client` us at the client and, if it said,
    /// `server` us in the server (answers other than successes and refusals are not kept).
    pub fn record(&mut self, outcome: Outcome, client: u64, server: Option<u64>) {
        let split = if outcome.is_success() {
            &mut self.successes
        } else if outcome.is_refusal() {
            self.refusals.entry(outcome).or_insert_with(Split::new)
        } else {
            return;
        };
        match server {
            None => self.untimed += 1,
            Some(server) => split.record(client, server),
        }
    }

    pub fn summary(&self) -> TimingSummary {
        TimingSummary {
            successes: self.successes.summary(),
            refusals: (self.refusals.iter())
                .map(|(outcome, split)| (outcome.as_str(), split.summary()))
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
            timing.record(Outcome::DeadlineUnreachable, 10_000, Some(20));
        }
        timing.record(Outcome::TimedOut, 100_000, Some(100_000));
        timing.record(Outcome::Ok, 5_000, Some(4_000));
        timing.record(Outcome::DeadlineUnreachable, 7_000, None);
        timing.record(Outcome::BadInput, 7_000, Some(1));
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
}
