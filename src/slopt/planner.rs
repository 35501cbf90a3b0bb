//! When to re-plan, and the plan as the pipeline's budget.
//!
//! [`Planner`] re-solves the tuner every [`PlannerConfig::every`] and at once when a
//! stage's estimated rate has moved by more than [`PlannerConfig::moved`] since the last
//! solve; it raises a stage's replica target at once (a LOAD takes time, so it is issued
//! ahead) and lowers it only after the lower target has held for
//! [`PlannerConfig::hold_down`]. [`TunedBudget`] sets stage deadlines from the plan's
//! budgets (`super::tuning::Tuning` ties the estimator, the planner and the budget
//! together for the pipeline actor).

use std::sync::RwLock;

use super::tune::{Plan, Split, StageLoad, TuneError, DEFAULT_STEPS};
use super::SECOND;
use crate::model::BatchLatency;
use crate::pipeline::budget::{split, Budget};
use crate::pipeline::Pipeline;
use crate::time::Nanos;

/// The re-solve and scale-down rules.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlannerConfig {
    /// Re-solve at least this often.
    pub every: Nanos,
    /// Re-solve at once when a stage's rate moves by more than this fraction.
    pub moved: f64,
    /// Lower a replica target only after the lower one has held this long.
    pub hold_down: Nanos,
    /// The dynamic program's budget steps.
    pub steps: u32,
    /// A moved rate re-solves only this long after the last solve (Nexus's epochs; 0:
    /// at once).
    pub settle: Nanos,
    /// How the budget is split: the dynamic program, or the even split (ablations).
    pub split: Split,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        Self {
            every: SECOND,
            moved: 0.10,
            hold_down: 30 * SECOND,
            steps: DEFAULT_STEPS,
            settle: 0,
            split: Split::Dp,
        }
    }
}

/// The re-solve rules over the tuner, in the caller's time.
#[derive(Clone, Debug)]
pub struct Planner {
    config: PlannerConfig,
    usable: Nanos,
    stages: Vec<StageLoad>,
    solved_at: Option<Nanos>,
    plan: Option<Plan>,
    targets: Vec<u32>,
    /// Per stage, since when the plan has wanted fewer replicas than the target.
    lower_since: Vec<Option<Nanos>>,
}

impl Planner {
    /// A planner for stages given by (parent, profile), splitting `usable`.
    pub fn new(
        config: PlannerConfig,
        usable: Nanos,
        stages: Vec<(Option<usize>, Vec<BatchLatency>)>,
    ) -> Self {
        let n = stages.len();
        Self {
            config,
            usable,
            stages: stages
                .into_iter()
                .map(|(parent, profile)| StageLoad {
                    parent,
                    profile,
                    rate: 0.0,
                })
                .collect(),
            solved_at: None,
            plan: None,
            targets: vec![0; n],
            lower_since: vec![None; n],
        }
    }

    /// Whether rates observed at `now` call for a new solve.
    pub fn due(&self, now: Nanos, rates: &[f64]) -> bool {
        let Some(at) = self.solved_at else {
            return true;
        };
        let moved = self.stages.iter().zip(rates).any(|(s, &r)| {
            (r - s.rate).abs() > self.config.moved * s.rate || (s.rate == 0.0 && r > 0.0)
        });
        let since = now.saturating_sub(at);
        (moved && since >= self.config.settle) || since >= self.config.every
    }

    /// Takes the rates (per stage, to provision for) at `now`; re-solves when due and
    /// returns the new plan. A plan that cannot fit keeps the last one.
    pub fn observe(&mut self, now: Nanos, rates: &[f64]) -> Result<Option<&Plan>, TuneError> {
        if !self.due(now, rates) {
            self.follow(now);
            return Ok(None);
        }
        for (s, &r) in self.stages.iter_mut().zip(rates) {
            s.rate = r;
        }
        self.solved_at = Some(now);
        let plan = self
            .config
            .split
            .solve(&self.stages, self.usable, self.config.steps)?;
        self.plan = Some(plan);
        self.follow(now);
        Ok(self.plan.as_ref())
    }

    /// Moves the replica targets toward the plan: up at once, down after the hold.
    fn follow(&mut self, now: Nanos) {
        let Some(plan) = &self.plan else { return };
        for (v, want) in plan.stages.iter().map(|s| s.replicas).enumerate() {
            if want >= self.targets[v] {
                self.targets[v] = want;
                self.lower_since[v] = None;
                continue;
            }
            let since = *self.lower_since[v].get_or_insert(now);
            if now.saturating_sub(since) >= self.config.hold_down {
                self.targets[v] = want;
                self.lower_since[v] = None;
            }
        }
    }

    /// The last plan.
    pub fn plan(&self) -> Option<&Plan> {
        self.plan.as_ref()
    }

    /// Replicas per stage the placement should hold.
    pub fn targets(&self) -> &[u32] {
        &self.targets
    }
}

/// Stage deadlines from the plan: the time left split along the longest remaining path
/// in proportion to the planned budgets (the batch-1 estimates until the first plan).
#[derive(Debug)]
pub struct TunedBudget {
    weights: RwLock<Vec<Nanos>>,
}

impl TunedBudget {
    /// Weighs stages by their batch-1 estimates until [`TunedBudget::set`].
    pub fn new(pipeline: &Pipeline) -> Self {
        Self {
            weights: RwLock::new(pipeline.stages.iter().map(|s| s.single).collect()),
        }
    }

    /// Follows `plan` from now on.
    pub fn set(&self, plan: &Plan) {
        let mut w = self.weights.write().unwrap_or_else(|e| e.into_inner());
        *w = plan.stages.iter().map(|s| s.budget).collect();
    }
}

impl Budget for TunedBudget {
    fn stage_deadline(
        &self,
        pipeline: &Pipeline,
        stage: usize,
        now: Nanos,
        root_deadline: Nanos,
    ) -> Nanos {
        let w = self.weights.read().unwrap_or_else(|e| e.into_inner());
        split(pipeline, stage, now, root_deadline, |v| {
            w.get(v).copied().unwrap_or(0)
        })
    }
}

#[cfg(test)]
#[path = "planner_tests.rs"]
mod tests;
