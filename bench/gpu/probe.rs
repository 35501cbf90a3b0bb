//! `gpu-probe`: measures the numbers a `sim` device profile needs on a real GPU.
//!
//! It times (1) host-to-device copies from pinned memory, for 16 MiB pages
//! and for a whole ~100 MB weight blob; (2) a ResNet50-like chain of cuBLAS
//! GEMMs at several batch sizes; and (3) the same chain while a LOAD loops
//! page copies on another stream. It prints a table and writes JSON to
//! `--out`. Without a usable driver, device or cuBLAS it says so on stderr
//! and exits with status 2. See bench/gpu/README.md.

mod gpu;
mod infer;
mod report;
mod resnet;
mod transfer;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Result};
use clap::Parser;
use cudarc::cublas::CudaBlas;
use cudarc::driver::CudaStream;

use crate::gpu::InitError;
use crate::infer::{Model, RunCount};
use crate::report::{BatchResult, Report, Settings};
use crate::transfer::{LoadParams, Repetitions, Staging, TransferCase, TransferResult};

/// Exit status when the machine has no usable GPU (driver, device or cuBLAS).
const EXIT_NO_GPU: u8 = 2;
/// Exit status for any other failure (bad --out, a failed CUDA call mid-measurement).
const EXIT_FAILED: u8 = 1;
const MIB: usize = 1 << 20;
const MB: usize = 1_000_000;

/// Measure pinned host-to-device bandwidth and ResNet50-like cuBLAS latency,
/// with and without a concurrent weight transfer.
#[derive(Debug, Parser)]
#[command(name = "gpu-probe", version)]
struct Args {
    /// Where to write the JSON results.
    #[arg(long, default_value = "bench/gpu/results.json")]
    out: PathBuf,
    /// Timed INFER runs per batch size and condition.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Untimed INFER runs before each timed series (cuBLAS heuristics, clocks).
    #[arg(long, default_value_t = 20)]
    warmup: u32,
    /// Batch sizes to time, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16",
          value_parser = clap::value_parser!(u32).range(1..=256))]
    batches: Vec<u32>,
    /// Timed repetitions of each transfer case.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    transfer_reps: u32,
    /// Weight page size in MiB (Clockwork pages weights in 16 MiB pages).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    page_mib: u32,
    /// Weight blob size in MB (ResNet50's f32 weights are ~102 MB).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=16384))]
    blob_mb: u32,
    /// Pages the background LOAD keeps queued on its stream.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    load_in_flight: u32,
    /// Let cuBLAS use TF32 tensor cores (off: plain FP32, as a TVM-compiled model would run).
    #[arg(long)]
    tf32: bool,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
}

impl Args {
    fn settings(&self) -> Settings {
        Settings {
            runs: self.runs as usize,
            warmup_runs: self.warmup as usize,
            transfer_reps: self.transfer_reps as usize,
            page_bytes: self.page_mib as usize * MIB,
            blob_bytes: self.blob_mb as usize * MB,
            load_pages_in_flight: self.load_in_flight as usize,
            dtype: "f32",
            tf32: self.tf32,
        }
    }
}

/// Why the probe stopped; decides the message and the exit status.
enum Failure {
    NoGpu(InitError),
    Other(anyhow::Error),
}

impl From<InitError> for Failure {
    fn from(e: InitError) -> Self {
        Failure::NoGpu(e)
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Other(e)
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::NoGpu(e)) => {
            eprintln!("gpu-probe: {e}");
            ExitCode::from(EXIT_NO_GPU)
        }
        Err(Failure::Other(e)) => {
            eprintln!("gpu-probe: error: {e:#}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// The streams and handles every measurement shares.
struct Rig {
    compute: Arc<CudaStream>,
    copy: Arc<CudaStream>,
    blas: CudaBlas,
}

fn run(args: &Args) -> Result<(), Failure> {
    check_out_dir(&args.out)?;
    let gpu = gpu::open(args.device)?;
    eprintln!(
        "gpu-probe: opened {} (device {})",
        gpu.info.name, gpu.info.ordinal
    );
    let new_stream = || gpu.ctx.new_stream().map_err(InitError::Query);
    let (compute, copy) = (new_stream()?, new_stream()?);
    let blas = gpu::blas(&compute, args.tf32)?;
    let rig = Rig {
        compute,
        copy,
        blas,
    };
    let settings = args.settings();
    let mut staging = Staging::new(&gpu.ctx, &rig.copy, settings.blob_bytes)?;
    let transfers = measure_transfers(&rig, &mut staging, &settings)?;
    let inference = measure_inference(&rig, &mut staging, &settings, &args.batches)?;
    gpu.ctx.check_err().map_err(anyhow::Error::from)?;
    let report = Report {
        schema_version: 1,
        device: gpu.info,
        settings,
        transfers,
        inference,
    };
    report::print_table(&report);
    report::write_json(&report, &args.out)?;
    eprintln!("gpu-probe: wrote {}", args.out.display());
    Ok(())
}

/// Fails before any measuring if `--out` cannot be written where it points,
/// rather than after a minute of work.
fn check_out_dir(out: &Path) -> Result<()> {
    match out.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.is_dir() => {
            bail!("the directory of --out {} does not exist", out.display())
        }
        _ => Ok(()),
    }
}

fn measure_transfers(
    rig: &Rig,
    staging: &mut Staging,
    s: &Settings,
) -> Result<Vec<TransferResult>> {
    let page = s.page_bytes.min(s.blob_bytes);
    let cases = [
        TransferCase {
            name: "page",
            bytes: page,
            chunk: page,
        },
        TransferCase {
            name: "blob",
            bytes: s.blob_bytes,
            chunk: s.blob_bytes,
        },
        TransferCase {
            name: "blob_in_pages",
            bytes: s.blob_bytes,
            chunk: page,
        },
    ];
    // A couple of unmeasured copies first: the first touches map pages into
    // the DMA engine's translation and would skew the minimum.
    let reps = Repetitions {
        warmup: 2,
        measured: s.transfer_reps,
    };
    cases
        .iter()
        .map(|case| {
            eprintln!("gpu-probe: timing transfer {}", case.name);
            transfer::measure(&rig.copy, staging, case, &reps)
        })
        .collect()
}

fn measure_inference(
    rig: &Rig,
    staging: &mut Staging,
    s: &Settings,
    batches: &[u32],
) -> Result<Vec<BatchResult>> {
    let max_batch = batches.iter().copied().max().unwrap_or(1) as usize;
    let mut model = Model::new(&rig.compute, resnet::resnet50(), max_batch)?;
    let runs = RunCount {
        warmup: s.warmup_runs,
        measured: s.runs,
    };
    let load = LoadParams {
        page_bytes: s.page_bytes,
        in_flight: s.load_pages_in_flight,
    };
    let mut results = Vec::with_capacity(batches.len());
    for &batch in batches {
        let batch = batch as usize;
        eprintln!(
            "gpu-probe: timing batch {batch} ({} runs, alone then with a LOAD)",
            s.runs
        );
        let isolated = infer::time_runs(&rig.blas, &rig.compute, &mut model, batch, &runs)?;
        let (with_load, load_report) =
            transfer::with_background_load(&rig.copy, staging, &load, || {
                infer::time_runs(&rig.blas, &rig.compute, &mut model, batch, &runs)
            })?;
        results.push(BatchResult {
            batch,
            gemms: model.gemm_count(),
            gflop: model.flops(batch) / 1e9,
            p99_ratio: with_load.gpu_us.p99 / isolated.gpu_us.p99,
            isolated,
            with_load,
            load: load_report,
        });
    }
    Ok(results)
}
