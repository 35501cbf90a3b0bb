//! The INFER side: a ResNet50-like chain of cuBLAS GEMMs, timed per run with
//! CUDA events at a given batch size.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, bail, Context as _, Result};
use cudarc::cublas::{sys as cublas_sys, CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{CudaSlice, CudaStream};
use serde::Serialize;

use crate::gpu::Timer;
use crate::resnet::{ConvLayer, GemmShape};
use clockwork::stats::Summary;

/// Device buffers for the GEMM chain, sized for batches up to `max_batch`.
///
/// Every layer reads the same scratch input and writes the same scratch
/// output: the probe times the arithmetic and memory traffic of each shape,
/// not a numerically meaningful network, and sharing keeps memory small.
pub struct Model {
    layers: Vec<ConvLayer>,
    weights: Vec<CudaSlice<f32>>,
    input: CudaSlice<f32>,
    output: CudaSlice<f32>,
    max_batch: usize,
}

impl Model {
    /// Allocates per-layer weights and the shared scratch buffers on `stream`.
    pub fn new(
        stream: &Arc<CudaStream>,
        layers: Vec<ConvLayer>,
        max_batch: usize,
    ) -> Result<Model> {
        let largest = |size: fn(&GemmShape) -> usize| {
            layers
                .iter()
                .map(|l| size(&l.gemm(max_batch)))
                .max()
                .unwrap_or(0)
        };
        let input_len = largest(|g| g.k * g.n);
        let output_len = largest(|g| g.m * g.n);
        let weights = layers
            .iter()
            .map(|l| stream.alloc_zeros::<f32>(l.weights()))
            .collect::<Result<Vec<_>, _>>()
            .context("allocating layer weights")?;
        let input = stream
            .alloc_zeros::<f32>(input_len)
            .context("allocating GEMM input")?;
        let output = stream
            .alloc_zeros::<f32>(output_len)
            .context("allocating GEMM output")?;
        Ok(Model {
            layers,
            weights,
            input,
            output,
            max_batch,
        })
    }

    pub fn gemm_count(&self) -> usize {
        self.layers.len()
    }

    /// Floating-point operations of one run at `batch`.
    pub fn flops(&self, batch: usize) -> f64 {
        self.layers.iter().map(|l| l.gemm(batch).flops()).sum()
    }

    /// Enqueues one run (every layer's GEMM) at `batch` on `blas`'s stream.
    fn enqueue(&mut self, blas: &CudaBlas, batch: usize) -> Result<()> {
        if batch == 0 || batch > self.max_batch {
            bail!(
                "batch {batch} outside the buffers' range 1..={}",
                self.max_batch
            );
        }
        for (layer, weights) in self.layers.iter().zip(&self.weights) {
            let cfg = gemm_config(&layer.gemm(batch))
                .with_context(|| format!("layer {} at batch {batch}", layer.name))?;
            // SAFETY: column-major C[m x n] = A[m x k] * B[k x n] with tight
            // leading dimensions reads m*k weights (exactly the layer's
            // buffer) and k*n inputs, and writes m*n outputs; the scratch
            // buffers were sized for the largest k*n and m*n at max_batch.
            unsafe { blas.gemm(cfg, weights, &self.input, &mut self.output) }
                .with_context(|| format!("cuBLAS sgemm for layer {}", layer.name))?;
        }
        Ok(())
    }
}

/// cuBLAS parameters for `C = A * B` with no transposes.
fn gemm_config(shape: &GemmShape) -> Result<GemmConfig<f32>> {
    let dim = |v: usize| i32::try_from(v).map_err(|_| anyhow!("GEMM dimension {v} exceeds i32"));
    let (m, n, k) = (dim(shape.m)?, dim(shape.n)?, dim(shape.k)?);
    Ok(GemmConfig {
        transa: cublas_sys::cublasOperation_t::CUBLAS_OP_N,
        transb: cublas_sys::cublasOperation_t::CUBLAS_OP_N,
        m,
        n,
        k,
        alpha: 1.0,
        lda: m,
        ldb: k,
        beta: 0.0,
        ldc: m,
    })
}

/// How many runs to time at each batch size.
pub struct RunCount {
    pub warmup: usize,
    pub measured: usize,
}

/// Latency of one run at one batch size, in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct InferStats {
    /// GPU time between CUDA events recorded before and after the run's GEMMs.
    pub gpu_us: Summary,
    /// Host wall time from enqueueing the first GEMM to seeing the run finish
    /// (adds launch overhead and synchronisation wake-up).
    pub wall_us: Summary,
}

/// Times `runs.measured` runs at `batch` on `stream`, one at a time: each run
/// is enqueued into an idle stream and waited for, as a worker executing one
/// INFER action would.
pub fn time_runs(
    blas: &CudaBlas,
    stream: &Arc<CudaStream>,
    model: &mut Model,
    batch: usize,
    runs: &RunCount,
) -> Result<InferStats> {
    let timer = Timer::new(stream.context())?;
    let mut gpu_us = Vec::with_capacity(runs.measured);
    let mut wall_us = Vec::with_capacity(runs.measured);
    for run in 0..runs.warmup + runs.measured {
        let begin = Instant::now();
        timer.start(stream)?;
        model.enqueue(blas, batch)?;
        let ms = timer.stop(stream)?;
        let wall = begin.elapsed();
        if run >= runs.warmup {
            gpu_us.push(ms * 1e3);
            wall_us.push(wall.as_secs_f64() * 1e6);
        }
    }
    let empty = || anyhow!("batch {batch} has no measured runs");
    Ok(InferStats {
        gpu_us: Summary::of(&gpu_us).ok_or_else(empty)?,
        wall_us: Summary::of(&wall_us).ok_or_else(empty)?,
    })
}
