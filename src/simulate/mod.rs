//! `clockwork simulate`: the real controller, executors and model cache on emulated
//! devices, in virtual time, fed a workload; one run per policy on the same arrivals.
//!
//! Each policy gets a fresh actor system on a paused tokio clock, so a 30-minute run takes
//! seconds and the same seed and flags give the same numbers. The driver sends every
//! arrival as a real `Infer` message and records its one answer; a subscriber to the
//! controller's events records the actions. The report goes to `--out`.

mod driver;
mod listener;
pub mod pipelines;

use std::collections::BTreeMap;
use std::path::PathBuf;

use self::pipelines::PipelineArgs;
use crate::actors::StartError;
use crate::config::{BackendKind, Config, DeviceGroupConfig, ModelConfig, PolicyConfig, SimConfig};
use crate::gpu::profiles;
use crate::pipeline::BudgetKind;
use crate::report::{self, PolicyReport, Report, ReportError};
use crate::scheduler::{UnknownPolicy, POLICIES};
use crate::slopt::systems::{Parts, System};
use crate::time::Nanos;
use crate::workload::{WorkloadError, WorkloadKind, WorkloadParams};

/// Everything a simulation run is told.
#[derive(Clone, Debug)]
pub struct SimulateArgs {
    pub workload: WorkloadKind,
    /// Workload parameters (models, rate, duration, SLO, seed, ...).
    pub params: WorkloadParams,
    /// Emulated devices.
    pub devices: u32,
    /// Built-in device profile of every device.
    pub device_profile: String,
    /// Overrides the device profile's page count.
    pub pages: Option<u32>,
    /// Built-in model profile of every model.
    pub model_profile: String,
    /// Relative spread of emulated durations (0 = exact).
    pub noise_cv: f64,
    /// Policies to run, each on the same arrivals.
    pub policies: Vec<String>,
    /// The policy constants every run starts from (its `name` is replaced by each of
    /// `policies`), so that a setting can be compared on the same arrivals.
    pub policy: PolicyConfig,
    /// Closed loop: number of clients and think time.
    pub clients: u32,
    pub think: Nanos,
    pub out: PathBuf,
    /// The command line, for the report.
    pub command: String,
    /// Show a progress bar on stderr (only drawn on a terminal).
    pub progress: bool,
    /// Drive a built-in pipeline's root requests instead of `models` copies of
    /// `model_profile` (the SLO is then the end-to-end objective).
    pub pipeline: Option<PipelineArgs>,
}

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error(transparent)]
    Policy(#[from] UnknownPolicy),
    #[error("cannot start the actors: {0}")]
    Start(#[from] StartError),
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error("--{0}: {1}")]
    BadArgument(&'static str, String),
    #[error("cannot build the virtual-time runtime: {0}")]
    Runtime(#[from] std::io::Error),
    #[error("built-in pipeline {0}: {1}")]
    Pipeline(String, String),
    #[error("the event subscriber fell behind by {0} events; the report would be wrong")]
    EventsLost(u64),
}

impl SimulateArgs {
    fn check(&self) -> Result<(), SimulateError> {
        let bad = |flag, why: String| Err(SimulateError::BadArgument(flag, why));
        if self.devices == 0 {
            return bad("devices", "must be at least 1".into());
        }
        if profiles::device(&self.device_profile).is_none() {
            let known = profiles::DEVICES.join(", ");
            return bad(
                "device-profile",
                format!("'{}' is not one of {known}", self.device_profile),
            );
        }
        if profiles::model(&self.model_profile, "m", 1).is_none() {
            let known = profiles::MODELS.join(", ");
            return bad(
                "model-profile",
                format!("'{}' is not one of {known}", self.model_profile),
            );
        }
        if self.policies.is_empty() {
            return bad(
                "policy",
                format!("name at least one of {}", POLICIES.join(", ")),
            );
        }
        if let Some(p) = self.policies.iter().find(|p| self.parts(p).is_err()) {
            if self.pipeline.is_some() {
                return bad(
                    "policy",
                    format!(
                        "'{p}' is neither a policy nor a pipeline system ({})",
                        System::known()
                    ),
                );
            }
            return Err(UnknownPolicy(p.clone()).into());
        }
        if self.workload == WorkloadKind::Closed && self.clients == 0 {
            return bad("clients", "the closed loop needs at least 1 client".into());
        }
        if !(0.0..10.0).contains(&self.noise_cv) {
            return bad("noise-cv", "must be within 0..10".into());
        }
        self.check_pipeline()
    }

    fn check_pipeline(&self) -> Result<(), SimulateError> {
        let Some(pipeline) = &self.pipeline else {
            return Ok(());
        };
        let bad = |flag, why: &str| Err(SimulateError::BadArgument(flag, why.to_owned()));
        let fan_out = pipeline.fan_out;
        if !(fan_out.mean.is_finite() && fan_out.mean >= 0.0) {
            return bad("fanout-mean", "must be a number of at least 0");
        }
        if !(fan_out.variance.is_finite() && fan_out.variance > 0.0) {
            return bad("fanout-var", "must be a number above 0");
        }
        if !(pipeline.escalate > 0.0 && pipeline.escalate < 1.0) {
            return bad("escalate", "must be a fraction strictly between 0 and 1");
        }
        if self.params.models != 1 {
            return bad(
                "models",
                "a pipeline run sends root requests to one pipeline: 1",
            );
        }
        Ok(())
    }

    /// What `name` runs: a pipeline system's parts, or a plain policy's (SLOpt's
    /// planning with `--budget tuned`).
    fn parts(&self, name: &str) -> Result<Parts, UnknownPolicy> {
        match (name.parse::<System>(), &self.pipeline) {
            (Ok(system), Some(_)) => Ok(system.parts()),
            _ => {
                let tuned = self
                    .pipeline
                    .as_ref()
                    .is_some_and(|p| p.budget == BudgetKind::Tuned);
                Ok(Parts::legacy(name.parse()?, tuned))
            }
        }
    }

    /// The runtime configuration of one policy's run.
    fn config(&self, policy: &str) -> Result<Config, UnknownPolicy> {
        let mut config = Config {
            policy: self.policy.clone(),
            ..Config::default()
        };
        config.policy.name = self.parts(policy)?.policy;
        config.runtime.default_slo = std::time::Duration::from_nanos(self.params.slo);
        config.devices.push(DeviceGroupConfig {
            backend: BackendKind::Sim,
            profile: Some(self.device_profile.clone()),
            count: self.devices.into(),
            pages: self.pages,
            sim: SimConfig {
                seed: self.params.seed,
                noise_cv: self.noise_cv,
                // A pipeline maps its stages' outputs to the next stages' inputs: they
                // must exist (emulated, of the declared shapes; one row where variable).
                skip_outputs: self.pipeline.is_none(),
                ..SimConfig::default()
            },
            faults: None,
            cpu: Default::default(),
            ort: Default::default(),
        });
        let slo = Some(std::time::Duration::from_nanos(self.params.slo));
        match &self.pipeline {
            None => config.models.push(ModelConfig {
                name: "m".into(),
                profile: self.model_profile.clone(),
                copies: self.params.models,
                slo,
            }),
            // Each stage's model under its profile's name; their own objectives never
            // apply (stage requests carry stage deadlines), the pipeline's does.
            Some(pipeline) => config
                .models
                .extend(pipeline.which.stages().iter().map(|stage| ModelConfig {
                    name: stage.model.into(),
                    profile: stage.model.into(),
                    copies: 1,
                    slo,
                })),
        }
        Ok(config)
    }

    fn setup(&self) -> BTreeMap<String, String> {
        let p = &self.params;
        let mut setup = BTreeMap::new();
        let mut put = |k: &str, v: String| setup.insert(k.to_owned(), v);
        put("workload", self.workload.to_string());
        match &self.pipeline {
            None => put("models", format!("{} x {}", p.models, self.model_profile)),
            Some(pipeline) => {
                let emulated = pipeline.emulated();
                put("pipeline", pipeline.which.to_string());
                put(
                    "emulated fan-out (mean, variance)",
                    format!("{}, {}", emulated.mean, emulated.variance),
                )
            }
        };
        put(
            "devices",
            format!("{} x {}", self.devices, self.device_profile),
        );
        put("rate (req/s)", format!("{}", p.rate));
        put("duration (s)", format!("{}", p.duration as f64 / 1e9));
        put("slo (ms)", format!("{}", p.slo as f64 / 1e6));
        put("seed", p.seed.to_string());
        put("noise cv", self.noise_cv.to_string());
        setup
    }
}

/// Runs every policy on the workload and writes the report into `args.out`.
pub fn run(args: &SimulateArgs) -> Result<Report, SimulateError> {
    args.check()?;
    let mut policies: Vec<PolicyReport> = Vec::new();
    for policy in &args.policies {
        let config = args.config(policy)?;
        let parts = args.parts(policy)?;
        policies.push(driver::run_policy(args, policy, &config, &parts)?);
    }
    let report = Report {
        command: args.command.clone(),
        setup: args.setup(),
        policies,
    };
    report::write_all(&args.out, &report)?;
    Ok(report)
}
