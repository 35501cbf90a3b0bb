//! The probe's results: the JSON document and the table printed to stdout.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context as _, Result};
use serde::Serialize;

use crate::gpu::DeviceInfo;
use crate::infer::InferStats;
use crate::transfer::{LoadReport, TransferResult};

/// Everything the probe measured; serialised as the `--out` JSON.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Bumped when a field changes meaning, so profile converters can check.
    pub schema_version: u32,
    pub device: DeviceInfo,
    pub settings: Settings,
    pub transfers: Vec<TransferResult>,
    pub inference: Vec<BatchResult>,
}

/// The knobs the numbers were measured with.
#[derive(Debug, Serialize)]
pub struct Settings {
    pub runs: usize,
    pub warmup_runs: usize,
    pub transfer_reps: usize,
    pub page_bytes: usize,
    pub blob_bytes: usize,
    pub load_pages_in_flight: usize,
    pub dtype: &'static str,
    pub tf32: bool,
}

/// INFER latency at one batch size, alone and next to a LOAD.
#[derive(Debug, Serialize)]
pub struct BatchResult {
    pub batch: usize,
    pub gemms: usize,
    pub gflop: f64,
    pub isolated: InferStats,
    pub with_load: InferStats,
    /// The background LOAD's own throughput while `with_load` ran.
    pub load: LoadReport,
    /// `with_load.gpu_us.p99 / isolated.gpu_us.p99`: 1.0 means LOADs do not
    /// disturb INFERs at the tail.
    pub p99_ratio: f64,
}

/// Writes `report` as pretty JSON to `path`.
pub fn write_json(report: &Report, path: &Path) -> Result<()> {
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = BufWriter::new(file);
    serde_json::to_writer_pretty(&mut out, report).context("serialising the report")?;
    writeln!(out)?;
    out.flush()
        .with_context(|| format!("writing {}", path.display()))
}

/// Prints the human-readable tables to stdout.
pub fn print_table(report: &Report) {
    print_device(report);
    print_transfers(&report.transfers);
    print_inference(report);
}

fn print_device(report: &Report) {
    let d = &report.device;
    let gib = d.total_memory_bytes as f64 / f64::from(1u32 << 30);
    let (major, minor) = (d.driver_version / 1000, d.driver_version % 1000 / 10);
    println!(
        "device {}: {} (compute {}, {gib:.1} GiB, driver CUDA {major}.{minor})",
        d.ordinal, d.name, d.compute_capability
    );
}

fn print_transfers(transfers: &[TransferResult]) {
    println!("\nhost-to-device from pinned memory (GB/s = 1e9 B/s)");
    println!(
        "{:<22} {:>11} {:>11} {:>9} {:>9} {:>9} {:>10}",
        "case", "bytes", "chunk", "p50", "min", "max", "p50 us"
    );
    for t in transfers {
        println!(
            "{:<22} {:>11} {:>11} {:>9.2} {:>9.2} {:>9.2} {:>10.1}",
            t.case, t.bytes, t.chunk_bytes, t.gbps.p50, t.gbps.min, t.gbps.max, t.time_us.p50
        );
    }
}

fn print_inference(report: &Report) {
    let s = &report.settings;
    let gemms = report.inference.first().map_or(0, |b| b.gemms);
    println!(
        "\nResNet50-like INFER: {gemms} GEMMs/run, {}{}, {} runs; GPU time (CUDA events) in us",
        s.dtype,
        if s.tf32 { " (TF32)" } else { "" },
        s.runs
    );
    println!(
        "{:>5} {:>7} | {:>9} {:>9} {:>9} {:>6} | {:>9} {:>9} {:>9} {:>6} | {:>6} {:>8}",
        "batch",
        "GFLOP",
        "p50",
        "p99",
        "max",
        "cv",
        "p50+L",
        "p99+L",
        "max+L",
        "cv+L",
        "p99 x",
        "LOAD GB/s"
    );
    for b in &report.inference {
        let (i, l) = (&b.isolated.gpu_us, &b.with_load.gpu_us);
        println!(
            "{:>5} {:>7.1} | {:>9.1} {:>9.1} {:>9.1} {:>6.3} | {:>9.1} {:>9.1} {:>9.1} {:>6.3} | {:>6.2} {:>8.2}",
            b.batch, b.gflop, i.p50, i.p99, i.max, i.cv, l.p50, l.p99, l.max, l.cv, b.p99_ratio, b.load.gbps
        );
    }
    println!("(+L: while a LOAD streams pinned pages to the device on another stream)");
}
