//! A fast hasher for the runtime's small integer ids.
//!
//! Model, device, request and action ids are dense integers produced by this process, not
//! by an attacker, so the policy's hot maps need no DoS-resistant hashing: one
//! multiplication spreads them well enough for hashbrown's probing.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Fibonacci hashing of one integer.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map keyed by an id.
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
