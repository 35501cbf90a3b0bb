//! Scenario tests of placement: replicas by measured rate, loading at start while memory
//! allows, and what a model wanted only by rate may evict. Driven directly, with a small
//! event loop that completes every action after its expected duration.

use super::tests::request;
use super::*;
use crate::model::{BatchLatency, ModelProfile};
use crate::time::MS;

/// A model like the issue's real one on a cpu device: 18 ms per request at batch 1, and a
/// LOAD (430 ms) far longer than the 100 ms objective.
fn slow_loading() -> ModelInfo {
    let batches = [(1, 18), (2, 30), (4, 55)]
        .into_iter()
        .map(|(batch, ms)| BatchLatency {
            batch,
            latency: ms * MS,
        })
        .collect();
    ModelInfo {
        pages: 7,
        profile: ModelProfile {
            weight_bytes: 7 << 24,
            load_latency: 430 * MS,
            batches,
        },
        by_kind: Vec::new(),
        devices: None,
    }
}

/// The policy and the actions it sent, each completed `expected_duration` after it could
/// start (its `earliest`, or when it was sent).
struct Drive {
    policy: ClockworkPolicy,
    /// (end, action) of actions not yet reported.
    running: Vec<(Nanos, Action)>,
    /// Every action planned, in order.
    sent: Vec<Action>,
    now: Nanos,
}

impl Drive {
    fn new(devices: &[u32], models: Vec<ModelInfo>) -> Self {
        // The tests' numbers are worked out at 70% (not the default, which may move).
        let config = PolicyConfig {
            target_utilisation: 0.7,
            ..PolicyConfig::default()
        };
        let mut policy = ClockworkPolicy::new(&config);
        for &pages in devices {
            policy.add_device(DeviceInfo {
                kind: "cpu".into(),
                pages,
            });
        }
        for model in models {
            policy.add_model(model);
        }
        Self {
            policy,
            running: Vec::new(),
            sent: Vec::new(),
            now: 0,
        }
    }

    fn take(&mut self, plan: Plan) {
        for action in plan.actions {
            let end = action.earliest.max(self.now) + action.expected_duration;
            self.running.push((end, action.clone()));
            self.sent.push(action);
        }
    }

    /// Reports everything that ends by `t`, in order, scheduling after each report.
    fn run_until(&mut self, t: Nanos) {
        loop {
            self.running.sort_by_key(|(end, a)| (*end, a.id));
            let Some(&(end, _)) = self.running.first().filter(|(end, _)| *end <= t) else {
                break;
            };
            let (_, action) = self.running.remove(0);
            self.now = self.now.max(end);
            let mut plan = Plan::default();
            let measured = Measured {
                begin: end - action.expected_duration,
                end,
                duration: action.expected_duration,
            };
            let outcome = Outcome {
                action: action.id,
                result: Ok(measured),
            };
            self.policy.observe(outcome, self.now, &mut plan);
            self.policy.schedule(self.now, &mut plan);
            self.take(plan);
        }
        self.now = self.now.max(t);
        let mut plan = Plan::default();
        self.policy.schedule(self.now, &mut plan);
        self.take(plan);
    }

    /// Admits a request for `model` at `t` (100 ms objective), after what ended before.
    fn arrive(&mut self, id: u64, model: u32, t: Nanos) {
        self.run_until(t);
        let mut plan = Plan::default();
        self.policy
            .admit(request(id, model, t, 100 * MS), t, &mut plan);
        self.policy.schedule(t, &mut plan);
        self.take(plan);
    }

    /// (device, model) of every action of `kind` sent so far.
    fn sent(&self, kind: &ActionKind) -> Vec<(u32, u32)> {
        self.sent
            .iter()
            .filter(|a| &a.kind == kind)
            .map(|a| (a.device.0, a.model.0))
            .collect()
    }
}

#[test]
fn a_hot_model_gets_a_second_replica_once_its_rate_needs_it() {
    let mut drive = Drive::new(&[64, 64], vec![slow_loading()]);
    drive.run_until(0);
    assert_eq!(drive.sent(&ActionKind::Load), [(0, 0)], "loaded at start");
    let load = drive.sent[0].expected_duration;
    assert!(load > 100 * MS, "the LOAD outlasts the objective");
    drive.run_until(load);
    // 50 requests per second of 18 ms: 0.9 of a device, 1.29 at 70% utilisation.
    let mut t = load;
    let mut second = None;
    for id in 0..150 {
        drive.arrive(id, 0, t);
        if second.is_none() && drive.sent(&ActionKind::Load).len() == 2 {
            second = Some(id);
        }
        t += 20 * MS;
    }
    assert_eq!(drive.sent(&ActionKind::Load), [(0, 0), (1, 0)]);
    // The need shows once the window holds more than 0.7 s / 18 ms = 39 per second.
    let after = second.expect("a second replica");
    assert!((60..=100).contains(&after), "loaded after request {after}");
    assert_eq!(drive.policy.snapshot(t).ready_replicas, [2]);
}

#[test]
fn registered_models_are_loaded_at_start_while_memory_allows() {
    // Room for one model per device; three models, one of which fits nowhere.
    let mut big = slow_loading();
    big.pages = 9;
    let models = vec![slow_loading(), slow_loading(), slow_loading(), big];
    let mut drive = Drive::new(&[8, 8], models);
    assert_eq!(drive.policy.snapshot(0).ready_replicas, [0, 0, 0, 0]);
    drive.run_until(0);
    assert_eq!(drive.sent(&ActionKind::Load), [(0, 0), (1, 1)], "spread");
    drive.run_until(2_000 * MS);
    assert_eq!(drive.sent(&ActionKind::Load).len(), 2, "no room left");
    assert!(
        drive.sent(&ActionKind::Unload).is_empty(),
        "never by eviction"
    );
    assert_eq!(
        drive.policy.snapshot(drive.now).ready_replicas,
        [1, 1, 0, 0]
    );
}

#[test]
fn a_model_wanted_by_rate_evicts_only_models_above_their_own_need() {
    // Model 0 hot; model 1 on the other device, which holds one model, with a little
    // traffic of its own (it needs its one replica).
    let mut drive = Drive::new(&[7, 7], vec![slow_loading(), slow_loading()]);
    drive.run_until(0);
    assert_eq!(drive.sent(&ActionKind::Load), [(0, 0), (1, 1)]);
    let mut t = 500 * MS;
    for id in 0..150 {
        drive.arrive(id, 0, t);
        if id.is_multiple_of(25) {
            drive.arrive(1_000 + id, 1, t);
        }
        t += 20 * MS;
    }
    assert!(
        drive.sent(&ActionKind::Unload).is_empty(),
        "model 1 still needs its replica"
    );
    // Model 1's traffic stops; once it leaves the window, model 0 takes its place.
    for id in 150..300 {
        drive.arrive(id, 0, t);
        t += 20 * MS;
    }
    assert_eq!(drive.sent(&ActionKind::Unload), [(1, 1)]);
    assert_eq!(drive.sent(&ActionKind::Load).last(), Some(&(1, 0)));
}

/// Memory short, a queued request for a cold model evicts by Clockwork's rules (idle
/// first, then least recently used, never a model with INFERs in flight), even a model
/// whose own rate needs its replica: real requests wait for this one.
#[test]
fn memory_short_keeps_clockwork_eviction_order() {
    let resnet = crate::gpu::profiles::model("resnet50", "r", 100 * MS).unwrap();
    let info = ModelInfo {
        pages: 7,
        profile: resnet.profile,
        by_kind: Vec::new(),
        devices: None,
    };
    // Room for two ResNet50s: models 0 and 1 are loaded at start, model 2 is not.
    let mut drive = Drive::new(&[14], vec![info.clone(), info.clone(), info]);
    drive.run_until(0);
    drive.run_until(100 * MS);
    assert_eq!(drive.sent(&ActionKind::Load), [(0, 0), (0, 1)]);
    // Model 0 used, then model 1 (the most recent).
    drive.arrive(1, 0, 100 * MS);
    drive.arrive(2, 1, 110 * MS);
    drive.run_until(120 * MS);
    // Model 0 busy again (a batch in flight) when model 2 is asked for: model 1 goes.
    // (At once: the device's last look, which found only model 2 wanted for preloading
    // and no room, does not hold back a load that requests wait for.)
    drive.arrive(3, 0, 120 * MS);
    drive.arrive(4, 2, 120 * MS);
    assert_eq!(drive.sent(&ActionKind::Unload), [(0, 1)]);
    assert_eq!(drive.sent(&ActionKind::Load).last(), Some(&(0, 2)));
    let snapshot = drive.policy.snapshot(drive.now);
    assert!(snapshot.devices[0].pages_used <= snapshot.devices[0].pages);
}

/// A planner's floor places replicas before any traffic (one per device up to the floor),
/// and while it holds they are not given up as surplus; removing it lets them go again
/// only when something needs the room.
#[test]
fn a_replica_floor_loads_ahead_of_traffic_and_holds() {
    let mut drive = Drive::new(&[64, 64, 64], vec![slow_loading()]);
    drive.run_until(0);
    assert_eq!(drive.sent(&ActionKind::Load), [(0, 0)], "preloaded once");
    drive.policy.set_replica_floor(ModelId(0), 3);
    drive.run_until(MS);
    let mut devices: Vec<u32> = drive
        .sent(&ActionKind::Load)
        .iter()
        .map(|&(d, _)| d)
        .collect();
    devices.sort_unstable();
    assert_eq!(
        devices,
        [0, 1, 2],
        "no request has come: the floor alone asks"
    );
    drive.run_until(SECOND_AND_A_HALF);
    assert!(!drive.policy.surplus(ModelId(0)), "held by the floor");
    drive.policy.set_replica_floor(ModelId(0), 0);
    assert!(
        drive.policy.surplus(ModelId(0)),
        "no traffic, no floor: surplus"
    );
}

const SECOND_AND_A_HALF: Nanos = 1500 * MS;
