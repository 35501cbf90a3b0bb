//! Scenario tests of the Clockwork policy, driven directly (no testbed) so each decision
//! can be inspected.

use super::*;
use crate::gpu::profiles;
use crate::model::RequestId;
use crate::scheduler::view::{judge, Admission, Due};
use crate::scheduler::Refusal;
use crate::time::MS;

mod estimates;

const RESNET_PAGES: u32 = 7;

/// A policy with `devices` V100-like devices of `pages` pages and `models` ResNet50s.
fn policy(devices: usize, pages: u32, models: usize) -> ClockworkPolicy {
    let mut policy = ClockworkPolicy::new(&PolicyConfig::default());
    for _ in 0..devices {
        policy.add_device(DeviceInfo {
            kind: "v100".into(),
            pages,
        });
    }
    let spec = profiles::model("resnet50", "r", 100 * MS).unwrap();
    for _ in 0..models {
        policy.add_model(ModelInfo {
            pages: RESNET_PAGES,
            profile: spec.profile.clone(),
            by_kind: Vec::new(),
            devices: None,
        });
    }
    policy
}

pub(super) fn request(id: u64, model: u32, arrival: Nanos, slo: Nanos) -> Request {
    Request {
        id: RequestId(id),
        model: ModelId(model),
        arrival,
        slo,
        latest_finish: None,
        items: 1,
    }
}

/// Reports success of every action in the plan, each taking its expected duration from
/// `now`, and returns the plan of the reports.
fn complete_all(policy: &mut ClockworkPolicy, plan: &Plan, now: Nanos) -> Plan {
    let mut next = Plan::default();
    for action in &plan.actions {
        let measured = Measured {
            begin: now,
            end: now + action.expected_duration,
            duration: action.expected_duration,
        };
        let outcome = Outcome {
            action: action.id,
            result: Ok(measured),
        };
        policy.observe(outcome, now + action.expected_duration, &mut next);
    }
    next
}

/// Loads model 0 on device 0 and returns the time the load finished.
fn warm(policy: &mut ClockworkPolicy) -> Nanos {
    let mut plan = Plan::default();
    policy.admit(request(1000, 0, 0, 100 * MS), 0, &mut plan);
    policy.schedule(0, &mut plan);
    assert_eq!(plan.actions.len(), 1);
    assert_eq!(plan.actions[0].kind, ActionKind::Load);
    let after = complete_all(policy, &plan, 0);
    assert!(after.answers.is_empty());
    let ready = plan.actions[0].expected_duration;
    let mut infer = Plan::default();
    policy.schedule(ready, &mut infer);
    let done = complete_all(policy, &infer, ready);
    assert_eq!(
        done.answers.len(),
        1,
        "the request that caused the load is served"
    );
    ready + infer.actions[0].expected_duration
}

/// Unknown model names are the controller's to refuse (`tests/shutdown.rs`);
/// an id the policy was never given is a broken invariant, not a refusal it decides.
#[test]
#[should_panic]
fn a_model_never_added_is_a_broken_invariant() {
    let mut policy = policy(1, 100, 1);
    let mut plan = Plan::default();
    policy.admit(request(1, 5, 0, 100 * MS), 0, &mut plan);
}

#[test]
fn a_queue_forms_the_largest_batch_it_can_fill() {
    let mut policy = policy(1, 100, 1);
    let now = warm(&mut policy);
    let mut plan = Plan::default();
    for id in 0..11 {
        policy.admit(request(id, 0, now, 100 * MS), now, &mut plan);
    }
    policy.schedule(now, &mut plan);
    let batches: Vec<usize> = plan
        .actions
        .iter()
        .map(|a| match &a.kind {
            ActionKind::Infer { requests } => requests.len(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(batches[0], 8, "11 queued: the largest allowed batch is 8");
    assert!(plan.actions.iter().all(|a| a.latest >= a.earliest));
}

/// Runs the plan's actions one after another on one lane, from `free` (each from its
/// `earliest` at the soonest, for its expected duration), reports each at its end, and
/// returns the reports' plan and when the lane is free again.
fn complete_in_order(policy: &mut ClockworkPolicy, plan: &Plan, mut free: Nanos) -> (Plan, Nanos) {
    let mut next = Plan::default();
    for action in &plan.actions {
        let begin = free.max(action.earliest);
        free = begin + action.expected_duration;
        let measured = Measured {
            begin,
            end: free,
            duration: action.expected_duration,
        };
        let outcome = Outcome {
            action: action.id,
            result: Ok(measured),
        };
        policy.observe(outcome, free, &mut next);
    }
    (next, free)
}

#[test]
fn a_request_that_cannot_finish_is_refused_when_its_turn_comes() {
    let mut policy = policy(1, 100, 1);
    let now = warm(&mut policy);
    let mut plan = Plan::default();
    // 10 ms objective: the internal deadline (objective less the buffer, at least
    // schedule-ahead plus buffer) is 10 ms. A batch of 4 (5.88 ms) then one of 1 (2.73 ms)
    // end at 8.61 ms; when the lane reaches the other three, even one more (2.73 ms) would
    // end past 10 ms, so they are refused then, not run late or left to time out.
    for id in 0..8 {
        policy.admit(request(id, 0, now, 10 * MS), now, &mut plan);
    }
    policy.schedule(now, &mut plan);
    let (mut t, mut answers) = (now, Vec::new());
    for _ in 0..100 {
        answers.append(&mut plan.answers);
        if plan.actions.is_empty() && policy.queued == 0 {
            break;
        }
        let (mut reports, free) = complete_in_order(&mut policy, &plan, t);
        answers.append(&mut reports.answers);
        // With nothing in flight, time moves on by a millisecond (for expiries).
        t = if plan.actions.is_empty() {
            t + MS
        } else {
            free
        };
        plan.clear();
        policy.schedule(t, &mut plan);
    }
    answers.sort_by_key(|a| a.request);
    let verdicts: Vec<(u64, Verdict)> = answers
        .into_iter()
        .map(|a| (a.request.0, a.verdict))
        .collect();
    let done = |action| Verdict::Completed {
        action: ActionId(action),
        late: false,
    };
    let refused = Verdict::Refused(Refusal::DeadlineUnreachable);
    let first = done(3); // warm() used actions 1 and 2
    assert_eq!(
        verdicts,
        [
            (0, first.clone()),
            (1, first.clone()),
            (2, first.clone()),
            (3, first),
            (4, done(4)),
            (5, refused.clone()),
            (6, refused.clone()),
            (7, refused),
        ]
    );
}

#[test]
fn a_request_that_no_load_can_serve_in_time_is_refused_at_once() {
    let mut policy = policy(1, 100, 1);
    let mut plan = Plan::default();
    // 5 ms objective: the load alone takes 8.31 ms and nobody holds the model.
    policy.admit(request(1, 0, 0, 5 * MS), 0, &mut plan);
    assert_eq!(plan.answers.len(), 1);
    assert_eq!(
        plan.answers[0].verdict,
        Verdict::Refused(Refusal::DeadlineUnreachable)
    );
    // The miss still asks for a load, for the requests that follow.
    policy.schedule(0, &mut plan);
    assert_eq!(plan.actions.len(), 1);
    assert_eq!(plan.actions[0].kind, ActionKind::Load);
    let loaded = complete_all(&mut policy, &plan, 0);
    assert!(loaded.answers.is_empty());
    let ready = plan.actions[0].expected_duration;
    let mut next = Plan::default();
    policy.admit(request(2, 0, ready, 5 * MS), ready, &mut next);
    policy.schedule(ready, &mut next);
    assert!(next.answers.is_empty(), "now warm: admitted");
    assert!(matches!(next.actions[0].kind, ActionKind::Infer { .. }));
}

#[test]
fn a_waiting_request_times_out_as_soon_as_it_is_hopeless() {
    let mut policy = policy(1, 100, 1);
    let now = warm(&mut policy);
    let mut plan = Plan::default();
    // 20 ms objective: internal deadline 15 ms after arrival, hopeless 2.73 ms before.
    policy.admit(request(1, 0, now, 20 * MS), now, &mut plan);
    let hopeless = now + 15 * MS - 2_730_000 + 1;
    let wake = policy.next_wakeup(now).expect("an expiry is armed");
    assert!(wake <= hopeless, "wakes by {hopeless}, not {wake}");
    // Nobody scheduled it (say every device was busy) until it was hopeless.
    policy.schedule(hopeless, &mut plan);
    assert_eq!(plan.answers.len(), 1);
    assert_eq!(plan.answers[0].verdict, Verdict::Refused(Refusal::TimedOut));
    assert!(plan.actions.is_empty());
}

#[test]
fn tight_objectives_never_plan_past_the_deadline() {
    let mut policy = policy(1, 100, 1);
    let now = warm(&mut policy);
    let mut plan = Plan::default();
    // Below schedule-ahead + 2 x buffer: the whole objective is the internal deadline,
    // and the action's latest start still finishes inside it.
    policy.admit(request(1, 0, now, 6 * MS), now, &mut plan);
    policy.schedule(now, &mut plan);
    let action = &plan.actions[0];
    assert!(
        action.latest + action.expected_duration <= now + 6 * MS,
        "{action:?}"
    );
}

/// Under a burst, the request the queue ahead of it cannot drain in time is refused in
/// the plan of its own arrival, the edge's view projected exactly that (and the edge's
/// rule, `judge`, with its objective, refuses exactly it), and every request admitted
/// before it is then served in time (exact durations). Mutation that breaks it: the view
/// without the policy's buffer (the edge admits what the policy refuses).
#[test]
fn a_request_the_queue_cannot_drain_in_time_is_refused_on_arrival() {
    let mut policy = policy(1, 100, 1);
    let now = warm(&mut policy);
    // 100 ms objective: internal deadline 95 ms after arrival.
    let internal = now + 95 * MS;
    let due = Due {
        arrival: now,
        deadline: now + 100 * MS,
    };
    let mut admitted = 0;
    let refused = loop {
        assert!(
            admitted < 1000,
            "a burst of 1000 at once must overflow 95 ms"
        );
        let view = policy.view(ModelId(0), now).expect("the model is known");
        let edge = judge(Some(&view), now, 0, due);
        let mut plan = Plan::default();
        policy.admit(request(admitted, 0, now, 100 * MS), now, &mut plan);
        if let Some(answer) = plan.answers.pop() {
            assert!(view.finish > internal, "the view projected it: {view:?}");
            assert!(matches!(edge, Admission::Refuse { .. }), "{view:?}");
            break answer;
        }
        assert!(
            view.finish <= internal,
            "the view agreed to admit it: {view:?}"
        );
        assert_eq!(edge, Admission::Admit, "{view:?}");
        admitted += 1;
    };
    assert!(admitted > 16, "more than one batch fits 95 ms: {admitted}");
    assert_eq!(refused.request, RequestId(admitted));
    assert_eq!(
        refused.verdict,
        Verdict::Refused(Refusal::DeadlineUnreachable)
    );
    // Drain: everything admitted completes, none late, nothing refused later.
    let mut plan = Plan::default();
    policy.schedule(now, &mut plan);
    let (mut t, mut completed) = (now, 0);
    while !plan.actions.is_empty() {
        let (reports, free) = complete_in_order(&mut policy, &plan, t);
        for answer in &reports.answers {
            assert!(
                matches!(answer.verdict, Verdict::Completed { late: false, .. }),
                "{answer:?}"
            );
            completed += 1;
        }
        t = free;
        plan.clear();
        policy.schedule(t, &mut plan);
        assert!(plan.answers.is_empty(), "{:?}", plan.answers);
    }
    assert_eq!(completed, admitted);
}

/// A pipeline sub-request: objective `slo` (its stage's share), latest useful finish
/// `latest` (its root's deadline less what the stages after it need).
fn sub_request(id: u64, now: Nanos, slo: Nanos, latest: Nanos) -> Request {
    Request {
        latest_finish: Some(latest),
        items: 1,
        ..request(id, 0, now, slo)
    }
}

fn infers(plan: &Plan) -> Vec<Vec<RequestId>> {
    let infer = |a: &Action| match &a.kind {
        ActionKind::Infer { requests } => Some(requests.clone()),
        _ => None,
    };
    plan.actions.iter().filter_map(infer).collect()
}

/// Adaptive batch drop: past its stage's deadline a sub-request is still served while
/// its root can make it; a batch leaves out (defers, does not drop) the one it would
/// finish too late for. Mutation that breaks it: `bounds` in `admit.rs` ignoring
/// `latest_finish` (the first request is refused at arrival).
#[test]
fn a_sub_request_is_served_by_its_latest_finish_and_deferred_by_a_larger_batch() {
    let mut policy = policy(1, 100, 1);
    let now = warm(&mut policy);
    let mut plan = Plan::default();
    // A 3 ms share (batch 1 takes 2.73 ms after a 1 ms lag), 20 ms left for its root.
    policy.admit(sub_request(1, now, 3 * MS, now + 20 * MS), now, &mut plan);
    policy.schedule(now, &mut plan);
    assert!(plan.answers.is_empty(), "{:?}", plan.answers);
    assert_eq!(infers(&plan), vec![vec![RequestId(1)]]);
    let now = now + 20 * MS;
    complete_all(&mut policy, &plan, now);
    // Eight requests with time to spare and one that only a batch of at most 4
    // (5.88 ms) finishes by its latest finish (12 ms away, less the 5 ms buffer).
    let mut plan = Plan::default();
    for id in 10..18 {
        policy.admit(request(id, 0, now, 100 * MS), now, &mut plan);
    }
    policy.admit(sub_request(2, now, 3 * MS, now + 12 * MS), now, &mut plan);
    policy.schedule(now, &mut plan);
    let batches = infers(&plan);
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].len(), 8);
    assert!(!batches[0].contains(&RequestId(2)));
    assert!(plan.answers.is_empty(), "deferred, not dropped");
}
