//! The `sim` backend: an emulated device that follows latency profiles.
//!
//! It is a product feature, not a test double: testers and the simulator use it to ask
//! what a pool of accelerators would do. An INFER takes the profiled time of (model,
//! batch) divided by the device's speed; a LOAD takes weight bytes over the configured
//! bandwidth. Time passes on the injected clock, so under a paused tokio runtime a run of
//! hours takes seconds. Seeded noise and injected faults (a slowdown window, failing
//! actions) make it misbehave on purpose. Outputs have the model's declared shapes and are
//! a cheap deterministic function of the inputs; [`BackendInfo::emulated`] says so.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal};

use super::profiles::DeviceProfile;
use super::{
    Backend, BackendFuture, BackendInfo, BatchOutputs, DeviceError, Executed, InferJob,
    ModelArtifact,
};
use crate::config::SimConfig;
use crate::model::{DataType, ModelId, ModelSpec};
use crate::tensor::Tensor;
use crate::time::{nanos, Clock, Nanos};

/// Settings of one emulated device.
#[derive(Clone, Debug)]
pub struct SimSettings {
    pub profile: DeviceProfile,
    /// Overrides the profile's page count.
    pub pages: Option<u32>,
    pub emulation: SimConfig,
}

/// An emulated device.
pub struct SimDevice {
    clock: Clock,
    info: BackendInfo,
    profile: DeviceProfile,
    faults: Faults,
    /// Answer INFERs without output tensors (see `SimConfig::skip_outputs`).
    skip_outputs: bool,
    state: Arc<Mutex<State>>,
}

/// Injected misbehaviour.
#[derive(Clone, Debug)]
struct Faults {
    /// (from, until, factor): durations of work that begins in the window are scaled.
    slowdown: Option<(Nanos, Nanos, f64)>,
    failure_rate: f64,
}

struct State {
    rng: StdRng,
    /// Multiplicative noise with mean 1; `None` for an exact device.
    noise: Option<LogNormal<f64>>,
    loaded: HashMap<ModelId, Arc<ModelArtifact>>,
}

impl SimDevice {
    pub fn new(clock: Clock, settings: SimSettings) -> Self {
        let emulation = &settings.emulation;
        let noise = (emulation.noise_cv > 0.0).then(|| {
            // A log-normal with mean 1 and the requested coefficient of variation.
            let sigma2 = (1.0 + emulation.noise_cv * emulation.noise_cv).ln();
            LogNormal::new(-sigma2 / 2.0, sigma2.sqrt()).ok()
        });
        let slowdown = emulation
            .slowdown
            .as_ref()
            .map(|s| (nanos(s.from), nanos(s.until), s.factor));
        Self {
            clock,
            info: BackendInfo {
                kind: settings.profile.kind.into(),
                pages: settings.pages.unwrap_or(settings.profile.pages),
                emulated: true,
                needs_graph: false,
            },
            profile: settings.profile,
            faults: Faults {
                slowdown,
                failure_rate: emulation.failure_rate,
            },
            skip_outputs: emulation.skip_outputs,
            state: Arc::new(Mutex::new(State {
                rng: StdRng::seed_from_u64(emulation.seed),
                noise: noise.flatten(),
                loaded: HashMap::new(),
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// The duration of work nominally taking `nominal`, with noise and faults applied;
    /// an error if the fault injector decides this action fails.
    fn perturb(&self, nominal: Nanos) -> Result<Nanos, DeviceError> {
        let mut guard = self.state();
        let state = &mut *guard;
        if self.faults.failure_rate > 0.0 && state.rng.random_bool(self.faults.failure_rate) {
            return Err(DeviceError::Injected("action failed"));
        }
        let mut factor = match state.noise {
            Some(noise) => noise.sample(&mut state.rng),
            None => 1.0,
        };
        let now = self.clock.now();
        if let Some((from, until, slow)) = self.faults.slowdown {
            if (from..until).contains(&now) {
                factor *= slow;
            }
        }
        Ok((nominal as f64 * factor).round() as Nanos)
    }

    /// Sleeps on the clock for the perturbed duration of `nominal` work.
    fn work<T: 'static>(
        &self,
        nominal: Result<Nanos, DeviceError>,
        value: T,
    ) -> BackendFuture<Executed<T>> {
        let duration = nominal.and_then(|n| self.perturb(n));
        let clock = self.clock;
        Box::pin(async move {
            let duration = duration?;
            clock.sleep_until(clock.now() + duration).await;
            Ok(Executed {
                value,
                device_time: Some(duration),
            })
        })
    }
}

impl Backend for SimDevice {
    fn info(&self) -> BackendInfo {
        self.info.clone()
    }

    fn load(&self, artifact: Arc<ModelArtifact>) -> BackendFuture<Executed<()>> {
        let bytes = artifact.spec.profile.weight_bytes as f64;
        let nominal = (bytes / self.profile.load_bytes_per_s * 1e9).round() as Nanos;
        let state = Arc::clone(&self.state);
        let work = self.work(Ok(nominal), ());
        Box::pin(async move {
            let done = work.await?;
            lock(&state).loaded.insert(artifact.id, artifact);
            Ok(done)
        })
    }

    fn unload(&self, model: ModelId) -> BackendFuture<Executed<()>> {
        self.state().loaded.remove(&model);
        self.work(Ok(0), ())
    }

    fn infer(&self, job: InferJob) -> BackendFuture<Executed<BatchOutputs>> {
        let artifact = self.state().loaded.get(&job.model).cloned();
        let Some(artifact) = artifact else {
            return Box::pin(async move { Err(DeviceError::NotLoaded(job.model)) });
        };
        // Timed by its items, as the smallest allowed batch that holds them (padded).
        let batch = job.inputs.len() as u32;
        let profile = &artifact.spec.profile;
        let nominal = profile
            .fitting_batch(batch)
            .and_then(|b| profile.latency(b))
            .map(|t| (t as f64 / self.profile.speed).round() as Nanos)
            .ok_or_else(|| DeviceError::BadInput(format!("batch size {batch} is not allowed")));
        let outputs = job
            .inputs
            .iter()
            .map(|inputs| match self.skip_outputs {
                true => Vec::new(),
                false => emulate(&artifact.spec, inputs),
            })
            .collect();
        self.work(nominal, outputs)
    }
}

/// The state holds no invariant a panic could break half-way, so a poisoned lock is usable.
fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Input words (8 bytes each) an emulated inference looks at per tensor.
const SAMPLED: usize = 512;

/// Distinct values at the start of an emulated output; the rest repeats them.
const DISTINCT: usize = 1024;

/// Outputs of the declared shapes (variable dimensions taken as 1), filled from a hash of
/// (a sample of) the inputs so that equal inputs give equal outputs.
pub fn emulate(spec: &ModelSpec, inputs: &[Tensor]) -> Vec<Tensor> {
    let mut seed = 0xcbf2_9ce4_8422_2325u64;
    for tensor in inputs {
        // At most SAMPLED words spread over the tensor: cheap for a 600 KB image. A word
        // at a time, not a byte: the emulated device's executor shares the server's core
        // in the emulated benches, where this hashing and the outputs' below were 6% of
        // that core's samples under the burst (docs/EXPERIMENTS.md, "The emulated
        // answers' hash, a word at a time").
        let words = tensor.data.chunks(8);
        let stride = words.len().div_ceil(SAMPLED).max(1);
        for word in words.step_by(stride) {
            let mut bytes = [0u8; 8];
            bytes[..word.len()].copy_from_slice(word);
            seed = (seed ^ u64::from_le_bytes(bytes)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    spec.outputs
        .iter()
        .map(|out| {
            let shape: Vec<usize> = out
                .shape
                .iter()
                .map(|&d| usize::try_from(d).unwrap_or(1))
                .collect();
            let count: usize = shape.iter().product();
            let bytes = count * out.datatype.size().unwrap_or(0);
            let mut data = Vec::with_capacity(bytes);
            // A block of distinct values, repeated past it: the zoo detector's crops are
            // 6,912 values an item, each hashed on its own before.
            for i in 0..count.min(DISTINCT) as u64 {
                push_value(&mut data, out.datatype, mix(seed ^ i));
            }
            let block = data.len();
            while block > 0 && data.len() < bytes {
                let more = block.min(bytes - data.len());
                data.extend_from_within(..more);
            }
            Tensor {
                name: out.name.clone(),
                datatype: out.datatype,
                shape,
                data: data.into(),
            }
        })
        .collect()
}

/// splitmix64's finaliser: a cheap, well-spread hash of one word.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Appends one element made from `bits`; floats land in `[0, 1)`.
fn push_value(out: &mut Vec<u8>, datatype: DataType, bits: u64) {
    let unit = (bits >> 11) as f64 / (1u64 << 53) as f64;
    match datatype {
        DataType::Fp32 => out.extend((unit as f32).to_le_bytes()),
        DataType::Fp64 => out.extend(unit.to_le_bytes()),
        DataType::Bool => out.push((bits & 1) as u8),
        DataType::Bytes => {}
        other => {
            let size = other.size().unwrap_or(0);
            out.extend(&bits.to_le_bytes()[..size]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::profiles;
    use crate::time::MS;

    fn device(emulation: SimConfig) -> SimDevice {
        let settings = SimSettings {
            profile: profiles::device("v100").unwrap(),
            pages: None,
            emulation,
        };
        SimDevice::new(Clock::start_virtual(), settings)
    }

    fn artifact() -> Arc<ModelArtifact> {
        Arc::new(ModelArtifact {
            id: ModelId(0),
            spec: profiles::model("resnet50", "r", 100 * MS).unwrap(),
            bytes: None,
            prepared: Default::default(),
        })
    }

    fn job(n: usize, value: f32) -> InferJob {
        let input = Tensor::from_f32("data", vec![3, 224, 224], &vec![value; 150_528]);
        InferJob {
            model: ModelId(0),
            inputs: (0..n).map(|_| Arc::new(vec![input.clone()])).collect(),
        }
    }

    #[test]
    fn an_emulated_output_past_its_distinct_block_fills_its_shape() {
        let mut spec = profiles::model("resnet50", "r", 100 * MS).unwrap();
        spec.outputs = vec![crate::model::TensorSpec {
            name: "crops".into(),
            datatype: DataType::Fp32,
            shape: vec![9, 3, 16, 16],
        }];
        let input = Tensor::from_f32("data", vec![4], &[0.1, 0.2, 0.3, 0.4]);
        let out = emulate(&spec, &[input]);
        assert_eq!(out[0].data.len(), 6_912 * 4, "every value of the shape");
        let block = DISTINCT * 4;
        assert_eq!(out[0].data[..block], out[0].data[block..2 * block]);
        assert_ne!(
            out[0].data[..4],
            out[0].data[4..8],
            "the block's values differ"
        );
        let other = Tensor::from_f32("data", vec![4], &[0.1, 0.2, 0.3, 0.5]);
        assert_ne!(emulate(&spec, &[other])[0].data, out[0].data);
    }

    #[tokio::test(start_paused = true)]
    async fn exact_device_takes_profiled_time() {
        let sim = device(SimConfig::default());
        let clock = sim.clock;
        let loaded = sim.load(artifact()).await.unwrap();
        assert_eq!(loaded.device_time, Some(8_310_000));
        let before = clock.now();
        let done = sim.infer(job(4, 0.5)).await.unwrap();
        assert_eq!(clock.now() - before, 5_880_000);
        assert_eq!(done.value.len(), 4);
        assert_eq!(done.value[0][0].shape, vec![1000]);
        assert_eq!(done.value[0], done.value[3], "same inputs, same outputs");
        let other = sim.infer(job(1, 0.25)).await.unwrap();
        assert_ne!(other.value[0], done.value[0], "outputs follow the inputs");
    }

    #[tokio::test(start_paused = true)]
    async fn noise_is_seeded_and_faults_fire() {
        let noisy = |seed| SimConfig {
            seed,
            noise_cv: 0.2,
            ..SimConfig::default()
        };
        let mut runs = Vec::new();
        for seed in [1, 1, 2] {
            let sim = device(noisy(seed));
            sim.load(artifact()).await.unwrap();
            runs.push(sim.infer(job(1, 0.0)).await.unwrap().device_time);
        }
        assert_eq!(runs[0], runs[1]);
        assert_ne!(runs[0], runs[2]);
        let failing = device(SimConfig {
            failure_rate: 1.0,
            ..SimConfig::default()
        });
        assert!(matches!(
            failing.load(artifact()).await,
            Err(DeviceError::Injected(_))
        ));
        assert!(matches!(
            failing.infer(job(1, 0.0)).await,
            Err(DeviceError::NotLoaded(_))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn slowdown_window_scales_durations() {
        let sim = device(SimConfig {
            slowdown: Some(crate::config::SlowdownConfig {
                from: std::time::Duration::from_millis(0),
                until: std::time::Duration::from_millis(40),
                factor: 3.0,
            }),
            ..SimConfig::default()
        });
        sim.load(artifact()).await.unwrap();
        let slow = sim.infer(job(1, 0.0)).await.unwrap().device_time.unwrap();
        assert_eq!(slow, 3 * 2_730_000);
        sim.clock.sleep_until(50 * MS).await;
        let normal = sim.infer(job(1, 0.0)).await.unwrap().device_time.unwrap();
        assert_eq!(normal, 2_730_000);
    }
}
