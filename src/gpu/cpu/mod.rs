//! The `cpu` backend: real ONNX inference with tract on a dedicated thread per device.
//!
//! A device is one thread (tract single-threaded unless `threads` says otherwise) with a
//! memory capacity counted in pages, as a GPU's weight memory is. The optimised runnable
//! plans of a model, one per allowed batch size ([`ModelPlans`]), are built once, at
//! registration, in host memory, and shared by every device (they hold no thread pool: a
//! device runs them under its own). LOAD makes them resident on a device: it takes the
//! shared plans from the artifact the model cache hands out, in microseconds, as a GPU
//! copies weights; UNLOAD drops the device's reference; INFER runs a batch on the
//! smallest plan that holds it and reports the time it took. Graphs are read by
//! [`graph`], plans built and run by [`plan`], and models profiled at registration by
//! [`profile`]; [`batch`] holds the batch rules the `ort` backend shares.

pub mod batch;
pub mod graph;
pub mod plan;
pub mod profile;

use std::collections::HashMap;
use std::sync::Arc;

use super::thread::BlockingDevice;
use super::{BackendInfo, BatchOutputs, DeviceError, InferJob, ModelArtifact};
use crate::model::{ModelId, ModelSpec};
use crate::tensor::Tensor;
use plan::{Plan, PlanRequest};
use tract_linalg::multithread::{multithread_tract_scope, Executor};

/// Why the cpu backend cannot read, build or run a model.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CpuError {
    #[error("{0}")]
    Decode(String),
    #[error("not supported: {0}")]
    Unsupported(String),
    #[error("tract cannot build a plan for batch {batch}: {message}")]
    Compile { batch: u32, message: String },
    #[error("bad input: {0}")]
    Input(String),
    #[error("tract failed: {0}")]
    Run(String),
}

impl From<batch::BatchError> for CpuError {
    fn from(error: batch::BatchError) -> Self {
        match error {
            batch::BatchError::Input(message) => CpuError::Input(message),
            batch::BatchError::Shape(message) => CpuError::Unsupported(message),
        }
    }
}

impl From<CpuError> for DeviceError {
    fn from(error: CpuError) -> Self {
        match error {
            CpuError::Input(message) => DeviceError::BadInput(message),
            CpuError::Run(_) => DeviceError::Model(error.to_string()),
            other => DeviceError::Other(other.to_string()),
        }
    }
}

/// How a cpu device is set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuSettings {
    /// Weight memory, in pages of the policy's page size.
    pub pages: u32,
    /// Threads tract may use within one run.
    pub threads: usize,
}

impl CpuSettings {
    /// The device kind estimates are kept for: `cpu`, or `cpu-<n>t` with `n` threads.
    pub fn kind(&self) -> String {
        if self.threads <= 1 {
            "cpu".into()
        } else {
            format!("cpu-{}t", self.threads)
        }
    }
}

/// A pool of `threads` for tract, or tract's single thread (the caller's) for one.
pub fn executor(threads: usize) -> Executor {
    if threads > 1 {
        Executor::multithread_with_name(threads, crate::gpu::panics::POOL_THREADS)
    } else {
        Executor::SingleThread
    }
}

/// The plans of one model, one per allowed batch size, smallest first.
pub struct ModelPlans {
    plans: Vec<Plan>,
}

impl ModelPlans {
    /// Builds a plan for every batch size of `spec`'s profile: the expensive part
    /// (parsing, typing, optimising), done once per model at registration.
    pub fn compile(bytes: &[u8], spec: &ModelSpec) -> Result<Self, CpuError> {
        let outputs: Vec<String> = spec.outputs.iter().map(|o| o.name.clone()).collect();
        let mut sizes: Vec<u32> = spec.profile.batches.iter().map(|b| b.batch).collect();
        sizes.sort_unstable();
        sizes.dedup();
        if !spec.batched {
            sizes = vec![1];
        }
        let plans = sizes
            .into_iter()
            .map(|batch| {
                let request = PlanRequest {
                    inputs: &spec.inputs,
                    outputs: &outputs,
                    batched: spec.batched,
                    batch,
                };
                Plan::compile(bytes, request)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { plans })
    }

    /// Outputs of one item, as the compiled graph gives them.
    pub fn outputs(&self) -> &[crate::model::TensorSpec] {
        self.plans.first().map_or(&[], |p| p.outputs())
    }

    /// Memory the plans' constants take, all plans together.
    pub fn weight_bytes(&self) -> u64 {
        self.plans.iter().map(Plan::weight_bytes).sum()
    }

    /// The batch sizes planned.
    pub fn batches(&self) -> impl Iterator<Item = u32> + '_ {
        self.plans.iter().map(|p| p.batch)
    }

    /// Runs one batch on the smallest plan that holds it, with tract's work spread over
    /// `executor` (the running device's threads).
    pub fn run(&self, items: &[&[Tensor]], executor: &Executor) -> Result<BatchOutputs, CpuError> {
        let n = items.len() as u32;
        let plan = self
            .plans
            .iter()
            .find(|p| p.batch >= n)
            .ok_or_else(|| CpuError::Run(format!("no plan holds a batch of {n}")))?;
        multithread_tract_scope(executor.clone(), || plan.run(items))
    }
}

impl std::fmt::Debug for ModelPlans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let batches: Vec<u32> = self.batches().collect();
        f.debug_struct("ModelPlans")
            .field("batches", &batches)
            .field("weight_bytes", &self.weight_bytes())
            .finish()
    }
}

/// A cpu device: the plans of the models loaded on it.
pub struct CpuDevice {
    settings: CpuSettings,
    /// The device's threads, under which it runs every plan.
    executor: Executor,
    /// The shared plans of the models resident here.
    loaded: HashMap<ModelId, Arc<ModelPlans>>,
}

impl CpuDevice {
    pub fn new(settings: CpuSettings) -> Self {
        Self {
            executor: executor(settings.threads),
            settings,
            loaded: HashMap::new(),
        }
    }
}

impl BlockingDevice for CpuDevice {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: self.settings.kind(),
            pages: self.settings.pages,
            emulated: false,
            needs_graph: true,
        }
    }

    fn load(&mut self, artifact: &ModelArtifact) -> Result<(), DeviceError> {
        // The plans were built at registration; making them resident is taking a share.
        let plans = artifact.prepared.cpu.as_ref().ok_or_else(|| {
            DeviceError::Other(format!(
                "model '{}' has no cpu plans: the cpu backend serves models prepared at \
                 registration (repository models)",
                artifact.spec.name
            ))
        })?;
        self.loaded.insert(artifact.id, Arc::clone(plans));
        Ok(())
    }

    fn unload(&mut self, model: ModelId) -> Result<(), DeviceError> {
        // Dropping the plans frees their memory; unloading what is not there is harmless.
        self.loaded.remove(&model);
        Ok(())
    }

    fn infer(&mut self, job: &InferJob) -> Result<BatchOutputs, DeviceError> {
        let plans = self
            .loaded
            .get(&job.model)
            .ok_or(DeviceError::NotLoaded(job.model))?;
        let items: Vec<&[Tensor]> = job.inputs.iter().map(|i| i.as_slice()).collect();
        // tract panics on some values (a Gather index out of range, from a client's
        // input): that is the model failing on these inputs, not the device, whose plans
        // are shared and immutable (each run has a state of its own). Caught here, it
        // neither takes the device out nor fails the requests batched beside it.
        match crate::gpu::panics::catch_quietly(|| plans.run(&items, &self.executor)) {
            Ok(outputs) => Ok(outputs?),
            Err(panic) => Err(DeviceError::Model(format!("tract panicked: {panic}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repository::zoo;

    fn mlp_spec(sizes: &[u32]) -> ModelSpec {
        let tensor = |name: &str, n: i64| crate::model::TensorSpec {
            name: name.into(),
            datatype: crate::model::DataType::Fp32,
            shape: vec![n],
        };
        ModelSpec {
            name: "mlp".into(),
            inputs: vec![tensor("input", 256)],
            outputs: vec![tensor("output", 10)],
            slo: 1,
            profile: crate::model::ModelProfile {
                weight_bytes: 0,
                load_latency: 0,
                batches: sizes
                    .iter()
                    .map(|&batch| crate::model::BatchLatency { batch, latency: 0 })
                    .collect(),
            },
            batched: true,
            version: 1,
        }
    }

    #[test]
    fn a_batch_runs_on_the_smallest_plan_that_holds_it_and_threads_agree() {
        let bytes = zoo::build("mlp", zoo::Batch::Dynamic, 1).unwrap();
        let spec = mlp_spec(&[1, 4]);
        let plans = ModelPlans::compile(&bytes, &spec).unwrap();
        assert_eq!(plans.batches().collect::<Vec<_>>(), [1, 4]);
        let (one, two) = (executor(1), executor(2));
        let items: Vec<Vec<Tensor>> = (0..3)
            .map(|i| {
                vec![Tensor::from_f32(
                    "input",
                    vec![256],
                    &[i as f32 / 10.0; 256],
                )]
            })
            .collect();
        let refs: Vec<&[Tensor]> = items.iter().map(|i| i.as_slice()).collect();
        // Three items ride the plan for four, padded; each gets its own outputs.
        let batched = plans.run(&refs, &one).unwrap();
        assert_eq!(batched.len(), 3);
        let alone = plans.run(&refs[2..], &one).unwrap();
        let (a, b) = (
            batched[2][0].to_f32().unwrap(),
            alone[0][0].to_f32().unwrap(),
        );
        assert!(
            a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-4),
            "{a:?} {b:?}"
        );
        assert_ne!(batched[0][0].data, batched[1][0].data);
        // The same plans run under two threads: one build serves every device.
        let parallel = plans.run(&refs, &two).unwrap();
        let (p, s) = (
            parallel[1][0].to_f32().unwrap(),
            batched[1][0].to_f32().unwrap(),
        );
        assert!(p.iter().zip(&s).all(|(x, y)| (x - y).abs() < 1e-4));
        assert!(
            plans.run(&[refs[0]; 5], &one).is_err(),
            "no plan holds five"
        );
    }

    #[test]
    fn wrong_inputs_are_refused_not_run() {
        let bytes = zoo::build("mlp", zoo::Batch::Dynamic, 1).unwrap();
        let plans = ModelPlans::compile(&bytes, &mlp_spec(&[1])).unwrap();
        let short = vec![Tensor::from_f32("input", vec![255], &[0.0; 255])];
        let err = plans.run(&[short.as_slice()], &executor(1)).unwrap_err();
        assert!(matches!(err, CpuError::Input(_)), "{err}");
        assert!(ModelPlans::compile(b"junk", &mlp_spec(&[1])).is_err());
    }

    #[test]
    fn a_load_shares_the_plans_built_at_registration() {
        let bytes = zoo::build("mlp", zoo::Batch::Dynamic, 1).unwrap();
        let spec = mlp_spec(&[1, 2]);
        let plans = Arc::new(ModelPlans::compile(&bytes, &spec).unwrap());
        let artifact = ModelArtifact {
            id: ModelId(3),
            spec: spec.clone(),
            bytes: Some(Arc::from(&bytes[..])),
            prepared: crate::gpu::Prepared {
                cpu: Some(Arc::clone(&plans)),
                ..crate::gpu::Prepared::default()
            },
        };
        // Two devices of different kinds load the one build: no copy, no compilation.
        let mut one = CpuDevice::new(CpuSettings {
            pages: 1,
            threads: 1,
        });
        let mut two = CpuDevice::new(CpuSettings {
            pages: 1,
            threads: 2,
        });
        one.load(&artifact).unwrap();
        two.load(&artifact).unwrap();
        assert_eq!(
            Arc::strong_count(&plans),
            4,
            "the artifact, two devices, here"
        );
        let item = vec![Tensor::from_f32("input", vec![256], &[0.25; 256])];
        let job = InferJob {
            model: ModelId(3),
            inputs: vec![Arc::new(item)],
        };
        let (a, b) = (one.infer(&job).unwrap(), two.infer(&job).unwrap());
        let (a, b) = (a[0][0].to_f32().unwrap(), b[0][0].to_f32().unwrap());
        assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-4));
        one.unload(ModelId(3)).unwrap();
        assert_eq!(
            Arc::strong_count(&plans),
            3,
            "UNLOAD drops the device's share"
        );
        assert!(matches!(one.infer(&job), Err(DeviceError::NotLoaded(_))));
        // A graph nobody prepared is refused, not compiled on the device thread.
        let bare = ModelArtifact {
            prepared: crate::gpu::Prepared::default(),
            ..artifact
        };
        let err = one.load(&bare).unwrap_err().to_string();
        assert!(err.contains("no cpu plans"), "{err}");
    }
}
