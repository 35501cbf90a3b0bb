//! Turning a stream of answers and actions into a [`PolicyReport`].

use std::collections::BTreeMap;

use super::over_time::{slot, OutcomeSeries};
use super::stages::{Latencies, StageOutline, StageTally};
use super::{ms, PolicyReport, PredictionErrorMs, TimePoint, TimelineSpan};
use crate::events::ActionDone;
use crate::outcome::{Class, Outcome};
use crate::protocol::ActionTag;
use crate::time::Nanos;

/// How a request was answered, as a report counts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answered {
    /// An answer in the server's vocabulary.
    Known(Outcome),
    /// An answer outside it, named as the client saw it (the load generator's only): no
    /// readable answer at all, or an `error_type` this build does not know. Counted under
    /// that name, never folded into a known outcome.
    Unrecognised(String),
}

impl From<Outcome> for Answered {
    fn from(outcome: Outcome) -> Self {
        Answered::Known(outcome)
    }
}

/// Accumulates one run of one policy.
pub struct Recorder {
    /// Width of a goodput-over-time bucket.
    bucket: Nanos,
    /// Window of the timeline excerpt: [from, until).
    timeline_window: (Nanos, Nanos),
    offered: Vec<u64>,
    in_slo: Vec<u64>,
    ok_in_slo: u64,
    late: u64,
    /// Refusals and errors by outcome.
    not_ok: BTreeMap<Outcome, u64>,
    /// Answers outside the vocabulary, by the name the client gave them.
    unrecognised: BTreeMap<String, u64>,
    /// Latency of successful answers in microseconds.
    latency_us: Latencies,
    /// How long refused requests waited for their refusal, in microseconds: early
    /// refusal means these are short.
    refusal_us: Latencies,
    /// Measured minus planned duration of INFERs, nanoseconds.
    prediction_error: Vec<i64>,
    batches: u64,
    batched: u64,
    loads: u64,
    unloads: u64,
    timeline: Vec<TimelineSpan>,
    action_errors: BTreeMap<String, u64>,
    /// Execution time per device.
    busy: Vec<Nanos>,
    duration: Nanos,
    /// The stages of the pipeline whose root requests this run sends, if it sends any.
    stages: Option<StageTally>,
    /// The answers by their arrival's bucket.
    outcomes: OutcomeSeries,
}

impl Recorder {
    /// A recorder for a run of `duration`, with `buckets` goodput buckets and a timeline
    /// excerpt of `window` starting in the middle of the run.
    pub fn new(duration: Nanos, buckets: u64, window: Nanos) -> Self {
        let middle = duration / 2;
        let bucket = (duration / buckets.max(1)).max(1);
        Self {
            bucket,
            timeline_window: (middle, middle + window),
            offered: Vec::new(),
            in_slo: Vec::new(),
            ok_in_slo: 0,
            late: 0,
            not_ok: BTreeMap::new(),
            unrecognised: BTreeMap::new(),
            latency_us: Latencies::new(),
            refusal_us: Latencies::new(),
            prediction_error: Vec::new(),
            batches: 0,
            batched: 0,
            loads: 0,
            unloads: 0,
            timeline: Vec::new(),
            action_errors: BTreeMap::new(),
            busy: Vec::new(),
            duration,
            stages: None,
            outcomes: OutcomeSeries::new(bucket),
        }
    }

    /// This run's requests are root requests of `pipeline`, whose end-to-end objective is
    /// `slo`: its stages are reported too, fed by [`Recorder::fan_out`] and
    /// [`Recorder::stage_answered`].
    pub fn pipeline(&mut self, pipeline: &str, slo: Nanos, stages: Vec<StageOutline>) {
        self.stages = Some(StageTally::new(pipeline, slo, stages));
    }

    /// An answer of `stage`'s parent made `count` requests of `stage` (zero counts too).
    /// Ignored in a run that declared no pipeline.
    pub fn fan_out(&mut self, stage: &str, count: u32) {
        if let Some(stages) = &mut self.stages {
            stages.fan_out(stage, count);
        }
    }

    /// A request of `stage` was answered `latency` after it was submitted.
    /// Ignored in a run that declared no pipeline.
    pub fn stage_answered(&mut self, stage: &str, latency: Nanos, outcome: Outcome) {
        if let Some(stages) = &mut self.stages {
            stages.answered(stage, latency, outcome);
        }
    }

    /// A request was sent at `arrival`.
    pub fn offered(&mut self, arrival: Nanos) {
        let index = (arrival / self.bucket) as usize;
        *slot(&mut self.offered, index) += 1;
    }

    /// The request that arrived at `arrival` was answered at `answered`.
    pub fn answered(&mut self, arrival: Nanos, answered: Nanos, how: Answered) {
        self.outcomes.record(arrival, &how);
        let outcome = match how {
            Answered::Known(outcome) => outcome,
            Answered::Unrecognised(name) => {
                *self.unrecognised.entry(name).or_default() += 1;
                return;
            }
        };
        let latency = answered.saturating_sub(arrival) / 1_000;
        match outcome.class() {
            Class::InTime => {
                self.latency_us.record(latency);
                self.ok_in_slo += 1;
                let index = (arrival / self.bucket) as usize;
                *slot(&mut self.in_slo, index) += 1;
            }
            Class::Late => {
                self.latency_us.record(latency);
                self.late += 1;
            }
            Class::Refused => {
                self.refusal_us.record(latency);
                *self.not_ok.entry(outcome).or_default() += 1
            }
            Class::Rejected | Class::Failed => *self.not_ok.entry(outcome).or_default() += 1,
        }
    }

    /// An executor reported an action.
    pub fn action(&mut self, done: &ActionDone) {
        let batch = done.batch;
        let Some(measured) = done.measured else {
            let error = done
                .error
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            *self.action_errors.entry(error).or_default() += 1;
            return;
        };
        match done.kind {
            ActionTag::Infer => {
                self.batches += 1;
                self.batched += u64::from(batch);
                let error = measured.duration as i64 - done.expected as i64;
                self.prediction_error.push(error);
                *slot(&mut self.busy, done.device.0 as usize) += measured.duration;
            }
            ActionTag::Load => self.loads += 1,
            ActionTag::Unload => self.unloads += 1,
            ActionTag::Probe => {}
        }
        let (from, until) = self.timeline_window;
        if done.kind != ActionTag::Unload && measured.end > from && measured.begin < until {
            self.timeline.push(TimelineSpan {
                device: done.device.0,
                kind: done.kind,
                begin_ms: ms(measured.begin.max(from) - from),
                end_ms: ms(measured.end.min(until) - from),
                batch,
            });
        }
    }

    /// The report of this run, handled in `wall_s` seconds of wall-clock time.
    pub fn finish(self, policy: &str, wall_s: f64) -> PolicyReport {
        let offered: u64 = self.offered.iter().sum();
        let by_name = |refusals: bool| {
            self.not_ok
                .iter()
                .filter(move |(outcome, _)| outcome.is_refusal() == refusals)
                .map(|(outcome, &n)| (outcome.as_str().to_owned(), n))
        };
        let refused: BTreeMap<String, u64> = by_name(true).collect();
        let errors: BTreeMap<String, u64> =
            by_name(false).chain(self.unrecognised.clone()).collect();
        let failed = errors.values().sum();
        PolicyReport {
            policy: policy.to_owned(),
            offered,
            ok_in_slo: self.ok_in_slo,
            late: self.late,
            refused,
            failed,
            errors,
            goodput: ratio(self.ok_in_slo, offered),
            latency_ms: self.latency_us.percentiles(),
            refusal_ms: self.refusal_us.percentiles(),
            cold_loads: self.loads,
            action_errors: self.action_errors.clone(),
            evictions: self.unloads,
            mean_batch: ratio(self.batched, self.batches),
            device_busy: self
                .busy
                .iter()
                .map(|&b| b as f64 / self.duration.max(1) as f64)
                .collect(),
            prediction_error_ms: self.prediction_error(),
            sim_requests_per_wall_s: offered as f64 / wall_s.max(1e-9),
            wall_s,
            goodput_over_time: self.goodput_over_time(),
            outcomes_over_time: self.outcomes.finish(&self.offered),
            latency_cdf: self.cdf(),
            timeline: self.timeline,
            pipeline: self.stages.as_ref().map(StageTally::finish),
        }
    }

    fn prediction_error(&self) -> PredictionErrorMs {
        let mut errors = self.prediction_error.clone();
        if errors.is_empty() {
            return PredictionErrorMs::default();
        }
        errors.sort_unstable();
        let at = |q: f64| errors[((errors.len() - 1) as f64 * q).round() as usize] as f64 / 1e6;
        PredictionErrorMs {
            p1: at(0.01),
            p50: at(0.5),
            p99: at(0.99),
            p999: at(0.999),
            max: at(1.0),
        }
    }

    fn goodput_over_time(&self) -> Vec<TimePoint> {
        self.offered
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| TimePoint {
                t_s: (i as u64 * self.bucket) as f64 / 1e9,
                value: ratio(self.in_slo.get(i).copied().unwrap_or(0), n),
            })
            .collect()
    }

    fn cdf(&self) -> Vec<(f64, f64)> {
        let h = &self.latency_us;
        if h.is_empty() {
            return Vec::new();
        }
        (0..=200)
            .map(|i| {
                // Denser towards the tail, where predictability shows.
                let q = 1.0 - 10f64.powf(-(i as f64) / 40.0);
                (h.at(q) as f64 / 1e3, q)
            })
            .collect()
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ActionId, DeviceId, ModelId};
    use crate::scheduler::Measured;
    use crate::time::MS;

    /// Mutation that breaks it: `Latencies::at` without its cap at the largest recorded
    /// (a histogram bucket's top, 100.031 ms, would be reported for 99.99 ms).
    #[test]
    fn answers_in_time_near_the_objective_are_reported_in_time() {
        let mut r = Recorder::new(1_000 * MS, 10, 100 * MS);
        for i in 0..100u64 {
            r.offered(i * MS);
            r.answered(i * MS, i * MS + 99_990_000, Answered::Known(Outcome::Ok));
        }
        assert!(r.cdf().iter().all(|&(ms, _)| ms <= 99.99));
        let latency = r.finish("clockwork", 1.0).latency_ms;
        assert_eq!(latency.max, 99.99);
        assert!(latency.p9999 <= 99.99, "{latency:?}");
    }

    #[test]
    fn counts_and_percentiles() {
        let mut r = Recorder::new(10_000 * MS, 10, 100 * MS);
        for i in 0..100u64 {
            r.offered(i * 100 * MS);
            let how = match i {
                0..=89 => Answered::Known(Outcome::Ok),
                90..=94 => Answered::Known(Outcome::Late),
                95..=97 => Answered::Known(Outcome::TimedOut),
                98 => Answered::Known(Outcome::BadInput),
                _ => Answered::Unrecognised("http_error".into()),
            };
            r.answered(i * 100 * MS, i * 100 * MS + (i + 1) * MS, how);
        }
        let done = ActionDone {
            action: ActionId(1),
            device: DeviceId(0),
            model: ModelId(0),
            kind: ActionTag::Infer,
            batch: 4,
            expected: 2 * MS,
            measured: Some(Measured {
                begin: 5_000 * MS,
                end: 5_003 * MS,
                duration: 3 * MS,
            }),
            error: None,
        };
        r.action(&done);
        let report = r.finish("clockwork", 2.0);
        assert_eq!(
            (report.offered, report.ok_in_slo, report.late),
            (100, 90, 5)
        );
        assert_eq!(report.refused, BTreeMap::from([("timed_out".into(), 3)]));
        // The three refusals waited 96, 97 and 98 ms; errors are not refusals.
        let wait = &report.refusal_ms;
        assert!(
            (wait.p50 - 97.0).abs() < 0.1 && (wait.max - 98.0).abs() < 0.1,
            "{wait:?}"
        );
        let errors = BTreeMap::from([("bad_input".into(), 1), ("http_error".into(), 1)]);
        assert_eq!(report.errors, errors);
        assert_eq!(report.failed, 2);
        assert!((report.goodput - 0.9).abs() < 1e-9);
        assert!((report.latency_ms.max - 95.0).abs() < 0.1);
        assert!(
            (report.latency_ms.p50 - 48.0).abs() < 0.1,
            "{:?}",
            report.latency_ms
        );
        assert_eq!(report.mean_batch, 4.0);
        assert!((report.prediction_error_ms.p50 - 1.0).abs() < 1e-9);
        assert_eq!(report.timeline.len(), 1);
        assert_eq!(report.goodput_over_time.len(), 10);
        assert_eq!(report.goodput_over_time[0].value, 1.0);
        assert!((report.sim_requests_per_wall_s - 50.0).abs() < 1e-9);
    }
}
