//! The configuration file (`config.toml`), documented field by field.
//!
//! Every key has a default taken from the Clockwork paper (see "Facts the design rests on"
//! in docs/ARCHITECTURE.md), so an empty file is valid. Unknown keys are rejected with the
//! key's name, because a misspelt setting that silently keeps its default is worse than a
//! refusal to start. Device groups and start-up models are in `devices.rs`.

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::cores::DeviceCount;
pub use access::{AuthConfig, ConnectionConfig, Role, TlsConfig, Token};
pub use cluster::{ClusterConfig, TOKEN_ENV};
pub use devices::{
    BackendKind, CpuConfig, DeviceGroupConfig, FaultConfig, FaultEpisode, ModelConfig, OrtConfig,
    SimConfig, SlowdownConfig, DEFAULT_CPU_PAGES,
};

mod access;
mod cluster;
mod devices;

/// Errors reading the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid configuration {path}")]
    Parse {
        path: String,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// The whole file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub policy: PolicyConfig,
    /// Settings of the runtime around the policy: page size, default objective.
    pub runtime: RuntimeConfig,
    /// Groups of devices; every group adds `count` executors.
    pub devices: Vec<DeviceGroupConfig>,
    /// Models registered at start from built-in profiles (served by `sim` devices).
    pub models: Vec<ModelConfig>,
    /// The model repository: real ONNX models, registered at start and on demand.
    pub repository: Option<RepositoryConfig>,
    /// Remote workers: where they join, their token, how many devices readiness waits for.
    pub cluster: ClusterConfig,
}

/// The model repository on disk (Triton's layout, see `src/repository/`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RepositoryConfig {
    /// Root directory: `<path>/<model>/<version>/model.onnx`, and an optional
    /// `<path>/<model>/config.toml`. Relative paths are taken from the working directory.
    pub path: std::path::PathBuf,
    /// Write the built-in zoo models (mlp, cnn, resnet) that are missing from the
    /// repository before registering, so a first run needs nothing downloaded.
    pub generate_zoo: bool,
    /// Register every model of the repository at start; if false, models are registered
    /// only through `POST /v2/repository/models/{model}/load`.
    pub load_all: bool,
    /// Measured runs per batch size when profiling a model at registration.
    pub profile_runs: u32,
    /// Unmeasured runs per batch size before those.
    pub profile_warmup: u32,
}

impl Default for RepositoryConfig {
    fn default() -> Self {
        Self {
            path: "models".into(),
            generate_zoo: false,
            load_all: true,
            profile_runs: 20,
            profile_warmup: 3,
        }
    }
}

/// The HTTP side.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address the API listens on; port 0 picks a free port.
    pub listen: String,
    /// Address the gRPC API (`inference.GRPCInferenceService`) listens on; absent: no
    /// gRPC. Triton's clients default to the port after the HTTP one.
    pub grpc_listen: Option<String>,
    /// How long shutdown waits for in-flight requests; those still unanswered then are
    /// answered `shutting_down`.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Least time an action may run past its latest start and its estimate before the
    /// controller gives up on it: its requests are re-planned or answered
    /// `execution_failed`, and its device gets no work until it reports again. An action
    /// is always given at least twice its estimate.
    #[serde(with = "humantime_serde")]
    pub watchdog_grace: Duration,
    /// Largest request body the API accepts; larger ones are refused with 413.
    pub max_body_bytes: usize,
    /// Request bodies decoded at once (JSON or binary tensors to the runtime's tensors),
    /// on threads of their own: the cores the front end may use. 0: `front_end_cores`.
    pub decode_threads: usize,
    /// Requests that may wait for a decoder; more are refused at once
    /// (`deadline_unreachable`), and none waits past its deadline's slack.
    pub decode_queue: usize,
    /// When a request's answer is not ready by its deadline (its run, or the answer's way
    /// back, took longer than planned): `false` refuses it then (503 `overran`), so that
    /// no answer reaches a client after its objective; `true` waits and sends the outputs
    /// late (a closed-loop benchmark such as perf_analyzer stops at the first refusal).
    pub answer_late: bool,
    /// Cores kept for the front end (HTTP workers, decoding, controller) when cpu devices
    /// are pinned one per core: what `count = "auto"` leaves out.
    pub front_end_cores: usize,
    /// Bearer tokens of the admin and inference routes (`[server.auth]`).
    pub auth: AuthConfig,
    /// Certificate and key for HTTPS (`[server.tls]`).
    pub tls: TlsConfig,
    /// Timeouts and limits of the HTTP connections (`[server.connections]`).
    pub connections: ConnectionConfig,
}

impl ServerConfig {
    /// Decoders to run: `decode_threads`, or the front end's cores if 0.
    pub fn decoders(&self) -> usize {
        match self.decode_threads {
            0 => self.front_end_cores.max(1),
            n => n,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8000".into(),
            grpc_listen: None,
            shutdown_grace: Duration::from_secs(10),
            watchdog_grace: Duration::from_millis(100),
            max_body_bytes: 32 << 20,
            decode_threads: 0,
            decode_queue: 256,
            answer_late: false,
            front_end_cores: 1,
            auth: AuthConfig::default(),
            tls: TlsConfig::default(),
            connections: ConnectionConfig::default(),
        }
    }
}

/// The policies that can be named in configuration and on the command line: the one
/// table of their names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(try_from = "String", into = "&'static str")]
pub enum PolicyName {
    /// Clockwork's planning with early refusal.
    #[default]
    Clockwork,
    /// Ablation: Clockwork's planning without early refusal.
    ClockworkNodrop,
    /// A Clipper-like baseline that never refuses.
    Reactive,
    /// A Triton-like baseline: the reactive FIFO with full batches, replica floors and a
    /// timeout at the request's deadline as its only drop.
    Triton,
}

impl PolicyName {
    /// Every policy, in the order help texts list them.
    pub const ALL: [PolicyName; 4] = [
        Self::Clockwork,
        Self::ClockworkNodrop,
        Self::Reactive,
        Self::Triton,
    ];

    /// The name in configuration, on the command line and in reports.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Clockwork => "clockwork",
            Self::ClockworkNodrop => "clockwork-nodrop",
            Self::Reactive => "reactive",
            Self::Triton => "triton",
        }
    }

    /// Every name, comma-separated, for messages.
    pub fn known() -> String {
        Self::ALL.map(Self::as_str).join(", ")
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy name that is not one of [`PolicyName::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy '{0}' (known: {known})", known = PolicyName::known())]
pub struct UnknownPolicy(pub String);

impl FromStr for PolicyName {
    type Err = UnknownPolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownPolicy(s.to_owned()))
    }
}

impl TryFrom<String> for PolicyName {
    type Error = UnknownPolicy;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<PolicyName> for &'static str {
    fn from(name: PolicyName) -> Self {
        name.as_str()
    }
}

/// Settings of the runtime that are not decisions of the policy.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    /// Latency objective of a request whose model and request name none.
    #[serde(with = "humantime_serde")]
    pub default_slo: Duration,
    /// Size of one device weight page: the unit of device memory every model's weights
    /// are counted in, by the executors and the policy alike.
    pub page_bytes: u64,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            default_slo: Duration::from_millis(100),
            page_bytes: 16 << 20,
        }
    }
}

/// Constants of the scheduling policy.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// Which policy decides: `clockwork`, `clockwork-nodrop` (ablation: no early
    /// refusal) or `reactive` (a Clipper-like baseline).
    pub name: PolicyName,
    /// How far ahead of now each device's exec and load lanes are kept busy: more hides
    /// dispatch latency, less keeps batching decisions late and informed.
    #[serde(with = "humantime_serde")]
    pub schedule_ahead: Duration,
    /// Measurements kept per (model, batch size, device kind) estimate.
    pub estimate_window: usize,
    /// Percentile of the window used as the estimate (99 is in effect the max of 10).
    pub estimate_percentile: f64,
    /// Measurements older than this no longer count: before a model's requests are
    /// refused on its estimates, estimates not measured for this long go back to the
    /// profile. Without it a slow spell that raised an estimate past every objective
    /// would refuse that model forever (nothing runs, so nothing is measured again).
    /// Learned margins age the same way: when a request's objective leaves no room for a
    /// run besides the learned buffer and no device has learned from a report for this
    /// long, those whose margins are that old go back to `expected_lag` and `buffer`.
    #[serde(with = "humantime_serde")]
    pub estimate_max_age: Duration,
    /// Expected delay between the controller sending an action and an executor seeing it:
    /// the starting point of each device's learned lag (with `learn_margins`, replaced
    /// after a device's first `WARM_UP` (32) INFER reports by the 90th percentile of the
    /// lag it measured, `LAG_PERCENTILE`; a remote worker's measured trip stays a floor).
    #[serde(with = "humantime_serde")]
    pub expected_lag: Duration,
    /// Work overdue by more than this is assumed to have started this long ago.
    #[serde(with = "humantime_serde")]
    pub lag_allowance: Duration,
    /// Safety margin taken off every deadline for runs that take longer than their
    /// estimate: the starting point of the learned one (with `learn_margins`, each
    /// device's is replaced after its first 32 INFER reports by a high percentile of how
    /// much later than planned its answers were known: overrun plus the report's trip;
    /// the widest over the devices is taken off).
    #[serde(with = "humantime_serde")]
    pub buffer: Duration,
    /// Learn each device's lag and overrun margin from its reports (`expected_lag` and
    /// `buffer` are then starting points); off, they stay the fixed constants of the
    /// Clockwork paper, which hold back devices with exact timing at tight objectives.
    pub learn_margins: bool,
    /// Reports per device that the learned lag and overrun margin are taken over.
    pub margin_window: usize,
    /// Percentile of that window used as the overrun margin (100: the largest seen); the
    /// lag takes the lower of this and `estimate::LAG_PERCENTILE` (90).
    pub margin_percentile: f64,
    /// Admission projects the batches queued ahead of a new request at the mean of their
    /// estimate windows (the new request's own batch still at the estimate). Off, every
    /// batch counts at the estimate, as in the Clockwork paper: a sum of high percentiles,
    /// which on a device with a tail of slow runs (a cpu core) refuses requests it then
    /// serves with room to spare. Either way a queued request runs only if, when its turn
    /// comes, its own batch still fits at the estimate; what this changes is how many are
    /// admitted to wait for that turn.
    pub queue_at_mean: bool,
    /// Admission keeps, before the objective of a request that would wait behind other
    /// work, a share of the time until it would finish: the drift of the devices that
    /// hold its model, the 99th percentile over their last `margin_window` stretches of 8
    /// consecutive runs of how much longer than their means a stretch took, as a share of
    /// those means (`scheduler::estimate::Drift`). Nothing on devices with exact timing
    /// (the simulator's); on a device whose runs drift in slow spells (a cpu core),
    /// without it the requests admitted last under overload wait most of their objective
    /// and are then refused as timed out. Off by default: on a noisy 2-core host it
    /// halved the time-outs under overload but refused work below capacity that the
    /// device would have served (docs/EXPERIMENTS.md, "The drift margin"). Learned only
    /// with `learn_margins`.
    pub drift_margin: bool,
    /// Admission also counts, on each device that holds the model, the work the other
    /// resident models will run before the new request (`scheduler/clockwork/shared.rs`):
    /// their queued requests due before it and those still to come that will be, each
    /// model's at the share of what it admits that it serves. Without it, on a device
    /// shared by several busy models each admits as if it had the device alone, and under
    /// overload most of what is refused is refused after waiting most of its objective
    /// (docs/EXPERIMENTS.md, "Other models' work counted at arrival").
    pub shared_arrival: bool,
    /// Admission also keeps the promise made to the requests already queued: a request
    /// that would be queued ahead of some (an earlier deadline: a tighter objective, or
    /// a model's direct request beside a pipeline's sub-requests) is refused when it
    /// arrives if the projection shows it would push one of them past its latest finish
    /// (`scheduler/clockwork/behind.rs`). Without it, under overload the requests
    /// admitted with looser objectives wait most of them and are then refused as timed
    /// out. A model whose requests all share one objective never has any behind a new
    /// one in the simulator: nothing changes for it. Off by default: on a real server
    /// requests reach admission a little out of their arrival order, so one objective
    /// also puts requests behind newcomers, and under overload on the zoo the check
    /// refused work the device would have served (fewer answered in time in both runs
    /// with it); with objectives within a few runs of a batch it may serve a few percent
    /// fewer (docs/EXPERIMENTS.md, "Admitted requests keep their place").
    pub protect_admitted: bool,
    /// Admission learns, per model, how much later than projected its admitted requests
    /// finished when they missed (served late, or refused after waiting), and keeps the
    /// 99th percentile of the last 200 admissions' errors before the objective of the
    /// next (`scheduler/clockwork/hindsight.rs`); after 200 ms without learning anything,
    /// one request is admitted without it, so that a model refused at arrival comes back.
    /// Without it, under overload on a device shared by models of different objectives,
    /// the projection's expectation of the other models' work is a mean, and a fifth of
    /// what it admits with a few ms to spare is refused after waiting most of its
    /// objective. With it, under overload on the zoo (cpu devices) most of that is refused
    /// at arrival instead, serving as much. Off by default: where batches are cheaper per
    /// request (a GPU's), the requests that time out in a deep queue are the price of full
    /// batches, and a shallower queue serves less (in virtual time, 7% fewer at 7x on
    /// eight models of that shape, 0.70 against 0.74 of the load sweep's offered at
    /// 1.25x); and a model of a tight objective beside one of long runs, whose misses are
    /// as long as its objective's slack, can be refused nearly whole (docs/EXPERIMENTS.md,
    /// "Admission in hindsight").
    pub admission_hindsight: bool,
    /// Plan a device that runs much slower than the other devices of its kind at its own
    /// pace: once its last 3 runs (of models a peer of its kind holds too) each took at
    /// least twice its kind's quickest recent run of that batch, its estimates are scaled
    /// by the least of those ratios, and its runs are scaled back before its kind learns
    /// them (`scheduler::estimate::Slowdown`). Without it, such a device (throttled, its
    /// core taken by another process) is planned at its kind's pace: its actions overrun
    /// their plans until the watchdog takes it out as slow, and its slow runs raise its
    /// healthy peers' estimates. Off by default: in virtual time (exact timing) it keeps
    /// a slow device's capacity (at 1200 requests/s on two V100s, 83 refused against 260
    /// with one 4x slow), but two cpu devices on a noisy host run in stretches at twice
    /// their quickest anyway, and there it refused a few more requests than without
    /// (docs/EXPERIMENTS.md, "A device planned at its own pace"). For devices with steady
    /// timing.
    pub device_slowdown: bool,
    /// Horizon over which a queued request's demand for a device is counted when deciding
    /// which model to load: a request needs its batch-1 time within this much device time.
    #[serde(with = "humantime_serde")]
    pub load_budget: Duration,
    /// Largest batch ever formed.
    pub max_batch: u32,
    /// Longest estimated execution of one batch; larger batches are not formed.
    #[serde(with = "humantime_serde")]
    pub max_exec_time: Duration,
    /// Busy share of a device a model's replicas are sized for: a model gets as many
    /// replicas as its measured arrival rate times its per-request device time, divided
    /// by this (at least one while it has traffic). Below 1 so that bursts find room.
    pub target_utilisation: f64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        let ms = Duration::from_millis;
        Self {
            name: PolicyName::Clockwork,
            schedule_ahead: ms(5),
            estimate_window: 10,
            estimate_percentile: 99.0,
            estimate_max_age: ms(1000),
            expected_lag: ms(1),
            lag_allowance: ms(10),
            buffer: ms(5),
            learn_margins: true,
            margin_window: 256,
            margin_percentile: 100.0,
            queue_at_mean: true,
            drift_margin: false,
            shared_arrival: true,
            protect_admitted: false,
            admission_hindsight: false,
            device_slowdown: false,
            load_budget: ms(25),
            max_batch: 16,
            max_exec_time: ms(250),
            target_utilisation: 0.4,
        }
    }
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        let config = Self::parse(&text).map_err(|e| match e {
            ConfigError::Parse { source, .. } => ConfigError::Parse {
                path: shown,
                source,
            },
            other => other,
        })?;
        Ok(config)
    }

    /// Parses and validates configuration text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        refuse_moved_keys(text)?;
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: "<text>".into(),
            source: Box::new(e),
        })?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let p = &self.policy;
        let invalid = |m: &str| Err(ConfigError::Invalid(m.into()));
        if p.estimate_window == 0 {
            return invalid("policy.estimate_window must be at least 1");
        }
        if !(0.0..=100.0).contains(&p.estimate_percentile) {
            return invalid("policy.estimate_percentile must be within 0..=100");
        }
        if p.margin_window == 0 {
            return invalid("policy.margin_window must be at least 1");
        }
        if !(0.0..=100.0).contains(&p.margin_percentile) {
            return invalid("policy.margin_percentile must be within 0..=100");
        }
        if p.max_batch == 0 {
            return invalid("policy.max_batch must be at least 1");
        }
        if self.runtime.page_bytes == 0 {
            return invalid("runtime.page_bytes must be positive");
        }
        if self.server.front_end_cores == 0 {
            return invalid("server.front_end_cores must be at least 1");
        }
        self.server.auth.validate().map_err(ConfigError::Invalid)?;
        let tls = self.server.tls.files().map_err(ConfigError::Invalid)?;
        // The gRPC port has no TLS yet: with tokens configured for HTTPS, they would cross
        // it in plaintext. Refuse the combination rather than serve it quietly.
        if tls.is_some() && self.server.grpc_listen.is_some() {
            return invalid(
                "server.grpc_listen cannot be combined with server.tls yet (the gRPC port \
                 has no TLS, so tokens would cross it in plaintext): remove one of them",
            );
        }
        for group in &self.devices {
            if !group.backend.runs_on_cores() && group.count == DeviceCount::Auto {
                return invalid(
                    "devices: count = \"auto\" is for cpu and ort groups (one per core)",
                );
            }
            if group.backend == BackendKind::Sim && group.profile.is_none() {
                return invalid("devices: a sim group needs a profile (e.g. profile = \"v100\")");
            }
            if group.cpu.threads == 0 {
                return invalid("devices.cpu.threads must be at least 1");
            }
            if group.ort.threads == 0 {
                return invalid("devices.ort.threads must be at least 1");
            }
            if !(0.0..=1.0).contains(&group.sim.failure_rate) {
                return invalid("devices.sim.failure_rate must be within 0..=1");
            }
            if group.sim.noise_cv < 0.0 {
                return invalid("devices.sim.noise_cv must not be negative");
            }
        }
        Ok(())
    }
}

/// Keys that left `[policy]` (they are not the policy's decisions): refused with their new
/// place, so an old file does not fail with a bare "unknown field".
const MOVED: [(&str, &str); 2] = [
    ("page_bytes", "runtime.page_bytes"),
    ("default_slo", "runtime.default_slo"),
];

fn refuse_moved_keys(text: &str) -> Result<(), ConfigError> {
    // A file that does not parse is reported by the typed parse that follows.
    let Ok(table) = text.parse::<toml::Table>() else {
        return Ok(());
    };
    let Some(policy) = table.get("policy").and_then(toml::Value::as_table) else {
        return Ok(());
    };
    match MOVED.iter().find(|(key, _)| policy.contains_key(*key)) {
        Some((key, place)) => Err(ConfigError::Invalid(format!(
            "policy.{key} has moved: set it as {place} (in a [runtime] section)"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
