//! The configuration file (`config.toml`), documented field by field.
//!
//! Every key has a default taken from the Clockwork paper (see "Facts the design rests on"
//! in docs/ARCHITECTURE.md), so an empty file is valid. Unknown keys are rejected with the key's name, because a misspelt
//! setting that silently keeps its default is worse than a refusal to start.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

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
    /// Groups of devices; every group adds `count` executors.
    pub devices: Vec<DeviceGroupConfig>,
    /// Models registered at start from built-in profiles (served by `sim` devices).
    pub models: Vec<ModelConfig>,
    /// The model repository: real ONNX models, registered at start and on demand.
    pub repository: Option<RepositoryConfig>,
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
    /// How long shutdown waits for in-flight requests before giving up on them.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Largest request body the API accepts; larger ones are refused with 413.
    pub max_body_bytes: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8000".into(),
            shutdown_grace: Duration::from_secs(10),
            max_body_bytes: 32 << 20,
        }
    }
}

/// Constants of the scheduling policy.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// Which policy decides: `clockwork`, `clockwork-nodrop` (ablation: no early
    /// refusal) or `reactive` (a Clipper-like baseline).
    pub name: String,
    /// How far ahead of now each device's exec and load lanes are kept busy: more hides
    /// dispatch latency, less keeps batching decisions late and informed.
    #[serde(with = "humantime_serde")]
    pub schedule_ahead: Duration,
    /// Measurements kept per (model, batch size, device kind) estimate.
    pub estimate_window: usize,
    /// Percentile of the window used as the estimate (99 is in effect the max of 10).
    pub estimate_percentile: f64,
    /// Expected delay between the controller sending an action and an executor seeing it.
    #[serde(with = "humantime_serde")]
    pub expected_lag: Duration,
    /// Work overdue by more than this is assumed to have started this long ago.
    #[serde(with = "humantime_serde")]
    pub lag_allowance: Duration,
    /// Safety margin taken off every deadline so that an action started at its `latest`
    /// still finishes in time; keep it at least `schedule_ahead`.
    #[serde(with = "humantime_serde")]
    pub buffer: Duration,
    /// Horizon over which a queued request's demand for a device is counted when deciding
    /// which model to load: a request needs its batch-1 time within this much device time.
    #[serde(with = "humantime_serde")]
    pub load_budget: Duration,
    /// Largest batch ever formed.
    pub max_batch: u32,
    /// Longest estimated execution of one batch; larger batches are not formed.
    #[serde(with = "humantime_serde")]
    pub max_exec_time: Duration,
    /// Latency objective of a request whose model and request name none.
    #[serde(with = "humantime_serde")]
    pub default_slo: Duration,
    /// Size of one device weight page.
    pub page_bytes: u64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        let ms = Duration::from_millis;
        Self {
            name: "clockwork".into(),
            schedule_ahead: ms(5),
            estimate_window: 10,
            estimate_percentile: 99.0,
            expected_lag: ms(1),
            lag_allowance: ms(10),
            buffer: ms(5),
            load_budget: ms(25),
            max_batch: 16,
            max_exec_time: ms(250),
            default_slo: ms(100),
            page_bytes: 16 << 20,
        }
    }
}

/// Which backend a group of devices runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// Emulated device following latency profiles.
    Sim,
    /// Real ONNX inference with tract on a dedicated CPU thread.
    Cpu,
}

/// A group of identical devices.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceGroupConfig {
    pub backend: BackendKind,
    /// Built-in device profile (`v100`, ...) giving the kind, pages and load bandwidth;
    /// required for `sim` devices.
    pub profile: Option<String>,
    /// Number of devices in the group.
    #[serde(default = "one")]
    pub count: u32,
    /// Weight memory in pages of `policy.page_bytes`: overrides a `sim` profile's; the
    /// capacity of a `cpu` device (default 64, 1 GiB with 16 MiB pages).
    pub pages: Option<u32>,
    /// Emulation settings for `sim` devices.
    #[serde(default)]
    pub sim: SimConfig,
    /// Settings of `cpu` devices.
    #[serde(default)]
    pub cpu: CpuConfig,
}

/// How a `cpu` device runs tract.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CpuConfig {
    /// Threads tract uses within one run. 1 keeps a device on its own thread, the most
    /// predictable setting; more trade predictability for speed on large batches.
    pub threads: usize,
}

impl Default for CpuConfig {
    fn default() -> Self {
        Self { threads: 1 }
    }
}

/// Pages of a `cpu` device whose group names none.
pub const DEFAULT_CPU_PAGES: u32 = 64;

fn one() -> u32 {
    1
}

/// How an emulated device deviates from its profile.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// Seed of the noise; devices of a group get consecutive seeds.
    pub seed: u64,
    /// Relative spread (coefficient of variation) of execution times; 0 is exact.
    pub noise_cv: f64,
    /// A window in which the device runs slower.
    pub slowdown: Option<SlowdownConfig>,
    /// Probability that an action fails with a device error.
    pub failure_rate: f64,
    /// Skip computing outputs: INFERs answer with no tensors. The simulator sets it,
    /// since it never reads outputs and they would dominate its run time.
    pub skip_outputs: bool,
}

/// A window of degraded speed.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowdownConfig {
    /// Start, from the clock's epoch.
    #[serde(with = "humantime_serde")]
    pub from: Duration,
    /// End, from the clock's epoch.
    #[serde(with = "humantime_serde")]
    pub until: Duration,
    /// Multiplier of every duration inside the window.
    pub factor: f64,
}

/// Models registered at start.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Name in the API; with `copies > 1`, copies are named `name-0`, `name-1`, ...
    pub name: String,
    /// Built-in model profile (`resnet50`, ...).
    pub profile: String,
    /// Number of independent copies (distinct models with the same profile).
    #[serde(default = "one")]
    pub copies: u32,
    /// Latency objective of its requests unless a request names one.
    #[serde(default, with = "humantime_serde")]
    pub slo: Option<Duration>,
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
        if !crate::scheduler::POLICIES.contains(&p.name.as_str()) {
            let known = crate::scheduler::POLICIES.join(", ");
            let name = &p.name;
            return Err(ConfigError::Invalid(format!(
                "policy.name '{name}' is not one of {known}"
            )));
        }
        if p.estimate_window == 0 {
            return invalid("policy.estimate_window must be at least 1");
        }
        if !(0.0..=100.0).contains(&p.estimate_percentile) {
            return invalid("policy.estimate_percentile must be within 0..=100");
        }
        if p.max_batch == 0 {
            return invalid("policy.max_batch must be at least 1");
        }
        if p.page_bytes == 0 {
            return invalid("policy.page_bytes must be positive");
        }
        for group in &self.devices {
            if group.backend == BackendKind::Sim && group.profile.is_none() {
                return invalid("devices: a sim group needs a profile (e.g. profile = \"v100\")");
            }
            if group.cpu.threads == 0 {
                return invalid("devices.cpu.threads must be at least 1");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_takes_paper_defaults() {
        let config = Config::parse("").unwrap();
        assert_eq!(config.policy.schedule_ahead, Duration::from_millis(5));
        assert_eq!(config.policy.estimate_window, 10);
        assert_eq!(config.policy.page_bytes, 16 << 20);
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = Config::parse("[policy]\nschedule_ahaed = \"5ms\"\n").unwrap_err();
        let ConfigError::Parse { source, .. } = err else {
            panic!("expected a parse error, got {err}");
        };
        assert!(
            source
                .to_string()
                .contains("unknown field `schedule_ahaed`"),
            "{source}"
        );
    }

    #[test]
    fn durations_are_humane() {
        let text = "[policy]\nschedule_ahead = \"10ms\"\n[[models]]\nname = \"a\"\nprofile = \"resnet50\"\nslo = \"250ms\"\n";
        let config = Config::parse(text).unwrap();
        assert_eq!(config.policy.schedule_ahead, Duration::from_millis(10));
        assert_eq!(config.models[0].slo, Some(Duration::from_millis(250)));
    }

    #[test]
    fn bad_values_are_refused() {
        let err = Config::parse("[policy]\nmax_batch = 0\n").unwrap_err();
        assert!(err.to_string().contains("max_batch"), "{err}");
    }
}
