//! Admission: what happens to a request the moment it arrives. It is refused at once when
//! nobody holds its model and a load could not finish in time, or when the queue ahead of
//! it on the replicas that hold the model cannot drain in time; otherwise it waits in its
//! model's queue for a batch.
//!
//! A pipeline's sub-request (`Request::latest_finish`) is planned by its stage's deadline
//! but judged by its latest useful finish (its root's deadline less R_v, the least time the
//! stages after it need): refused at arrival when the projection cannot finish it by that,
//! and served past its stage deadline while it can.
//!
//! Refusing at arrival rather than when the request finally expires is what keeps
//! refusals fast under overload: a request the plan cannot serve learns so in
//! microseconds instead of after waiting most of its objective, and its client can go
//! elsewhere while there is still time.

use super::hindsight::Keep;
use super::{ClockworkPolicy, ModelState, DEVICE};
use crate::model::ModelId;
use crate::scheduler::cover;
use crate::scheduler::device::{DeviceMirror, Runs};
use crate::scheduler::estimate::{Estimator, DRIFT_RUNS};
use crate::scheduler::queue::Queued;
use crate::scheduler::view::Buffer;
use crate::scheduler::{Answer, Plan, Refusal, Request, Verdict};
use crate::time::Nanos;

/// Replicas the projection follows one by one; a model on more devices is not refused by
/// projection (rare, and then its queue drains fast anyway).
const MAX_PROJECTED: usize = 8;

impl ClockworkPolicy {
    /// Admits `request` at `now`: refuses it at once, or queues it.
    pub(super) fn admit_request(&mut self, request: Request, now: Nanos, plan: &mut Plan) {
        // The controller admits only models it added (see `Policy::admit`).
        self.models[request.model.0 as usize].rate.record(now);
        let model = &self.models[request.model.0 as usize];
        let quickest = model.exec.iter().map(|k| k[0].get()).min().unwrap_or(0);
        if self.buffer.saturating_add(quickest) >= request.slo {
            // Margins so wide that not even the quickest run fits: stale ones give way
            // first (see `refresh_margins`).
            self.refresh_margins(now);
        }
        let (deadline, latest) = self.internal_bounds(request);
        let model = &self.models[request.model.0 as usize];
        let p = &self.params;
        let items = request.items();
        let Some(alone) = cover(&model.batches, items) else {
            // More items than its largest batch: no plan can ever run it (the controller
            // turns such requests away before admission, naming both numbers).
            refuse(plan, request, Refusal::DeadlineUnreachable);
            return;
        };
        let single = model.exec.iter().map(|k| k[alone].get()).max().unwrap_or(0);
        let cold = model.ready_on.is_empty() && model.loading == 0;
        let load = model.load.iter().map(Estimator::get).min().unwrap_or(0);
        let hopeless = now + p.lanes.expected_lag + load + single > latest;
        // Device time it needs over the load budget; at least 1 so that a model that takes
        // no time still counts as wanted.
        let demand = (single.saturating_mul(DEVICE) / p.load_budget).max(1);
        if p.early_drop && cold && hopeless {
            // Nobody holds the model and a load could not finish in time: say so now, and
            // remember the miss so that the model gets loaded for the next requests.
            self.models[request.model.0 as usize].missed += demand;
            self.rerank(request.model);
            refuse(plan, request, Refusal::DeadlineUnreachable);
            return;
        }
        let judged = Judged {
            deadline,
            latest,
            items,
            single,
        };
        let Some((projected, trial)) = self.judge_queue(request, now, judged) else {
            refuse(plan, request, Refusal::DeadlineUnreachable);
            return;
        };
        let item = Queued {
            id: request.id,
            deadline,
            latest,
            due: request.deadline().max(request.latest_finish.unwrap_or(0)),
            demand,
            items,
            alone: false,
            projected,
        };
        if trial {
            let m = &mut self.models[request.model.0 as usize];
            m.hindsight.admitted(request.id, latest, now);
        }
        let direct = request.latest_finish.is_none();
        let objective = direct.then(|| deadline.saturating_sub(request.arrival));
        self.models[request.model.0 as usize]
            .flow
            .admitted(now, objective);
        // Enqueueing re-ranks the model, with its new rate.
        self.enqueue(request.model, item);
    }

    /// Whether the queue ahead of `request` lets it finish in time (`drain_in_time`, with
    /// its model's margin in hindsight) without pushing out those admitted before it
    /// (`behind.rs`): its projected finish (0 without a projection) and whether it goes
    /// as its model's trial (`hindsight.rs`), or `None` to refuse it.
    fn judge_queue(&mut self, request: Request, now: Nanos, j: Judged) -> Option<(Nanos, bool)> {
        let p = self.params;
        if !p.early_drop {
            return Some((0, false));
        }
        // A pipeline's sub-request is judged by its own queue only: its stage deadline is
        // earlier than its root's, and newly arrived roots must not push it out.
        let shared = p.shared_arrival && request.latest_finish.is_none();
        // A tight objective (a few runs) is judged without hindsight; so is a model below
        // its floor of service (`floor.rs`).
        let loose = request.slo >= j.single.saturating_mul(p.hindsight_min_runs.into());
        let below_floor = self.below_floor(request.model, now);
        let keep = if p.admission_hindsight && loose && !below_floor {
            self.models[request.model.0 as usize].hindsight.keep(now)
        } else {
            Keep::default()
        };
        // A looser request books the device no further ahead than its busy neighbours'
        // tightest objective (`horizon.rs`), unless its model is below its floor of
        // service (`floor.rs`): the bound must not starve it. Bounded, it starts by then,
        // so the other models' work that goes first is what is due before then.
        let bounded = shared && p.booking_horizon && !below_floor;
        let latest = if bounded {
            self.booking_bound(request.model, now, (j.latest, j.single))
        } else {
            j.latest
        };
        let others = shared.then_some(if bounded { latest } else { j.deadline });
        let ahead = (j.deadline, j.items, others);
        let projected = self.drain_in_time(request.model, now, ahead, (latest, keep.margin))?;
        let new = Newcomer {
            deadline: j.deadline,
            items: j.items,
            shared,
            alone: j.single,
        };
        if p.protect_admitted && !self.keeps_those_behind(request.model, now, new) {
            return None;
        }
        Some((projected, keep.trial))
    }

    /// A request's internal deadline and latest useful finish: its objective less a
    /// buffer for estimate error (learned per device, see `rewiden_buffer`), but never
    /// planned past the objective itself.
    fn internal_bounds(&self, request: Request) -> (Nanos, Nanos) {
        let buffer = self.objective_buffer();
        let window = request.slo - buffer.kept_off(request.slo);
        bounds(
            request.arrival.saturating_add(window),
            request,
            buffer.width,
        )
    }

    /// The margin taken off every objective (the edge keeps it too: `ModelView::buffer`):
    /// until every device has learned its margins, an objective keeps at least
    /// `schedule_ahead` plus the configured buffer, or nothing tight could ever run and be
    /// measured.
    pub(super) fn objective_buffer(&self) -> Buffer {
        Buffer {
            width: self.buffer,
            floor: if self.learned {
                0
            } else {
                self.params.schedule_ahead + self.buffer
            },
        }
    }

    /// Whether a request of `model` with (internal deadline, items, until when other models'
    /// work counts), queued now behind the requests due before it, could finish by
    /// `latest` on the replicas that hold the model, with the estimates the plan uses and,
    /// if it would wait behind other work, the replicas' drift kept as a margin
    /// ([`Projection::margin`]). Before answering no on estimates a slow spell left
    /// behind, they go back to their seeds (see `refresh_estimates`).
    fn drain_in_time(
        &mut self,
        model: ModelId,
        now: Nanos,
        ahead: (Nanos, u32, Option<Nanos>),
        (latest, hindsight): (Nanos, Nanos),
    ) -> Option<Nanos> {
        let fits = |projection: Option<Projection>| match projection {
            None => Some(0),
            Some(p) => {
                let finish = p.finish.saturating_add(p.margin);
                (finish.saturating_add(hindsight) <= latest).then_some(finish.max(1))
            }
        };
        fits(self.projected_finish(model, now, ahead, latest)).or_else(|| {
            self.refresh_estimates(model, now)
                .then(|| fits(self.projected_finish(model, now, ahead, latest)))
                .flatten()
        })
    }

    /// When a request with internal `deadline` arriving at `now` would finish if the
    /// model's replicas drained the queue ahead of it (the requests due no later, less
    /// those about to expire; the projection stops once it passes `bound`) in the most
    /// efficient batches the queue fills, each replica taking the next batch when its
    /// planned work ends (or its load), the batches ahead at their means with
    /// `queue_at_mean` (see [`drain`]). `None`: no
    /// projection (no replica ready or loading, so the load rules decide; or too many to
    /// follow).
    ///
    /// With `others` (some instant), each replica starts only after the work of the
    /// other models on its device that is due before it (`shared.rs`; the request's
    /// deadline, or sooner where it may book the device only so far: `horizon.rs`);
    /// without, other models' work still to be planned is not counted (optimistic on
    /// shared devices, so the plan still refuses what turns out hopeless later, as it
    /// always did).
    pub(super) fn projected_finish(
        &self,
        model: ModelId,
        now: Nanos,
        (deadline, items, others): (Nanos, u32, Option<Nanos>),
        bound: Nanos,
    ) -> Option<Projection> {
        let m = &self.models[model.0 as usize];
        let mut replicas = self.replicas_free(model, now, others)?;
        let (base, idle) = (replicas.base, replicas.idle);
        let free = replicas.free();
        free.first()?;
        // The model's own requests that expire: those that could not finish even if
        // started when a replica's planned work ends (other models' work due before the
        // new request is not necessarily due before them).
        let expiring = m
            .queue
            .items_before(base.saturating_add(self.best_single(model)));
        let ahead = m.queue.items_before(deadline.saturating_add(1));
        let remaining = ahead.saturating_sub(expiring) + items as usize;
        // Whole requests of several items leave batches short of their size: the last
        // batch may then be a padded one.
        let pad = items > 1 || m.queue.items() > m.queue.len();
        let rules = Rules {
            bound,
            max_exec: self.params.max_exec_time,
            at_mean: self.params.queue_at_mean,
        };
        let behind = !idle || remaining > items as usize;
        let finish = drain(m, free, (remaining, pad), rules)?;
        let queued = finish.saturating_sub(now);
        // The drift is a share of stretches of `DRIFT_RUNS` runs: a wait of fewer runs is
        // what the estimates' percentiles cover (kept there, it refused 3-8% of what a
        // noisy device served at objectives of a few runs).
        let long = queued >= self.best_single(model).saturating_mul(DRIFT_RUNS as u64);
        let margin = if behind && long && self.keeps_drift_margin(model, now) {
            self.drift_margin(model, queued)
        } else {
            0
        };
        Some(Projection { finish, margin })
    }

    /// When each replica of `model` (ready, or loading: from when its load lane is
    /// done, an upper bound on when the weights are ready; suspect ones left out) could
    /// start a request arriving at `now`: its exec lane's planned work, and with `others`
    /// the other models' work due before that instant (`shared.rs`). `None`: more
    /// replicas than the projection follows.
    pub(super) fn replicas_free(
        &self,
        model: ModelId,
        now: Nanos,
        others: Option<Nanos>,
    ) -> Option<Replicas> {
        let m = &self.models[model.0 as usize];
        let lanes = self.params.lanes;
        let mut replicas = Replicas {
            free: [(0, Runs::of_kind(0)); MAX_PROJECTED],
            len: 0,
            base: Nanos::MAX,
            idle: false,
        };
        // Scanning the devices for replicas being loaded is needed only while a load is
        // in flight.
        let loading = (m.loading > 0).then(|| {
            self.devices
                .iter()
                .filter(|d| d.residents.get(&model).is_some_and(|r| !r.ready))
        });
        let ready = m.ready_on.iter().map(|d| &self.devices[d.0 as usize]);
        for device in ready.chain(loading.into_iter().flatten()) {
            if device.suspect {
                continue;
            }
            if replicas.len == MAX_PROJECTED {
                return None;
            }
            let timing = device.timing(lanes);
            let mut at = device.exec.free_at(now, timing);
            if !device.is_ready(model) {
                at = at.max(device.load.free_at(now, timing));
            }
            replicas.base = replicas.base.min(at);
            if let Some(until) = others {
                let window = (now, at, until);
                at = at.saturating_add(self.others_ahead(device, model, window));
            }
            replicas.idle |= at <= now.saturating_add(timing.expected_lag);
            replicas.free[replicas.len] = (at, device.runs());
            replicas.len += 1;
        }
        Some(replicas)
    }

    /// The narrowest drift margin of the model's replicas in service (`estimate::Drift`)
    /// for a request projected to finish `queued` from now: it runs on whichever frees
    /// first, and a replica that runs many times slower than its kind (its drift then a
    /// multiple of its queue) would otherwise hold every request of the model to its pace,
    /// refusing what the others serve.
    fn drift_margin(&self, model: ModelId, queued: Nanos) -> Nanos {
        let m = &self.models[model.0 as usize];
        let in_service = m.ready_on.iter().map(|d| &self.devices[d.0 as usize]);
        let drift = |d: &DeviceMirror| d.margins().drift(queued);
        in_service
            .filter(|d| !d.suspect)
            .map(drift)
            .min()
            .unwrap_or(0)
    }
}

/// What admission projects for an arrival (`ClockworkPolicy::projected_finish`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Projection {
    /// When it would finish.
    pub(super) finish: Nanos,
    /// What it keeps before its objective besides: if it would wait behind other work (no
    /// replica idle, or requests queued ahead) for `DRIFT_RUNS` runs alone or more, the
    /// narrowest drift of the replicas in service for the time until it finishes
    /// (`estimate::Drift`: the share by which a stretch of their runs fell behind the
    /// means the projection counts them at), where `drift_margin` keeps it
    /// (`ClockworkPolicy::keeps_drift_margin`); else nothing.
    pub(super) margin: Nanos,
}

/// A request past the checks that need no queue, as [`ClockworkPolicy::judge_queue`] takes
/// it.
#[derive(Clone, Copy, Debug)]
struct Judged {
    /// Its internal deadline and latest useful finish (`internal_bounds`).
    deadline: Nanos,
    latest: Nanos,
    items: u32,
    /// Its run alone at the estimate.
    single: Nanos,
}

/// A request about to be admitted, as [`ClockworkPolicy::keeps_those_behind`] sees it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Newcomer {
    /// Its internal deadline: where it goes in the queue.
    pub(super) deadline: Nanos,
    /// Its items.
    pub(super) items: u32,
    /// Whether other models' queued work counts on shared devices (as for its own
    /// projection).
    pub(super) shared: bool,
    /// Its run alone at the estimate: the most it can delay anyone behind it.
    pub(super) alone: Nanos,
}

/// The replicas a projection runs on (`ClockworkPolicy::replicas_free`).
pub(super) struct Replicas {
    /// (When it could start, where its runs are estimated from), for the first `len`.
    free: [(Nanos, Runs); MAX_PROJECTED],
    len: usize,
    /// The soonest any of them frees of its own planned work (other models' queued work
    /// not counted).
    pub(super) base: Nanos,
    /// One could start a request as soon as anything can: only the queue ahead of it
    /// would keep it waiting.
    pub(super) idle: bool,
}

impl Replicas {
    /// Each replica's (start, runs), to be advanced as batches are given to it.
    pub(super) fn free(&mut self) -> &mut [(Nanos, Runs)] {
        &mut self.free[..self.len]
    }
}

/// How a projection runs its batches.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rules {
    /// Once the soonest free replica is past it, the projection stops there.
    pub(super) bound: Nanos,
    /// No batch estimated above this is formed (`max_exec_time`).
    pub(super) max_exec: Nanos,
    /// The batches ahead of the new request's own count at their windows' means, its own
    /// at the estimate (`queue_at_mean`); else every batch at the estimate.
    pub(super) at_mean: bool,
}

/// When replicas free at `free` (time, where their runs are estimated from) finish
/// `remaining` items of `m`, each taking the next most efficient batch when it frees
/// (`pad`: see [`efficient_batch`]); once the soonest free replica is past the rules'
/// bound, that time. `None` without replicas.
///
/// Why the batches ahead may count at their mean: the estimate is a high percentile of one
/// run, and a queue of runs adds up to close to their mean times their count (one run in a
/// hundred is slow, not every one); summing percentiles made a cpu device refuse a request
/// with three ahead of it at a third of its capacity. The last batch, the one that carries
/// the new request, keeps the estimate: it is what the plan will check when it starts.
fn drain(
    m: &ModelState,
    free: &mut [(Nanos, Runs)],
    (mut remaining, pad): (usize, bool),
    rules: Rules,
) -> Option<Nanos> {
    // While the largest batch's worth of items remains, a replica's most efficient batch
    // does not depend on how many: chosen once per replica, not per batch (under overload
    // a projection runs through many batches on every arrival).
    let largest = m.batches.last().map_or(1, |&b| b as usize);
    let mut full: [Option<Batch>; MAX_PROJECTED] = [None; MAX_PROJECTED];
    loop {
        let (i, at) = free
            .iter()
            .enumerate()
            .min_by_key(|(_, f)| f.0)
            .map(|(i, f)| (i, f.0))?;
        if at > rules.bound {
            return Some(at);
        }
        let runs = free[i].1;
        let batch = if remaining >= largest {
            *full[i].get_or_insert_with(|| efficient_batch(m, runs, (largest, pad), rules.max_exec))
        } else {
            efficient_batch(m, runs, (remaining, pad), rules.max_exec)
        };
        if remaining <= batch.served {
            return Some(at.saturating_add(batch.estimate));
        }
        let ahead = if rules.at_mean {
            batch.mean
        } else {
            batch.estimate
        };
        free[i].0 = at.saturating_add(ahead);
        remaining -= batch.served;
    }
}

/// A batch a projection runs: the items it serves and what it costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Batch {
    pub(super) served: usize,
    /// Its estimate (a high percentile of its window).
    pub(super) estimate: Nanos,
    /// The mean of its window.
    pub(super) mean: Nanos,
}

/// The allowed batch of at most `items` items that serves the most per unit of device
/// time on a device whose runs are estimated from `runs` (within `max_exec_time` above
/// batch 1), by its mean (as the plan chooses its batches: `ClockworkPolicy::exec_mean`).
/// With `pad`, the smallest batch that holds every item is a candidate too.
pub(super) fn efficient_batch(
    m: &ModelState,
    runs: Runs,
    (items, pad): (usize, bool),
    max_exec_time: Nanos,
) -> Batch {
    let (exec, slowdown) = (&m.exec[runs.kind], runs.slowdown);
    let (mut best, mut at) = ((1, slowdown.scale(exec[0].mean())), 0);
    for (b, &size) in m.batches.iter().enumerate().skip(1) {
        let est = slowdown.scale(exec[b].get());
        let covers = pad && b > 0 && m.batches[b - 1] < items as u32;
        if (size as usize > items && !covers) || est > max_exec_time {
            break;
        }
        let (served, mean) = ((size as usize).min(items), slowdown.scale(exec[b].mean()));
        // served / mean > best.0 / best.1, without division.
        if served as u128 * u128::from(best.1) >= best.0 as u128 * u128::from(mean) {
            best = (served, mean);
            at = b;
        }
    }
    Batch {
        served: best.0,
        estimate: slowdown.scale(exec[at].get()),
        mean: best.1,
    }
}

/// A request's (internal deadline, latest useful internal finish): for a pipeline
/// sub-request the deadline never passes its latest finish, and the latest finish keeps
/// the buffer before it, but never falls before the deadline.
fn bounds(deadline: Nanos, request: Request, buffer: Nanos) -> (Nanos, Nanos) {
    match request.latest_finish {
        None => (deadline, deadline),
        Some(finish) => {
            let deadline = deadline.min(finish);
            (deadline, finish.saturating_sub(buffer).max(deadline))
        }
    }
}

fn refuse(plan: &mut Plan, request: Request, refusal: Refusal) {
    plan.answers.push(Answer {
        request: request.id,
        verdict: Verdict::Refused(refusal),
    });
}

#[cfg(test)]
mod tests;
