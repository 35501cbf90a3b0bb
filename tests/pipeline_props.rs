//! Property tests of pipelines on the scheduler's testbed: the Clockwork policy in virtual
//! time, with a harness that drives one `pipeline::run::Run` per root request over random
//! trees of stages, fan-outs (one, rows, threshold) with random row counts, and arrival
//! streams. Every root gets exactly one answer; no batch is planned for a root already
//! answered with a refusal (its queued siblings are withdrawn and use no device time);
//! with exact estimates no root is answered after its end-to-end deadline.

mod pipeline_support;

use std::sync::Arc;

use clockwork::config::PolicyConfig;
use clockwork::pipeline::budget::Proportional;
use clockwork::scheduler::ClockworkPolicy;
use clockwork::slopt::systems::{DropRule, System};
use pipeline_support::{check, check_system, check_with, run_system, scenario, Scenario};
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Mutations that break it: `Run::on_answer` not listing the outstanding siblings in
    /// `withdraw`, or `ClockworkPolicy::withdraw` leaving the request queued (either way a
    /// sibling is planned after its root was refused).
    #[test]
    fn every_root_one_answer_and_no_work_after_a_refusal(s in scenario()) {
        check(&s, 1.3)?;
    }

    /// Mutation that breaks it: `Proportional::stage_deadline` not capped at the root
    /// deadline and given `now + left * 2` (stages plan past the root's deadline).
    #[test]
    fn exact_estimates_answer_no_root_after_its_deadline(s in scenario()) {
        let harness = check(&s, 1.0)?;
        for (root, (at, _, deadline)) in &harness.answers {
            prop_assert!(at <= deadline, "root {} answered at {} after its deadline {}", root, at, deadline);
        }
    }

    /// The same promises with the earliest-stage drop (each root's first stage judged by
    /// the policy's views of the stages below): one answer per root, no work after a
    /// refusal, and with exact estimates no root late.
    /// Mutation that breaks it: `bounds` in `clockwork/admit.rs` taking the latest finish
    /// without the cap `deadline.min(finish)` and as `finish + buffer` (a sub-request is
    /// served past what its root can afford: roots late).
    #[test]
    fn with_backlog_no_root_late_and_one_answer_each(s in scenario()) {
        let harness = check_with(&s, 1.0, true)?;
        for (root, (at, _, deadline)) in &harness.answers {
            prop_assert!(at <= deadline, "root {} answered at {} after its deadline {}", root, at, deadline);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Every system of `simulate --pipeline` (its policy, split and drop rule): one
    /// answer per root and no stage work for a root already refused; with exact
    /// estimates no root late, except with `triton-like`, a baseline with no deadline
    /// planning (its only drop is a timeout); with the stage-deadline drop no sub-request
    /// served past its stage's deadline.
    /// Mutations that break it: `DropRule::downstream` giving `StageDeadline` the R_v of
    /// the adaptive drop (sub-requests kept past their stage deadlines); the Triton-like
    /// `time_out` dropping a request without answering it (a root unanswered).
    #[test]
    fn every_system_one_answer_per_root_and_none_late_where_promised(s in scenario()) {
        for system in System::ALL {
            let harness = check_system(&s, 1.0, system)?;
            if system == System::TritonLike {
                continue;
            }
            if system.parts().drop == DropRule::StageDeadline {
                prop_assert_eq!(harness.late_subs, 0, "{}: sub-requests past their stage deadline", system);
            }
            for (root, (at, _, deadline)) in &harness.answers {
                prop_assert!(at <= deadline, "{}: root {} answered at {} after its deadline {}", system, root, at, deadline);
            }
        }
    }
}

/// A two-stage cascade on one device: a 3 ms first stage whose answers fan out to 0..=3
/// requests of a 1.5 ms second stage, roots at about 1.5 times what the device serves,
/// 40 ms objectives.
fn overloaded() -> Scenario {
    Scenario {
        tree: vec![(0, 1)],
        latency: vec![3_000, 1_500],
        max_rows: 3,
        roots: vec![(1_500, 40); 800],
        devices: 1,
    }
}

/// (roots answered in time, roots refused, refused roots some stage had already worked
/// for) of an overloaded two-stage cascade on one device: a 3 ms first stage whose
/// answers fan out to 0..=3 requests of a 1.5 ms second stage, roots at about 1.5 times
/// what the device serves, 40 ms objectives, exact estimates.
fn overloaded_cascade(backlog: bool) -> (usize, usize, usize) {
    let s = overloaded();
    let harness = check_with(&s, 1.0, backlog).expect("bookkeeping holds");
    let refused: Vec<u64> = harness
        .answers
        .iter()
        .filter(|(_, a)| a.1)
        .map(|(&r, _)| r)
        .collect();
    let wasted = refused
        .iter()
        .filter(|r| harness.worked.contains(r))
        .count();
    let in_time = harness
        .answers
        .values()
        .filter(|(at, refused, deadline)| !refused && at <= deadline)
        .count();
    (in_time, refused.len(), wasted)
}

/// The stage-deadline drop (`nexus-like`, `slopt-nodrop`, ...) serves no sub-request past
/// its stage's deadline, where the adaptive drop keeps some past it (they can still make
/// their root): on the overloaded cascade, exact estimates.
/// Mutation that breaks it: `DropRule::downstream` giving `StageDeadline` the adaptive
/// drop's R_v.
#[test]
fn the_stage_deadline_drop_keeps_to_stage_deadlines() {
    let s = overloaded();
    let late = |drop| {
        let policy = ClockworkPolicy::new(&PolicyConfig::default());
        let harness =
            run_system(&s, 1.0, policy, Arc::new(Proportional), drop).expect("bookkeeping holds");
        harness.late_subs
    };
    let adaptive = late(DropRule::Adaptive { earliest: false });
    assert!(
        adaptive > 0,
        "the adaptive drop kept none past its stage deadline"
    );
    assert_eq!(late(DropRule::StageDeadline), 0);
}

/// Earliest-stage drop: under overload, judging a root's first stage by the queues below
/// it refuses more roots before any stage works for them, where judging it by batch-1
/// estimates alone refuses every one after the first stage ran (its work wasted, and
/// taken from the roots that could have made it), and no fewer roots make it.
///
/// Mutation that breaks it: `Run::with_costs` ignoring its costs (R_v from batch-1
/// estimates alone): the wasted share rises to that of the run without backlog.
#[test]
fn overload_refuses_roots_before_their_first_stage_runs() {
    let (ok_before, refused_before, wasted_before) = overloaded_cascade(false);
    let (ok, refused, wasted) = overloaded_cascade(true);
    eprintln!(
        "without backlog: {ok_before} in time, {refused_before} refused, {wasted_before} after work; \
         with: {ok} in time, {refused} refused, {wasted} after work"
    );
    assert!(refused > 0, "the cascade is overloaded");
    // Not every one: the projections count each model's queue alone, so where stages
    // share devices they are optimistic (see docs/EXPERIMENTS.md, "Adaptive batch drop").
    assert!(
        wasted * 10 < wasted_before * 9,
        "{wasted} of {refused} refused roots had stage work spent on them, against \
         {wasted_before} of {refused_before} without"
    );
    assert!(ok >= ok_before, "{ok} roots in time against {ok_before}");
}
