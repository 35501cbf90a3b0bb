//! Batching and early refusal: which batch each device runs next.
//!
//! Requests are ordered by their internal deadline but served and dropped by their latest
//! useful finish (`Queued::latest`, the deadline itself unless a pipeline's sub-request
//! still has time after its stage's share; see `admit.rs`).

use std::cmp::Reverse;

use super::hindsight::Left;
use super::{ClockworkPolicy, Work};
use crate::model::{DeviceId, ModelId};
use crate::scheduler::device::{Expected, Runs};
use crate::scheduler::queue::Queued;
use crate::scheduler::{cover, ActionKind, Plan, Refusal, Verdict};
use crate::time::Nanos;

/// How much more requests per unit of device time a batch must serve than the best batch
/// that leaves nobody behind, before it may leave behind requests a smaller batch would
/// still serve in time.
const SKIP_GAIN: f64 = 1.08;

/// The first instant at which a request with internal `deadline` cannot finish even if
/// started at once.
pub(super) fn expiry(deadline: Nanos, single: Nanos) -> Nanos {
    deadline.saturating_sub(single) + 1
}

impl ClockworkPolicy {
    /// Latest start time of the model's most urgent strategy: its front deadline less the
    /// estimate of the batch it would run, the one among those its queue fills (and at
    /// least the one its front needs, within `max_exec_time` above it) that serves the
    /// most per unit of device time; of equals, the smallest.
    ///
    /// Not simply the largest batch the queue fills: where a larger batch is no cheaper
    /// per request (on a cpu, where it may even be dearer: the zoo's resnet runs batch 8
    /// in about 10 times its batch 1), ranking a model by it puts it first for as long as its
    /// queue stays full (under overload, always), though it then runs small batches, and
    /// the requests the other models resident on the device admitted wait behind it until
    /// they time out.
    fn priority(&self, model: ModelId) -> Option<Nanos> {
        let m = &self.models[model.0 as usize];
        let front = m.queue.front()?;
        let items = m.queue.items();
        let needs = cover(&m.batches, front.items).unwrap_or(0);
        // (size, mean, estimate) of the best so far: compared by the mean, ranked by the
        // estimate (see `exec_mean`).
        let first = (
            self.worst_mean(model, needs),
            self.worst_estimate(model, needs),
        );
        let mut best = (m.batches[needs] as usize, first.0, first.1);
        for b in needs + 1..m.batches.len() {
            let est = self.worst_estimate(model, b);
            if m.batches[b] as usize > items || est > self.params.max_exec_time {
                break;
            }
            let (size, mean) = (m.batches[b] as usize, self.worst_mean(model, b));
            // size / mean > best.0 / best.1, without division.
            if size as u128 * u128::from(best.1) > best.0 as u128 * u128::from(mean) {
                best = (size, mean, est);
            }
        }
        Some(front.deadline.saturating_sub(best.2))
    }

    /// Re-files the model after its queue or estimates changed: in the strategy queues of
    /// the devices that hold it (always on `popped_from`, whose entry was consumed), and
    /// in the load ranking.
    pub(super) fn queue_changed(&mut self, model: ModelId, popped_from: Option<DeviceId>) {
        let priority = self.priority(model);
        let m = &mut self.models[model.0 as usize];
        let changed = priority != m.priority;
        m.priority = priority;
        if let Some(p) = priority {
            for &d in &m.ready_on {
                if changed || Some(d) == popped_from {
                    self.devices[d.0 as usize]
                        .strategies
                        .push(Reverse((p, model)));
                }
            }
        }
        self.rerank(model);
        self.rearm_expiry(model);
    }

    /// Refuses requests that waited until no device could finish them in time.
    ///
    /// Each waiting model has one armed expiry, for the request that expires first (see
    /// `rearm_expiry`); superseded entries are skipped.
    pub(super) fn expire(&mut self, now: Nanos, plan: &mut Plan) {
        while let Some(&Reverse((at, model))) = self.expiries.peek() {
            if at > now {
                break;
            }
            self.expiries.pop();
            if self.models[model.0 as usize].expiry != Some(at) {
                continue;
            }
            if self.refresh_estimates(model, now) {
                // Stale estimates made it look hopeless: look again with the seeds.
                self.models[model.0 as usize].expiry = None;
                self.queue_changed(model, None);
                continue;
            }
            // Not only the front: a pipeline's sub-request behind it may be past its
            // latest useful finish first (see `ModelQueue::expiring_first`).
            let mut queue = std::mem::take(&mut self.models[model.0 as usize].queue);
            let expired = queue.take_expired(|q| now + self.best_alone(model, q.items) > q.latest);
            for q in &expired {
                self.learn_refused(model, q, now);
            }
            self.models[model.0 as usize].queue = queue;
            self.models[model.0 as usize].expiry = None;
            self.queued -= expired.len();
            self.models[model.0 as usize]
                .flow
                .dropped(now, expired.len());
            Self::answer(plan, expired, Verdict::Refused(Refusal::TimedOut));
            // Re-arms for the new front (or the same one, if estimates moved).
            self.queue_changed(model, None);
        }
    }

    /// Before a model's requests are refused on its estimates: sends the estimates whose
    /// newest measurement is older than `estimate_max_age` back to their seeds, so that a
    /// model whose estimates a slow spell raised past its objectives runs (and is measured)
    /// again instead of being refused forever. Answers whether any changed.
    pub(super) fn refresh_estimates(&mut self, model: ModelId, now: Nanos) -> bool {
        let m = &mut self.models[model.0 as usize];
        if now.saturating_sub(m.measured_at) <= self.params.estimate_max_age {
            return false;
        }
        let mut changed = false;
        for (kind, name) in self.kinds.iter().enumerate() {
            let profile = m.info.profile_for(name);
            for (b, &size) in m.batches.iter().enumerate() {
                let seed = profile.latency(size).unwrap_or(0);
                changed |= m.exec[kind][b].reseed(seed);
            }
        }
        changed
    }

    /// Keeps the model's armed expiry on the request that expires first: the front, or a
    /// pipeline sub-request behind it whose latest useful finish comes sooner (armed on
    /// the front alone, such a request waited past its latest until it reached the front,
    /// and its root was answered after its deadline).
    fn rearm_expiry(&mut self, model: ModelId) {
        if !self.params.early_drop {
            return;
        }
        let alone = |items| self.best_alone(model, items);
        let first = self.models[model.0 as usize].queue.expiring_first(alone);
        let armed = first.map(|q| expiry(q.latest, alone(q.items)));
        let m = &mut self.models[model.0 as usize];
        if armed != m.expiry {
            m.expiry = armed;
            if let Some(at) = armed {
                self.expiries.push(Reverse((at, model)));
            }
        }
    }

    /// Fills the device's exec lane up to its horizon (`schedule_ahead` past the soonest
    /// start).
    pub(super) fn schedule_infers(&mut self, device: DeviceId, now: Nanos, plan: &mut Plan) {
        let (lanes, ahead) = (self.params.lanes, self.params.schedule_ahead);
        let horizon = self.devices[device.0 as usize].horizon(now, lanes, ahead);
        loop {
            let d = &mut self.devices[device.0 as usize];
            if d.strategies.is_empty() {
                return;
            }
            let start = d.exec.free_at(now, d.timing(self.params.lanes));
            if start >= horizon {
                return;
            }
            let Some(Reverse((priority, model))) = d.strategies.pop() else {
                return;
            };
            let current =
                d.is_ready(model) && self.models[model.0 as usize].priority == Some(priority);
            if current {
                // A device slower than its kind may have nothing it can finish in time
                // (the others may): it looks at the model again when its priority moves.
                let planned = self.plan_batch(device, model, start, now, plan);
                self.queue_changed(model, planned.then_some(device));
            }
        }
    }

    /// Plans one batch of `model` on `device` starting at `start`, refusing the requests
    /// at the front that cannot finish in time even alone on a device of its kind;
    /// answers whether it planned one.
    fn plan_batch(
        &mut self,
        device: DeviceId,
        model: ModelId,
        start: Nanos,
        now: Nanos,
        plan: &mut Plan,
    ) -> bool {
        let runs = self.devices[device.0 as usize].runs();
        if self.params.early_drop {
            // At its kind's pace, not this device's: a device slower than its kind
            // leaves what it cannot finish to the others.
            self.drop_hopeless(model, runs.kind, start, now, plan);
        }
        if self.models[model.0 as usize].queue.front().is_none() {
            return false;
        }
        let (chosen, skips) = self.choose_batch(model, runs, start);
        let expected = self.run_estimate(model, runs, chosen);
        let p = self.params;
        let m = &mut self.models[model.0 as usize];
        if skips {
            // Left behind on purpose, for a larger batch: not admission's error.
            m.queue.left_behind(start + expected);
        }
        let size = m.batches[chosen] as usize;
        let requests = m
            .queue
            .take_fitting(p.early_drop.then_some(start + expected), size);
        self.queued -= requests.len();
        m.flow.planned(now, requests.len());
        if requests.is_empty() {
            // Nothing it could serve in time (the front was judged by its latest finish,
            // or this device is slower than its kind).
            return false;
        }
        // Whole requests may leave the batch short of its size: it runs at the smallest
        // allowed size that holds its items (padded), if that is no slower.
        let items = requests.iter().map(|q| q.items).sum();
        let b = cover(&self.models[model.0 as usize].batches, items)
            .filter(|&b| self.run_estimate(model, runs, b) <= expected)
            .unwrap_or(chosen);
        let expected = self.run_estimate(model, runs, b);
        // Leave the executor slack to start late, but not so late that it would finish
        // past the most urgent latest finish of the batch (the first one's, unless a
        // pipeline's sub-request has time left after its stage's share).
        let slack = (now + p.lanes.expected_lag + p.schedule_ahead).max(start + p.schedule_ahead);
        let latest = match (p.early_drop, requests.iter().map(|q| q.latest).min()) {
            (true, Some(first)) => slack.min(first.saturating_sub(expected)).max(start),
            _ => slack,
        };
        let ids = requests.iter().map(|q| q.id).collect();
        let action = self.action(
            device,
            model,
            (now, latest, expected),
            ActionKind::Infer { requests: ids },
        );
        let expected = Expected {
            estimate: expected,
            mean: self.run_mean(model, runs, b),
        };
        let d = &mut self.devices[device.0 as usize];
        d.exec.push(action.id, expected, start, now);
        if let Some(r) = d.residents.get_mut(&model) {
            r.infers_in_flight += 1;
            r.last_use = now;
        }
        self.send(plan, action, Work::Infer { batch: b, requests });
        true
    }

    /// Execution estimate on device kind `kind` of the batch a request of `items` items
    /// runs in alone.
    fn alone_on(&self, model: ModelId, kind: usize, items: u32) -> Nanos {
        let m = &self.models[model.0 as usize];
        let b = cover(&m.batches, items).unwrap_or(m.batches.len() - 1);
        self.exec_estimate(model, kind, b)
    }

    /// Tells `model`'s hindsight of `q`, refused after waiting: a miss.
    fn learn_refused(&mut self, model: ModelId, q: &Queued, now: Nanos) {
        let outcome = Left {
            projected: q.projected,
            latest: q.latest,
            in_time: false,
        };
        self.models[model.0 as usize]
            .hindsight
            .learn(q.id, outcome, now);
    }

    /// Refuses the requests at the front that a batch starting at `start` cannot finish
    /// in time even alone (after giving stale estimates a second look): `timed_out`,
    /// like those refused by their expiry, since admission found them servable and they
    /// waited until they were not (under overload on a shared device, other models' work
    /// ran first). Called `deadline_unreachable`, they hid among the refusals at arrival:
    /// in one overload run on the zoo, 34,386 of 36,367 refusals of that name came 5 ms
    /// or more after the controller got the request (docs/EXPERIMENTS.md, "Refused after
    /// waiting, by name").
    fn drop_hopeless(
        &mut self,
        model: ModelId,
        kind: usize,
        start: Nanos,
        now: Nanos,
        plan: &mut Plan,
    ) {
        let front = self.models[model.0 as usize].queue.front().copied();
        if front.is_some_and(|q| start + self.alone_on(model, kind, q.items) > q.latest) {
            self.refresh_estimates(model, now);
        }
        let mut hopeless = Vec::new();
        while let Some(q) = self.models[model.0 as usize].queue.front().copied() {
            if start + self.alone_on(model, kind, q.items) <= q.latest {
                break;
            }
            self.learn_refused(model, &q, now);
            hopeless.extend(self.models[model.0 as usize].queue.pop_front());
        }
        self.queued -= hopeless.len();
        self.models[model.0 as usize]
            .flow
            .dropped(now, hopeless.len());
        Self::answer(plan, hopeless, Verdict::Refused(Refusal::TimedOut));
    }

    /// The batch to run at `start`, as an index into the allowed sizes; its requests are
    /// the most urgent whole ones it finishes in time (`ModelQueue::take_fitting`).
    ///
    /// Goodput first: among allowed sizes within `max_exec_time`, the one that serves the
    /// most requests per unit of device time in time, where a size may skip the few
    /// requests that it would finish too late for, by their latest useful finish (they
    /// stay queued for another device or a smaller batch, or expire: deferred, not
    /// dropped). At moderate load nothing needs skipping and
    /// this is the largest batch the queue fills; under overload it keeps batches large
    /// instead of collapsing to batch 1 for requests that are about to expire (SLOpt's
    /// adaptive batch drop), but only when it serves at least `SKIP_GAIN` times as many
    /// requests per unit of device time as the best batch that leaves nobody behind, both
    /// by the sizes' recent means and by the device kind's profile (`profile_gain`).
    /// Without early drop: the largest batch the queue fills.
    fn choose_batch(&self, model: ModelId, runs: Runs, start: Nanos) -> (usize, bool) {
        let m = &self.models[model.0 as usize];
        let items = m.queue.items();
        // The batch the front request needs alone: always a candidate, so that a request
        // of many items is never starved by sizes too small to hold it.
        let front = m.queue.front().map_or(1, |q| q.items);
        let needs = cover(&m.batches, front).unwrap_or(0);
        let (mut best, mut best_rate, mut best_served) = (needs, 0.0, 0);
        // The best batch that leaves behind no request a smaller batch would serve.
        let (mut whole, mut whole_rate, mut whole_served) = (needs, 0.0, 0);
        // Items even batch 1 finishes too late for: lost whatever is chosen.
        let mut lost_anyway = 0;
        for (b, &size) in m.batches.iter().enumerate() {
            let est = self.run_estimate(model, runs, b);
            let finish = self.params.early_drop.then_some(start + est);
            let fit = finish.map_or(items, |f| m.queue.items_meeting(f));
            if b == 0 {
                lost_anyway = items - fit;
            }
            if b != needs {
                if size as usize > items || (b > 0 && est > self.params.max_exec_time) {
                    if b > needs {
                        break;
                    }
                    continue;
                }
                if fit < size as usize {
                    continue;
                }
            }
            // Whole requests may fill it short of its size.
            let served = m.queue.fill(finish, size as usize);
            if served == 0 {
                continue;
            }
            // Per unit of device time as runs of this size take on average (`exec_mean`).
            let rate = served as f64 / self.run_mean(model, runs, b).max(1) as f64;
            if rate >= best_rate {
                (best, best_rate, best_served) = (b, rate, served);
            }
            if items - fit <= lost_anyway && rate >= whole_rate {
                (whole, whole_rate, whole_served) = (b, rate, served);
            }
        }
        // Leaving urgent requests behind pays only when larger batches are clearly cheaper
        // per request (a GPU's); where they are not (a cpu's run time grows with the batch),
        // it would give up requests for nothing.
        // The profile is read only when the means would skip (not on every batch planned).
        if best_rate < SKIP_GAIN * whole_rate
            || self.profile_gain(model, runs.kind, (best, best_served), (whole, whole_served))
                < SKIP_GAIN
        {
            return (whole, false);
        }
        (best, best != whole)
    }

    /// How many times as many requests per unit of device time batch index `best`
    /// serving `best_served` does as `whole` serving `whole_served`, by the device kind's
    /// profile (every size measured back to back at registration; unbounded where it
    /// lacks a time for either, so that the means alone decide).
    ///
    /// The recent means alone are not enough to leave a request behind: a size that runs
    /// only now and then (batch 1 under overload, after an idle spell or at a change of
    /// load) keeps a window of runs slower than the back-to-back runs of the larger size,
    /// and once a larger batch looked cheaper by that, the size was never chosen, so never
    /// measured, again: on squeezenet's cpu device the most urgent request was left
    /// behind, and refused `timed_out` after ~92 ms, once every 100 ms for seconds
    /// (docs/EXPERIMENTS.md, "The most urgent request left behind for a stale mean").
    fn profile_gain(
        &self,
        model: ModelId,
        kind: usize,
        (best, best_served): (usize, usize),
        (whole, whole_served): (usize, usize),
    ) -> f64 {
        let m = &self.models[model.0 as usize];
        let Some(name) = self.kinds.get(kind) else {
            return f64::INFINITY;
        };
        let profile = m.info.profile_for(name);
        let time = |b: usize| profile.latency(m.batches[b]).filter(|&t| t > 0);
        match (time(best), time(whole)) {
            (Some(b), Some(w)) if whole_served > 0 => {
                (best_served as f64 / b as f64) / (whole_served as f64 / w as f64)
            }
            _ => f64::INFINITY,
        }
    }
}
