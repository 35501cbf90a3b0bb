//! The Clockwork policy's arithmetic at the extremes of what it is told: a profile it is
//! seeded with, or a run a device reports, may claim anything from nothing to centuries
//! (a damaged `profile.json`, a remote worker's bad clock). The policy must neither
//! overflow nor lose a request: every estimate counts as at most `time::LONGEST`, and a
//! report's times are held to when it arrived (`Measured::received_at`).

use clockwork::config::PolicyConfig;
use clockwork::model::{BatchLatency, ModelId, ModelProfile, RequestId};
use clockwork::scheduler::testbed::{Driver, Reaction, Testbed};
use clockwork::scheduler::{
    ClockworkPolicy, DeviceInfo, ModelInfo, Policy, ReactivePolicy, Request, Verdict,
};
use clockwork::time::{Nanos, MS};
use proptest::prelude::*;

/// A duration anywhere from nothing to the largest there is, extremes often.
fn duration() -> impl Strategy<Value = Nanos> {
    prop_oneof![
        2 => 1..100 * MS,
        1 => Just(0),
        1 => Just(Nanos::MAX),
        1 => any::<Nanos>(),
    ]
}

/// What a run really takes: mostly what a model takes, sometimes two weeks (2^50 ns: the
/// testbed's own clock must stay in range).
fn true_duration() -> impl Strategy<Value = Nanos> {
    prop_oneof![3 => 1..100 * MS, 1 => 0..1u64 << 50]
}

fn profile(load: Nanos, run: Nanos) -> ModelProfile {
    ModelProfile {
        weight_bytes: 1 << 24,
        load_latency: load,
        batches: [1u32, 2, 4]
            .iter()
            .map(|&batch| BatchLatency {
                batch,
                latency: run,
            })
            .collect(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Seeded with `belief` and served by devices whose runs really take `truth` (at most
    /// 2^50 ns, two weeks, so that the testbed's own clock stays in range) whose first
    /// reports may claim to have taken `claimed`, every request is answered once.
    #[test]
    fn any_seed_or_reported_run_is_planned_without_overflow(
        belief in (duration(), duration()),
        truth in (true_duration(), true_duration()),
        claimed in proptest::collection::vec(duration(), 0..8),
        gap in 1..10 * MS,
    ) {
        let mut policy = ClockworkPolicy::new(&PolicyConfig::default());
        for _ in 0..2 {
            policy.add_device(DeviceInfo { kind: "test".into(), pages: 16 });
        }
        policy.add_model(ModelInfo {
            pages: 1,
            profile: profile(belief.0, belief.1),
            by_kind: Vec::new(),
            devices: None,
        });
        let truth = vec![(1, profile(truth.0, truth.1))];
        let mut testbed =
            Testbed::new(policy, &[16, 16], truth, 16).with_claimed_durations(claimed);
        let requests = (0..300u64).map(|i| Request {
            id: RequestId(i),
            model: ModelId(0),
            arrival: i * gap,
            slo: 100 * MS,
            latest_finish: None,
            items: 1,
        });
        let report = testbed.run(requests);
        prop_assert!(report.violations.is_empty(), "{:?}", report.violations);
    }
}

/// Records the answers of the requests from `from` on.
struct Answers {
    stream: std::vec::IntoIter<Request>,
    from: u64,
    verdicts: Vec<(RequestId, &'static str)>,
}

impl Driver for Answers {
    fn next_arrival(&mut self) -> Option<Nanos> {
        self.stream.as_slice().first().map(|r| r.arrival)
    }

    fn arrivals(&mut self, now: Nanos, _: &dyn Policy) -> Vec<Request> {
        let due = self
            .stream
            .as_slice()
            .iter()
            .take_while(|r| r.arrival <= now)
            .count();
        self.stream.by_ref().take(due).collect()
    }

    fn answered(&mut self, request: RequestId, verdict: &Verdict, _: Nanos) -> Reaction {
        if request.0 >= self.from {
            let tag = match verdict {
                Verdict::Completed { late: false, .. } => "in time",
                Verdict::Completed { late: true, .. } => "late",
                Verdict::Refused(_) => "refused",
                Verdict::Failed(_) => "failed",
            };
            self.verdicts.push((request, tag));
        }
        Reaction::default()
    }
}

/// One device and one model whose runs take `run`, its first reports claiming `claimed`.
fn one_device<P: Policy>(mut policy: P, run: Nanos, claimed: Vec<Nanos>) -> Testbed<P> {
    policy.add_device(DeviceInfo {
        kind: "test".into(),
        pages: 16,
    });
    policy.add_model(ModelInfo {
        pages: 1,
        profile: profile(5 * MS, run),
        by_kind: Vec::new(),
        devices: None,
    });
    let truth = vec![(1, profile(5 * MS, run))];
    Testbed::new(policy, &[16], truth, 16).with_claimed_durations(claimed)
}

/// `n` requests 10 ms apart, with a 100 ms objective.
fn every_10ms(n: u64) -> Vec<Request> {
    (0..n)
        .map(|i| Request {
            id: RequestId(i),
            model: ModelId(0),
            arrival: i * 10 * MS,
            slo: 100 * MS,
            latest_finish: None,
            items: 1,
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// A device whose first reports were nonsense (a remote worker before its clock's
    /// offset is known) serves again: a report that claims a run of centuries makes its
    /// model's estimates an hour until they age out (`estimate_max_age`, 1 s, each claim
    /// consumed by the next run), so with at most three such claims every request from
    /// 6 s on is served in time.
    #[test]
    fn a_device_whose_first_reports_were_nonsense_serves_again(
        claimed in proptest::collection::vec(duration(), 1..4),
        run in 1..5 * MS,
    ) {
        let policy = ClockworkPolicy::new(&PolicyConfig::default());
        let mut testbed = one_device(policy, run, claimed);
        let stream = every_10ms(800).into_iter();
        let mut answers = Answers { stream, from: 600, verdicts: Vec::new() };
        let report = testbed.run_driven(&mut answers);
        prop_assert!(report.violations.is_empty(), "{:?}", report.violations);
        let missed: Vec<_> = answers.verdicts.iter().filter(|v| v.1 != "in time").collect();
        prop_assert!(missed.is_empty() && answers.verdicts.len() == 200, "{missed:?}");
    }

    /// The reactive baseline judges lateness by a report's end: one that claims to end
    /// in the far future does not make answers given in time count as late.
    #[test]
    fn the_reactive_baseline_reads_reports_as_received(
        claimed in proptest::collection::vec(duration(), 1..4),
        run in 1..5 * MS,
    ) {
        let policy = ReactivePolicy::new(&PolicyConfig::default());
        let report = one_device(policy, run, claimed).run(every_10ms(100));
        prop_assert!(report.violations.is_empty(), "{:?}", report.violations);
        prop_assert_eq!((report.completed, report.late), (100, 0));
    }
}
