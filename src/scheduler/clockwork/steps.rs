//! The policy's planning steps behind its entry points: filling the devices' lanes in
//! order, when to be called again, recording planned actions, and applying the report of
//! an INFER.

use super::*;

impl ClockworkPolicy {
    /// Applies the report of an INFER: learns its duration and answers its requests, or
    /// puts them back in the queue if nothing (known) ran, or fails them.
    pub(super) fn observe_infer(
        &mut self,
        action: ActionId,
        flight: InFlight,
        result: Result<Measured, ActionError>,
        plan: &mut Plan,
    ) {
        let Work::Infer { batch, requests } = flight.work else {
            return;
        };
        let device = &mut self.devices[flight.device.0 as usize];
        if let Some(r) = device.residents.get_mut(&flight.model) {
            r.infers_in_flight = r.infers_in_flight.saturating_sub(1);
            if r.infers_in_flight == 0 && device.load_blocked_by_flight {
                // The load that was refused for want of this model's pages may go now.
                device.load_retry_at = 0;
                device.load_blocked_by_flight = false;
            }
        }
        match result {
            Ok(measured) => {
                self.forget_withdrawn(&requests);
                self.learn_run(flight.device, (flight.model, batch), measured.duration);
                let m = &mut self.models[flight.model.0 as usize];
                m.measured_at = m.measured_at.max(measured.end);
                self.queue_changed(flight.model, None);
                for q in requests {
                    let m = &mut self.models[flight.model.0 as usize];
                    let outcome = hindsight::Left {
                        projected: q.projected,
                        latest: q.latest,
                        in_time: measured.end <= q.latest,
                    };
                    m.hindsight.learn(q.id, outcome, self.now);
                    let late = measured.end > q.due;
                    plan.answers.push(Answer {
                        request: q.id,
                        verdict: Verdict::Completed { action, late },
                    });
                }
            }
            Err(error @ (ActionError::TooLate | ActionError::Overdue)) => {
                if error == ActionError::Overdue {
                    // Its late report may still tell how slow its device runs.
                    self.given_up
                        .remember(action, flight.device, flight.model, batch);
                }
                // Nothing ran (or nothing is known to have run): the requests may still
                // make it on another try, elsewhere if this device is suspect.
                self.requeue(flight.model, requests, |q| q, plan);
            }
            Err(ActionError::Model(_)) if requests.len() > 1 => {
                // One request's inputs may have failed the whole batch: each runs again
                // alone, within its own deadline, and fails (or is served) by itself.
                self.requeue(
                    flight.model,
                    requests,
                    |q| Queued { alone: true, ..q },
                    plan,
                );
            }
            Err(error) => {
                self.forget_withdrawn(&requests);
                if error == ActionError::NotResident {
                    self.forget_residency(flight.device, flight.model);
                }
                Self::answer(plan, requests, Verdict::Failed(error));
            }
        }
    }

    /// Queues the requests of a batch that gave no answers again, as `again` makes them;
    /// those withdrawn meanwhile are answered so instead.
    fn requeue(
        &mut self,
        model: ModelId,
        requests: Vec<Queued>,
        again: impl Fn(Queued) -> Queued,
        plan: &mut Plan,
    ) {
        let (gone, kept): (Vec<Queued>, Vec<Queued>) = requests
            .into_iter()
            .partition(|q| self.withdrawn.remove(&q.id));
        for q in kept {
            self.enqueue(model, again(q));
        }
        Self::answer(plan, gone, Verdict::Refused(Refusal::Withdrawn));
    }

    /// Remembers `request`, withdrawn while in a batch not yet reported, so that it is
    /// not queued again if that batch does not run (see `observe_infer`).
    pub(super) fn withdraw_in_flight(&mut self, request: RequestId) {
        let in_batch = self.in_flight.values().any(|f| match &f.work {
            Work::Infer { requests, .. } => requests.iter().any(|q| q.id == request),
            _ => false,
        });
        if in_batch {
            self.withdrawn.insert(request);
        }
    }

    /// The batch of `requests` ran (or failed for good): their answers stand.
    fn forget_withdrawn(&mut self, requests: &[Queued]) {
        if !self.withdrawn.is_empty() {
            requests.iter().for_each(|q| {
                self.withdrawn.remove(&q.id);
            });
        }
    }

    /// `Policy::next_wakeup`: the first armed expiry, or the first moment a lane with
    /// something to take drops inside the schedule-ahead window.
    pub(super) fn wakeup(&self, now: Nanos) -> Option<Nanos> {
        let mut wake = self.expiries.peek().map(|Reverse((t, _))| *t);
        let mut consider = |at: Nanos| {
            if at > now {
                wake = Some(wake.map_or(at, |w| w.min(at)));
            }
        };
        if self.queued > 0 {
            let (ahead, lanes) = (self.params.schedule_ahead, self.params.lanes);
            // Only waiting requests are worth waking for: models wanted by rate or for
            // preloading are looked at when anything else happens (often, under traffic),
            // and time alone rarely makes room for them.
            let loading = self
                .load_ranking
                .last()
                .is_some_and(|((want, _, _), _)| *want == placement::Want::Queued);
            let suspects = self.suspects > 0;
            for device in &self.devices {
                if suspects && device.suspect {
                    continue;
                }
                // A lane needs the policy again when its planned work drops inside the
                // schedule-ahead window, if it has something it could take. (The window
                // ends `ahead` past the soonest start: the lag counts too.)
                let timing = device.timing(lanes);
                let window = ahead + timing.expected_lag;
                if !device.strategies.is_empty() {
                    consider(device.exec.free_at(now, timing).saturating_sub(window));
                }
                if loading {
                    let free = device.load.free_at(now, timing).saturating_sub(window);
                    consider(free.max(device.load_retry_at));
                }
            }
        }
        wake.map(|w| w.max(now + 1))
    }

    /// Fills exec lanes, then load lanes.
    pub(super) fn schedule_devices(&mut self, now: Nanos, plan: &mut Plan) {
        let suspects = self.suspects > 0;
        for d in 0..self.devices.len() {
            if !(suspects && self.devices[d].suspect) {
                self.schedule_infers(DeviceId(d as u32), now, plan);
            }
        }
        if !self.load_ranking.is_empty() {
            // The least busy device picks first, so hot models spread over devices.
            let (lanes, ahead) = (self.params.lanes, self.params.schedule_ahead);
            // The order is built in a kept buffer: this runs at every event.
            let mut order = std::mem::take(&mut self.load_order);
            order.clear();
            order.extend(
                self.devices
                    .iter()
                    .enumerate()
                    .filter(|(_, dev)| {
                        !(suspects && dev.suspect)
                            && now >= dev.load_retry_at
                            && dev.load.free_at(now, dev.timing(lanes))
                                < dev.horizon(now, lanes, ahead)
                    })
                    .map(|(d, dev)| (dev.exec.free_at(now, dev.timing(lanes)), d)),
            );
            order.sort_unstable();
            for &(_, d) in &order {
                self.schedule_load(DeviceId(d as u32), now, plan);
            }
            self.load_order = order;
        }
    }

    /// Drops superseded entries from the top of the expiry queue, so that the next
    /// wake-up is a real expiry and not a stale one.
    pub(super) fn prune_expiries(&mut self) {
        while let Some(&Reverse((at, model))) = self.expiries.peek() {
            if self.models[model.0 as usize].expiry == Some(at) {
                return;
            }
            self.expiries.pop();
        }
    }

    /// Records a planned action and hands it to the plan.
    pub(super) fn send(&mut self, plan: &mut Plan, action: Action, work: Work) {
        let flight = InFlight {
            device: action.device,
            model: action.model,
            work,
        };
        self.in_flight.insert(action.id, flight);
        plan.actions.push(action);
    }

    pub(super) fn action(
        &mut self,
        device: DeviceId,
        model: ModelId,
        timing: (Nanos, Nanos, Nanos),
        kind: ActionKind,
    ) -> Action {
        let (earliest, latest, expected_duration) = timing;
        Action {
            id: self.next_id(),
            device,
            model,
            earliest,
            latest,
            expected_duration,
            kind,
        }
    }
}
