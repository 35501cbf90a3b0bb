//! Shared by the policy tests on the in-memory testbed: a model profile and reproducible
//! random draws.

use clockwork::model::{BatchLatency, ModelProfile};
use clockwork::time::{Nanos, MS};

/// One model's profile: batch 1 takes `base`, larger batches grow sublinearly (more
/// served per unit of device time).
pub fn profile(base: Nanos) -> ModelProfile {
    ModelProfile {
        weight_bytes: 1 << 24,
        load_latency: 5 * MS,
        batches: [1u32, 2, 4, 8]
            .iter()
            .map(|&batch| BatchLatency {
                batch,
                latency: base * (2 + u64::from(batch)) / 3,
            })
            .collect(),
    }
}

/// Uniform draws in [0, 1) from `seed`, the same on every run: xorshift64*, without a
/// dependency. (Not every test file that includes this module draws.)
#[allow(dead_code)]
pub fn uniform(seed: u64) -> impl FnMut() -> f64 {
    let mut state = seed | 1;
    move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}
