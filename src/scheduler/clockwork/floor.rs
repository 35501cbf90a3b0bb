//! A floor under what admission in hindsight refuses (`PolicyConfig::hindsight_floor`).
//!
//! Under overload the device serves the most urgent model first, and a model whose runs
//! are long and whose objective is loose is overtaken by the others' requests: most of
//! its admitted requests wait until they are refused. Admission in hindsight
//! (`hindsight.rs`) then refuses its arrivals too, rightly one by one (each would more
//! likely miss than be served), but the model's share of what is served falls with them:
//! over random mixes at 2x-8x, a model kept 5% of its requests or more without it and
//! fewer with it in a quarter of the mixes. Nothing in Clockwork's policy gives a model a
//! share. Here, a model that is losing requests (refused at arrival or after waiting, over
//! the last two seconds) and has had fewer than `hindsight_floor` of its arrivals taken
//! into batches is admitted without its margin, as if hindsight were off for it, until it
//! has. A model losing nothing, or served above its floor, is judged as before.
//!
//! Tried and dropped: lifting such a model ahead of the others on its devices (in the
//! strategy queues) instead. It kept every model above the floor but refused after
//! waiting the requests of the models it overtook, which hindsight then refused at
//! arrival in turn: over the random mixes 0.4% fewer served than with neither rule at 5%,
//! 7% fewer at 10%, where this serves 0.9% more at 5% (docs/EXPERIMENTS.md, "A floor under
//! it").

use super::shared::Counts;
use super::ClockworkPolicy;
use crate::model::ModelId;
use crate::time::Nanos;

/// Whether a model that saw `arrived` arrivals over the window, and `flow` of them, is
/// below a floor of `share`: it lost some, and fewer than `share` of its arrivals were
/// taken into batches.
pub(super) fn below_floor(arrived: u64, flow: Counts, share: f64) -> bool {
    let refused_at_arrival = arrived.saturating_sub(flow.admitted);
    let lost = refused_at_arrival.saturating_add(flow.dropped);
    lost > 0 && (flow.planned as f64) < share * arrived as f64
}

impl ClockworkPolicy {
    /// Whether `model`, at `now`, is losing requests and below its floor of service.
    pub(super) fn below_floor(&self, model: ModelId, now: Nanos) -> bool {
        let share = self.params.hindsight_floor;
        if share <= 0.0 {
            return false;
        }
        let m = &self.models[model.0 as usize];
        below_floor(m.rate.count(now), m.flow.counts(now), share)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(admitted: u64, planned: u64, dropped: u64) -> Counts {
        Counts {
            admitted,
            planned,
            dropped,
        }
    }

    #[test]
    fn only_a_model_losing_requests_and_under_its_share_is_below() {
        // Losing nothing: never below, however little was planned yet.
        assert!(!below_floor(100, flow(100, 0, 0), 0.05));
        // Refused at arrival, 4 of 100 planned: below 5%, not below 4%.
        assert!(below_floor(100, flow(10, 4, 0), 0.05));
        assert!(!below_floor(100, flow(10, 4, 0), 0.04));
        // Refused after waiting only: losing too.
        assert!(below_floor(100, flow(100, 4, 96), 0.05));
        assert!(!below_floor(100, flow(100, 5, 95), 0.05));
        // A floor of 0 holds nothing up.
        assert!(!below_floor(100, flow(0, 0, 0), 0.0));
    }
}
