//! How a root request's end-to-end objective becomes stage deadlines.
//!
//! This rule ([`Proportional`]): when a stage's requests are made, the time left
//! until the root's deadline is split over the longest path of stages still to run from
//! that stage down, in proportion to their batch-1 estimates; the stage gets its share.
//! At the root this is the whole objective split along the pipeline's longest path; a
//! stage whose upstream ran long or short gets the share of what is really left. No stage
//! deadline is ever past the root's. The planning of the next issue (cascade workload
//! estimation, ahead-of-time tuning) replaces it through [`Budget`].

use super::Pipeline;
use crate::time::Nanos;

/// The seam: when a stage's requests, made at `now`, must be answered.
pub trait Budget: Send + Sync {
    /// The stage deadline of `stage`'s requests made at `now` for a root due at
    /// `root_deadline`. Never past `root_deadline`.
    fn stage_deadline(
        &self,
        pipeline: &Pipeline,
        stage: usize,
        now: Nanos,
        root_deadline: Nanos,
    ) -> Nanos;
}

/// The split in proportion to the batch-1 estimates along the longest remaining path.
#[derive(Clone, Copy, Debug, Default)]
pub struct Proportional;

impl Budget for Proportional {
    fn stage_deadline(
        &self,
        pipeline: &Pipeline,
        stage: usize,
        now: Nanos,
        root_deadline: Nanos,
    ) -> Nanos {
        split(pipeline, stage, now, root_deadline, |v| {
            pipeline.stages[v].single
        })
    }
}

/// The one split rule, for any weights: `stage` gets of the time left its weight's share
/// of the heaviest path from it down (itself included), capped at the root's deadline.
/// [`Proportional`] weighs by batch-1 estimates; SLOpt's tuned budget by planned budgets.
pub fn split(
    pipeline: &Pipeline,
    stage: usize,
    now: Nanos,
    root_deadline: Nanos,
    weight: impl Fn(usize) -> Nanos,
) -> Nanos {
    let left = root_deadline.saturating_sub(now);
    let path = heaviest_from(pipeline, stage, &weight);
    let own = weight(stage);
    let share = if path == 0 {
        left
    } else {
        (u128::from(left) * u128::from(own) / u128::from(path)) as Nanos
    };
    now.saturating_add(share).min(root_deadline)
}

fn heaviest_from(pipeline: &Pipeline, stage: usize, weight: &impl Fn(usize) -> Nanos) -> Nanos {
    let below = pipeline.stages[stage]
        .children
        .iter()
        .map(|&c| heaviest_from(pipeline, c, weight))
        .max()
        .unwrap_or(0);
    weight(stage).saturating_add(below)
}

/// Sum of the batch-1 estimates along the longest path from `stage` (inclusive) down.
pub fn longest_from(pipeline: &Pipeline, stage: usize) -> Nanos {
    pipeline.stages[stage]
        .single
        .saturating_add(downstream(pipeline, stage, &|s| pipeline.stages[s].single))
}

/// R_v: the least time still needed after `stage` on its longest downstream path, each
/// stage below costing `cost(stage)` (its batch-1 estimate, or more where its queue is
/// known to be longer); 0 at a leaf. A request of `stage` that cannot finish by the root
/// deadline less this cannot make its root in time (adaptive batch drop, issue 13).
pub fn downstream(pipeline: &Pipeline, stage: usize, cost: &dyn Fn(usize) -> Nanos) -> Nanos {
    pipeline.stages[stage]
        .children
        .iter()
        .map(|&c| cost(c).saturating_add(downstream(pipeline, c, cost)))
        .max()
        .unwrap_or(0)
}

/// The projected waits of every stage below `stage` added up (`cost`), for the
/// earliest-stage drop: the stages of a pipeline share devices, so the queues below a
/// root drain one after another on them, not side by side as the longest path assumes.
pub fn queued_below(pipeline: &Pipeline, stage: usize, cost: &dyn Fn(usize) -> Nanos) -> Nanos {
    pipeline.stages[stage]
        .children
        .iter()
        .map(|&c| cost(c).saturating_add(queued_below(pipeline, c, cost)))
        .fold(0, Nanos::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Stage;
    use crate::time::MS;

    fn stage(name: &str, parent: Option<usize>, children: Vec<usize>, single: Nanos) -> Stage {
        crate::pipeline::test_stage(name, parent, children, single)
    }

    fn tree() -> Pipeline {
        // a(10) -> b(30), a -> c(10) -> d(10): the longest path is a, b (40 ms).
        Pipeline {
            name: "p".into(),
            slo: 200 * MS,
            partial_results: false,
            budget: crate::pipeline::BudgetKind::Even,
            inputs: vec![],
            outputs: vec![],
            stages: vec![
                stage("a", None, vec![1, 2], 10 * MS),
                stage("b", Some(0), vec![], 30 * MS),
                stage("c", Some(0), vec![3], 10 * MS),
                stage("d", Some(2), vec![], 10 * MS),
            ],
        }
    }

    #[test]
    fn the_objective_is_split_along_the_longest_path() {
        let p = tree();
        assert_eq!(longest_from(&p, 0), 40 * MS);
        // a gets 10/40 of 200 ms; b, made at 50 ms, the rest (it is the last on its path);
        // c gets half of what is left (c and d weigh the same).
        assert_eq!(Proportional.stage_deadline(&p, 0, 0, 200 * MS), 50 * MS);
        assert_eq!(
            Proportional.stage_deadline(&p, 1, 50 * MS, 200 * MS),
            200 * MS
        );
        assert_eq!(
            Proportional.stage_deadline(&p, 2, 50 * MS, 200 * MS),
            125 * MS
        );
    }

    #[test]
    fn downstream_is_the_longest_path_below() {
        let p = tree();
        let single = |s: usize| p.stages[s].single;
        // Below a: b (30) against c, d (20); below c: d; leaves: nothing.
        assert_eq!(downstream(&p, 0, &single), 30 * MS);
        assert_eq!(downstream(&p, 2, &single), 10 * MS);
        assert_eq!(downstream(&p, 1, &single), 0);
        // A backlog at d makes the c, d path the longest.
        let queued = |s: usize| if s == 3 { 50 * MS } else { single(s) };
        assert_eq!(downstream(&p, 0, &queued), 60 * MS);
    }

    #[test]
    fn never_past_the_root_deadline() {
        let mut p = tree();
        for s in &mut p.stages {
            s.single = 0;
        }
        assert_eq!(Proportional.stage_deadline(&p, 0, 10, 100), 100);
        assert_eq!(Proportional.stage_deadline(&tree(), 2, 300, 100), 100);
    }
}
