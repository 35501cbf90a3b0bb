//! The estimator, spreads and margins, checked alone.

use super::*;

/// Planned with `expected` as both its estimate and its mean.
fn planned(could_start: Nanos, expected: Nanos) -> Planned {
    Planned {
        could_start,
        expected: Expected::exact(expected),
    }
}

#[test]
fn margins_answer_the_seed_until_warm() {
    let mut m = Margins::new(64, 100.0);
    let run = |begin, end| Measured {
        begin,
        end,
        duration: end - begin,
    };
    for i in 0..WARM_UP as u64 - 1 {
        m.learn(
            planned(i * 100, 10),
            &run(i * 100, i * 100 + 10),
            i * 100 + 10,
        );
    }
    assert_eq!((m.lag(7), m.overrun(9)), (7, 9), "one sample short of warm");
    m.learn(planned(0, 10), &run(0, 10), 10);
    assert_eq!((m.lag(7), m.overrun(9)), (0, 0), "exact: no margin at all");
}

#[test]
fn margins_follow_lag_and_overrun() {
    let mut m = Margins::new(64, 100.0);
    let run = |begin, end| Measured {
        begin,
        end,
        duration: end - begin,
    };
    for i in 0..100 {
        // Starts 3 after it could; runs 2 over its estimate every tenth time; its
        // report takes 1 every seventh time.
        let over = if i % 10 == 0 { 2 } else { 0 };
        let trip = u64::from(i % 7 == 0);
        let (begin, end) = (1000 * i + 3, 1000 * i + 3 + 50 + over);
        m.learn(planned(1000 * i, 50), &run(begin, end), end + trip);
    }
    assert_eq!(
        (m.lag(0), m.overrun(0)),
        (3, 3),
        "i = 0: over by 2, reported 1 late"
    );
    for i in 100..200 {
        let (begin, end) = (1000 * i, 1000 * i + 40);
        m.learn(planned(1000 * i, 50), &run(begin, end), end);
    }
    assert_eq!(
        (m.lag(0), m.overrun(0)),
        (0, 0),
        "a spell of exact runs pushes the old ones out of the window"
    );
}

proptest::proptest! {
    /// The kept window and percentile equal those of the last `window` measurements
    /// sorted afresh, whatever values come and go (many repeats: the in-place
    /// replacement's case of equal values).
    #[test]
    fn estimate_is_the_percentile_of_the_last_window(
        window in 1usize..12,
        percentile in 0.0f64..=100.0,
        seed in 0u64..8,
        values in proptest::collection::vec(0u64..8, 0..64),
    ) {
        let mut e = Estimator::new(seed, window, percentile);
        for (i, &v) in values.iter().enumerate() {
            e.observe(v);
            let recent = &values[(i + 1).saturating_sub(window)..=i];
            proptest::prop_assert!(e.recent.iter().eq(recent.iter()));
            let mut seen = recent.to_vec();
            seen.sort_unstable();
            let rank = (percentile / 100.0 * (seen.len() - 1) as f64).ceil() as usize;
            proptest::prop_assert_eq!(&e.sorted, &seen);
            proptest::prop_assert_eq!(e.get(), seen[rank.min(seen.len() - 1)]);
            proptest::prop_assert_eq!(e.least(), seen[0]);
            let mean = recent.iter().sum::<u64>() / recent.len() as u64;
            proptest::prop_assert_eq!(e.mean(), mean);
        }
    }
}

proptest::proptest! {
    /// A revision leaves the window as if the revised value had been measured in its
    /// place.
    #[test]
    fn a_revision_is_as_if_measured_so(
        window in 1usize..12,
        percentile in 0.0f64..=100.0,
        values in proptest::collection::vec(0u64..8, 1..40),
        pick in 0usize..40,
        new in 0u64..8,
    ) {
        let mut e = Estimator::new(0, window, percentile);
        values.iter().for_each(|&v| e.observe(v));
        let kept = &values[values.len().saturating_sub(window)..];
        let old = kept[pick % kept.len()];
        proptest::prop_assert!(e.revise(old, new));
        let mut as_if = kept.to_vec();
        let last = as_if.iter().rposition(|&v| v == old).unwrap_or(0);
        as_if[last] = new;
        let mut fresh = Estimator::new(0, window, percentile);
        as_if.iter().for_each(|&v| fresh.observe(v));
        proptest::prop_assert!(e.recent.iter().eq(fresh.recent.iter()));
        proptest::prop_assert_eq!(&e.sorted, &fresh.sorted);
        proptest::prop_assert_eq!(
            (e.get(), e.mean(), e.least()),
            (fresh.get(), fresh.mean(), fresh.least())
        );
        proptest::prop_assert!(!e.revise(9, 1), "a value not in the window");
    }
}

#[test]
fn reseeding_forgets_measurements() {
    let mut e = Estimator::new(10, 4, 99.0);
    assert!(!e.reseed(10), "a seed alone is left as it is");
    e.observe(500);
    assert_eq!(e.get(), 500);
    assert!(e.reseed(10));
    assert_eq!((e.get(), e.mean()), (10, 10));
    e.observe(20);
    assert_eq!(e.get(), 20, "the seed is forgotten at the next measurement");
}

#[test]
fn seed_until_first_measurement() {
    let mut e = Estimator::new(100, 4, 99.0);
    assert_eq!(e.get(), 100);
    e.observe(40);
    assert_eq!(e.get(), 40);
}

#[test]
fn window_forgets_old_measurements() {
    let mut e = Estimator::new(0, 3, 100.0);
    for m in [50, 10, 10, 10] {
        e.observe(m);
    }
    assert_eq!(e.get(), 10, "50 fell out of a window of 3");
}

#[test]
fn percentile_picks_rank() {
    let mut e = Estimator::new(0, 5, 50.0);
    for m in [5, 1, 4, 2, 3] {
        e.observe(m);
    }
    assert_eq!(e.get(), 3);
    let mut max = Estimator::new(0, 10, 99.0);
    for m in 1..=10 {
        max.observe(m);
    }
    assert_eq!(max.get(), 10, "p99 of 10 samples is their max");
}

/// Mutation that breaks it: `runner_up` answering the largest (or the estimate).
#[test]
fn the_runner_up_ignores_one_outlier_and_not_two() {
    let mut e = Estimator::new(50, 100, 90.0);
    assert_eq!(e.runner_up(), 50, "the seed");
    for _ in 0..98 {
        e.observe(4);
    }
    e.observe(200);
    assert_eq!((e.get(), e.runner_up()), (4, 4), "one outlier");
    e.observe(150);
    assert_eq!(e.runner_up(), 150, "two");
}

/// Mutation that breaks it: `median` answering the mean (or the largest).
#[test]
fn the_median_follows_most_of_the_window_and_not_its_outliers() {
    let mut e = Estimator::new(50, 100, 99.0);
    assert_eq!(e.median(), 50, "the seed");
    for _ in 0..60 {
        e.observe(4);
    }
    for _ in 0..3 {
        e.observe(1_000);
    }
    assert_eq!(e.median(), 4, "three stalls in 63");
    // The window keeps the last 100: 47 of 4, the 3 stalls, 50 of 9.
    for _ in 0..50 {
        e.observe(9);
    }
    assert_eq!(e.median(), 9, "half of the window and more now takes 9");
}
