//! ONNX Runtime (the `ort` backend) against tract (the `cpu` backend) on this machine, in
//! the same run: for each zoo model and each of the onnx wheel's reference architectures
//! (if `scripts/onnx_testdata.sh` fetched them), every allowed batch size runs `runs`
//! times on a device of each backend, one thread each, alternating backends per batch
//! size: p50, p99, CV, and the ratio tract p50 / ort p50 (above 1: ONNX Runtime faster).
//!
//! `ORT_DYLIB_PATH=$(scripts/onnxruntime.sh) cargo bench --bench ort -- [runs]` (default
//! 100). A markdown table goes to stdout, the numbers as JSON to target/bench-ort.json.
//! Without ONNX Runtime it says why and measures nothing.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use clockwork::gpu::cpu::profile::{time_each, BatchProfile, ProfileSettings};
use clockwork::gpu::cpu::{CpuDevice, CpuSettings};
use clockwork::gpu::ort::{library, OrtDevice, OrtSettings};
use clockwork::gpu::thread::BlockingDevice;
use clockwork::gpu::{DeviceError, InferJob, ModelArtifact};
use clockwork::model::ModelId;
use clockwork::repository::{prepare, zoo, PrepareSettings, Registration, Repository};
use clockwork::stats::Summary;
use serde::Serialize;

/// The reference architectures of the onnx wheel, under target/onnx-testdata.
const LIGHT: &[&str] = &[
    "squeezenet",
    "resnet50",
    "inception_v1",
    "densenet121",
    "shufflenet",
];

#[derive(Serialize)]
struct Row {
    model: String,
    batch: u32,
    /// Nanoseconds, tract.
    tract: Summary,
    /// Nanoseconds, ONNX Runtime.
    ort: Summary,
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let runs: u32 = args.first().map_or(Ok(100), |a| a.parse())?;
    if let Err(error) = library::available() {
        println!("ort bench skipped: {error}");
        return Ok(());
    }
    let root = std::env::temp_dir().join(format!("clockwork-bench-ort-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    zoo::write_missing(&root)?;
    let mut names: Vec<String> = zoo::MODELS.iter().map(|m| m.to_string()).collect();
    let light = Path::new("target/onnx-testdata/onnx/backend/test/data/light");
    for name in LIGHT {
        let model = light.join(format!("light_{name}.onnx"));
        if model.is_file() {
            let dir = root.join(name).join("1");
            std::fs::create_dir_all(&dir)?;
            std::fs::copy(&model, dir.join("model.onnx"))?;
            names.push(name.to_string());
        }
    }
    let mut rows = Vec::new();
    for name in &names {
        let registration = registered(&root, name)?;
        rows.extend(compare(&registration, runs)?);
    }
    print_rows(&rows, runs);
    let json = serde_json::json!({ "runs": runs, "rows": rows });
    std::fs::create_dir_all("target")?;
    std::fs::write(
        "target/bench-ort.json",
        serde_json::to_string_pretty(&json)?,
    )?;
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}

/// `name` prepared for both backends (a short profile: the comparison measures).
fn registered(root: &Path, name: &str) -> anyhow::Result<Registration> {
    let settings = PrepareSettings {
        default_slo: Duration::from_millis(100),
        threads: vec![1],
        ort_threads: vec![1],
        profiling: ProfileSettings {
            threads: 1,
            warmup: 1,
            runs: 1,
            loads: 1,
        },
    };
    let registration = prepare(&Repository::new(root).read(name)?, &settings)?;
    if let Some(error) = &registration.ort_refused {
        anyhow::bail!("{name}: {error}");
    }
    Ok(registration)
}

/// Every batch size of the model on a tract and an ONNX Runtime device, alternating.
fn compare(registration: &Registration, runs: u32) -> anyhow::Result<Vec<Row>> {
    let artifact = ModelArtifact {
        id: ModelId(0),
        spec: registration.spec.clone(),
        bytes: None,
        prepared: registration.prepared.clone(),
    };
    let mut tract = CpuDevice::new(CpuSettings {
        pages: 0,
        threads: 1,
    });
    let mut ort = OrtDevice::new(OrtSettings {
        pages: 0,
        threads: 1,
    })?;
    tract.load(&artifact)?;
    ort.load(&artifact)?;
    let mut rows = Vec::new();
    for batch in registration.spec.profile.batches.iter().map(|b| b.batch) {
        let tract_time = time(&mut tract, &artifact, batch, runs)?;
        let ort_time = time(&mut ort, &artifact, batch, runs)?;
        rows.push(Row {
            model: registration.spec.name.clone(),
            batch,
            tract: tract_time.latency,
            ort: ort_time.latency,
        });
    }
    Ok(rows)
}

/// `runs` INFERs of a batch of `batch` sample items on `device`, after 5 unmeasured ones.
fn time(
    device: &mut dyn BlockingDevice,
    artifact: &ModelArtifact,
    batch: u32,
    runs: u32,
) -> Result<BatchProfile, DeviceError> {
    let mut timed = time_each(&[batch], &artifact.spec.inputs, (5, runs), |items| {
        let inputs = items.iter().map(|i| Arc::new(i.to_vec())).collect();
        let job = InferJob {
            model: artifact.id,
            inputs,
        };
        device.infer(&job).map(drop)
    })?;
    Ok(timed.remove(0))
}

fn print_rows(rows: &[Row], runs: u32) {
    println!("## tract and ONNX Runtime, one thread each ({runs} runs per batch size)\n");
    println!(
        "| model | batch | tract p50 ms | tract p99 ms | tract CV | ort p50 ms | ort p99 ms \
         | ort CV | tract/ort p50 | tract/ort p99 |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in rows {
        println!(
            "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2}x | {:.2}x |",
            r.model,
            r.batch,
            r.tract.p50 / 1e6,
            r.tract.p99 / 1e6,
            r.tract.cv,
            r.ort.p50 / 1e6,
            r.ort.p99 / 1e6,
            r.ort.cv,
            r.tract.p50 / r.ort.p50,
            r.tract.p99 / r.ort.p99,
        );
    }
}
