//! How far ahead a request may book its devices (`PolicyConfig::booking_horizon`).
//!
//! Admission (`admit.rs`) books a device up to each request's own deadline, and the
//! device serves the model whose front must start soonest. Under sustained overload that
//! hands a shared device to the model of the longest objectives: its queue fills until its
//! newest request just finishes by its deadline, so its oldest requests are always due
//! within the next tens of milliseconds, and a request of a tighter objective always finds
//! that much work due before it and is refused at arrival, however little device time it
//! needs. The zoo's resnet (200 ms objectives, 1.3 ms an item on a cpu) held its device
//! for 17.8 of 20 s so, while the three models of 50 ms objectives (0.01-0.05 ms an item)
//! were refused nearly whole: a sixth of the device's capacity served in time
//! (docs/EXPERIMENTS.md, "A model of long objectives books the device").
//!
//! So a request whose objective is looser than the tightest among the other models busy
//! on its devices (arrivals within the rate window) may book them no further ahead than
//! that objective, plus its own run: its projected finish must come by then. The looser
//! model's queued requests are then due after any tight request that arrives, which goes
//! first, and the looser model takes what the tight ones leave; under overload its queue
//! refills at once, so the device does not idle for the bound. The other models' work
//! counted ahead of such a request is what is due before the bound, not before its
//! deadline: it starts by then. (Counted to its deadline, the tight models' work to come
//! over the whole of a 200 ms objective held resnet out while the device idled half the
//! time: 432 and 470 of its requests in time in 20 s, against about 10,000.) A model below
//! its floor of service (`floor.rs`) is judged without the bound; a model alone, or among
//! models of objectives as loose as its own, is judged as before.
//!
//! The bound holds only on a device offered more than it can serve: its residents'
//! arrivals over the rate window, each costed per item at its most efficient batch, ask
//! for more than all of its time ([`ClockworkPolicy::overloaded`]). Below that the looser
//! model's queue drains between its bursts, a tight request that arrives meanwhile is due
//! before its work and goes first, and the bound would only refuse the burst's tail: a
//! model of 200 ms objectives arriving in bursts of 16 (43% of the device) beside one 50 ms
//! request every 400 ms kept 1,349 of 3,264 in time with the bound held always, 2,937
//! without it, the tight requests all in time either way (`tests/policy_overload.rs`).
//!
//! The window's mean lags the onset of a burst: from a calm spell to three times the
//! device, it reads overload only once most of the window has seen the burst. Until then
//! the looser model booked the device to its objectives, and the tight models were
//! refused at arrival or timed out for most of a second (`tests/policy_onset.rs`: the
//! zoo's shape at its ONNX Runtime times, 1,000/s then 6,000/s). So the bound also holds
//! where the last [`ONSET`] buckets alone ask for more than the device's time, if the busy
//! neighbours asked for at least [`ONSET_SHARE`] of it over them. Without that share the
//! short window alone read the bursts above as overload (they come close together often
//! enough) and refused their tails, 2,690 of 3,264 in time, while the tight trickle beside
//! them lost nothing either way.
//!
//! That window was first four buckets (300-400 ms of arrivals). From outside, a bursty
//! client against the emulated zoo still found the tight models timing out for the first
//! 300 ms of every burst: the onset read overload 120-180 ms in, and until then resnet
//! and the pipeline's classify sub-requests (the classifier's requests of some 240 ms,
//! what is left of the pipeline's 250 ms) booked the device to their objectives. Two
//! buckets (100-200 ms) read it sooner, and `timed_out` fell from 282-502 to 0-15 in runs of
//! three bursts (docs/EXPERIMENTS.md, "The onset, read sooner").

use super::admit::efficient_batch;
use super::shared::MAX_OTHERS;
use super::{ClockworkPolicy, ModelState};
use crate::model::ModelId;
use crate::scheduler::device::DeviceMirror;
use crate::time::Nanos;

/// Device time a second holds, in ns: the overloaded device's residents ask for more.
const SECOND: f64 = 1e9;

/// Rate buckets (of 100 ms) over which the onset of a burst reads as overload: the current
/// one and the one before, so at least 100 ms of arrivals, enough to hold the device's
/// recent demand rather than one batch's, and the emulated zoo's burst (three times the
/// device) read 40-90 ms after it began, within a tight request's objective. (Four
/// buckets read it 120-180 ms in, when the looser models had booked the device past the
/// tight objectives.)
const ONSET: usize = 2;

/// The share of the device's time the busy neighbours must have asked for over those
/// buckets for the onset to count: the tight requests the bound serves are then a real
/// part of the device's work, not a trickle that fits between the looser model's bursts
/// (the zoo's tight models ask about a quarter at its burst; the trickle beside the
/// bursts above, a quarter of a percent).
const ONSET_SHARE: f64 = 0.05;

impl ClockworkPolicy {
    /// The latest finish a request of `model` arriving at `now` with internal `deadline`
    /// and run alone `single` may be admitted with: `deadline`, or sooner where a busy
    /// model of a tighter objective shares one of its devices.
    pub(super) fn booking_bound(
        &self,
        model: ModelId,
        now: Nanos,
        (deadline, single): (Nanos, Nanos),
    ) -> Nanos {
        let Some(tightest) = self.tightest_neighbour(model, now) else {
            return deadline;
        };
        // A request no looser than the neighbour's objective keeps its own deadline.
        now.saturating_add(tightest)
            .saturating_add(single)
            .min(deadline)
    }

    /// The tightest objective (arrival to internal deadline, of its last direct request)
    /// among the models other than `model` resident on an overloaded device that holds it
    /// and with arrivals within the rate window; `None` if there is none.
    fn tightest_neighbour(&self, model: ModelId, now: Nanos) -> Option<Nanos> {
        let m = &self.models[model.0 as usize];
        m.ready_on
            .iter()
            .map(|d| &self.devices[d.0 as usize])
            .filter_map(|device| {
                let residents = device.residents.keys();
                let tightest = residents
                    .filter(|&&o| o != model)
                    .take(MAX_OTHERS)
                    .map(|&o| &self.models[o.0 as usize])
                    .filter(|o| o.flow.objective() > 0 && o.rate.any(now))
                    .map(|o| o.flow.objective())
                    .min()?;
                // Costed only where a busy neighbour could bound the request.
                self.overloaded(device, model, now).then_some(tightest)
            })
            .min()
    }

    /// Whether the models resident on `device` were offered, over the rate window that ends
    /// at `now`, more than it can serve: each one's arrivals per second at
    /// [`Self::cost_per_item`] add up to more than a second a second. Or over its last
    /// [`ONSET`] buckets, where the busy residents other than `model` asked for at least
    /// [`ONSET_SHARE`] of its time over them. The first [`MAX_OTHERS`] residents are
    /// counted.
    fn overloaded(&self, device: &DeviceMirror, model: ModelId, now: Nanos) -> bool {
        let (mut window, mut recent, mut neighbours) = (0.0, 0.0, 0.0);
        for &r in device.residents.keys().take(MAX_OTHERS) {
            let m = &self.models[r.0 as usize];
            let rate = m.rate.per_second(now);
            if rate <= 0.0 {
                continue;
            }
            let cost = self.cost_per_item(m, device);
            window += rate * cost;
            let asked = m.rate.recent_per_second(now, ONSET) * cost;
            recent += asked;
            if r != model && m.flow.objective() > 0 {
                neighbours += asked;
            }
        }
        window > SECOND || (recent > SECOND && neighbours > ONSET_SHARE * SECOND)
    }

    /// The device time (ns) an arrival of `m` asks of `device`: an item at the most
    /// efficient batch allowed there (a lower bound), split over the model's replicas
    /// ready or loading.
    fn cost_per_item(&self, m: &ModelState, device: &DeviceMirror) -> f64 {
        let batch = efficient_batch(
            m,
            device.runs(),
            (usize::MAX, false),
            self.params.max_exec_time,
        );
        batch.mean as f64 / batch.served.max(1) as f64 / m.replicas()
    }
}
