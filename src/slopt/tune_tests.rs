use proptest::prelude::*;

use super::*;
use crate::time::MS;

fn profile(single: Nanos, per_extra: Nanos, max_batch: u32) -> Vec<BatchLatency> {
    (1..=max_batch)
        .map(|b| BatchLatency {
            batch: b,
            latency: single + per_extra * Nanos::from(b - 1),
        })
        .collect()
}

fn load(parent: Option<usize>, single_ms: u64, rate: f64) -> StageLoad {
    StageLoad {
        parent,
        profile: profile(single_ms * MS, single_ms * MS / 4, 16),
        rate,
    }
}

/// Root-to-leaf paths of a tree, as stage lists.
fn paths(stages: &[StageLoad]) -> Vec<Vec<usize>> {
    let leaves = (0..stages.len()).filter(|&v| !stages.iter().any(|s| s.parent == Some(v)));
    leaves
        .map(|leaf| {
            let mut path = vec![leaf];
            while let Some(u) = stages[*path.last().unwrap()].parent {
                path.push(u);
            }
            path
        })
        .collect()
}

#[test]
fn throughput_takes_the_best_batch_within_half_the_budget() {
    let p = profile(10 * MS, 2 * MS, 8);
    assert_eq!(throughput(&p, 19 * MS), None);
    assert_eq!(throughput(&p, 20 * MS), Some((1, 100.0)));
    // 2 l(b) <= 40 ms: b up to 6 (20 ms), 300 per second.
    assert_eq!(throughput(&p, 40 * MS), Some((6, 300.0)));
    assert_eq!(replicas(301.0, 300.0), 2);
    assert_eq!(replicas(0.0, 300.0), 1);
    assert_eq!(replicas(f64::NAN, 300.0), 1);
}

#[test]
fn a_heavy_downstream_stage_gets_the_budget() {
    // a (20 ms, 10/s) -> b (20 ms + 1 ms a request, 2000/s): the even split gives each
    // 50 ms (b batches 6 in 25 ms: 9 replicas); the DP gives b the 58 ms that batches
    // of 10 in 29 ms need for its fewest, 6 replicas (60 ms would buy no fewer), and a
    // the rest, 42 ms (nearest its even share among the budgets that tie).
    let stage = |parent, rate| StageLoad {
        parent,
        profile: profile(20 * MS, MS, 64),
        rate,
    };
    let stages = vec![stage(None, 10.0), stage(Some(0), 2000.0)];
    let tuned = tune(&stages, 100 * MS, DEFAULT_STEPS).unwrap();
    let even = even_split(&stages, 100 * MS, DEFAULT_STEPS).unwrap();
    assert_eq!(
        even.stages[1],
        StagePlan {
            budget: 50 * MS,
            batch: 6,
            replicas: 9
        }
    );
    assert_eq!(
        tuned.stages[0],
        StagePlan {
            budget: 42 * MS,
            batch: 2,
            replicas: 1
        }
    );
    assert_eq!(
        tuned.stages[1],
        StagePlan {
            budget: 58 * MS,
            batch: 10,
            replicas: 6
        }
    );
}

#[test]
fn too_tight_and_bad_trees_are_errors() {
    let stages = vec![load(None, 30, 1.0), load(Some(0), 30, 1.0)];
    assert_eq!(tune(&stages, 100 * MS, 20), Err(TuneError::TooTight(0)));
    let backwards = vec![load(Some(1), 1, 1.0), load(None, 1, 1.0)];
    assert_eq!(tune(&backwards, 100 * MS, 20), Err(TuneError::BadTree(0)));
}

/// A random tree of `n` stages (parents before children) with random profiles and rates.
fn trees(max: usize) -> impl Strategy<Value = Vec<StageLoad>> {
    proptest::collection::vec(
        (0usize..8, 1u64..20, 0u64..10, 1u32..9, 0.0f64..3000.0),
        1..=max,
    )
    .prop_map(|raw| {
        raw.into_iter()
            .enumerate()
            .map(|(v, (p, single, extra, max_batch, rate))| StageLoad {
                parent: if v == 0 || p == 0 { None } else { Some(p % v) },
                profile: profile(single * MS, extra * MS, max_batch),
                rate,
            })
            .collect()
    })
}

/// Fewest replicas over every assignment of whole steps (brute force).
fn brute_force(stages: &[StageLoad], usable: Nanos, steps: u32) -> Option<u64> {
    let step = usable / u64::from(steps);
    let paths = paths(stages);
    let mut best = None;
    let mut js = vec![1u32; stages.len()];
    loop {
        let fits = paths
            .iter()
            .all(|p| p.iter().map(|&v| js[v]).sum::<u32>() <= steps);
        let cost: Option<u64> = fits
            .then(|| {
                (0..stages.len())
                    .map(|v| stage_plan(&stages[v], u64::from(js[v]) * step))
                    .try_fold(0, |sum, p| p.map(|p| sum + u64::from(p.replicas)))
            })
            .flatten();
        if let Some(c) = cost {
            best = Some(best.map_or(c, |b: u64| b.min(c)));
        }
        // Next assignment, like an odometer.
        let Some(v) = js.iter().position(|&j| j < steps) else {
            return best;
        };
        js[v] += 1;
        js[..v].iter_mut().for_each(|j| *j = 1);
    }
}

proptest! {
    /// Budgets along every path sum to at most L, and every stage's replicas serve its
    /// rate at the plan's batch within its budget.
    /// Mutation that breaks it: children given `k` instead of `k - j` steps in the
    /// reconstruction (paths then sum past L).
    #[test]
    fn plans_fit_the_budget_and_the_rates(stages in trees(6), usable_ms in 20u64..400) {
        let usable = usable_ms * MS;
        let Ok(plan) = tune(&stages, usable, DEFAULT_STEPS) else { return Ok(()); };
        for path in paths(&stages) {
            let sum: Nanos = path.iter().map(|&v| plan.stages[v].budget).sum();
            prop_assert!(sum <= usable, "path {path:?} sums to {sum}");
            // A leaf takes what is left: every path uses the whole grid.
            prop_assert_eq!(sum, usable / Nanos::from(DEFAULT_STEPS) * Nanos::from(DEFAULT_STEPS));
        }
        for (s, p) in stages.iter().zip(&plan.stages) {
            let (_, t) = throughput(&s.profile, p.budget).unwrap();
            prop_assert!(f64::from(p.replicas) * t >= s.rate);
        }
    }

    /// The dynamic program never needs more replicas than the even split on the same
    /// grid, and is infeasible only when the even split is too.
    /// Mutation that breaks it: `total < b` written `total > b` (the DP keeps the worst).
    #[test]
    fn no_worse_than_the_even_split(stages in trees(6), usable_ms in 20u64..400) {
        let usable = usable_ms * MS;
        if let Ok(even) = even_split(&stages, usable, DEFAULT_STEPS) {
            let tuned = tune(&stages, usable, DEFAULT_STEPS).unwrap();
            prop_assert!(tuned.replicas() <= even.replicas());
        }
    }

    /// Where nothing is saved (rates so low that one replica of each stage serves at any
    /// budget that fits a batch), the DP's plan is the even split's: it departs from the
    /// even split only to save replicas. (The earlier tie-break, the fewest steps to each
    /// inner stage, made the first stage's deadline the tightest its batch 1 allows.)
    /// Mutation that breaks it: `off < nearest` dropped from the tie-break in `tune`.
    #[test]
    fn ties_keep_the_even_split(stages in trees(6), usable_ms in 20u64..400) {
        let usable = usable_ms * MS;
        let idle: Vec<StageLoad> = stages
            .into_iter()
            .map(|s| StageLoad { rate: 0.001, ..s })
            .collect();
        if let Ok(even) = even_split(&idle, usable, DEFAULT_STEPS) {
            let tuned = tune(&idle, usable, DEFAULT_STEPS).unwrap();
            prop_assert_eq!(tuned, even);
        }
    }

    /// On tiny trees and grids the dynamic program finds the brute force's optimum.
    /// Mutation that breaks it: `for j in 1..=k` written `for j in 1..k` (a stage can no
    /// longer take every step left) misses optima on chains.
    #[test]
    fn optimal_on_tiny_trees(stages in trees(4), usable_ms in 10u64..120, steps in 1u32..7) {
        let usable = usable_ms * MS;
        let tuned = tune(&stages, usable, steps).ok().map(|p| p.replicas());
        prop_assert_eq!(tuned, brute_force(&stages, usable, steps));
    }
}
