//! The policy's estimates: measured durations replace the profile's, each device kind
//! starts from its own, and a slow spell's estimates and margins do not refuse forever.

use super::*;

#[test]
fn measured_durations_replace_the_profile() {
    let mut policy = policy(1, 100, 1);
    let now = warm(&mut policy);
    let slow = 4 * MS;
    let mut plan = Plan::default();
    policy.admit(request(1, 0, now, 100 * MS), now, &mut plan);
    policy.schedule(now, &mut plan);
    let action = plan.actions[0].clone();
    assert_eq!(
        action.expected_duration, 2_730_000,
        "seeded from the profile"
    );
    let outcome = Outcome {
        action: action.id,
        result: Ok(Measured {
            begin: now,
            end: now + slow,
            duration: slow,
        }),
    };
    policy.observe(outcome, now + slow, &mut Plan::default());
    let mut next = Plan::default();
    policy.admit(request(2, 0, now + slow, 100 * MS), now + slow, &mut next);
    policy.schedule(now + slow, &mut next);
    assert_eq!(
        next.actions[0].expected_duration, slow,
        "p99 of the window is the slow one"
    );
}

/// `profile` with every duration scaled by `factor`.
fn scaled(profile: &ModelProfile, factor: u64) -> ModelProfile {
    let mut scaled = profile.clone();
    scaled.load_latency *= factor;
    for b in &mut scaled.batches {
        b.latency *= factor;
    }
    scaled
}

#[test]
fn each_device_kind_is_seeded_from_its_own_profile() {
    use crate::model::KindProfile;
    let mut policy = ClockworkPolicy::new(&PolicyConfig::default());
    let device = |kind: &str| DeviceInfo {
        kind: kind.into(),
        pages: 100,
    };
    // One kind known before the model, one after it, one with no profile of its own.
    policy.add_device(device("fast"));
    let fallback = profiles::model("resnet50", "r", 100 * MS).unwrap().profile;
    let kind = |name: &str, factor| KindProfile {
        kind: name.into(),
        profile: scaled(&fallback, factor),
    };
    policy.add_model(ModelInfo {
        pages: RESNET_PAGES,
        profile: fallback.clone(),
        by_kind: vec![kind("fast", 2), kind("slow", 3)],
        devices: None,
    });
    policy.add_device(device("slow"));
    policy.add_device(device("other"));
    let kinds: Vec<usize> = ["fast", "slow", "other"]
        .iter()
        .map(|k| policy.kinds.iter().position(|n| n == k).unwrap())
        .collect();
    let model = &policy.models[0];
    for (b, &batch) in model.batches.iter().enumerate() {
        let base = fallback.latency(batch).unwrap();
        let seeds: Vec<Nanos> = kinds.iter().map(|&k| model.exec[k][b].get()).collect();
        assert_eq!(seeds, [2 * base, 3 * base, base], "batch {batch}");
    }
    let loads: Vec<Nanos> = kinds.iter().map(|&k| model.load[k].get()).collect();
    let base = fallback.load_latency;
    assert_eq!(loads, [2 * base, 3 * base, base]);
}

/// Whether request `id` of model 0 (100 ms objective) arriving at `at` is planned at
/// once (true) or refused (false): one of the two.
fn served(policy: &mut ClockworkPolicy, id: u64, at: Nanos) -> bool {
    let mut plan = Plan::default();
    policy.admit(request(id, 0, at, 100 * MS), at, &mut plan);
    policy.schedule(at, &mut plan);
    let refused = plan
        .answers
        .iter()
        .any(|a| a.request == RequestId(id) && matches!(a.verdict, Verdict::Refused(_)));
    let ran = plan.actions.iter().any(|a| {
        a.kind
            == ActionKind::Infer {
                requests: vec![RequestId(id)],
            }
    });
    assert!(refused != ran, "request {id}: one of refused or planned");
    ran
}

/// A slow spell raised the estimate past the objective: requests are refused while the
/// measurement is fresh, and served again (seeded from the profile) once it is older than
/// `estimate_max_age`, instead of being refused forever with nothing ever measured again.
#[test]
fn estimates_raised_by_a_slow_spell_do_not_refuse_forever() {
    let mut policy = policy(1, 100, 1);
    let now = warm(&mut policy);
    let mut plan = Plan::default();
    policy.admit(request(1, 0, now, 100 * MS), now, &mut plan);
    policy.schedule(now, &mut plan);
    let action = plan.actions[0].clone();
    let slow = 300 * MS;
    let outcome = Outcome {
        action: action.id,
        result: Ok(Measured {
            begin: now,
            end: now + slow,
            duration: slow,
        }),
    };
    let end = now + slow;
    policy.observe(outcome, end, &mut Plan::default());
    assert!(
        !served(&mut policy, 2, end + 10 * MS),
        "fresh 300 ms estimate"
    );
    let max_age = nanos(PolicyConfig::default().estimate_max_age);
    assert!(
        served(&mut policy, 3, end + max_age + MS),
        "an estimate not measured for longer than its maximum age gives way to the profile"
    );
}

/// Margins a slow spell left behind (40 reports that came back 150 ms after their runs:
/// a learned buffer wider than a 100 ms objective) refuse requests while fresh, and give
/// way to the configured lag and buffer once nothing has been learned for
/// `estimate_max_age`, instead of refusing forever with nothing ever run again.
/// (Mutation that breaks it: `refresh_margins` returning at once.)
#[test]
fn margins_raised_by_a_slow_spell_do_not_refuse_forever() {
    let mut policy = policy(1, 100, 1);
    let mut now = warm(&mut policy);
    let trip = 150 * MS;
    for id in 0..40 {
        let mut plan = Plan::default();
        policy.admit(request(id, 0, now, 10_000 * MS), now, &mut plan);
        policy.schedule(now, &mut plan);
        let action = plan.actions.pop().expect("an INFER planned at once");
        let begin = now.max(action.earliest);
        let end = begin + action.expected_duration;
        let measured = Measured {
            begin,
            end,
            duration: action.expected_duration,
        };
        let outcome = Outcome {
            action: action.id,
            result: Ok(measured),
        };
        now = end + trip;
        policy.observe(outcome, now, &mut Plan::default());
    }
    let (_, buffer) = policy.margins(DeviceId(0));
    assert!(buffer >= trip, "learned buffer {buffer}");
    assert!(!served(&mut policy, 100, now + 10 * MS), "fresh margins");
    let max_age = nanos(PolicyConfig::default().estimate_max_age);
    let later = now + max_age + MS;
    assert!(
        served(&mut policy, 101, later),
        "margins nothing taught for longer than estimate_max_age give way"
    );
    assert_eq!(
        policy.margins(DeviceId(0)).1,
        nanos(PolicyConfig::default().buffer)
    );
}

/// With `device_slowdown`, a device is planned at its own pace only beside a peer of its
/// kind: alone, its kind's windows are its own runs. Three runs in a row at 3 times the
/// batch's quickest (after ten at the quickest) slow a device with a peer that holds the
/// model too, and its kind learns them scaled back; the same runs leave a device alone of
/// its kind, or running a model its peer does not hold, or under the default (off),
/// planned by its window; its peer's leaving plans it as its kind again. Mutations that
/// break it: `measures_pace` without the count of peers; `shared_with_a_peer` always true.
#[test]
fn a_device_is_planned_at_its_own_pace_only_beside_a_peer() {
    let (model, batch) = (ModelId(0), 0);
    let three_slow_runs = |policy: &mut ClockworkPolicy| {
        // Held by both devices: its windows mix their runs.
        policy.models[0].ready_on = vec![DeviceId(0), DeviceId(1)];
        let quickest = policy.models[0].exec[0][batch].least();
        for _ in 0..10 {
            policy.learn_run(DeviceId(0), (model, batch), quickest);
        }
        for _ in 0..3 {
            policy.learn_run(DeviceId(0), (model, batch), 3 * quickest);
        }
        let slowdown = policy.devices[0].runs().slowdown.thousandths();
        (slowdown, policy.models[0].exec[0][batch].get() / quickest)
    };
    let paced = |devices| {
        let mut policy = policy(devices, 100, 1);
        policy.params.device_slowdown = true;
        policy
    };
    // A second device of another kind keeps the first alone of its own.
    let mut alone = paced(1);
    alone.add_device(DeviceInfo {
        kind: "a100".into(),
        pages: 100,
    });
    assert_eq!(
        three_slow_runs(&mut alone),
        (1_000, 3),
        "learned as measured"
    );
    let mut paired = paced(2);
    assert_eq!(
        three_slow_runs(&mut paired),
        (3_000, 1),
        "learned scaled back"
    );
    let mut unshared = paced(2);
    unshared.models[0].ready_on = vec![DeviceId(0)];
    let quickest = unshared.models[0].exec[0][batch].least();
    for took in [quickest; 10].into_iter().chain([3 * quickest; 3]) {
        unshared.learn_run(DeviceId(0), (model, batch), took);
    }
    assert_eq!(
        unshared.devices[0].runs().slowdown.thousandths(),
        1_000,
        "a model only it holds: its own runs are the window"
    );
    let mut by_default = policy(2, 100, 1);
    assert_eq!(
        three_slow_runs(&mut by_default),
        (1_000, 3),
        "off by default"
    );
    paired.remove_device(DeviceId(1), 0, &mut Plan::default());
    paired.learn_run(DeviceId(0), (model, batch), 10);
    assert_eq!(paired.devices[0].runs().slowdown.thousandths(), 1_000);
}
