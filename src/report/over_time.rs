//! How the answers went over a run: for each time bucket, the requests that arrived in it
//! counted by how they were answered. A run's totals say how many requests timed out; this
//! says when they arrived (a burst's onset, a load's arrival, a steady trickle), which is
//! what tells a warm-up from a policy's lag from the machine's noise.

use std::collections::BTreeMap;

use serde::Serialize;

use super::Answered;
use crate::outcome::Outcome;
use crate::time::Nanos;

/// The requests that arrived in one bucket, by answer.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct OutcomesAt {
    /// Start of the bucket, seconds from the start of the run.
    pub t_s: f64,
    /// Requests that arrived in the bucket.
    pub offered: u64,
    /// Their answers by name: the server's outcomes (`ok` is an answer in time, `late`
    /// one after its objective) and a load generator's names for what it could not read.
    pub answers: BTreeMap<String, u64>,
}

/// The entry at `index` of a per-bucket series, grown with defaults to reach it.
pub(super) fn slot<T: Default>(series: &mut Vec<T>, index: usize) -> &mut T {
    if series.len() <= index {
        series.resize_with(index + 1, T::default);
    }
    &mut series[index]
}

/// Answers counted by the bucket of their request's arrival.
pub(super) struct OutcomeSeries {
    /// Width of a bucket (the recorder's goodput bucket).
    bucket: Nanos,
    /// Known outcomes per bucket: keyed by the enum, so counting allocates nothing.
    known: Vec<BTreeMap<Outcome, u64>>,
    /// Answers outside the vocabulary per bucket (rare: a load generator's only).
    unrecognised: Vec<BTreeMap<String, u64>>,
}

impl OutcomeSeries {
    pub(super) fn new(bucket: Nanos) -> Self {
        Self {
            bucket: bucket.max(1),
            known: Vec::new(),
            unrecognised: Vec::new(),
        }
    }

    /// The request that arrived at `arrival` was answered `how`.
    pub(super) fn record(&mut self, arrival: Nanos, how: &Answered) {
        let index = (arrival / self.bucket) as usize;
        match how {
            Answered::Known(outcome) => {
                *slot(&mut self.known, index).entry(*outcome).or_default() += 1;
            }
            Answered::Unrecognised(name) => {
                let bucket = slot(&mut self.unrecognised, index);
                *bucket.entry(name.clone()).or_default() += 1;
            }
        }
    }

    /// One entry per bucket in which requests arrived (`offered[i]` of them in bucket
    /// `i`), in time order.
    pub(super) fn finish(&self, offered: &[u64]) -> Vec<OutcomesAt> {
        offered
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| {
                let mut answers: BTreeMap<String, u64> = BTreeMap::new();
                for (outcome, &count) in self.known.get(i).into_iter().flatten() {
                    answers.insert(outcome.as_str().to_owned(), count);
                }
                for (name, &count) in self.unrecognised.get(i).into_iter().flatten() {
                    *answers.entry(name.clone()).or_default() += count;
                }
                OutcomesAt {
                    t_s: (i as u64 * self.bucket) as f64 / 1e9,
                    offered: n,
                    answers,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::MS;

    /// Each answer lands in its arrival's bucket, whenever it came, and a bucket with no
    /// arrivals is left out.
    ///
    /// Mutation that breaks it: bucketing by `answered` instead of `arrival` in
    /// `Recorder::answered` (the late answer of the first bucket moves to the third).
    #[test]
    fn answers_are_counted_in_their_arrivals_bucket() {
        let mut r = super::super::Recorder::new(1_000 * MS, 10, 10 * MS);
        let mut answer = |arrival, answered, how: Answered| {
            r.offered(arrival);
            r.answered(arrival, answered, how);
        };
        answer(10 * MS, 20 * MS, Answered::Known(Outcome::Ok));
        answer(50 * MS, 250 * MS, Answered::Known(Outcome::Late));
        answer(60 * MS, 61 * MS, Answered::Known(Outcome::TimedOut));
        answer(350 * MS, 351 * MS, Answered::Known(Outcome::TimedOut));
        answer(360 * MS, 900 * MS, Answered::Unrecognised("timeout".into()));
        let series = r.finish("clockwork", 1.0).outcomes_over_time;
        let counts = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
            pairs.iter().map(|&(k, v)| (k.to_owned(), v)).collect()
        };
        assert_eq!(series.len(), 2, "{series:?}");
        assert_eq!((series[0].t_s, series[0].offered), (0.0, 3));
        assert_eq!(
            series[0].answers,
            counts(&[("ok", 1), ("late", 1), ("timed_out", 1)])
        );
        assert_eq!((series[1].t_s, series[1].offered), (0.3, 2));
        assert_eq!(
            series[1].answers,
            counts(&[("timed_out", 1), ("timeout", 1)])
        );
    }
}
