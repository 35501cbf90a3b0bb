//! The Clockwork policy's arithmetic at the extremes of what it is told: a profile it is
//! seeded with, or a run a device reports, may claim anything from nothing to centuries
//! (a damaged `profile.json`, a remote worker's bad clock). The policy must neither
//! overflow nor lose a request: every estimate counts as at most `time::LONGEST`.

use clockwork::config::PolicyConfig;
use clockwork::model::{BatchLatency, ModelId, ModelProfile, RequestId};
use clockwork::scheduler::testbed::Testbed;
use clockwork::scheduler::{ClockworkPolicy, DeviceInfo, ModelInfo, Policy, Request};
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
    /// 2^50 ns, two weeks, so that the testbed's own clock stays in range) and that may
    /// claim in their reports to have taken `claimed` (in turn), every request is
    /// answered once.
    #[test]
    fn any_seed_or_reported_run_is_planned_without_overflow(
        belief in (duration(), duration()),
        truth in (true_duration(), true_duration()),
        claimed in proptest::collection::vec(duration(), 0..4),
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
