//! Summary statistics for latency and bandwidth samples.
//!
//! Shared by the cpu profiler, the benchmarks and the GPU probe.

use serde::Serialize;

/// Distribution summary of one series of samples, in the caller's unit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Summary {
    pub count: usize,
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
    /// Coefficient of variation: population standard deviation / mean.
    pub cv: f64,
}

impl Summary {
    /// Summarises `samples`; `None` when there are none (a zero-run
    /// measurement has no meaningful percentiles).
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let count = sorted.len();
        let mean = sorted.iter().sum::<f64>() / count as f64;
        let variance = sorted.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / count as f64;
        let cv = if mean > 0.0 {
            variance.sqrt() / mean
        } else {
            0.0
        };
        Some(Summary {
            count,
            mean,
            p50: percentile(&sorted, 50.0),
            p99: percentile(&sorted, 99.0),
            min: sorted[0],
            max: sorted[count - 1],
            cv,
        })
    }
}

/// Nearest-rank percentile of an already sorted, non-empty slice.
///
/// Nearest-rank (rather than interpolation) always returns an observed
/// value, which is what a simulator replaying the distribution wants.
fn percentile(sorted: &[f64], pct: f64) -> f64 {
    let rank = (pct / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_has_no_summary() {
        assert_eq!(Summary::of(&[]), None);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = Summary::of(&samples).expect("non-empty");
        assert_eq!(s.p50, 50.0);
        assert_eq!(s.p99, 99.0);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 100.0);
        assert_eq!(s.count, 100);
    }

    #[test]
    fn constant_series_has_zero_cv() {
        let s = Summary::of(&[3.0; 10]).expect("non-empty");
        assert_eq!(s.cv, 0.0);
        assert_eq!(s.p99, 3.0);
    }

    #[test]
    fn cv_is_std_over_mean() {
        let s = Summary::of(&[1.0, 3.0]).expect("non-empty");
        assert!((s.cv - 0.5).abs() < 1e-12);
    }
}
