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
pub use drift::DriftMargin;
pub use policy::PolicyConfig;

mod access;
mod cluster;
mod devices;
mod drift;
mod policy;

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
    /// Memory written once at start and kept for the request path (`clockwork serve`,
    /// with its default allocator): from then on the allocator keeps what is freed
    /// instead of handing it back to the system, so that the first burst to hold many
    /// bodies at once does not wait for fresh pages (tens of ms on a virtual machine).
    /// The process's resident memory starts that much higher. 0: none written (freed
    /// memory is still kept).
    pub warm_memory_bytes: usize,
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
    /// Timeouts and limits of the HTTP and gRPC connections (`[server.connections]`).
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
            warm_memory_bytes: 256 << 20,
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
        if !(0.0..=1.0).contains(&p.hindsight_floor) {
            return invalid(
                "policy.hindsight_floor must be within 0..=1 (a share of a model's arrivals)",
            );
        }
        if p.hindsight_weight == 0 {
            return invalid("policy.hindsight_weight must be at least 1 (1 refuses only where more missed than were served)");
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
                    "devices: count = \"auto\" is for cpu, ort and auto groups (one per core)",
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
