//! Model popularity for the synthetic kinds: a Zipf law over `0..models`, model 0 the most
//! popular. Sampling uses Walker's alias method: one uniform number picks a column and,
//! with its fractional part, either the column or its alias, in constant time (a binary
//! search over thousands of models costs a dozen unpredictable branches per arrival).

use super::{check, check_models, WorkloadError};

/// Draws model indices from Zipf(`models`, `exponent`).
#[derive(Clone, Debug)]
pub(crate) struct Popularity {
    models: u32,
    /// Per column, the probability of keeping the column rather than its alias; empty when
    /// the law is uniform.
    keep: Vec<f64>,
    /// Per column, the model chosen when the column is not kept.
    alias: Vec<u32>,
}

impl Popularity {
    /// Zipf with this exponent (0 = uniform) over `models` models.
    pub(crate) fn new(models: u32, exponent: f64) -> Result<Self, WorkloadError> {
        check_models(models)?;
        check(
            "popularity",
            exponent,
            exponent >= 0.0,
            "must be a finite exponent >= 0 (0 = uniform)",
        )?;
        if exponent == 0.0 {
            return Ok(Self {
                models,
                keep: Vec::new(),
                alias: Vec::new(),
            });
        }
        // Vose's construction: scale weights to mean 1, then pair each column under 1 with
        // one over 1 that tops it up.
        let n = models as usize;
        let weights: Vec<f64> = (0..models)
            .map(|k| (f64::from(k) + 1.0).powf(-exponent))
            .collect();
        let sum: f64 = weights.iter().sum();
        let mut keep: Vec<f64> = weights.iter().map(|w| w * n as f64 / sum).collect();
        let mut alias: Vec<u32> = (0..models).collect();
        let (mut small, mut large): (Vec<u32>, Vec<u32>) =
            (0..models).partition(|&k| keep[k as usize] < 1.0);
        while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
            small.pop();
            alias[s as usize] = l;
            keep[l as usize] -= 1.0 - keep[s as usize];
            if keep[l as usize] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // What is left is 1 up to rounding: always keep it.
        for k in small.into_iter().chain(large) {
            keep[k as usize] = 1.0;
        }
        Ok(Self {
            models,
            keep,
            alias,
        })
    }

    /// The model for a uniform number `u` in `[0, 1)`.
    #[inline]
    pub(crate) fn pick(&self, u: f64) -> u32 {
        let last = self.models - 1;
        let x = u * f64::from(self.models);
        // `as` saturates; `min` guards u rounding up to the last edge.
        let column = (x as u32).min(last);
        if self.keep.is_empty() {
            return column;
        }
        let i = column as usize;
        if x - f64::from(column) < self.keep[i] {
            column
        } else {
            self.alias[i]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_is_skewed_and_uniform_is_flat() {
        let zipf = Popularity::new(10, 1.0).unwrap();
        let flat = Popularity::new(10, 0.0).unwrap();
        let mut z = [0u32; 10];
        let mut f = [0u32; 10];
        for i in 0..100_000 {
            let u = f64::from(i) / 100_000.0;
            z[zipf.pick(u) as usize] += 1;
            f[flat.pick(u) as usize] += 1;
        }
        assert!(z.windows(2).all(|w| w[0] >= w[1]), "{z:?}");
        // Harmonic number H10 = 2.929: model 0 has 1 / 2.929 of the mass.
        assert!((f64::from(z[0]) / 100_000.0 - 0.3414).abs() < 0.001);
        assert!(f.iter().all(|&n| n == 10_000), "{f:?}");
        assert!(zipf.pick(0.999_999_999_999) < 10);
    }

    #[test]
    fn alias_table_holds_the_exact_law() {
        let zipf = Popularity::new(1000, 1.2).unwrap();
        let mut mass = vec![0.0; 1000];
        for (i, (&keep, &alias)) in zipf.keep.iter().zip(&zipf.alias).enumerate() {
            mass[i] += keep / 1000.0;
            mass[alias as usize] += (1.0 - keep) / 1000.0;
        }
        let sum: f64 = (1..=1000).map(|k| f64::from(k).powf(-1.2)).sum();
        for (k, m) in mass.iter().enumerate() {
            let want = (k as f64 + 1.0).powf(-1.2) / sum;
            assert!((m - want).abs() < 1e-12, "model {k}: {m} vs {want}");
        }
    }

    #[test]
    fn bad_exponent_is_refused() {
        let e = Popularity::new(10, -1.0).unwrap_err().to_string();
        assert!(e.contains("popularity"), "{e}");
        assert!(Popularity::new(10, f64::NAN).is_err());
        assert!(Popularity::new(0, 1.0).is_err());
    }
}
