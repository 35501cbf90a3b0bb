//! The per-stage half of a pipeline run's report: how many requests each stage's parent
//! fanned out into, and how each stage's requests were answered and how fast.
//!
//! The end-to-end half is the report's usual figures: when a run drives a pipeline, its
//! requests are the root requests, so `goodput` is root goodput (answered within the
//! end-to-end objective / offered), `late` counts late roots and `latency_ms` is end to end.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::{ms, LatencyMs};
use crate::outcome::{Class, Outcome};
use crate::time::Nanos;

/// Requests per upstream answer on one fan-out edge.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct FanOutStats {
    /// Upstream answers fanned out (each counts, also those that made no request).
    pub answers: u64,
    pub mean: f64,
    pub p99: u32,
    pub max: u32,
}

/// One stage of a pipeline, as the run saw it.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct StageReport {
    pub stage: String,
    pub model: String,
    /// Requests of the stage that were answered.
    pub requests: u64,
    /// Answered successfully within the stage's own deadline.
    pub ok_in_slo: u64,
    /// Answered successfully after it.
    pub late: u64,
    /// The other answers (refusals, withdrawals, errors), by outcome.
    pub not_ok: BTreeMap<String, u64>,
    /// Absent for a stage on the root's inputs.
    pub fan_out: Option<FanOutStats>,
    /// From the stage request's submission to its answer, successful answers only.
    pub latency_ms: LatencyMs,
}

/// The pipeline a run drove and its stages.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PipelineReport {
    pub pipeline: String,
    /// The end-to-end objective of its root requests.
    pub slo_ms: f64,
    pub stages: Vec<StageReport>,
}

/// A stage as declared: its name, its model, and whether a fan-out edge feeds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageOutline {
    pub stage: String,
    pub model: String,
    pub fanned: bool,
}

/// Accumulates the stages of one pipeline run.
pub(super) struct StageTally {
    pipeline: String,
    slo: Nanos,
    stages: Vec<OneStage>,
}

struct OneStage {
    decl: StageOutline,
    ok_in_slo: u64,
    late: u64,
    not_ok: BTreeMap<Outcome, u64>,
    /// Upstream answers by the number of requests they made here.
    fan_out: BTreeMap<u32, u64>,
    latency_us: Latencies,
}

/// Microsecond latencies from 1 us to an hour at 3 significant digits (longer saturate),
/// and the exact largest. A histogram gives back the top of a value's bucket, 64 us wide
/// around 100 ms: without the exact largest as a cap, answers in time near a 100 ms
/// objective would be reported as taking 100.031 ms.
pub(super) struct Latencies {
    histogram: Histogram<u64>,
    max: u64,
}

impl Latencies {
    pub(super) fn new() -> Self {
        let histogram = Histogram::new_with_bounds(1, 3_600_000_000, 3)
            .unwrap_or_else(|_| unreachable!("constant, valid bounds"));
        Self { histogram, max: 0 }
    }

    pub(super) fn record(&mut self, micros: u64) {
        let micros = micros.clamp(1, self.histogram.high());
        self.histogram.saturating_record(micros);
        self.max = self.max.max(micros);
    }

    /// The latency at quantile `q`, in microseconds (never above the largest recorded).
    pub(super) fn at(&self, q: f64) -> u64 {
        self.histogram.value_at_quantile(q).min(self.max)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.histogram.is_empty()
    }

    /// The percentiles, in milliseconds.
    pub(super) fn percentiles(&self) -> LatencyMs {
        if self.is_empty() {
            return LatencyMs::default();
        }
        let at = |q: f64| self.at(q) as f64 / 1e3;
        LatencyMs {
            p50: at(0.5),
            p99: at(0.99),
            p999: at(0.999),
            p9999: at(0.9999),
            max: self.max as f64 / 1e3,
        }
    }
}

impl StageTally {
    pub(super) fn new(pipeline: &str, slo: Nanos, stages: Vec<StageOutline>) -> Self {
        let stages = stages
            .into_iter()
            .map(|decl| OneStage {
                decl,
                ok_in_slo: 0,
                late: 0,
                not_ok: BTreeMap::new(),
                fan_out: BTreeMap::new(),
                latency_us: Latencies::new(),
            })
            .collect();
        Self {
            pipeline: pipeline.to_owned(),
            slo,
            stages,
        }
    }

    /// The stage named `name`; a name the run did not declare is a bug of the caller.
    fn stage(&mut self, name: &str) -> &mut OneStage {
        let index = self.stages.iter().position(|s| s.decl.stage == name);
        let Some(index) = index else {
            panic!("stage '{name}' is not a stage of {}", self.pipeline)
        };
        &mut self.stages[index]
    }

    pub(super) fn fan_out(&mut self, stage: &str, count: u32) {
        *self.stage(stage).fan_out.entry(count).or_default() += 1;
    }

    pub(super) fn answered(&mut self, stage: &str, latency: Nanos, outcome: Outcome) {
        let stage = self.stage(stage);
        let micros = (latency / 1_000).max(1);
        match outcome.class() {
            Class::InTime => {
                stage.ok_in_slo += 1;
                stage.latency_us.record(micros);
            }
            Class::Late => {
                stage.late += 1;
                stage.latency_us.record(micros);
            }
            Class::Refused | Class::Rejected | Class::Failed => {
                *stage.not_ok.entry(outcome).or_default() += 1
            }
        }
    }

    pub(super) fn finish(&self) -> PipelineReport {
        PipelineReport {
            pipeline: self.pipeline.clone(),
            slo_ms: ms(self.slo),
            stages: self.stages.iter().map(OneStage::report).collect(),
        }
    }
}

impl OneStage {
    fn report(&self) -> StageReport {
        let not_ok: BTreeMap<String, u64> = self
            .not_ok
            .iter()
            .map(|(outcome, &n)| (outcome.as_str().to_owned(), n))
            .collect();
        StageReport {
            stage: self.decl.stage.clone(),
            model: self.decl.model.clone(),
            requests: self.ok_in_slo + self.late + not_ok.values().sum::<u64>(),
            ok_in_slo: self.ok_in_slo,
            late: self.late,
            not_ok,
            fan_out: self.decl.fanned.then(|| fan_out_stats(&self.fan_out)),
            latency_ms: self.latency_us.percentiles(),
        }
    }
}

/// Mean, 99th percentile (nearest rank) and maximum of counts given as (value, times).
fn fan_out_stats(counts: &BTreeMap<u32, u64>) -> FanOutStats {
    let answers: u64 = counts.values().sum();
    if answers == 0 {
        return FanOutStats::default();
    }
    let total: u64 = counts.iter().map(|(&v, &n)| u64::from(v) * n).sum();
    let rank = (answers as f64 * 0.99).ceil() as u64;
    let mut seen = 0;
    let p99 = counts
        .iter()
        .find(|(_, &n)| {
            seen += n;
            seen >= rank
        })
        .map_or(0, |(&v, _)| v);
    FanOutStats {
        answers,
        mean: total as f64 / answers as f64,
        p99,
        max: counts.keys().next_back().copied().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::MS;

    fn decl(stage: &str, fanned: bool) -> StageOutline {
        StageOutline {
            stage: stage.into(),
            model: format!("{stage}-model"),
            fanned,
        }
    }

    #[test]
    fn fan_out_counts_every_answer_and_takes_the_nearest_rank() {
        // 98 answers of 1, one of 0, one of 7: p99 is the 99th value, 1; max 7.
        let mut counts = BTreeMap::from([(1, 98), (0, 1), (7, 1)]);
        let stats = fan_out_stats(&counts);
        assert_eq!((stats.answers, stats.p99, stats.max), (100, 1, 7));
        assert!((stats.mean - 1.05).abs() < 1e-12);
        // Two answers of 7: the 99th value is 7.
        counts.insert(7, 2);
        counts.insert(1, 97);
        assert_eq!(fan_out_stats(&counts).p99, 7);
        assert_eq!(fan_out_stats(&BTreeMap::new()), FanOutStats::default());
    }

    #[test]
    fn stages_count_answers_by_class_and_time_only_successes() {
        let mut tally = StageTally::new("p", 250 * MS, vec![decl("a", false), decl("b", true)]);
        tally.fan_out("b", 3);
        tally.fan_out("b", 0);
        tally.answered("a", 10 * MS, Outcome::Ok);
        tally.answered("b", 20 * MS, Outcome::Ok);
        tally.answered("b", 40 * MS, Outcome::Late);
        tally.answered("b", 1, Outcome::TimedOut);
        let report = tally.finish();
        assert_eq!(report.slo_ms, 250.0);
        let (a, b) = (&report.stages[0], &report.stages[1]);
        assert_eq!(a.fan_out, None, "a root stage has no fan-out");
        assert_eq!((a.requests, a.ok_in_slo, a.late), (1, 1, 0));
        assert_eq!((b.requests, b.ok_in_slo, b.late), (3, 1, 1));
        assert_eq!(b.not_ok, BTreeMap::from([("timed_out".into(), 1)]));
        let fan_out = b.fan_out.clone().unwrap();
        assert_eq!((fan_out.answers, fan_out.max), (2, 3));
        assert!((fan_out.mean - 1.5).abs() < 1e-12);
        assert!((b.latency_ms.max - 40.0).abs() < 0.1, "{:?}", b.latency_ms);
        assert!((b.latency_ms.p50 - 20.0).abs() < 0.1, "{:?}", b.latency_ms);
    }

    #[test]
    #[should_panic(expected = "not a stage")]
    fn an_undeclared_stage_is_a_bug() {
        StageTally::new("p", MS, vec![decl("a", false)]).fan_out("z", 1);
    }
}
