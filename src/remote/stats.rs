//! What the controller publishes of its workers: the metrics
//! `clockwork_workers_connected`, `clockwork_worker_round_trip_seconds{worker}`,
//! `clockwork_worker_clock_offset_seconds{worker}` and
//! `clockwork_worker_losses_total{worker}`, registered in the API's registry.

use prometheus::{GaugeVec, IntCounterVec, IntGauge, Opts, Registry};

use super::clock::ClockSync;

/// The cluster's series; cheap to share (`Arc`).
#[derive(Clone)]
pub struct ClusterStats {
    connected: IntGauge,
    round_trip: GaugeVec,
    offset: GaugeVec,
    losses: IntCounterVec,
}

impl ClusterStats {
    /// The series, registered in `registry`.
    pub fn new(registry: &Registry) -> prometheus::Result<Self> {
        let stats = Self::unregistered()?;
        registry.register(Box::new(stats.connected.clone()))?;
        registry.register(Box::new(stats.round_trip.clone()))?;
        registry.register(Box::new(stats.offset.clone()))?;
        registry.register(Box::new(stats.losses.clone()))?;
        Ok(stats)
    }

    /// The series, registered nowhere (tests, a worker's side).
    pub fn unregistered() -> prometheus::Result<Self> {
        Ok(Self {
            connected: IntGauge::new("clockwork_workers_connected", "Workers connected now")?,
            round_trip: GaugeVec::new(
                Opts::new(
                    "clockwork_worker_round_trip_seconds",
                    "Least round trip to the worker over its last 1024 frames",
                ),
                &["worker"],
            )?,
            offset: GaugeVec::new(
                Opts::new(
                    "clockwork_worker_clock_offset_seconds",
                    "The controller's clock minus the worker's, as estimated",
                ),
                &["worker"],
            )?,
            losses: IntCounterVec::new(
                Opts::new(
                    "clockwork_worker_losses_total",
                    "Times the worker's connection was lost",
                ),
                &["worker"],
            )?,
        })
    }

    /// A worker joined.
    pub fn joined(&self) {
        self.connected.inc();
    }

    /// A worker's connection was lost.
    pub fn lost(&self, worker: &str) {
        self.connected.dec();
        self.losses.with_label_values(&[worker]).inc();
    }

    /// The worker's latest estimates.
    pub fn clock(&self, worker: &str, sync: &ClockSync) {
        if let Some(rtt) = sync.round_trip() {
            let seconds = rtt as f64 / 1e9;
            self.round_trip.with_label_values(&[worker]).set(seconds);
        }
        if let Some(offset) = sync.offset() {
            self.offset
                .with_label_values(&[worker])
                .set(offset as f64 / 1e9);
        }
    }

    /// Workers connected now.
    pub fn connected(&self) -> i64 {
        self.connected.get()
    }
}
