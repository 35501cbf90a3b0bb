//! Property tests of the Clockwork policy over random profiles and request streams, on the
//! in-memory testbed (executor semantics without actors).

use clockwork::config::PolicyConfig;
use clockwork::model::{BatchLatency, ModelId, ModelProfile, RequestId};
use clockwork::scheduler::testbed::{Report, Testbed};
use clockwork::scheduler::{
    ClockworkPolicy, DeviceInfo, ModelInfo, Policy, ReactivePolicy, Request,
};
use clockwork::time::{Nanos, MS, US};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Scenario {
    devices: Vec<u32>,
    models: Vec<(u32, ModelProfile)>,
    requests: Vec<Request>,
}

fn profile() -> impl Strategy<Value = (u32, ModelProfile)> {
    (1u32..6, 200u64..4_000, 1u64..10, 1usize..=5).prop_map(|(pages, base_us, load_ms, sizes)| {
        let batches = [1u32, 2, 4, 8, 16][..sizes]
            .iter()
            .map(|&batch| BatchLatency {
                batch,
                // Sublinear growth, as on real accelerators.
                latency: base_us * US * (2 + u64::from(batch)) / 3,
            })
            .collect();
        let profile = ModelProfile {
            weight_bytes: u64::from(pages) << 24,
            load_latency: load_ms * MS,
            batches,
        };
        (pages, profile)
    })
}

fn scenario() -> impl Strategy<Value = Scenario> {
    scenario_of(1..=1)
}

/// Random scenarios whose requests carry `items` items each (a client's batch).
fn scenario_of(items: std::ops::RangeInclusive<u32>) -> impl Strategy<Value = Scenario> {
    let devices = prop::collection::vec(6u32..30, 1..4);
    let models = prop::collection::vec(profile(), 1..24);
    (devices, models).prop_flat_map(move |(devices, models)| {
        let n = models.len();
        // (gap to previous arrival, model, slo, items)
        let request = (0u64..2_000, 0..n, 1u64..300, items.clone());
        prop::collection::vec(request, 1..400).prop_map(move |raw| {
            let mut arrival: Nanos = 0;
            let requests = raw
                .into_iter()
                .enumerate()
                .map(|(i, (gap_us, model, slo_ms, items))| {
                    arrival += gap_us * US;
                    Request {
                        id: RequestId(i as u64),
                        model: ModelId(model as u32),
                        arrival,
                        slo: slo_ms * MS,
                        latest_finish: None,
                        items,
                    }
                })
                .collect();
            Scenario {
                devices: devices.clone(),
                models: models.clone(),
                requests,
            }
        })
    })
}

fn run(scenario: &Scenario, factor: f64) -> Report {
    run_policy(
        ClockworkPolicy::new(&PolicyConfig::default()),
        scenario,
        factor,
    )
}

fn run_policy<P: Policy>(policy: P, scenario: &Scenario, factor: f64) -> Report {
    run_removing(policy, scenario, factor, None)
}

/// Runs the scenario; `removed`: (device, when) a device is taken away, as a lost worker.
fn run_removing<P: Policy>(
    mut policy: P,
    scenario: &Scenario,
    factor: f64,
    removed: Option<(usize, Nanos)>,
) -> Report {
    let config = PolicyConfig::default();
    for &pages in &scenario.devices {
        policy.add_device(DeviceInfo {
            kind: "test".into(),
            pages,
        });
    }
    for (pages, profile) in &scenario.models {
        policy.add_model(ModelInfo {
            pages: *pages,
            profile: profile.clone(),
            by_kind: Vec::new(),
            devices: None,
        });
    }
    let max_batch = config.max_batch as usize;
    let mut testbed = Testbed::new(
        policy,
        &scenario.devices,
        scenario.models.clone(),
        max_batch,
    )
    .with_factor(factor);
    if let Some((device, at)) = removed {
        testbed = testbed.remove_at(device, at);
    }
    testbed.run(scenario.requests.iter().copied())
}

fn answered(report: &Report) -> usize {
    report.completed + report.failed + report.refused.values().sum::<usize>()
}

/// The policy asked for no LOAD a device had to refuse for want of pages, nor for weights
/// it already held: its mirror of every device's memory is right. (The devices never go
/// over capacity themselves; a LOAD that would is refused and counted here.)
fn memory_mirrored(report: &Report) -> Result<(), TestCaseError> {
    let refused = (report.loads_without_pages, report.duplicate_loads);
    prop_assert_eq!(
        refused,
        (0, 0),
        "LOADs refused (no pages, duplicate): {:?}",
        report
    );
    Ok(())
}

/// Requests that carry more items than their model's largest batch: none can ever run.
fn too_large(scenario: &Scenario) -> usize {
    let max = |r: &Request| scenario.models[r.model.0 as usize].1.max_batch();
    scenario
        .requests
        .iter()
        .filter(|r| r.items > max(r))
        .count()
}

/// The scenario with every request cut to its model's largest batch.
fn within_limits(mut scenario: Scenario) -> Scenario {
    for r in &mut scenario.requests {
        r.items = r
            .items
            .min(scenario.models[r.model.0 as usize].1.max_batch());
    }
    scenario
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(96)
}

proptest! {
    // 96 cases by default; PROPTEST_CASES=5000 for a longer hunt.
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// With exact estimates: no LOAD beyond the memory of a device, batches allowed,
    /// every request answered exactly once, and nothing executed finishes after its
    /// deadline.
    #[test]
    fn exact_estimates_keep_every_promise(scenario in scenario()) {
        let report = run(&scenario, 1.0);
        memory_mirrored(&report)?;
        prop_assert!(report.violations.is_empty(), "{:?}", report.violations);
        prop_assert_eq!(report.late, 0, "{:?}", report);
        prop_assert_eq!(answered(&report), scenario.requests.len());
        prop_assert_eq!(report.failed, 0);
    }

    /// One model with batch size 1 only, on one device, one objective, exact estimates:
    /// projecting the queue at arrival is then exact, so every refusal is answered the
    /// moment its request arrives (none waits in the queue to time out), and nothing is
    /// late. Arrivals come faster than the device serves them, so most runs overload.
    #[test]
    fn overload_is_refused_on_arrival(
        base_us in 200u64..4_000,
        load_ms in 1u64..10,
        slo_ms in 5u64..200,
        gaps in prop::collection::vec(0u64..2_000, 1..400),
    ) {
        let profile = ModelProfile {
            weight_bytes: 1 << 24,
            load_latency: load_ms * MS,
            batches: vec![BatchLatency { batch: 1, latency: base_us * US }],
        };
        let mut arrival = 0;
        let requests = gaps
            .iter()
            .enumerate()
            .map(|(i, gap)| {
                arrival += gap * US;
                Request { id: RequestId(i as u64), model: ModelId(0), arrival, slo: slo_ms * MS, latest_finish: None, items: 1 }
            })
            .collect();
        let scenario = Scenario { devices: vec![8], models: vec![(1, profile)], requests };
        let report = run(&scenario, 1.0);
        prop_assert!(report.violations.is_empty(), "{:?}", report.violations);
        prop_assert_eq!(report.late, 0, "{:?}", report);
        let refused: usize = report.refused.values().sum();
        prop_assert_eq!(report.refused_on_arrival, refused, "{:?}", report);
    }

    /// Several models with batch size 1 only, the same cost and objective, sharing one
    /// device at about twice its capacity, exact estimates: the device serves the earliest
    /// deadline first, so counting at arrival the other models' queued work due before a
    /// request (not only its own model's queue) refuses most hopeless requests (at least two
    /// in three) the moment they arrive instead of letting them wait to time out, and
    /// nothing is late. Counting only the model's own queue fails it.
    #[test]
    fn a_shared_device_refuses_overload_on_arrival(
        base_us in 200u64..4_000,
        slo_ms in 10u64..200,
        models in 2usize..6,
        arrivals in prop::collection::vec((0.1f64..1.0, 0usize..6), 100..400),
    ) {
        let profile = ModelProfile {
            weight_bytes: 1 << 24,
            load_latency: MS,
            batches: vec![BatchLatency { batch: 1, latency: base_us * US }],
        };
        let mut arrival = 0;
        let requests = arrivals
            .iter()
            .enumerate()
            .map(|(i, &(gap, model))| {
                // Mean gap 0.55 of a request's service time: 1.8 times the device's capacity.
                // Never two at once: a burst at a model nobody holds yet is admitted
                // whole (no replica to project on), a cold start this test is not about.
                arrival += (gap * base_us as f64) as u64 * US;
                let model = ModelId((model % models) as u32);
                Request { id: RequestId(i as u64), model, arrival, slo: slo_ms * MS, latest_finish: None, items: 1 }
            })
            .collect();
        let scenario = Scenario { devices: vec![16], models: vec![(1, profile); models], requests };
        let policy = ClockworkPolicy::new(&PolicyConfig::default()).with_shared_arrival();
        let report = run_policy(policy, &scenario, 1.0);
        prop_assert!(report.violations.is_empty(), "{:?}", report.violations);
        prop_assert_eq!(report.late, 0, "{:?}", report);
        let refused: usize = report.refused.values().sum();
        prop_assert!(report.refused_on_arrival * 3 >= refused * 2, "{:?}", report);
    }

    /// When the devices are slower than profiled, answers may be late but are still
    /// exactly one per request, and no LOAD goes beyond the memory of a device.
    #[test]
    fn wrong_estimates_still_answer_everything_once(scenario in scenario(), factor in 1.0f64..3.0) {
        let report = run(&scenario, factor);
        memory_mirrored(&report)?;
        prop_assert!(report.violations.is_empty(), "{:?}", report.violations);
        prop_assert_eq!(answered(&report), scenario.requests.len());
    }

    /// A device taken away mid-run (its worker lost, `Policy::remove_device`): nothing is
    /// planned on it afterwards, every request is still answered exactly once (those of
    /// its batches re-planned on the others or refused), none late with exact estimates,
    /// none failed. The reactive baseline keeps the one-answer promise too, while a device
    /// is left (it never refuses: with no device at all its requests wait for one).
    #[test]
    fn a_device_removed_mid_run_breaks_no_promise(
        scenario in scenario(),
        which in 0usize..4,
        at_us in 0u64..400_000,
    ) {
        let removed = Some((which % scenario.devices.len(), at_us * US));
        let config = PolicyConfig::default();
        let report = run_removing(ClockworkPolicy::new(&config), &scenario, 1.0, removed);
        memory_mirrored(&report)?;
        prop_assert!(report.violations.is_empty(), "{:?}", report.violations);
        prop_assert_eq!(report.late, 0, "{:?}", report);
        prop_assert_eq!(report.failed, 0, "{:?}", report);
        prop_assert_eq!(answered(&report), scenario.requests.len());
        if scenario.devices.len() > 1 {
            let report = run_removing(ReactivePolicy::new(&config), &scenario, 1.0, removed);
            prop_assert!(report.violations.is_empty(), "{:?}", report.violations);
            prop_assert_eq!(answered(&report), scenario.requests.len());
        }
    }

    /// The baselines keep the same bookkeeping promises: one answer per request, memory
    /// within capacity, allowed batches (they may answer late; that is what they are for).
    #[test]
    fn baselines_answer_everything_once(scenario in scenario(), factor in 1.0f64..2.0) {
        let config = PolicyConfig::default();
        for report in [
            run_policy(ReactivePolicy::new(&config), &scenario, factor),
            run_policy(ClockworkPolicy::new(&config).without_early_drop(), &scenario, factor),
        ] {
            memory_mirrored(&report)?;
            prop_assert!(report.violations.is_empty(), "{:?}", report.violations);
            prop_assert_eq!(answered(&report), scenario.requests.len());
            prop_assert!(report.refused.is_empty(), "no early refusal: {:?}", report.refused);
        }
    }

    /// Requests of several items, exact estimates: every request one answer, no batch
    /// over an allowed size, no request's items split over two batches (the testbed
    /// checks both), nothing late, and those larger than their model's largest batch
    /// refused.
    #[test]
    fn multi_item_requests_keep_every_promise(scenario in scenario_of(1..=12)) {
        let report = run(&scenario, 1.0);
        memory_mirrored(&report)?;
        prop_assert!(report.violations.is_empty(), "{:?}", report.violations);
        prop_assert_eq!(report.late, 0, "{:?}", report);
        prop_assert_eq!(answered(&report), scenario.requests.len());
        prop_assert_eq!(report.failed, 0);
        let refused: usize = report.refused.values().sum();
        prop_assert!(refused >= too_large(&scenario), "{:?}", report);
        prop_assert!(report.batched_items >= report.batched_requests);
    }

    /// Requests of several items on devices slower than profiled: still one answer
    /// each, no batch over an allowed size, none split, no livelock.
    #[test]
    fn multi_item_requests_with_wrong_estimates_are_answered_once(
        scenario in scenario_of(1..=12),
        factor in 1.0f64..3.0,
    ) {
        let report = run(&scenario, factor);
        memory_mirrored(&report)?;
        prop_assert!(report.violations.is_empty(), "{:?}", report.violations);
        prop_assert_eq!(answered(&report), scenario.requests.len());
    }

    /// The baselines batch whole multi-item requests too, within the allowed sizes.
    #[test]
    fn baselines_batch_multi_item_requests(scenario in scenario_of(1..=12), factor in 1.0f64..2.0) {
        let scenario = within_limits(scenario);
        let config = PolicyConfig::default();
        for report in [
            run_policy(ReactivePolicy::new(&config), &scenario, factor),
            run_policy(ClockworkPolicy::new(&config).without_early_drop(), &scenario, factor),
        ] {
            prop_assert!(report.violations.is_empty(), "{:?}", report.violations);
            prop_assert_eq!(answered(&report), scenario.requests.len());
            prop_assert!(report.refused.is_empty(), "no early refusal: {:?}", report.refused);
        }
    }
}
