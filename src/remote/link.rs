//! The controller's stand-in for one worker's executors.
//!
//! To the controller a link is its devices' executor: it takes `Execute`s and sends
//! `ActionReport`s back, on the controller's clock (the worker translates its own times).
//! On the way out it renumbers devices (the controller's ids to the worker's), sends a
//! model's bytes before the worker's first LOAD of it, and sends an action only while it
//! can still arrive before `latest` less [`SEND_MARGIN`]: one that cannot is failed here,
//! at once, as `TooLate` (nothing ran, so the policy may plan its requests again). When the
//! connection is lost it tells the controller its devices left, and stops.

use std::collections::HashSet;

use actix::prelude::*;

use super::conn::{read_sync, Conn, Inbound, SharedSync};
use super::frame::{Body, ModelBytes};
use super::stats::ClusterStats;
use crate::actors::messages::{ActionReport, Execute, FetchArtifact};
use crate::actors::{DeviceLag, Leave};
use crate::gpu::ModelArtifact;
use crate::model::{DeviceId, ModelId};
use crate::protocol::{ActionError, ActionKind};
use crate::time::{Clock, Nanos, MS};

/// Time an action must still have, beyond the expected one-way trip, between its arrival
/// on the worker and its `latest` start: covers decoding and the executor's own queue.
pub const SEND_MARGIN: Nanos = MS;

/// Where a link sends what it learns.
pub struct LinkPeers {
    /// The controller, for reports.
    pub reports: Recipient<ActionReport>,
    /// The controller, when the worker is gone.
    pub leave: Recipient<Leave>,
    /// The controller, for the devices' expected lag from the measured round trip.
    pub lag: Recipient<DeviceLag>,
    /// The model cache, for the bytes a worker needs before a LOAD.
    pub artifacts: Recipient<FetchArtifact>,
    /// The cluster's metrics.
    pub stats: ClusterStats,
}

/// One worker, as the controller sees it.
pub struct Link {
    worker: String,
    /// The controller's id of each of the worker's devices, by the worker's index.
    devices: Vec<DeviceId>,
    clock: Clock,
    sync: SharedSync,
    conn: Conn,
    peers: LinkPeers,
    /// Models whose bytes the worker has.
    models: HashSet<ModelId>,
    /// The one-way trip last told to the controller as the devices' lag.
    lag: Option<Nanos>,
}

impl Link {
    pub fn new(
        worker: String,
        devices: Vec<DeviceId>,
        clock: Clock,
        (conn, sync): (Conn, SharedSync),
        peers: LinkPeers,
    ) -> Self {
        peers.stats.joined();
        Self {
            worker,
            devices,
            clock,
            sync,
            conn,
            peers,
            models: HashSet::new(),
            lag: None,
        }
    }

    /// Whether an action leaving now arrives by its `latest` less the margin.
    fn in_time(&self, latest: Nanos) -> bool {
        let one_way = read_sync(&self.sync, |s| s.round_trip()).unwrap_or(0) / 2;
        let arrives = self.clock.now().saturating_add(one_way);
        arrives.saturating_add(SEND_MARGIN) <= latest
    }

    /// Fails an action that is not sent. A `TooLate` is reported at `latest +
    /// expected_duration`, when it would have ended had it started last minute: reported at
    /// once, the policy would plan the same requests again at once, and again, in a loop
    /// that only their expiry ends (and that starves the controller meanwhile).
    fn fail_locally(&self, execute: &Execute, error: ActionError, ctx: &mut Context<Self>) {
        let report = ActionReport {
            action: execute.action.id,
            device: execute.action.device,
            result: Err(error),
            outputs: None,
        };
        let action = &execute.action;
        let at = action.latest.saturating_add(action.expected_duration);
        let reports = self.peers.reports.clone();
        ctx.run_later(self.clock.until(at), move |_, _| reports.do_send(report));
    }

    /// Sends the action with the worker's device number.
    fn forward(&mut self, mut execute: Execute, local: usize) {
        execute.action.device = DeviceId(local as u32);
        // A closed writer means the loss is on its way; the controller then fails it.
        self.conn.send(Body::Execute(execute));
    }

    /// Publishes the clock estimates, and tells the controller the devices' lag (half the
    /// round trip and the send margin: the policy then plans nothing this link would
    /// refuse to send) when it moved by more than a tenth.
    fn publish_clock(&mut self) {
        read_sync(&self.sync, |s| self.peers.stats.clock(&self.worker, s));
        let Some(rtt) = read_sync(&self.sync, |s| s.round_trip()) else {
            return;
        };
        let lag = rtt / 2 + SEND_MARGIN;
        if self.lag.is_none_or(|old| old.abs_diff(lag) > old / 10) {
            self.lag = Some(lag);
            self.peers.lag.do_send(DeviceLag {
                devices: self.devices.clone(),
                lag,
            });
        }
    }

    fn send_model(&mut self, artifact: &ModelArtifact) {
        self.models.insert(artifact.id);
        self.conn.send(Body::Model(ModelBytes {
            id: artifact.id,
            spec: artifact.spec.clone(),
            bytes: artifact.bytes.as_ref().map(|b| b.to_vec()),
        }));
    }
}

impl Actor for Link {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(crate::actors::MAILBOX);
        // An idle worker sends only pings, which the connection answers itself: publish
        // its clock estimates on a timer too.
        ctx.run_interval(super::conn::IDLE_PING, |link, _| link.publish_clock());
    }
}

impl Handler<Execute> for Link {
    type Result = ();

    fn handle(&mut self, execute: Execute, ctx: &mut Context<Self>) {
        let Some(local) = self
            .devices
            .iter()
            .position(|&d| d == execute.action.device)
        else {
            let error = ActionError::Device("not this worker's".into());
            return self.fail_locally(&execute, error, ctx);
        };
        if !self.in_time(execute.action.latest) {
            return self.fail_locally(&execute, ActionError::TooLate, ctx);
        }
        let model = execute.action.model;
        if execute.action.kind != ActionKind::Load || self.models.contains(&model) {
            return self.forward(execute, local);
        }
        // The bytes go first; `wait` holds later actions back so that none overtakes.
        let fetch = self.peers.artifacts.send(FetchArtifact(model));
        ctx.wait(fetch.into_actor(self).map(move |artifact, link, _| {
            if let Ok(Some(artifact)) = artifact {
                link.send_model(&artifact);
            }
            link.forward(execute, local);
        }));
    }
}

impl Handler<Inbound> for Link {
    type Result = ();

    fn handle(&mut self, inbound: Inbound, ctx: &mut Context<Self>) {
        match inbound {
            Inbound::Frame(Body::Report(mut report)) => {
                let Some(&device) = self.devices.get(report.device.0 as usize) else {
                    tracing::warn!(worker = %self.worker, device = report.device.0, "report for a device the worker does not have");
                    return;
                };
                report.device = device;
                self.peers.reports.do_send(report);
            }
            Inbound::Frame(other) => {
                tracing::debug!(worker = %self.worker, frame = ?std::mem::discriminant(&other), "unexpected frame ignored");
            }
            Inbound::Lost(why) => {
                tracing::info!(worker = %self.worker, %why, "worker lost");
                self.peers.stats.lost(&self.worker);
                self.peers.leave.do_send(Leave {
                    worker: self.worker.clone(),
                    devices: self.devices.clone(),
                });
                ctx.stop();
            }
        }
    }
}
