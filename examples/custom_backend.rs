//! How to add a backend: a blocking device on a dedicated thread.
//!
//! `MatVecDevice` is a tiny real device: LOAD builds a weight matrix for the model (from a
//! seed, as a real backend would parse the model's bytes), INFER multiplies each request's
//! input by it. Implementing [`BlockingDevice`] is all a backend needs; [`DeviceThread`]
//! gives it its own thread (where a CUDA backend would bind its context), and the executor
//! supplies lanes, `earliest`/`latest`, page accounting and timing.
//!
//! Run: `cargo run --example custom_backend`

use std::collections::HashMap;

use clockwork::actors::messages::Infer;
use clockwork::actors::{Placement, RuntimeBuilder};
use clockwork::config::PolicyConfig;
use clockwork::gpu::thread::{BlockingDevice, DeviceThread};
use clockwork::gpu::{BackendInfo, BatchOutputs, DeviceError, InferJob, ModelArtifact};
use clockwork::model::{BatchLatency, DataType, ModelId, ModelProfile, ModelSpec, TensorSpec};
use clockwork::tensor::Tensor;
use clockwork::time::{Clock, MS, US};

const N: usize = 256;

/// A CPU "device" that holds one N x N matrix per loaded model.
#[derive(Default)]
struct MatVecDevice {
    weights: HashMap<ModelId, Vec<f32>>,
}

impl BlockingDevice for MatVecDevice {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: "matvec-cpu".into(),
            pages: 64,
            emulated: false,
            needs_graph: false,
        }
    }

    fn load(&mut self, artifact: &ModelArtifact) -> Result<(), DeviceError> {
        let seed = artifact.id.0 as f32 + 1.0;
        let matrix = (0..N * N)
            .map(|i| ((i % 17) as f32 - 8.0) / (seed * 64.0))
            .collect();
        self.weights.insert(artifact.id, matrix);
        Ok(())
    }

    fn unload(&mut self, model: ModelId) -> Result<(), DeviceError> {
        self.weights.remove(&model);
        Ok(())
    }

    fn infer(&mut self, job: &InferJob) -> Result<BatchOutputs, DeviceError> {
        let matrix = self
            .weights
            .get(&job.model)
            .ok_or(DeviceError::NotLoaded(job.model))?;
        job.inputs
            .iter()
            .map(|inputs| {
                let x = inputs[0]
                    .to_f32()
                    .ok_or_else(|| DeviceError::BadInput("expected FP32".into()))?;
                let y: Vec<f32> = matrix
                    .chunks_exact(N)
                    .map(|row| row.iter().zip(&x).map(|(w, v)| w * v).sum())
                    .collect();
                Ok(vec![Tensor::from_f32("y", vec![N], &y)])
            })
            .collect()
    }
}

fn spec(name: &str) -> ModelSpec {
    let tensor = |name: &str| TensorSpec {
        name: name.into(),
        datatype: DataType::Fp32,
        shape: vec![N as i64],
    };
    ModelSpec {
        name: name.into(),
        inputs: vec![tensor("x")],
        outputs: vec![tensor("y")],
        slo: 50 * MS,
        // A rough first guess; the controller replaces it with measurements.
        profile: ModelProfile {
            weight_bytes: (N * N * 4) as u64,
            load_latency: 500 * US,
            batches: vec![
                BatchLatency {
                    batch: 1,
                    latency: 200 * US,
                },
                BatchLatency {
                    batch: 4,
                    latency: 500 * US,
                },
            ],
        },
        batched: true,
        version: 1,
    }
}

fn main() -> anyhow::Result<()> {
    actix_rt::System::new().block_on(async {
        let device = DeviceThread::spawn("matvec-0".into(), MatVecDevice::default())?;
        let runtime = RuntimeBuilder::new(Clock::start(), PolicyConfig::default())
            .model(spec("matvec-a"))
            .model(spec("matvec-b"))
            .device(Box::new(device))
            .placement(Placement::Threads)
            .start()?;
        for (i, model) in ["matvec-a", "matvec-b", "matvec-a"].into_iter().enumerate() {
            let x = Tensor::from_f32("x", vec![N], &vec![1.0 + i as f32; N]);
            let infer = Infer {
                model: model.into(),
                inputs: vec![x],
                items: 1,
                slo: None,
                edge: None,
                root: None,
            };
            match runtime.controller.send(infer).await? {
                Ok(done) => {
                    let y = done.outputs[0].to_f32().unwrap_or_default();
                    let t = done.timing;
                    println!(
                        "{model}: y[0..3] = {:?}, executed in {} us, answered {} us after arrival",
                        &y[..3],
                        t.exec.duration / 1000,
                        (t.answered - t.arrival) / 1000
                    );
                }
                Err(refused) => println!("{model}: {refused}"),
            }
        }
        runtime.shutdown().await;
        Ok(())
    })
}
