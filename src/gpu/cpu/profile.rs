//! Profiling a model on this CPU before it is served, as Clockwork profiles every model
//! at registration: given what was built once for the model, time LOADs of it onto a
//! device of the kind being profiled (the load time), then run every allowed batch size a
//! number of times, under that kind's threads, on inputs of the declared shapes. The
//! measurement goes through the device's own calls ([`measure_device`]), so the `ort`
//! backend is profiled by the same code as tract's.
//!
//! The measured distributions are kept (the repository stores them beside the model so a
//! restart reuses them); the controller's estimates are seeded from their 99th
//! percentile, the statistic its sliding window keeps. Runs are timed by the wall clock,
//! as requests will see them: seeds from each run's time on a core alone (less what it
//! waited for one) were tried and made answers late at a light load, the seed being
//! below what runs then took (docs/EXPERIMENTS.md, "Re-measured on main (end of the sixth
//! session)"); a device whose core is shared says so at run time (`gpu::contention`).

use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tract_linalg::multithread::Executor;

use super::{CpuDevice, CpuError, CpuSettings, ModelPlans};
use crate::gpu::thread::BlockingDevice;
use crate::gpu::{DeviceError, InferJob, ModelArtifact, Prepared};
use crate::model::{BatchLatency, DataType, ModelId, ModelProfile, ModelSpec, TensorSpec};
use crate::stats::Summary;
use crate::tensor::Tensor;
use crate::time::nanos;

/// How much profiling to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileSettings {
    /// Threads tract uses (the same as the devices that will serve the model).
    pub threads: usize,
    /// Runs per batch size that are not measured (caches, first-run allocations).
    pub warmup: u32,
    /// Measured runs per batch size.
    pub runs: u32,
    /// Measured LOADs of the built plans onto a device.
    pub loads: u32,
}

impl Default for ProfileSettings {
    fn default() -> Self {
        Self {
            threads: 1,
            warmup: 3,
            runs: 20,
            loads: 10,
        }
    }
}

/// Execution time of one batch size, in nanoseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchProfile {
    pub batch: u32,
    pub latency: Summary,
}

/// What profiling measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeasuredProfile {
    /// Time of a LOAD (the plans built at registration made resident on a device), in
    /// nanoseconds.
    pub load: Summary,
    pub batches: Vec<BatchProfile>,
    /// Memory the plans hold: the constants of every optimised plan (each keeps its own
    /// copy of the weights, repacked for its kernels, and folded constants count too).
    pub weight_bytes: u64,
    /// Outputs of one item, as the compiled graph gives them.
    pub outputs: Vec<TensorSpec>,
}

impl MeasuredProfile {
    /// The profile that seeds the controller's estimates: 99th percentiles.
    pub fn seed(&self) -> ModelProfile {
        ModelProfile {
            weight_bytes: self.weight_bytes,
            load_latency: self.load.p99.round() as u64,
            batches: self
                .batches
                .iter()
                .map(|b| BatchLatency {
                    batch: b.batch,
                    latency: b.latency.p99.round() as u64,
                })
                .collect(),
        }
    }
}

/// Profiles the `plans` built for `spec` (whose profile lists the batch sizes to serve) on
/// a cpu device with `settings.threads` threads.
pub fn measure(
    plans: &Arc<ModelPlans>,
    spec: &ModelSpec,
    settings: ProfileSettings,
) -> Result<MeasuredProfile, CpuError> {
    let mut device = CpuDevice::new(CpuSettings {
        pages: 0,
        threads: settings.threads,
    });
    let artifact = ModelArtifact {
        id: ModelId(0),
        spec: spec.clone(),
        bytes: None,
        prepared: Prepared {
            cpu: Some(Arc::clone(plans)),
            ..Prepared::default()
        },
    };
    let batches: Vec<u32> = plans.batches().collect();
    let (load, batches) = measure_device(&mut device, &artifact, &batches, settings)
        .map_err(|e| CpuError::Run(e.to_string()))?;
    Ok(MeasuredProfile {
        load,
        batches,
        weight_bytes: plans.weight_bytes(),
        outputs: plans.outputs().to_vec(),
    })
}

/// Profiles `artifact` on `device`, through the calls a serving device gets: the time of
/// a LOAD, and of an INFER at each of `batches`. The profiling of every real backend.
pub fn measure_device(
    device: &mut dyn BlockingDevice,
    artifact: &ModelArtifact,
    batches: &[u32],
    settings: ProfileSettings,
) -> Result<(Summary, Vec<BatchProfile>), DeviceError> {
    let load = time_loads_on(device, artifact, settings.loads)?;
    device.load(artifact)?;
    let warmup_runs = (settings.warmup, settings.runs);
    let timed = time_each(batches, &artifact.spec.inputs, warmup_runs, |items| {
        let inputs = items.iter().map(|i| Arc::new(i.to_vec())).collect();
        let job = InferJob {
            model: artifact.id,
            inputs,
        };
        device.infer(&job).map(drop)
    });
    device.unload(artifact.id)?;
    Ok((load, timed?))
}

/// Times `settings.loads` (at least one) LOADs of `plans` onto a device of the profiled
/// kind, exactly as a serving device does them, each followed by an untimed UNLOAD.
pub fn time_loads(
    plans: &Arc<ModelPlans>,
    spec: &ModelSpec,
    settings: ProfileSettings,
) -> Result<Summary, CpuError> {
    let mut device = CpuDevice::new(CpuSettings {
        pages: 0,
        threads: settings.threads,
    });
    let artifact = ModelArtifact {
        id: ModelId(0),
        spec: spec.clone(),
        bytes: None,
        prepared: Prepared {
            cpu: Some(Arc::clone(plans)),
            ..Prepared::default()
        },
    };
    time_loads_on(&mut device, &artifact, settings.loads).map_err(|e| CpuError::Run(e.to_string()))
}

/// Times `loads` (at least one) LOADs of `artifact` onto `device`, each followed by an
/// untimed UNLOAD.
pub fn time_loads_on(
    device: &mut dyn BlockingDevice,
    artifact: &ModelArtifact,
    loads: u32,
) -> Result<Summary, DeviceError> {
    let mut samples = Vec::new();
    for _ in 0..loads.max(1) {
        let begin = Instant::now();
        device.load(artifact)?;
        samples.push(nanos(begin.elapsed()) as f64);
        device.unload(artifact.id)?;
    }
    Ok(Summary::of(&samples).expect("at least one load"))
}

/// Runs every plan of `plans` under `executor` on batches of a sample item: `warmup`
/// unmeasured runs, then `runs` (at least one) timed ones, per batch size.
pub fn time_batches(
    plans: &ModelPlans,
    inputs: &[TensorSpec],
    warmup_runs: (u32, u32),
    executor: &Executor,
) -> Result<Vec<BatchProfile>, CpuError> {
    let batches: Vec<u32> = plans.batches().collect();
    time_each(&batches, inputs, warmup_runs, |items| {
        plans.run(items, executor).map(drop)
    })
}

/// Times `run` on batches of a sample item of `inputs` at each of `batches`: `warmup`
/// unmeasured runs, then `runs` (at least one) timed ones, per batch size.
pub fn time_each<E>(
    batches: &[u32],
    inputs: &[TensorSpec],
    (warmup, runs): (u32, u32),
    mut run: impl FnMut(&[&[Tensor]]) -> Result<(), E>,
) -> Result<Vec<BatchProfile>, E> {
    let item = sample_item(inputs);
    let mut profiles = Vec::new();
    for &batch in batches {
        let items: Vec<&[Tensor]> = (0..batch).map(|_| item.as_slice()).collect();
        for _ in 0..warmup {
            run(&items)?;
        }
        let mut samples = Vec::with_capacity(runs as usize);
        for _ in 0..runs.max(1) {
            let begin = Instant::now();
            run(&items)?;
            samples.push(nanos(begin.elapsed()) as f64);
        }
        let latency = Summary::of(&samples).expect("at least one run");
        profiles.push(BatchProfile { batch, latency });
    }
    Ok(profiles)
}

/// One item of inputs of the declared shapes: a deterministic ramp for floats, zeros for
/// integers (safe as indices), false for booleans.
pub fn sample_item(inputs: &[TensorSpec]) -> Vec<Tensor> {
    inputs
        .iter()
        .map(|spec| {
            let shape: Vec<usize> = spec.shape.iter().map(|&d| d.max(1) as usize).collect();
            let elements: usize = shape.iter().product();
            let data: Vec<u8> = match spec.datatype {
                DataType::Fp32 => (0..elements)
                    .flat_map(|i| (((i % 97) as f32) / 97.0 - 0.5).to_le_bytes())
                    .collect(),
                other => vec![0; elements * other.size().unwrap_or(1)],
            };
            Tensor {
                name: spec.name.clone(),
                datatype: spec.datatype,
                shape,
                data: data.into(),
            }
        })
        .collect()
}
