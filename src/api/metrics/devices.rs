//! The devices' series, from the executors' reports (`ActionDone` events): time busy per
//! lane, loads and evictions, failed actions, faults by kind, and how far each action's
//! measured duration was from the one the controller planned with; from `DeviceHealth`
//! events, the devices out of service and why they went out.

use prometheus::{
    CounterVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry,
};

use super::{counter, registered, seconds};
use crate::events::{ActionDone, DeviceHealth, Probed};
use crate::protocol::{ActionError, ActionTag};

/// The device families of the server's registry.
pub(super) struct DeviceMetrics {
    loads: IntCounterVec,
    evictions: IntCounterVec,
    action_failures: IntCounterVec,
    busy: CounterVec,
    prediction_error: HistogramVec,
    faults: IntCounterVec,
    outages: IntCounterVec,
    out: IntGauge,
    probes: IntCounterVec,
}

/// The fault an action's error shows, if it shows one (refusals do not).
fn fault_kind(kind: ActionTag, error: &ActionError) -> Option<&'static str> {
    match error {
        ActionError::Device(_) if kind == ActionTag::Load => Some("load_failed"),
        ActionError::Device(_) => Some("failed"),
        ActionError::Crashed(_) => Some("crashed"),
        ActionError::Overdue => Some("overdue"),
        _ => None,
    }
}

/// Measured minus planned duration of actions, by action kind: buckets on both sides of 0.
fn prediction_error_family() -> prometheus::Result<HistogramVec> {
    let signed = vec![-1e-2, -1e-3, -1e-4, -1e-5, 0.0, 1e-5, 1e-4, 1e-3, 1e-2];
    let opts = HistogramOpts::new(
        "clockwork_prediction_error_seconds",
        "Measured minus planned duration of actions",
    );
    HistogramVec::new(opts.buckets(signed), &["kind"])
}

impl DeviceMetrics {
    /// Registers the families in `r`.
    pub fn register(r: &Registry) -> prometheus::Result<Self> {
        let busy = CounterVec::new(
            Opts::new(
                "clockwork_device_busy_seconds",
                "Time devices spent executing actions, by lane",
            ),
            &["device", "lane"],
        )?;
        let device = ["device"];
        Ok(Self {
            loads: counter(
                r,
                "clockwork_loads",
                "Model loads completed, by device",
                &device,
            )?,
            evictions: counter(
                r,
                "clockwork_evictions",
                "Model unloads (evictions) completed, by device",
                &device,
            )?,
            action_failures: counter(
                r,
                "clockwork_action_failures",
                "Actions that did not complete, by kind",
                &["kind"],
            )?,
            busy: registered(r, busy)?,
            prediction_error: registered(r, prediction_error_family()?)?,
            faults: counter(
                r,
                "clockwork_device_faults",
                "Device faults seen in reports, by device and kind (failed, load_failed, crashed, overdue)",
                &["device", "kind"],
            )?,
            outages: counter(
                r,
                "clockwork_device_outages",
                "Times a device was taken out of service, by cause (hung, failing, crashed, slow)",
                &["cause"],
            )?,
            out: registered(
                r,
                IntGauge::new("clockwork_devices_out", "Devices out of service now")?,
            )?,
            probes: counter(
                r,
                "clockwork_device_probes",
                "Probes of devices out of service, by device and result (passed, failed)",
                &["device", "result"],
            )?,
        })
    }

    /// A device went out of service or came back (events come only on a change).
    pub fn health(&self, event: &DeviceHealth) {
        match event.out {
            Some(cause) => {
                self.outages.with_label_values(&[cause.as_str()]).inc();
                self.out.inc();
            }
            None => self.out.dec(),
        }
    }

    /// A probe of a device out of service reported.
    pub fn probed(&self, event: &Probed) {
        let result = if event.passed { "passed" } else { "failed" };
        let device = event.device.0.to_string();
        self.probes
            .with_label_values(&[device.as_str(), result])
            .inc();
    }

    /// Folds one report in; an INFER's batch is counted by the model's series, hence the
    /// answer: whether `event` was a batch that ran.
    pub fn action(&self, event: &ActionDone) -> bool {
        let Some(measured) = event.measured else {
            if let Some(kind) = event.error.as_ref().and_then(|e| fault_kind(event.kind, e)) {
                let device = event.device.0.to_string();
                self.faults
                    .with_label_values(&[device.as_str(), kind])
                    .inc();
            }
            self.action_failures
                .with_label_values(&[event.kind.as_str()])
                .inc();
            return false;
        };
        let device = event.device.0.to_string();
        let lane = if event.kind.is_load_lane() {
            "load"
        } else {
            "exec"
        };
        self.busy
            .with_label_values(&[device.as_str(), lane])
            .inc_by(seconds(measured.duration));
        let error = measured.duration as f64 - event.expected as f64;
        self.prediction_error
            .with_label_values(&[event.kind.as_str()])
            .observe(error / 1e9);
        match event.kind {
            ActionTag::Infer => return true,
            ActionTag::Load => self.loads.with_label_values(&[device.as_str()]).inc(),
            ActionTag::Unload => self.evictions.with_label_values(&[device.as_str()]).inc(),
            // The health rule's, never published as done.
            ActionTag::Probe => {}
        }
        false
    }
}
