//! Profiles stored beside the model (`<version>/profile.json`, a list with one record per
//! device kind), so that a restart serves at once instead of profiling again.
//!
//! A kind's stored profile is reused only if it was measured for the same graph bytes (by
//! hash), the same device kind, the same profiling settings and the same batch sizes;
//! anything else measures anew and replaces that kind's record, leaving the other kinds'.
//! A file of another shape (the single record of earlier versions, whose load time was a
//! plan build) counts as absent.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::PROFILE_FILE;
use crate::gpu::cpu::profile::{MeasuredProfile, ProfileSettings};
use crate::stats::Summary;
use crate::time::LONGEST;

/// What `profile.json` holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredProfile {
    /// FNV-1a hash of the graph's bytes, in hex.
    pub graph_hash: String,
    /// Device kind it was measured on (`cpu`, `cpu-4t`).
    pub kind: String,
    pub settings: ProfileSettings,
    pub batch_sizes: Vec<u32>,
    pub profile: MeasuredProfile,
}

impl StoredProfile {
    /// Whether it was measured for this graph, kind, settings and batch sizes.
    pub fn matches(&self, key: &ProfileKey<'_>) -> bool {
        self.graph_hash == key.graph_hash
            && self.kind == key.kind
            && self.settings == key.settings
            && self.batch_sizes == key.batch_sizes
    }

    /// Whether it holds what a measurement could have: a summary per batch size, in their
    /// order, and durations that are finite, non-negative and at most [`LONGEST`]. Its
    /// numbers seed the plans, and the file is outside data (a duration of 1e300 ns read
    /// back from a damaged file overflowed the controller's arithmetic).
    pub fn plausible(&self) -> bool {
        let profile = &self.profile;
        let sizes = profile.batches.iter().map(|b| b.batch);
        sizes.eq(self.batch_sizes.iter().copied())
            && plausible(&profile.load)
            && profile.batches.iter().all(|b| plausible(&b.latency))
    }
}

/// Whether a summary of durations in nanoseconds could have been measured.
fn plausible(summary: &Summary) -> bool {
    let durations = [
        summary.mean,
        summary.p50,
        summary.p99,
        summary.min,
        summary.max,
    ];
    let in_range = |v: f64| (0.0..=LONGEST as f64).contains(&v);
    durations.into_iter().all(in_range) && summary.cv.is_finite() && summary.cv >= 0.0
}

/// What a stored profile must have been measured for.
pub struct ProfileKey<'a> {
    pub graph_hash: String,
    pub kind: &'a str,
    pub settings: ProfileSettings,
    pub batch_sizes: &'a [u32],
}

/// Every stored profile of the version in `dir`. A file that cannot be read or parsed
/// counts as empty (its kinds will be measured again).
pub fn load_all(dir: &Path) -> Vec<StoredProfile> {
    std::fs::read_to_string(dir.join(PROFILE_FILE))
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default()
}

/// The stored profile of the version in `dir` that matches `key`, if there is one and it
/// is [plausible](StoredProfile::plausible) (else the kind is measured anew, and the
/// measurement replaces it).
pub fn load(dir: &Path, key: &ProfileKey<'_>) -> Option<StoredProfile> {
    let found = load_all(dir).into_iter().find(|s| s.matches(key))?;
    if found.plausible() {
        return Some(found);
    }
    let path = dir.join(PROFILE_FILE);
    let kind = key.kind;
    tracing::warn!(path = %path.display(), kind, "the stored profile holds numbers no measurement could have: measuring anew");
    None
}

/// Stores `record` beside the model, replacing the record of its kind. Failing to write
/// (a read-only repository) only costs a new measurement next time, so it is logged, not
/// fatal.
pub fn save(dir: &Path, record: StoredProfile) {
    let mut all = load_all(dir);
    all.retain(|s| s.kind != record.kind);
    all.push(record);
    let path = dir.join(PROFILE_FILE);
    let written = serde_json::to_string_pretty(&all)
        .map_err(std::io::Error::other)
        .and_then(|text| std::fs::write(&path, text));
    if let Err(error) = written {
        tracing::warn!(path = %path.display(), %error, "cannot store the profile");
    }
}

/// FNV-1a, 64 bits: a stable fingerprint of the graph bytes (std's hasher may change
/// between Rust releases, and this one only has to notice a changed file).
pub fn graph_hash(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}
