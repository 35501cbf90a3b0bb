//! The controller's side of executor reports: applying them to the policy, the watchdog
//! that fails actions whose report is overdue, the health rule and its probes, and what a
//! drain's deadline leaves.

use super::*;
use crate::actors::health::{Change, Pace};
use crate::events::OutCause;

impl Controller {
    /// Fails every action whose report is overdue, as if its executor had reported
    /// `Overdue`, and tells the policy its device is suspect.
    pub(super) fn fail_overdue(&mut self, now: Nanos) {
        for (action, device) in self.watchdog.overdue(now) {
            let Some(sent) = self.sent.remove(&action) else {
                continue;
            };
            tracing::warn!(
                action = action.0,
                device = device.0,
                kind = sent.action.kind.name(),
                "no report by the watchdog's deadline: action failed, device suspect"
            );
            if !self.out.contains_key(&device) {
                // A new hang of a device in service (its other actions overdue now are
                // the same hang).
                self.health.hung(device);
                self.health.blame(device, sent.action.model);
            }
            self.update_service(device, now);
            let report = ActionReport {
                action,
                device,
                result: Err(ActionError::Overdue),
                outputs: None,
            };
            self.apply(sent, report, now);
        }
    }

    /// The drain's deadline passed: what is still unanswered is answered `shutting_down`
    /// (the policy forgets nothing: a late report finds no pending request and is dropped).
    pub(super) fn abandon_pending(&mut self, now: Nanos) {
        let left: Vec<RequestId> = self.pending.keys().copied().collect();
        if !left.is_empty() {
            tracing::warn!(
                requests = left.len(),
                "shutdown grace over: answering what is left"
            );
        }
        for request in left {
            if let Some(pending) = self.pending.remove(&request) {
                self.outputs.remove(&request);
                let answer = (
                    Err(InferError::ShuttingDown),
                    RequestOutcome::ShuttingDown,
                    None,
                );
                self.deliver(request, pending, answer, now);
            }
        }
    }

    /// Takes an executor's report: a report in time goes to the policy (outputs are kept
    /// for the answers it gives); a late one, of an action the watchdog already failed,
    /// only shows that the device lives again.
    pub(super) fn report(&mut self, report: ActionReport, ctx: &mut Context<Self>) {
        let now = self.now();
        let settled = self.watchdog.settle(report.action, report.device);
        if let Some(device) = self.probes.remove(&report.action) {
            self.probed(device, &report.result, now);
            // Work may go to the device again, and the next probe needs the timer.
            return self.step(ctx);
        }
        if matches!(settled, Settled::Late(_)) {
            // The end of a hang, unless the device hangs over and over (the health rule).
            if let Change::Out(cause) = self.health.revived(report.device, now) {
                tracing::warn!(
                    device = report.device.0,
                    cause = cause.as_str(),
                    "device taken out of service: it hung again and again"
                );
            }
        }
        self.update_service(report.device, now);
        match settled {
            Settled::InTime => {}
            Settled::Late(given_up) => {
                tracing::info!(
                    action = report.action.0,
                    "late report of an action failed as overdue: its requests were planned again"
                );
                if given_up.load && report.result.is_ok() {
                    // The policy counts those pages free: give them back on the device.
                    self.evict_late_load(given_up);
                }
                if let (false, Ok(run)) = (given_up.load, &report.result) {
                    // How long it really took: a device slower than its kind says so
                    // only in reports like this one.
                    self.parts.policy.observe_late(report.action, run);
                }
                self.step(ctx);
                return;
            }
            Settled::Unknown => {
                tracing::debug!(action = ?report.action, "report of an action not in flight");
                return;
            }
        }
        let Some(sent) = self.sent.remove(&report.action) else {
            tracing::error!(action = ?report.action, "report of an unknown action");
            return;
        };
        let expected = sent.action.expected_duration;
        let pace = report
            .result
            .as_ref()
            .map(|m| Pace::of(m.duration, expected));
        if let Err(ActionError::Device(_) | ActionError::Crashed(_)) = &report.result {
            self.health.blame(report.device, sent.action.model);
        }
        let change = self.health.reported(report.device, pace, now);
        if let Change::Out(cause) = change {
            tracing::warn!(
                device = report.device.0,
                cause = cause.as_str(),
                error = ?report.result.as_ref().err(),
                "device taken out of service"
            );
        }
        self.update_service(report.device, now);
        if let Err(ActionError::Model(problem)) = &report.result {
            self.failed_on_inputs(sent.action.model, problem);
        }
        self.apply(sent, report, now);
        self.step_at(now, ctx);
    }

    /// Logs a model's failure on a batch's inputs: a warning the first time, then at
    /// debug level (the requests' answers and `clockwork_requests` count every one).
    fn failed_on_inputs(&mut self, model: ModelId, problem: &str) {
        let catalog = self.parts.registry.catalog();
        let name = catalog.get(model).map(|m| m.name().to_owned());
        if self.failed_on_inputs.insert(model) {
            tracing::warn!(
                model = name,
                %problem,
                "the model failed on a batch's inputs: its requests run again alone, and the \
                 one it fails on is answered execution_failed (later failures of this model \
                 are logged at debug level)"
            );
        } else {
            tracing::debug!(model = name, %problem, "the model failed on a batch's inputs");
        }
    }

    /// Why `device` is out of service, if it is: the health rule's cause, or a hang.
    fn out_cause(&self, device: DeviceId) -> Option<OutCause> {
        let hung = self.watchdog.is_suspect(device).then_some(OutCause::Hung);
        self.health.cause(device).or(hung)
    }

    /// Tells the policy (suspect or not) and the subscribers when `device` went out of
    /// service or came back.
    pub(super) fn update_service(&mut self, device: DeviceId, now: Nanos) {
        let cause = self.out_cause(device);
        // A change of cause (a hang found to be the device's slowness) is published too.
        let changed = match cause {
            Some(c) => self.out.insert(device, c) != Some(c),
            None => self.out.remove(&device).is_some(),
        };
        if !changed {
            return;
        }
        if cause.is_none() {
            tracing::info!(device = device.0, "device back in service");
        }
        self.parts.policy.set_suspect(device, cause.is_some());
        self.publish_health(device, now, cause);
    }

    /// Tells the subscribers that `device` is out for `out`, or no longer out.
    pub(super) fn publish_health(&self, device: DeviceId, now: Nanos, out: Option<OutCause>) {
        self.parts.events.publish(|| {
            Event::DeviceHealth(events::DeviceHealth {
                device,
                at: now,
                out,
            })
        });
    }

    /// A probe of `device` reported `result`: back in service, or probed again later.
    fn probed(
        &mut self,
        device: DeviceId,
        result: &Result<crate::scheduler::Measured, ActionError>,
        now: Nanos,
    ) {
        // A model failing on the probe's zeros ran on a sound device.
        let passed = matches!(result, Ok(_) | Err(ActionError::Model(_)));
        let change = self.health.probed(device, passed, now);
        self.parts.events.publish(|| {
            Event::Probed(events::Probed {
                device,
                at: now,
                passed,
            })
        });
        tracing::info!(
            device = device.0,
            back = change == Change::Back,
            error = ?result.as_ref().err(),
            "probe reported"
        );
        self.update_service(device, now);
    }

    /// Sends a probe to each out device whose backoff is over: real work on the model of
    /// its last failed action (`ActionKind::Probe`, `Health::probe_model`; the policy never
    /// sees it, and its report goes to the health rule).
    pub(super) fn send_probes(&mut self, now: Nanos) {
        for device in self.health.probes_due(now) {
            self.next_repair += 1;
            let id = ActionId(REPAIR_IDS | self.next_repair);
            let probe = Action {
                id,
                device,
                model: self.health.probe_model(device),
                earliest: now,
                latest: Nanos::MAX,
                expected_duration: 0,
                kind: ActionKind::Probe,
            };
            self.probes.insert(id, device);
            self.parts.executors[device.0 as usize].do_send(Execute {
                action: probe,
                inputs: Vec::new(),
            });
        }
    }

    /// Applies the report of an action the policy planned: outputs, event, policy.
    pub(super) fn apply(&mut self, sent: Sent, report: ActionReport, now: Nanos) {
        self.touched.push(sent.action.model);
        if let (Ok(measured), Some(outputs)) = (&report.result, report.outputs) {
            self.stash_outputs(&sent, *measured, outputs);
        }
        self.parts.events.publish(|| {
            Event::ActionDone(events::ActionDone {
                action: sent.action.id,
                device: report.device,
                model: sent.action.model,
                kind: sent.action.kind.tag(),
                batch: sent.items.iter().sum(),
                expected: sent.action.expected_duration,
                measured: report.result.as_ref().ok().copied(),
                error: report.result.as_ref().err().cloned(),
            })
        });
        let outcome = Outcome {
            action: report.action,
            result: report.result,
        };
        self.parts.policy.observe(outcome, now, &mut self.plan);
    }

    /// A LOAD the watchdog failed finished after all: the policy's mirror counts its pages
    /// free, so the controller unloads the weights again (a repair action the policy never
    /// sees; its report is ignored like any unknown one).
    pub(super) fn evict_late_load(&mut self, load: GivenUp) {
        let GivenUp { device, model, .. } = load;
        self.next_repair += 1;
        let now = self.now();
        let unload = Action {
            id: ActionId(REPAIR_IDS | self.next_repair),
            device,
            model,
            earliest: now,
            latest: Nanos::MAX,
            expected_duration: 0,
            kind: ActionKind::Unload,
        };
        self.parts.executors[device.0 as usize].do_send(Execute {
            action: unload,
            inputs: Vec::new(),
        });
    }

    pub(super) fn stash_outputs(
        &mut self,
        sent: &Sent,
        exec: crate::scheduler::Measured,
        outputs: BatchOutputs,
    ) {
        let batch = sent.items.iter().sum();
        let mut outputs = outputs.into_iter();
        for (&request, &items) in sent.requests().iter().zip(&sent.items) {
            // A request's items are never split: its outputs are the next `items`.
            let mine: Vec<_> = outputs.by_ref().take(items as usize).collect();
            let Some(pending) = self.pending.get(&request) else {
                continue;
            };
            let joined = match crate::tensor::join_items(mine) {
                Ok(joined) => joined,
                Err(problem) => {
                    tracing::warn!(?request, %problem, "outputs of a request's items do not join");
                    continue;
                }
            };
            let timing = RequestTiming {
                arrival: pending.arrival,
                deadline: pending.arrival + pending.slo,
                exec,
                answered: 0,
                batch,
                device: DeviceId(sent.action.device.0),
            };
            self.outputs.insert(request, (joined, timing));
        }
    }
}
