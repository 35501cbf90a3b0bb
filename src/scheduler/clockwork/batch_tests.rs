//! Batch choice where larger batches are no cheaper per request (a cpu device): the most
//! urgent request is not left behind for them.

use super::tests::request;
use super::*;
use crate::model::{BatchLatency, ModelProfile};
use crate::time::MS;

/// A model whose batch of b takes b times its batch of 1 (10 ms), loaded on one device.
fn linear() -> (ClockworkPolicy, Nanos) {
    let mut policy = ClockworkPolicy::new(&PolicyConfig::default());
    policy.add_device(DeviceInfo {
        kind: "cpu".into(),
        pages: 64,
    });
    let batches = [1u32, 2, 4]
        .into_iter()
        .map(|batch| BatchLatency {
            batch,
            latency: u64::from(batch) * 10 * MS,
        })
        .collect();
    policy.add_model(ModelInfo {
        pages: 1,
        profile: ModelProfile {
            weight_bytes: 1 << 20,
            load_latency: MS,
            batches,
        },
        by_kind: Vec::new(),
        devices: None,
    });
    // Preloaded at start: report the LOAD done.
    let mut plan = Plan::default();
    policy.schedule(0, &mut plan);
    let load = plan.actions.pop().expect("a LOAD at start");
    let end = load.earliest + load.expected_duration;
    let outcome = Outcome {
        action: load.id,
        result: Ok(Measured {
            begin: load.earliest,
            end,
            duration: load.expected_duration,
        }),
    };
    policy.observe(outcome, end, &mut Plan::default());
    (policy, end)
}

#[test]
fn a_batch_no_cheaper_per_request_does_not_leave_the_most_urgent_behind() {
    let (mut policy, now) = linear();
    let mut plan = Plan::default();
    // The first request has 30 ms left (internal deadline: 35 ms objective less the 5 ms
    // buffer): a batch of 1 (10 ms) serves it, the batch of 4 (40 ms) would not. Four
    // more with ample time fill that batch of 4 without it.
    policy.admit(request(0, 0, now, 35 * MS), now, &mut plan);
    for id in 1..5 {
        policy.admit(request(id, 0, now, 500 * MS), now, &mut plan);
    }
    assert!(plan.answers.is_empty(), "all admitted: {:?}", plan.answers);
    policy.schedule(now, &mut plan);
    let Some(ActionKind::Infer { requests }) = plan.actions.first().map(|a| &a.kind) else {
        panic!("an INFER first: {:?}", plan.actions);
    };
    assert!(
        requests.contains(&RequestId(0)),
        "the urgent request is in the first batch: {requests:?}"
    );
}

fn items(id: u64, now: Nanos, slo: Nanos, items: u32) -> Request {
    Request {
        items,
        ..request(id, 0, now, slo)
    }
}

#[test]
fn a_request_of_several_items_runs_whole_in_the_batch_that_holds_it() {
    let (mut policy, now) = linear();
    let mut plan = Plan::default();
    // 3 + 3 + 1 items: a batch of 4 holds one request of 3 whole and the 1 beside it;
    // the other 3 wait (never split over two batches).
    policy.admit(items(0, now, 500 * MS, 3), now, &mut plan);
    policy.admit(items(1, now, 500 * MS, 3), now, &mut plan);
    policy.admit(items(2, now, 500 * MS, 1), now, &mut plan);
    assert!(plan.answers.is_empty(), "all admitted: {:?}", plan.answers);
    policy.schedule(now, &mut plan);
    let batches: Vec<(Vec<RequestId>, Nanos)> = plan
        .actions
        .iter()
        .filter_map(|a| match &a.kind {
            ActionKind::Infer { requests } => Some((requests.clone(), a.expected_duration)),
            _ => None,
        })
        .collect();
    let first = (vec![RequestId(0), RequestId(2)], 40 * MS);
    assert_eq!(batches.first(), Some(&first), "{batches:?}");
    assert_eq!(
        policy.snapshot(now).queued,
        1,
        "the other waits for the next batch"
    );
}

#[test]
fn more_items_than_the_largest_batch_are_refused_at_once() {
    let (mut policy, now) = linear();
    assert_eq!(policy.max_items(ModelId(0)), 4);
    let mut plan = Plan::default();
    policy.admit(items(0, now, 500 * MS, 5), now, &mut plan);
    let refused = Verdict::Refused(Refusal::DeadlineUnreachable);
    assert_eq!(plan.answers.first().map(|a| &a.verdict), Some(&refused));
}
