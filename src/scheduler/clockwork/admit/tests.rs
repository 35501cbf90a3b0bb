//! Admission's projection: its shortcuts against the plain forms they replace.

use super::*;
use crate::config::PolicyConfig;
use crate::gpu::profiles;
use crate::scheduler::estimate::Slowdown;
use crate::scheduler::{ModelInfo, Policy};
use crate::time::MS;
use proptest::prelude::*;

/// A ResNet50's state, with its V100 execution estimates.
fn resnet() -> ClockworkPolicy {
    let mut policy = ClockworkPolicy::new(&PolicyConfig::default());
    policy.add_device(crate::scheduler::DeviceInfo {
        kind: "v100".into(),
        pages: 64,
    });
    let spec = profiles::model("resnet50", "r", 100 * MS).unwrap();
    policy.add_model(ModelInfo {
        pages: 7,
        profile: spec.profile,
        by_kind: Vec::new(),
        devices: None,
    });
    policy
}

/// The projection as it was first written: the most efficient batch chosen afresh for
/// every batch.
fn drain_batch_by_batch(
    m: &ModelState,
    free: &mut [(Nanos, Runs)],
    (mut remaining, pad): (usize, bool),
    rules: Rules,
) -> Option<Nanos> {
    loop {
        let next = free.iter_mut().min_by_key(|f| f.0)?;
        if next.0 > rules.bound {
            return Some(next.0);
        }
        let batch = efficient_batch(m, next.1, (remaining, pad), rules.max_exec);
        if remaining <= batch.served {
            return Some(next.0 + batch.estimate);
        }
        next.0 += if rules.at_mean {
            batch.mean
        } else {
            batch.estimate
        };
        remaining -= batch.served;
    }
}

/// Feeds each of the model's execution estimates `runs` measurements spread around
/// its profile (by the factors in `spread`, in turn).
fn measure(policy: &mut ClockworkPolicy, spread: &[u64]) {
    for estimates in &mut policy.models[0].exec {
        for e in estimates.iter_mut() {
            let base = e.get();
            for f in spread {
                e.observe(base * f / 10);
            }
        }
    }
}

/// A replica of the one device kind, as its kind or slower.
fn slowdown() -> impl Strategy<Value = Runs> {
    prop_oneof![Just(1_000u32), 1_000u32..10_000].prop_map(|t| Runs {
        kind: 0,
        slowdown: Slowdown::from_thousandths(t),
    })
}

proptest! {
    /// Choosing each replica's full batch once projects the same finish as choosing
    /// every batch afresh, for any replicas, queue, padding, bound and batch-time cap.
    #[test]
    fn the_full_batch_chosen_once_projects_the_same_finish(
        starts in prop::collection::vec((0u64..50 * MS, slowdown()), 0..=MAX_PROJECTED),
        remaining in 1usize..400,
        pad: bool,
        bound in 0u64..400 * MS,
        max_exec in prop_oneof![Just(u64::MAX), 2 * MS..40 * MS],
        at_mean: bool,
        spread in prop::collection::vec(5u64..40, 0..12),
    ) {
        let mut policy = resnet();
        measure(&mut policy, &spread);
        let m = &policy.models[0];
        let mut a: Vec<(Nanos, Runs)> = starts;
        let mut b = a.clone();
        let rules = Rules { bound, max_exec, at_mean };
        prop_assert_eq!(
            drain(m, &mut a, (remaining, pad), rules),
            drain_batch_by_batch(m, &mut b, (remaining, pad), rules)
        );
    }

    /// Counting the queue ahead at the means never projects a later finish than at the
    /// estimates, and the same one when every run measured the same (an emulated
    /// device's exact timing: the simulator's results do not move). Mutation that
    /// breaks it: the last batch at its mean too (earlier than the plan's own check).
    #[test]
    fn the_queue_at_its_mean_projects_no_later_and_the_same_for_exact_runs(
        starts in prop::collection::vec(0u64..50 * MS, 1..=MAX_PROJECTED),
        remaining in 1usize..200,
        spread in prop::collection::vec(5u64..40, 0..12),
        exact: bool,
    ) {
        let mut policy = resnet();
        let spread = if exact { vec![10; spread.len()] } else { spread };
        measure(&mut policy, &spread);
        let m = &policy.models[0];
        let free: Vec<(Nanos, Runs)> = starts.iter().map(|&s| (s, Runs::of_kind(0))).collect();
        let rules = |at_mean| Rules { bound: Nanos::MAX, max_exec: u64::MAX, at_mean };
        let mean = drain(m, &mut free.clone(), (remaining, false), rules(true));
        let estimate = drain(m, &mut free.clone(), (remaining, false), rules(false));
        prop_assert!(mean <= estimate, "{mean:?} > {estimate:?}");
        if exact {
            prop_assert_eq!(mean, estimate);
        }
        // The new request's own batch is at its estimate: never before the soonest
        // replica's start plus the quickest batch's estimate.
        let soonest = starts.iter().min().copied().unwrap_or(0);
        let batch = efficient_batch(m, Runs::of_kind(0), (remaining.min(16), false), u64::MAX);
        let quickest = m.exec[0].iter().map(|e| e.get()).min().unwrap_or(0);
        prop_assert!(mean.unwrap_or(0) >= soonest + quickest.min(batch.estimate));
    }
}
