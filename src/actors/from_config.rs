//! The runtime as `config.toml` describes it: device groups, models from built-in
//! profiles, and the model repository (zoo written if asked, every model prepared and
//! profiled). A repository model that cannot be read is refused with its reason and
//! logged here; one that no device can serve is refused by the registry at start; the
//! others are registered all the same.

use super::runtime::{RuntimeBuilder, StartError};
use crate::config::{
    BackendKind, Config, DeviceCount, DeviceGroupConfig, RepositoryConfig, DEFAULT_CPU_PAGES,
};
use crate::cores::{self, Core, CorePlan, Machine};
use crate::gpu::cpu::profile::ProfileSettings;
use crate::gpu::cpu::{CpuDevice, CpuSettings};
use crate::gpu::fault::Faulty;
use crate::gpu::ort::{self, OrtDevice, OrtSettings};
use crate::gpu::profiles;
use crate::gpu::sim::{SimDevice, SimSettings};
use crate::gpu::thread::{BlockingDevice, DeviceThread};
use crate::gpu::Backend;
use crate::repository::{zoo, PrepareSettings, Registration, Repository, RepositorySource};
use crate::time::{nanos, Clock};

impl RuntimeBuilder {
    /// Devices, models and repository as the configuration file describes them.
    pub fn from_config(clock: Clock, config: &Config) -> Result<Self, StartError> {
        let config = &resolve_backends(config);
        let settings = super::ControllerSettings {
            watchdog_grace: nanos(config.server.watchdog_grace),
            shutdown_grace: nanos(config.server.shutdown_grace),
            wait_for_devices: config.cluster.wait_for_devices,
            ..Default::default()
        };
        let mut builder = Self::new(clock, config.policy.clone())
            .runtime(config.runtime.clone())
            .controller_settings(settings);
        if config.cluster.listen.is_some() {
            builder = builder.open_to_workers();
        }
        let (devices, cores) = devices_of(clock, config)?;
        for (kind, backend) in devices {
            builder = builder.configured_device(Some(kind), backend);
        }
        builder.cores = cores;
        for model in &config.models {
            let slo = nanos(model.slo.unwrap_or(config.runtime.default_slo));
            for copy in 0..model.copies {
                let name = if model.copies == 1 {
                    model.name.clone()
                } else {
                    format!("{}-{copy}", model.name)
                };
                let spec = profiles::model(&model.profile, &name, slo)
                    .ok_or_else(|| StartError::UnknownModelProfile(model.profile.clone()))?;
                builder = builder.model(spec);
            }
        }
        if let Some(repository) = &config.repository {
            builder = builder.repository_models(config, repository)?;
        }
        Ok(builder)
    }

    /// Registers the repository's models (if `load_all`), refusing one by one those that
    /// cannot be served, and keeps the repository for registrations on demand.
    fn repository_models(
        mut self,
        config: &Config,
        repository: &RepositoryConfig,
    ) -> Result<Self, StartError> {
        let source = RepositorySource {
            repository: Repository::new(&repository.path),
            settings: PrepareSettings {
                default_slo: config.runtime.default_slo,
                threads: threads_of(config, BackendKind::Cpu),
                ort_threads: threads_of(config, BackendKind::Ort),
                profiling: ProfileSettings {
                    warmup: repository.profile_warmup,
                    runs: repository.profile_runs,
                    ..ProfileSettings::default()
                },
            },
        };
        if repository.generate_zoo {
            let mut written = zoo::write_missing(&repository.path)?;
            written.extend(zoo::write_pipelines(&repository.path)?);
            if !written.is_empty() {
                let root = repository.path.display();
                tracing::info!(%root, models = ?written, "wrote the built-in zoo");
            }
        }
        if repository.load_all {
            for name in source.repository.names()? {
                match source.repository.pipeline(&name) {
                    // Validated against the models once they are registered.
                    Ok(Some(decl)) => {
                        self.pipelines.push((name, decl));
                        continue;
                    }
                    Ok(None) => {}
                    Err(error) => {
                        tracing::error!(pipeline = %name, %error, "pipeline refused");
                        self.refused.push((name, error.to_string()));
                        continue;
                    }
                }
                match source.prepare(&name) {
                    Ok(registration) => {
                        log_prepared(&registration);
                        self = self.registered(registration);
                    }
                    Err(error) => {
                        tracing::error!(model = %name, %error, "model refused");
                        self.refused.push((name, error.to_string()));
                    }
                }
            }
        }
        Ok(self.repository(source))
    }
}

/// A device built from the configuration, with the backend it was configured as.
pub type ConfiguredDevice = (BackendKind, Box<dyn Backend>);

/// The configured devices (`[[devices]]`), each with its backend kind, and the cores
/// they run on: the runtime's, and a remote worker's (`crate::remote::worker`).
pub fn devices_from_config(
    clock: Clock,
    config: &Config,
) -> Result<(Vec<ConfiguredDevice>, Option<CorePlan>), StartError> {
    devices_of(clock, &resolve_backends(config))
}

/// [`devices_from_config`] of a configuration whose `auto` groups are decided.
fn devices_of(
    clock: Clock,
    config: &Config,
) -> Result<(Vec<ConfiguredDevice>, Option<CorePlan>), StartError> {
    let cores = core_plan(config);
    let mut devices = Vec::new();
    let mut cpu_devices = 0;
    let mut cpu_groups = 0;
    for group in &config.devices {
        let on_cores = group.backend.runs_on_cores();
        let count = match (on_cores, group.count, &cores) {
            (true, _, Some(plan)) => plan.counts[cpu_groups],
            (_, DeviceCount::Fixed(count), _) => count,
            // `validate` admits `auto` only in groups on cores, which have a plan.
            (_, DeviceCount::Auto, _) => 1,
        };
        for i in 0..count {
            let core = match (on_cores, &cores) {
                (true, Some(plan)) => plan.devices[cpu_devices + i as usize],
                _ => None,
            };
            let mut backend = device(clock, group, i, devices.len(), core)?;
            if let Some(faults) = group.faults.as_ref().filter(|f| f.applies_to(i)) {
                backend = Box::new(Faulty::new(backend, clock, faults, u64::from(i)));
            }
            devices.push((group.backend, backend));
        }
        if on_cores {
            cpu_groups += 1;
            cpu_devices += count as usize;
        }
    }
    Ok((devices, cores))
}

/// `config` with each `auto` device group decided ([`BackendKind::resolved`]): `ort` when
/// ONNX Runtime's library loads here, else `cpu`, the choice logged with its reason (and,
/// for tract, how to get ONNX Runtime). A configuration without `auto` comes back as it was.
pub fn resolve_backends(config: &Config) -> Config {
    let mut resolved = config.clone();
    let auto = |g: &&mut DeviceGroupConfig| g.backend == BackendKind::Auto;
    for group in resolved.devices.iter_mut().filter(auto) {
        let configured = group.ort.library.as_deref();
        let loaded = ort::library::environment(configured);
        group.backend = BackendKind::Auto.resolved(loaded.is_ok());
        // Said from the decision, so that the log cannot disagree with what runs.
        let error = loaded.err().map(|e| e.to_string()).unwrap_or_default();
        match group.backend {
            BackendKind::Ort => {
                let library = ort::library::resolve(configured)
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                tracing::info!(%library, "devices: backend \"auto\" runs ONNX Runtime (ort)");
            }
            // A library the group names was asked for: its failure is worth a warning.
            _ if configured.is_some() => tracing::warn!(
                %error,
                "devices: backend \"auto\" runs tract (cpu), the library named not loading"
            ),
            _ => tracing::info!(
                %error,
                "devices: backend \"auto\" runs tract (cpu), ONNX Runtime being unavailable"
            ),
        }
    }
    resolved
}

/// Which cores the cpu and ort devices and the front end get, said in the log; `None`
/// without such devices (emulated devices wait on the clock, they need no core of their own).
fn core_plan(config: &Config) -> Option<CorePlan> {
    let counts: Vec<DeviceCount> = config
        .devices
        .iter()
        .filter(|g| g.backend.runs_on_cores())
        .map(|g| g.count)
        .collect();
    if counts.is_empty() {
        return None;
    }
    let plan = cores::plan(&Machine::detect(), &counts, config.server.front_end_cores);
    let devices: Vec<String> = plan
        .devices
        .iter()
        .map(|c| c.map_or("-".into(), |c| c.to_string()))
        .collect();
    let front: Vec<String> = plan.front_end.iter().map(|c| c.to_string()).collect();
    tracing::info!(
        cpu_devices = plan.devices.len(),
        device_cores = %devices.join(","),
        front_end_cores = %front.join(","),
        http_workers = plan.workers,
        "cores: {}",
        plan.reason
    );
    Some(plan)
}

/// Device `i` of `group`, the `index`-th device overall; a cpu device's thread is pinned
/// to `core` if it has one.
fn device(
    clock: Clock,
    group: &DeviceGroupConfig,
    i: u32,
    index: usize,
    core: Option<Core>,
) -> Result<Box<dyn Backend>, StartError> {
    match group.backend {
        BackendKind::Sim => {
            let name = group.profile.clone().unwrap_or_default();
            let profile = profiles::device(&name).ok_or(StartError::UnknownDeviceProfile(name))?;
            let mut emulation = group.sim.clone();
            emulation.seed = emulation.seed.wrapping_add(u64::from(i));
            let settings = SimSettings {
                profile,
                pages: group.pages,
                emulation,
            };
            Ok(Box::new(SimDevice::new(clock, settings)))
        }
        // `auto` was decided by `resolve_backends`; tract, which needs nothing, otherwise.
        BackendKind::Cpu | BackendKind::Auto => {
            let settings = CpuSettings {
                pages: group.pages.unwrap_or(DEFAULT_CPU_PAGES),
                threads: group.cpu.threads,
            };
            let name = format!("cpu-device-{index}");
            spawn(name, CpuDevice::new(settings), core)
        }
        BackendKind::Ort => {
            let name = format!("ort-device-{index}");
            let failed = |message: String| StartError::Device {
                name: name.clone(),
                message,
            };
            // Loads the library (the group's, else ORT_DYLIB_PATH) or says how to get it.
            ort::library::environment(group.ort.library.as_deref())
                .map_err(|e| failed(e.to_string()))?;
            let settings = OrtSettings {
                pages: group.pages.unwrap_or(DEFAULT_CPU_PAGES),
                threads: group.ort.threads,
            };
            let device = OrtDevice::new(settings).map_err(|e| failed(e.to_string()))?;
            spawn(name, device, core)
        }
    }
}

/// A real device on a thread of its own, pinned to `core` if it has one.
fn spawn(
    name: String,
    device: impl BlockingDevice,
    core: Option<Core>,
) -> Result<Box<dyn Backend>, StartError> {
    let thread =
        DeviceThread::spawn_pinned(name.clone(), device, core).map_err(|e| StartError::Device {
            name,
            message: e.to_string(),
        })?;
    Ok(Box::new(thread))
}

/// The threads of every group of `backend` (cpu or ort), in order: models are profiled
/// once per distinct count (each is a device kind of its own), as those devices run.
fn threads_of(config: &Config, backend: BackendKind) -> Vec<usize> {
    config
        .devices
        .iter()
        .filter(|g| g.backend == backend)
        .map(|g| match backend {
            BackendKind::Ort => g.ort.threads,
            _ => g.cpu.threads,
        })
        .collect()
}

fn log_prepared(registration: &Registration) {
    let spec = &registration.spec;
    for measured in &registration.profiles {
        let profile = &measured.profile;
        let batches: Vec<String> = profile
            .batches
            .iter()
            .map(|b| format!("{}:{:.2}ms", b.batch, b.latency.p50 / 1e6))
            .collect();
        tracing::info!(
            model = %spec.name,
            version = spec.version,
            kind = %measured.kind,
            weight_bytes = spec.profile.weight_bytes,
            build_ms = format!("{:.1}", registration.build as f64 / 1e6),
            load_ms = format!("{:.3}", profile.load.p50 / 1e6),
            batches = %batches.join(" "),
            profile = if measured.reused { "stored" } else { "measured" },
            "model prepared"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `auto` whose library cannot load runs tract; other groups are left as they were.
    #[test]
    fn auto_without_onnx_runtime_runs_tract() {
        let config = Config::parse(
            "[[devices]]\nbackend = \"auto\"\ncount = 1\n[devices.ort]\n\
             library = \"/nonexistent/libonnxruntime.so\"\n\
             [[devices]]\nbackend = \"sim\"\nprofile = \"v100\"\n",
        )
        .unwrap();
        let resolved = resolve_backends(&config);
        let backends: Vec<BackendKind> = resolved.devices.iter().map(|g| g.backend).collect();
        assert_eq!(backends, [BackendKind::Cpu, BackendKind::Sim]);
    }
}
