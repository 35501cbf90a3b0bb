//! Devices that join and leave while serving: a remote worker's (see `crate::remote`).
//!
//! A worker's link sends [`Join`] with its devices; they join the policy and the registry
//! (which judges, per registered model, whether each may hold it) and the link becomes
//! their executor. [`Leave`] takes them out for good: what was sent to them is forgotten
//! (a report that still comes is unknown, and ignored) and the policy fails their actions
//! in flight and drops their memory and timelines (`Policy::remove_device`).

use super::*;
use crate::actors::eligibility::DeviceFacts;
use crate::scheduler::DeviceInfo;

/// A worker's devices join; answers their ids, in the worker's order.
#[derive(Debug, Message)]
#[rtype(result = "Vec<DeviceId>")]
pub struct Join {
    /// The worker's name, for the log.
    pub worker: String,
    /// Its devices, in its own order.
    pub devices: Vec<JoiningDevice>,
    /// Where their actions go: the worker's link, which stands in for their executors.
    pub link: Recipient<Execute>,
}

/// One device that joins.
#[derive(Clone, Debug)]
pub struct JoiningDevice {
    /// What the policy needs of it.
    pub info: DeviceInfo,
    /// What registration judges it by.
    pub facts: DeviceFacts,
}

/// A worker is gone: its devices leave for good.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Leave {
    /// The worker's name, for the log.
    pub worker: String,
    pub devices: Vec<DeviceId>,
}

/// A worker's measured one-way trip, the expected lag of its devices
/// (`Policy::set_lag`).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct DeviceLag {
    pub devices: Vec<DeviceId>,
    pub lag: Nanos,
}

impl Handler<DeviceLag> for Controller {
    type Result = ();

    fn handle(&mut self, lag: DeviceLag, _: &mut Context<Self>) {
        for &device in &lag.devices {
            if !self.gone.contains(&device) {
                self.parts.policy.set_lag(device, lag.lag);
            }
        }
    }
}

impl Handler<Join> for Controller {
    type Result = MessageResult<Join>;

    fn handle(&mut self, join: Join, ctx: &mut Context<Self>) -> Self::Result {
        let mut ids = Vec::with_capacity(join.devices.len());
        for device in join.devices {
            let policy = self.parts.policy.as_mut();
            let id = self.parts.registry.join(policy, device.info, device.facts);
            debug_assert_eq!(id.0 as usize, self.parts.executors.len());
            self.parts.executors.push(join.link.clone());
            self.parts.emulated.push(device.facts.emulated);
            ids.push(id);
        }
        self.live_devices += ids.len();
        tracing::info!(worker = %join.worker, devices = ?ids, live = self.live_devices, "worker's devices joined");
        self.step(ctx);
        MessageResult(ids)
    }
}

impl Handler<Leave> for Controller {
    type Result = ();

    fn handle(&mut self, leave: Leave, ctx: &mut Context<Self>) {
        let now = self.now();
        let before = self.plan.answers.len();
        let failed: usize = leave
            .devices
            .iter()
            .map(|&device| self.lose_device(device, now))
            .sum();
        let refused = self.plan.answers.len() - before;
        tracing::info!(worker = %leave.worker, devices = ?leave.devices, live = self.live_devices, actions_failed = failed, answered_at_once = refused, "worker's devices left");
        self.step(ctx);
    }
}

impl Controller {
    /// Takes a device out for good; its requests' answers come from the policy's plan.
    /// Answers how many actions in flight on it failed.
    fn lose_device(&mut self, device: DeviceId, now: Nanos) -> usize {
        if !self.gone.insert(device) {
            return 0;
        }
        self.live_devices = self.live_devices.saturating_sub(1);
        let lost: Vec<ActionId> = self
            .sent
            .iter()
            .filter(|(_, sent)| sent.action.device == device)
            .map(|(&id, _)| id)
            .collect();
        for action in &lost {
            self.sent.remove(action);
            self.watchdog.settle(*action, device);
        }
        self.parts.policy.remove_device(device, now, &mut self.plan);
        // Out of service no more: it is out of the pool. A device that hung because its
        // worker died (the watchdog first, the lost link later) would otherwise be
        // counted out for good, and probed into a closed link.
        self.health.forget(device);
        self.probes.retain(|_, probed| *probed != device);
        if self.out.remove(&device).is_some() {
            self.publish_health(device, now, None);
        }
        lost.len()
    }
}
