//! How long the testbed's devices take: an action's true duration (the model's profile
//! times the testbed's factor, slow spells and noise), the one a device claims, and the
//! checks on a batch's size.

use super::{ActionKind, Event, Measured, Policy, Testbed};
use crate::model::RequestId;
use crate::protocol::core::Lane;
use crate::scheduler::Action;
use crate::time::Nanos;

impl<P: Policy> Testbed<P> {
    /// Runs an action the core started, for its true duration.
    pub(super) fn begin(&mut self, device: usize, lane: Lane, action: Action) {
        let model = action.model.0 as usize;
        let (pages, profile) = &self.truth[model];
        let spell = match self.spells {
            Some((period, length, slower)) if self.now % period < length => slower,
            _ => 1.0,
        };
        let factor = self.factor * spell * (1.0 + self.spread * unit_noise(action.id.0));
        let scaled = |t: Nanos| (t as f64 * factor).round() as Nanos;
        let duration = match &action.kind {
            ActionKind::Load => {
                if let Err(error) = self.devices[device].core.reserve(action.model, *pages) {
                    self.devices[device].core.finish(&action, false);
                    return self.refuse(&action, error);
                }
                scaled(profile.load_latency)
            }
            ActionKind::Unload | ActionKind::Probe => 0,
            ActionKind::Infer { requests } => {
                let latency = self.batch_latency(model, requests);
                scaled(latency)
            }
        };
        let claimed = self.claimed.pop_front().unwrap_or(duration);
        let measured = Measured {
            begin: self.now,
            end: self.now.saturating_add(claimed),
            duration: claimed,
        };
        self.devices[device].running[lane.index()] = Some((action, measured));
        let lane = lane.index();
        self.at(self.now + duration, Event::End { device, lane });
    }

    /// The true run time of a batch of `requests` of `model`: that of the smallest
    /// profiled size that holds their items (padded, as a device runs it). Checks that
    /// it fits an allowed size and that no request was batched before (split).
    fn batch_latency(&mut self, model: usize, requests: &[RequestId]) -> Nanos {
        let mut items = 0;
        for r in requests {
            match self.items.remove(&r.0) {
                Some(n) => {
                    items += n as usize;
                    self.running_items.insert(r.0, n);
                }
                None => self.violation(format!("request {} batched twice", r.0)),
            }
        }
        let profile = &self.truth[model].1;
        let padded = profile
            .batches
            .iter()
            .map(|b| b.batch as usize)
            .filter(|&b| b >= items)
            .min();
        let latency = padded.and_then(|b| profile.latency(b as u32));
        if latency.is_none() || items > self.max_batch {
            self.violation(format!(
                "batch of {items} items for model {model} is not allowed"
            ));
        }
        self.report.batches += 1;
        self.report.batched_requests += requests.len();
        self.report.batched_items += items;
        latency.unwrap_or(0)
    }
}

/// A number in [-1, 1) drawn from `key` (splitmix64's finaliser), for reproducible noise.
fn unit_noise(key: u64) -> f64 {
    let mut z = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}
