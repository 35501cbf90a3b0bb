//! The closed loop: a fixed number of clients, each sending its next request `think` after
//! the answer to its previous one. The simulator's driver owns the loop (only it knows when
//! answers come); this decides, deterministically, which model each request asks for.
//!
//! Each request's model comes from a hash of (seed, client, the client's request number),
//! not from one shared random stream, so a client's sequence of models does not depend on
//! how the driver interleaves clients: a policy that answers in a different order still
//! sees the same requests per client.

use super::popularity::Popularity;
use super::{Arrival, WorkloadParams};
use crate::time::Nanos;

/// The model picker of a closed-loop workload (see the module docs).
#[derive(Clone, Debug)]
pub struct ClosedLoop {
    clients: u32,
    think: Nanos,
    seed: u64,
    picker: Popularity,
    /// Requests issued so far, per client.
    issued: Vec<u64>,
}

impl ClosedLoop {
    /// `clients` clients over `params.models` models with `params.popularity`; each client
    /// thinks for `think` between an answer and its next request.
    ///
    /// This cannot fail, so out-of-range parameters are clamped: fewer than one model counts
    /// as one, and a negative or non-finite popularity as uniform.
    pub fn new(clients: u32, think: Nanos, params: &WorkloadParams) -> Self {
        let models = params.models.max(1);
        let picker = Popularity::new(models, params.popularity)
            .or_else(|_| Popularity::new(models, 0.0))
            .unwrap_or_else(|_| unreachable!("uniform over at least one model is valid"));
        Self {
            clients,
            think,
            seed: params.seed,
            picker,
            issued: vec![0; clients as usize],
        }
    }

    /// How many clients the loop has.
    pub fn clients(&self) -> u32 {
        self.clients
    }

    /// How long a client waits between an answer and its next request.
    pub fn think(&self) -> Nanos {
        self.think
    }

    /// The next request of `client`, issued at `now`: its model, and `slo: None` (the
    /// default). A client number beyond `clients` is served too (it gets its own sequence).
    pub fn next_request(&mut self, client: u32, now: Nanos) -> Arrival {
        let i = client as usize;
        if i >= self.issued.len() {
            self.issued.resize(i + 1, 0);
        }
        let n = self.issued[i];
        self.issued[i] += 1;
        let h = mix(mix(self.seed ^ mix(u64::from(client))) ^ n);
        // The top 53 bits as a uniform number in [0, 1).
        let u = (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        Arrival {
            at: now,
            model: self.picker.pick(u),
            slo: None,
        }
    }
}

/// SplitMix64's finaliser: a fast bijective mix whose output bits all depend on every
/// input bit.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_client_sequences_ignore_interleaving() {
        let params = WorkloadParams::default();
        let mut a = ClosedLoop::new(3, 5, &params);
        let mut b = ClosedLoop::new(3, 5, &params);
        let a0: Vec<u32> = (0..50).map(|_| a.next_request(0, 7).model).collect();
        let mut b0 = Vec::new();
        for _ in 0..50 {
            b.next_request(2, 0);
            b0.push(b.next_request(0, 7).model);
            b.next_request(1, 0);
        }
        assert_eq!(a0, b0);
        assert_eq!((a.clients(), a.think()), (3, 5));
        let r = a.next_request(1, 42);
        assert_eq!((r.at, r.slo), (42, None));
        assert!(r.model < params.models);
    }

    #[test]
    fn popular_models_come_first_and_seed_matters() {
        let params = WorkloadParams {
            models: 20,
            ..WorkloadParams::default()
        };
        let mut c = ClosedLoop::new(4, 0, &params);
        let mut counts = [0u32; 20];
        for i in 0..40_000 {
            counts[c.next_request(i % 4, 0).model as usize] += 1;
        }
        let top = counts.iter().enumerate().max_by_key(|&(_, n)| n);
        assert_eq!(top.map(|(m, _)| m), Some(0), "{counts:?}");
        let other = WorkloadParams {
            seed: 2,
            ..params.clone()
        };
        let mut d = ClosedLoop::new(4, 0, &other);
        let mut c = ClosedLoop::new(4, 0, &params);
        let x: Vec<u32> = (0..32).map(|_| c.next_request(0, 0).model).collect();
        let y: Vec<u32> = (0..32).map(|_| d.next_request(0, 0).model).collect();
        assert_ne!(x, y);
    }
}
