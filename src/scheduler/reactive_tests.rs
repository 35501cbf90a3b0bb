//! The reactive baseline's unit tests.

use super::*;
use crate::model::{BatchLatency, ModelProfile};

const MS: Nanos = 1_000_000;

fn policy() -> ReactivePolicy {
    policy_on(1)
}

/// One model (2 pages, LOAD 7 ms, batch 1 in 3 ms) and `devices` devices of 10 pages:
/// also the Triton-like variant's fixture (`reactive_triton.rs`).
pub(super) fn policy_on(devices: usize) -> ReactivePolicy {
    let mut policy = ReactivePolicy::new(&PolicyConfig::default());
    let profile = ModelProfile {
        weight_bytes: 1,
        load_latency: 7 * MS,
        batches: vec![BatchLatency {
            batch: 1,
            latency: 3 * MS,
        }],
    };
    policy.add_model(ModelInfo {
        pages: 2,
        profile,
        by_kind: Vec::new(),
        devices: None,
    });
    for _ in 0..devices {
        policy.add_device(DeviceInfo {
            kind: "k".into(),
            pages: 10,
        });
    }
    policy
}

fn request(id: u64, now: Nanos) -> Request {
    Request {
        id: RequestId(id),
        model: ModelId(0),
        arrival: now,
        slo: 100 * MS,
        latest_finish: None,
        items: 1,
    }
}

#[test]
fn snapshot_reports_queues_pages_and_lane_free_times() {
    let mut policy = policy();
    let mut plan = Plan::default();
    let now = 10 * MS;
    policy.admit(request(1, now), now, &mut plan);
    policy.admit(request(2, now), now, &mut plan);
    policy.schedule(now, &mut plan);
    let load = plan.actions.pop().expect("a load on the miss");
    assert_eq!(load.kind, ActionKind::Load);
    let snap = policy.snapshot(now + MS);
    assert_eq!((snap.queued, snap.in_flight), (2, 1));
    let d = &snap.devices[0];
    assert_eq!((d.pages_used, d.pages, d.models), (2, 10, 1));
    assert_eq!(d.load_free_at, now + 7 * MS, "the load's profiled end");
    assert_eq!(d.exec_free_at, now + MS, "an idle lane is free now");

    let done = now + 7 * MS;
    let measured = crate::scheduler::Measured {
        begin: now,
        end: done,
        duration: 7 * MS,
    };
    let outcome = Outcome {
        action: load.id,
        result: Ok(measured),
    };
    policy.observe(outcome, done, &mut plan);
    policy.schedule(done, &mut plan);
    let snap = policy.snapshot(done);
    assert_eq!((snap.queued, snap.in_flight), (1, 1), "one request runs");
    assert_eq!(snap.devices[0].exec_free_at, done + 3 * MS);
    assert_eq!(snap.devices[0].load_free_at, done);
    // Overdue work is predicted to end now.
    assert_eq!(
        policy.snapshot(done + 9 * MS).devices[0].exec_free_at,
        done + 9 * MS
    );
}
