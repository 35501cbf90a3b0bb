use proptest::prelude::*;

use super::*;
use crate::pipeline::budget::Proportional;
use crate::pipeline::Stage;
use crate::slopt::tuning::Tuning;
use crate::time::MS;

fn profile() -> Vec<BatchLatency> {
    (1..=16)
        .map(|b| BatchLatency {
            batch: b,
            latency: 10 * MS + Nanos::from(b) * MS,
        })
        .collect()
}

fn planner() -> Planner {
    let stages = vec![(None, profile()), (Some(0), profile())];
    Planner::new(PlannerConfig::default(), 200 * MS, stages)
}

#[test]
fn re_solves_every_second_or_when_a_rate_moves_past_ten_percent() {
    let mut p = planner();
    assert!(p.observe(0, &[100.0, 400.0]).unwrap().is_some());
    // 9% later, within the second: the plan stands.
    assert!(p.observe(500 * MS, &[109.0, 400.0]).unwrap().is_none());
    // 11% at once.
    assert!(p.observe(600 * MS, &[100.0, 445.0]).unwrap().is_some());
    // A second after the last solve, whatever the rates.
    assert!(p.observe(1500 * MS, &[100.0, 445.0]).unwrap().is_none());
    assert!(p.observe(1600 * MS, &[100.0, 445.0]).unwrap().is_some());
}

#[test]
fn replicas_rise_at_once_and_fall_after_thirty_seconds() {
    let mut p = planner();
    p.observe(0, &[100.0, 3000.0]).unwrap();
    let high = p.targets()[1];
    p.observe(SECOND, &[100.0, 300.0]).unwrap();
    let low = p.plan().unwrap().stages[1].replicas;
    assert!(low < high);
    p.observe(30 * SECOND, &[100.0, 300.0]).unwrap();
    assert_eq!(p.targets()[1], high, "29 s at the lower target");
    p.observe(31 * SECOND, &[100.0, 300.0]).unwrap();
    assert_eq!(p.targets()[1], low);
    p.observe(32 * SECOND, &[100.0, 3000.0]).unwrap();
    assert_eq!(p.targets()[1], high);
}

fn stage(parent: Option<usize>, children: Vec<usize>, single: Nanos) -> Stage {
    crate::pipeline::test_stage("s", parent, children, single)
}

fn pipeline() -> Pipeline {
    Pipeline {
        name: "p".into(),
        slo: 100 * MS,
        partial_results: false,
        budget: crate::pipeline::BudgetKind::Even,
        inputs: vec![],
        outputs: vec![],
        stages: vec![
            stage(None, vec![1, 2], 10 * MS),
            stage(Some(0), vec![], 30 * MS),
            stage(Some(0), vec![], 10 * MS),
        ],
    }
}

#[test]
fn the_tuned_budget_follows_the_plan() {
    let p = pipeline();
    let budget = TunedBudget::new(&p);
    // Before a plan it is the even split.
    for (stage, now) in [(0, 0), (1, 20 * MS), (2, 40 * MS)] {
        assert_eq!(
            budget.stage_deadline(&p, stage, now, 100 * MS),
            Proportional.stage_deadline(&p, stage, now, 100 * MS)
        );
    }
    let plan = |budgets: [Nanos; 3]| Plan {
        stages: budgets
            .iter()
            .map(|&budget| super::super::tune::StagePlan {
                budget,
                batch: 1,
                replicas: 1,
            })
            .collect(),
    };
    budget.set(&plan([60 * MS, 40 * MS, 40 * MS]));
    assert_eq!(budget.stage_deadline(&p, 0, 0, 100 * MS), 60 * MS);
    // Upstream ran short: the stage gets all that is left on its path.
    assert_eq!(budget.stage_deadline(&p, 1, 30 * MS, 100 * MS), 100 * MS);
}

proptest! {
    /// A tuned stage deadline is never past the root's nor before `now`.
    /// Mutation that breaks it: `.min(root_deadline)` dropped from `split` (a stage of
    /// made after the root's deadline then gets `now`, past it).
    #[test]
    fn never_past_the_root(
        budgets in proptest::collection::vec(0u64..100, 3),
        stage in 0usize..3,
        now in 0u64..200,
        deadline in 0u64..200,
    ) {
        let p = pipeline();
        let b = TunedBudget::new(&p);
        b.set(&Plan { stages: budgets.iter().map(|&x| super::super::tune::StagePlan {
            budget: x * MS, batch: 1, replicas: 1 }).collect() });
        let d = b.stage_deadline(&p, stage, now * MS, deadline * MS);
        prop_assert!(d <= deadline * MS);
    }
}

#[test]
fn tuning_plans_from_root_arrivals() {
    let p = pipeline();
    let mut t = Tuning::new(&p, vec![profile(), profile(), profile()]);
    for i in 0..200 {
        t.on_root(i * 5 * MS).unwrap();
    }
    let plan = t.planner().plan().unwrap();
    assert_eq!(plan.stages.len(), 3);
    assert!(t.planner().targets().iter().all(|&n| n >= 1));
}
