//! The `[[devices]]` groups (backends and their settings) and the `[[models]]` registered
//! from built-in profiles at start.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::DeviceCount;

/// Which backend a group of devices runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// Emulated device following latency profiles.
    Sim,
    /// Real ONNX inference with tract on a dedicated CPU thread.
    Cpu,
    /// Real ONNX inference with ONNX Runtime (loaded at run time) on a dedicated CPU
    /// thread, like `cpu`.
    Ort,
    /// The faster real CPU runtime this machine has, chosen at start and logged: `ort`
    /// when ONNX Runtime's library loads (`[devices.ort] library`, else
    /// `ORT_DYLIB_PATH`), else `cpu` (tract, built in, needs nothing installed).
    Auto,
}

impl BackendKind {
    /// Whether its devices are threads that each want a core of their own (counted by
    /// `count = "auto"` and pinned by the core plan).
    pub fn runs_on_cores(self) -> bool {
        matches!(
            self,
            BackendKind::Cpu | BackendKind::Ort | BackendKind::Auto
        )
    }

    /// The backend a group runs once `auto` is decided: `ort` where ONNX Runtime loads
    /// (it runs the same graphs 2.6 to 5.5 times faster than tract on one core,
    /// docs/EXPERIMENTS.md "ONNX Runtime against tract on CPU"), else `cpu`. Any other
    /// backend is itself.
    pub fn resolved(self, ort_loads: bool) -> BackendKind {
        match self {
            BackendKind::Auto if ort_loads => BackendKind::Ort,
            BackendKind::Auto => BackendKind::Cpu,
            other => other,
        }
    }
}

/// A group of identical devices.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceGroupConfig {
    pub backend: BackendKind,
    /// Built-in device profile (`v100`, ...) giving the kind, pages and load bandwidth;
    /// required for `sim` devices.
    pub profile: Option<String>,
    /// Number of devices in the group, or `"auto"` (cpu, ort and auto groups only): one per core
    /// the front end does not keep (`server.front_end_cores`), at least one.
    #[serde(default)]
    pub count: DeviceCount,
    /// Weight memory in pages of `runtime.page_bytes`: overrides a `sim` profile's; the
    /// capacity of a `cpu` device (default 64, 1 GiB with 16 MiB pages).
    pub pages: Option<u32>,
    /// Emulation settings for `sim` devices.
    #[serde(default)]
    pub sim: SimConfig,
    /// Settings of `cpu` devices (and of `auto` ones that run tract).
    #[serde(default)]
    pub cpu: CpuConfig,
    /// Settings of `ort` devices (and of `auto` ones: its `library` is the one `auto`
    /// tries).
    #[serde(default)]
    pub ort: OrtConfig,
    /// Faults injected on purpose (any backend): for tests and soak runs, never for
    /// serving. None by default.
    pub faults: Option<FaultConfig>,
}

/// Faults to inject in a group's devices (`[devices.faults]`), wrapped around whatever
/// backend the group runs (`gpu::fault`). Times count from the clock's epoch (the
/// server's start).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultConfig {
    /// Which devices of the group misbehave (0-based, in the group); all if absent, so
    /// that a test can keep the others healthy.
    pub devices: Option<Vec<u32>>,
    /// Seed of the failure draws; the devices of a group get consecutive seeds.
    pub seed: u64,
    /// Probability that any action fails with an injected device error.
    pub failure_rate: f64,
    /// Probability that a LOAD fails (weights that cannot be copied in), on top of
    /// `failure_rate`.
    pub load_failure_rate: f64,
    /// A window in which every action takes `factor` times as long.
    pub slowdown: Option<SlowdownConfig>,
    /// From a time on, the device hangs: actions started in the episode wait, without a
    /// word, until it ends (forever if it has no end), then run.
    pub hang: Option<FaultEpisode>,
    /// From a time on, every action panics in the backend (a crashing driver): the
    /// action fails, the server lives on.
    pub panic: Option<FaultEpisode>,
    /// From a time on, every INFER fails with a device error while LOADs and UNLOADs
    /// pass (a device whose runs fail but whose memory copies work): only a probe that
    /// runs real work tells it is still broken.
    pub failing_runs: Option<FaultEpisode>,
    /// From a time on, every LOAD fails with a device error while INFERs and UNLOADs pass
    /// (weights that cannot be copied in, on a device whose runs work): only a probe that
    /// loads tells it is still broken.
    pub failing_loads: Option<FaultEpisode>,
}

impl FaultConfig {
    /// Whether device `i` of the group misbehaves.
    pub fn applies_to(&self, i: u32) -> bool {
        self.devices.as_ref().is_none_or(|d| d.contains(&i))
    }
}

/// When a fault lasts.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultEpisode {
    /// Start, from the clock's epoch.
    #[serde(with = "humantime_serde")]
    pub from: Duration,
    /// How long it lasts; forever if absent.
    #[serde(default, with = "humantime_serde")]
    pub lasting: Option<Duration>,
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

/// How an `ort` device runs ONNX Runtime.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OrtConfig {
    /// ONNX Runtime's shared library (`libonnxruntime.so`, as `scripts/onnxruntime.sh`
    /// prints it); unset: `ORT_DYLIB_PATH`. One library per process.
    pub library: Option<PathBuf>,
    /// Threads ONNX Runtime uses within one run (intra-op). 1 runs on the device's own
    /// thread, the most predictable setting, as for `cpu`.
    pub threads: usize,
}

impl Default for OrtConfig {
    fn default() -> Self {
        Self {
            library: None,
            threads: 1,
        }
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
#[derive(Clone, Copy, Debug, Deserialize)]
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
