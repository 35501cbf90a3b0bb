use proptest::prelude::*;

use super::*;
use crate::time::MS;

fn chain(seeds: &[Option<EmulatedFanOut>]) -> Cascade {
    let parents = (0..seeds.len()).map(|i| i.checked_sub(1)).collect();
    Cascade::from_tree(parents, seeds.to_vec(), SECOND, SECOND)
}

fn fan(mean: f64, variance: f64) -> Option<EmulatedFanOut> {
    Some(EmulatedFanOut { mean, variance })
}

#[test]
fn the_seed_answers_until_enough_completions_are_seen() {
    let mut s = FanOutStats::seeded(fan(3.0, 2.0));
    assert_eq!((s.mean(), s.variance()), (3.0, 2.0));
    for _ in 0..MIN_OBSERVED - 1 {
        s.record(5);
    }
    assert_eq!(s.mean(), 3.0);
    s.record(5);
    assert_eq!((s.mean(), s.variance(), s.p99()), (5.0, 0.0, 5.0));
    let one = FanOutStats::seeded(None);
    assert_eq!((one.mean(), one.variance(), one.p99()), (1.0, 0.0, 1.0));
}

#[test]
fn the_window_keeps_the_last_thousand_completions() {
    let mut s = FanOutStats::seeded(None);
    for _ in 0..FAN_OUT_WINDOW {
        s.record(100);
    }
    for _ in 0..FAN_OUT_WINDOW {
        s.record(2);
    }
    assert_eq!((s.mean(), s.variance()), (2.0, 0.0));
}

#[test]
fn the_root_rate_is_counted_over_the_window() {
    let mut w = RateWindow::new(SECOND);
    for i in 0..100 {
        w.record(i * 10 * MS);
    }
    assert!((w.rate(SECOND - 1) - 100.0).abs() < 1e-9);
    // Half a second later only the last half is in the window.
    assert!((w.rate(SECOND + 495 * MS) - 50.0).abs() < 1e-9);
    assert_eq!(w.rate(10 * SECOND), 0.0);
}

#[test]
fn rates_follow_the_fan_out_down_the_tree() {
    // a -> b (fan-out 4, var 4) -> c (fan-out 0.5, var 0.25); a -> d (one each).
    let parents = vec![None, Some(0), Some(1), Some(0)];
    let seeds = vec![None, fan(4.0, 4.0), fan(0.5, 0.25), None];
    let mut c = Cascade::from_tree(parents, seeds, SECOND, SECOND);
    for i in 0..100 {
        c.on_root(i * 10 * MS);
    }
    let r = c.estimate(SECOND - 1);
    let means: Vec<f64> = r.iter().map(|s| s.mean).collect();
    assert_eq!(means, vec![100.0, 400.0, 200.0, 100.0]);
    // One level down it is the formula: r m + z sqrt(r (s2 + m^2) / H).
    let b = 400.0 + Z_99 * (100.0f64 * (4.0 + 16.0)).sqrt();
    assert!((r[1].upper - b).abs() < 1e-9);
    // Two down, the compound count's: Q_c = M_b s2 + Q_b m^2 = 4 * 0.25 + 20 * 0.25.
    let c2 = 200.0 + Z_99 * (100.0f64 * 6.0).sqrt();
    assert!((r[2].upper - c2).abs() < 1e-9);
    assert!((r[3].upper - (100.0 + Z_99 * 10.0)).abs() < 1e-9);
}

proptest! {
    /// The upper bound is never below the mean, and the mean at a child is its parent's
    /// times the edge's observed mean, whatever was observed.
    /// Mutation that breaks it: `M_v = M_u * m` written `M_v = m` (the child's rate no
    /// longer follows its parent's) fails on any chain of three with fan-outs not one.
    #[test]
    fn means_multiply_and_bounds_cover(
        counts in proptest::collection::vec(proptest::collection::vec(0u32..10, 30..60), 3),
        roots in 1u64..200,
    ) {
        let mut c = chain(&[None, None, None, None]);
        for i in 0..roots {
            c.on_root(i * SECOND / roots);
        }
        for (edge, seen) in counts.iter().enumerate() {
            for &n in seen {
                c.on_fan_out(edge + 1, n);
            }
        }
        let r = c.estimate(SECOND - 1);
        for v in 1..4 {
            let m = c.edge(v).unwrap().mean();
            prop_assert!((r[v].mean - r[v - 1].mean * m).abs() <= 1e-6 * r[v - 1].mean.max(1.0));
            prop_assert!(r[v].upper >= r[v].mean);
        }
    }
}

/// The time from a step in the root rate until an estimate of the rate at `v` first
/// reaches 90% of the new rate there.
fn reach(estimate: impl Fn(Nanos) -> f64, step: Nanos, target: f64) -> Nanos {
    (0..)
        .map(|i| step + i * MS)
        .find(|&t| estimate(t) >= 0.9 * target)
        .map_or(Nanos::MAX, |t| t - step)
}

/// The step-change scenario of the issue: roots at `low`/s, then at `high`/s from 10 s;
/// each root makes `per_root` requests at `v`, which reach `v` after `upstream`. Returns the
/// lag of the cascade estimate and of the baseline counting arrivals at `v`.
fn step_lag(low: u64, high: u64, per_root: u32, upstream: Nanos, window: Nanos) -> (Nanos, Nanos) {
    let step = 10 * SECOND;
    let end = step + 5 * SECOND;
    let mut times = Vec::new();
    let mut t = 0;
    while t < end {
        times.push(t);
        t += if t < step {
            SECOND / low
        } else {
            SECOND / high
        };
    }
    let seeded = fan(f64::from(per_root), 0.0);
    let cascade = |now: Nanos| {
        let mut c = Cascade::from_tree(vec![None, Some(0)], vec![None, seeded], window, SECOND);
        times
            .iter()
            .take_while(|&&t| t <= now)
            .for_each(|&t| c.on_root(t));
        c.estimate(now)[1].mean
    };
    let baseline = |now: Nanos| {
        let mut w = RateWindow::new(window);
        for &t in times.iter().filter(|&&t| t + upstream <= now) {
            for _ in 0..per_root {
                w.record(t + upstream);
            }
        }
        w.rate(now)
    };
    let target = f64::from(per_root) * high as f64;
    (reach(cascade, step, target), reach(baseline, step, target))
}

/// The lag table of docs/EXPERIMENTS.md ("SLOpt planning"):
/// `cargo test --lib slopt::estimate::tests::lag_after_a_step -- --nocapture`.
/// Mutation that breaks it: the cascade estimate taken from arrivals at `v` (the
/// baseline's rule) gives the same lag, not `upstream` less.
#[test]
fn lag_after_a_step() {
    println!("| window | upstream | roots/s | cascade lag | baseline lag |");
    println!("|---|---|---|---|---|");
    for (window, upstream, low, high) in [
        (SECOND, 50 * MS, 100, 200),
        (SECOND, 200 * MS, 100, 200),
        (SECOND, 200 * MS, 100, 300),
        (200 * MS, 50 * MS, 100, 200),
    ] {
        let (cascade, baseline) = step_lag(low, high, 4, upstream, window);
        println!(
            "| {} ms | {} ms | {low} -> {high} | {} ms | {} ms |",
            window / MS,
            upstream / MS,
            cascade / MS,
            baseline / MS
        );
        assert!(cascade < window);
        assert!(baseline >= cascade + upstream);
    }
}
