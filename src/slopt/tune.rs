//! Ahead-of-time tuning: for the rates the cascade estimator expects, per stage a latency
//! budget, a batch size and a number of device replicas, chosen before queues build.
//!
//! A stage given budget `B` can run batches `b` with `2 l(b) <= B` (a request may wait
//! for one batch to finish before its own runs), so one replica serves at most
//! `T(B) = max b / l(b)` over those; it needs `n(B) = ceil(rate / T(B))` replicas (at
//! least one: a stage with no replica answers nothing, and a LOAD takes time). The usable
//! budget `L` is cut into `steps` equal steps and a dynamic program over the tree finds
//! the budgets, in whole steps, that minimise the total replicas while the budgets along
//! every root-to-leaf path sum to at most `L` (Nexus's split, fed by the cascade's
//! estimates). [`even_split`] is the pipelines issue's split on the same grid: what the
//! dynamic program must never do worse than.

use super::SECOND;
use crate::model::BatchLatency;
use crate::time::Nanos;

/// How a plan splits the usable budget among the stages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Split {
    /// [`tune`]: the budgets that minimise the total replicas.
    #[default]
    Dp,
    /// [`even_split`]: in proportion to the batch-1 latencies (the ablation and the
    /// baselines that do not tune).
    Even,
}

impl Split {
    /// The plan for `stages` under this split.
    pub fn solve(self, stages: &[StageLoad], usable: Nanos, steps: u32) -> Result<Plan, TuneError> {
        match self {
            Self::Dp => tune(stages, usable, steps),
            Self::Even => even_split(stages, usable, steps),
        }
    }
}

/// Budget steps of the dynamic program: the issue's `L/200`.
pub const DEFAULT_STEPS: u32 = 200;

/// What the tuner knows of one stage.
#[derive(Clone, Debug, PartialEq)]
pub struct StageLoad {
    /// The stage it runs after (before it in the slice); `None`: on the root inputs.
    pub parent: Option<usize>,
    /// The model's batch latencies, by batch size: what a budget buys.
    pub profile: Vec<BatchLatency>,
    /// Requests per second to provision for.
    pub rate: f64,
}

/// The tuner's choice for one stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagePlan {
    /// Its share of the end-to-end objective: its weight when stage deadlines are set.
    pub budget: Nanos,
    /// The batch size that gives its throughput within the budget.
    pub batch: u32,
    /// Device replicas the rate needs at that batch size: the placement's target.
    pub replicas: u32,
}

/// The tuner's choice for every stage, in the stages' order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// One per stage.
    pub stages: Vec<StagePlan>,
}

impl Plan {
    /// Total replicas: the cost minimised.
    pub fn replicas(&self) -> u64 {
        self.stages.iter().map(|s| u64::from(s.replicas)).sum()
    }
}

/// Why no plan fits.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TuneError {
    #[error("stage {0}'s parent is not a stage before it")]
    BadTree(usize),
    #[error("no split of the usable budget lets stage {0} and the stages below it run even batches of one (each needs twice its batch-1 latency)")]
    TooTight(usize),
}

/// The best batch and its throughput (requests per second) within `budget`, if any
/// batch fits; ties go to the smaller batch.
pub fn throughput(profile: &[BatchLatency], budget: Nanos) -> Option<(u32, f64)> {
    profile
        .iter()
        .filter(|b| b.latency > 0 && b.latency.saturating_mul(2) <= budget)
        .map(|b| {
            (
                b.batch,
                f64::from(b.batch) * SECOND as f64 / b.latency as f64,
            )
        })
        .fold(None, |best, (b, t)| match best {
            Some((_, bt)) if bt >= t => best,
            _ => Some((b, t)),
        })
}

/// Replicas that serve `rate` at `per_replica` each: at least one.
pub fn replicas(rate: f64, per_replica: f64) -> u32 {
    let rate = if rate.is_finite() { rate.max(0.0) } else { 0.0 };
    let n = (rate / per_replica).ceil();
    if n >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        (n as u32).max(1)
    }
}

/// The plan of one stage at `budget`, if a batch fits in it.
pub fn stage_plan(stage: &StageLoad, budget: Nanos) -> Option<StagePlan> {
    let (batch, per_replica) = throughput(&stage.profile, budget)?;
    Some(StagePlan {
        budget,
        batch,
        replicas: replicas(stage.rate, per_replica),
    })
}

/// Each stage's children; the tree checked (every parent before its child).
fn children(stages: &[StageLoad]) -> Result<Vec<Vec<usize>>, TuneError> {
    let mut children = vec![Vec::new(); stages.len()];
    for (v, s) in stages.iter().enumerate() {
        if let Some(u) = s.parent {
            if u >= v {
                return Err(TuneError::BadTree(v));
            }
            children[u].push(v);
        }
    }
    Ok(children)
}

/// The budgets (whole steps of `usable / steps`) that minimise the total replicas; among
/// budgets that tie, each stage takes the one nearest its even-split share of the steps
/// left (so the plan departs from the even split only where that saves replicas).
pub fn tune(stages: &[StageLoad], usable: Nanos, steps: u32) -> Result<Plan, TuneError> {
    let children = children(stages)?;
    let longest = longest(stages, &children);
    let k_max = steps.max(1) as usize;
    let step = usable / k_max as u64;
    // best[v][k]: fewest replicas of v's subtree with k steps left; pick[v][k]: v's steps.
    let mut best = vec![vec![None::<u64>; k_max + 1]; stages.len()];
    let mut pick = vec![vec![0usize; k_max + 1]; stages.len()];
    for v in (0..stages.len()).rev() {
        let own: Vec<Option<u64>> = (0..=k_max)
            .map(|j| stage_plan(&stages[v], j as u64 * step).map(|p| u64::from(p.replicas)))
            .collect();
        for k in 1..=k_max {
            // A leaf takes every step left (more never costs replicas).
            let first = if children[v].is_empty() { k } else { 1 };
            let even = share(k as u64, single(&stages[v]), longest[v]) as usize;
            let mut nearest = usize::MAX;
            for j in first..=k {
                let below = children[v]
                    .iter()
                    .try_fold(0u64, |sum, &c| best[c][k - j].map(|n| sum + n));
                let Some(total) = own[j].zip(below).map(|(a, b)| a + b) else {
                    continue;
                };
                let off = j.abs_diff(even);
                let better = best[v][k].is_none_or(|b| total < b || (total == b && off < nearest));
                if better {
                    best[v][k] = Some(total);
                    pick[v][k] = j;
                    nearest = off;
                }
            }
        }
    }
    let mut plan = vec![None; stages.len()];
    let mut todo: Vec<(usize, usize)> = (0..stages.len())
        .filter(|&v| stages[v].parent.is_none())
        .map(|v| (v, k_max))
        .collect();
    while let Some((v, k)) = todo.pop() {
        if best[v][k].is_none() {
            return Err(TuneError::TooTight(v));
        }
        let j = pick[v][k];
        plan[v] = stage_plan(&stages[v], j as u64 * step);
        todo.extend(children[v].iter().map(|&c| (c, k - j)));
    }
    let stages = plan
        .into_iter()
        .enumerate()
        .map(|(v, p)| p.ok_or(TuneError::BadTree(v)))
        .collect::<Result<_, _>>()?;
    Ok(Plan { stages })
}

/// The batch-1 latency (or the smallest batch's): a stage's weight in the even split.
fn single(stage: &StageLoad) -> Nanos {
    stage
        .profile
        .iter()
        .min_by_key(|b| b.batch)
        .map_or(0, |b| b.latency)
}

/// Per stage, the batch-1 latencies summed along the longest path from it down.
fn longest(stages: &[StageLoad], children: &[Vec<usize>]) -> Vec<Nanos> {
    let mut longest = vec![0u64; stages.len()];
    for v in (0..stages.len()).rev() {
        let below = children[v].iter().map(|&c| longest[c]).max().unwrap_or(0);
        longest[v] = single(&stages[v]).saturating_add(below);
    }
    longest
}

/// Of `avail` steps, the share in proportion `own / path` (rounded down; all of them
/// where the path weighs nothing).
fn share(avail: u64, own: Nanos, path: Nanos) -> u64 {
    if path == 0 {
        avail
    } else {
        (u128::from(avail) * u128::from(own) / u128::from(path)) as u64
    }
}

/// The pipelines issue's split on the same grid: each stage gets, of the steps left
/// above it, its share in proportion to the batch-1 latencies of the longest path from
/// it down (rounded down to whole steps).
pub fn even_split(stages: &[StageLoad], usable: Nanos, steps: u32) -> Result<Plan, TuneError> {
    let children = children(stages)?;
    let longest = longest(stages, &children);
    let k_max = u64::from(steps.max(1));
    let step = usable / k_max;
    let mut left = vec![k_max; stages.len()];
    let mut plan = Vec::with_capacity(stages.len());
    for (v, s) in stages.iter().enumerate() {
        let avail = s.parent.map_or(k_max, |u| left[u]);
        let share = share(avail, single(s), longest[v]);
        left[v] = avail - share;
        plan.push(stage_plan(s, share * step).ok_or(TuneError::TooTight(v))?);
    }
    Ok(Plan { stages: plan })
}

#[cfg(test)]
#[path = "tune_tests.rs"]
mod tests;
