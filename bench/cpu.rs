//! The cpu backend's predictability on this machine, in two parts.
//!
//! 1. Execution time: for each zoo model and allowed batch size, the plans a LOAD builds
//!    run `runs` times on one thread (single-threaded tract, as a cpu device runs them):
//!    p50, p99, p99/p50 and the coefficient of variation.
//! 2. Prediction error in a served run: two cpu devices behind the real controller, a
//!    Poisson stream at `rate` requests/s spread evenly over the zoo for `seconds`; for
//!    every INFER the controller planned, measured minus planned duration (the planned
//!    one is the policy's estimate: the p99 of a sliding window of measurements).
//!
//! `cargo bench --bench cpu -- [runs] [rate] [seconds]` (defaults 200, 300, 20).
//! Markdown tables go to stdout, the numbers as JSON to target/bench-cpu.json.
//!
//! `cargo bench --bench cpu -- load [reps]` (default 10) measures instead what a LOAD
//! costs, in the same run: building the plans from the ONNX bytes (what every LOAD did
//! before plans were built once at registration) against the LOAD a device does now
//! (taking the shared plans), for the zoo and, if `scripts/onnx_testdata.sh` fetched it,
//! the onnx wheel's squeezenet.

use std::collections::BTreeMap;
use std::time::Duration;

use clockwork::actors::messages::{InferResult, Submit};
use clockwork::actors::{Placement, RuntimeBuilder};
use clockwork::config::Config;
use clockwork::events::Event;
use clockwork::gpu::cpu::profile::{sample_item, time_batches, time_loads, ProfileSettings};
use clockwork::gpu::cpu::{executor, ModelPlans};
use clockwork::model::ModelSpec;
use clockwork::repository::{zoo, PrepareSettings, Repository, RepositorySource};
use clockwork::stats::Summary;
use clockwork::tensor::Tensor;
use clockwork::time::Clock;
use clockwork::workload::{self, WorkloadKind, WorkloadParams};
use serde::Serialize;

#[derive(Serialize)]
struct ExecRow {
    model: String,
    batch: u32,
    /// Nanoseconds.
    latency: Summary,
}

#[derive(Serialize)]
struct PredictionRow {
    model: String,
    infers: usize,
    /// Measured minus planned, nanoseconds.
    error: Summary,
    /// Measured durations, nanoseconds.
    measured: Summary,
}

#[derive(Serialize)]
struct Served {
    rate: f64,
    seconds: u64,
    offered: usize,
    ok: usize,
    late: usize,
    refused: usize,
    failed: usize,
    rows: Vec<PredictionRow>,
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.first().map(String::as_str) == Some("load") {
        let reps: u32 = args.get(1).map_or(Ok(10), |a| a.parse())?;
        return load_times(reps);
    }
    let runs: u32 = args.first().map_or(Ok(200), |a| a.parse())?;
    let rate: f64 = args.get(1).map_or(Ok(300.0), |a| a.parse())?;
    let seconds: u64 = args.get(2).map_or(Ok(20), |a| a.parse())?;
    let root = std::env::temp_dir().join(format!("clockwork-bench-cpu-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    zoo::write_missing(&root)?;

    let specs = prepare(&root)?;
    let exec = execution_times(&root, &specs, runs)?;
    print_exec(&exec, runs);
    let served = served_run(&root, rate, seconds)?;
    print_served(&served);

    let json = serde_json::json!({ "runs": runs, "execution": exec, "served": served });
    std::fs::create_dir_all("target")?;
    std::fs::write(
        "target/bench-cpu.json",
        serde_json::to_string_pretty(&json)?,
    )?;
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}

/// The zoo's specs, as registration makes them (a short profile: part 1 measures).
fn prepare(root: &std::path::Path) -> anyhow::Result<Vec<ModelSpec>> {
    let source = RepositorySource {
        repository: Repository::new(root),
        settings: PrepareSettings {
            default_slo: Duration::from_millis(100),
            threads: vec![1],
            ort_threads: Vec::new(),
            profiling: clockwork::gpu::cpu::profile::ProfileSettings {
                runs: 3,
                warmup: 1,
                ..Default::default()
            },
        },
    };
    zoo::MODELS
        .iter()
        .map(|m| Ok(source.prepare(m)?.spec))
        .collect()
}

/// Part 1: every plan of every model, `runs` times, on a thread of its own.
fn execution_times(
    root: &std::path::Path,
    specs: &[ModelSpec],
    runs: u32,
) -> anyhow::Result<Vec<ExecRow>> {
    let mut rows = Vec::new();
    for spec in specs {
        let bytes = std::fs::read(root.join(&spec.name).join("1/model.onnx"))?;
        let spec = spec.clone();
        let measured = std::thread::spawn(move || -> anyhow::Result<Vec<ExecRow>> {
            let plans = ModelPlans::compile(&bytes, &spec)?;
            let batches = time_batches(&plans, &spec.inputs, (10, runs), &executor(1))?;
            Ok(batches
                .into_iter()
                .map(|b| ExecRow {
                    model: spec.name.clone(),
                    batch: b.batch,
                    latency: b.latency,
                })
                .collect())
        })
        .join()
        .map_err(|_| anyhow::anyhow!("measuring thread panicked"))??;
        rows.extend(measured);
    }
    Ok(rows)
}

fn config(root: &std::path::Path) -> String {
    format!(
        r#"
[[devices]]
backend = "cpu"
count = 2
pages = 64

[repository]
path = "{}"
"#,
        root.display()
    )
}

/// Part 2: a Poisson stream through the real actors on two cpu devices.
fn served_run(root: &std::path::Path, rate: f64, seconds: u64) -> anyhow::Result<Served> {
    let config = Config::parse(&config(root))?;
    actix_rt::System::new().block_on(async move {
        let clock = Clock::start();
        let runtime = RuntimeBuilder::from_config(clock, &config)?
            .placement(Placement::Threads)
            .start()?;
        let names: Vec<String> = runtime.models.iter().map(|m| m.name.clone()).collect();
        let inputs: Vec<std::sync::Arc<Vec<Tensor>>> = runtime
            .models
            .iter()
            .map(|m| std::sync::Arc::new(sample_item(&m.inputs)))
            .collect();
        let mut events = runtime.events.subscribe();
        let params = WorkloadParams {
            models: names.len() as u32,
            rate,
            duration: seconds * 1_000_000_000,
            seed: 1,
            popularity: 0.0,
            ..WorkloadParams::default()
        };
        let mut stream = workload::open(&WorkloadKind::Poisson, &params)?;
        let start = clock.now();
        let mut answers = Vec::new();
        while let Some(arrival) = stream.next_arrival() {
            tokio::time::sleep_until(clock.instant(start + arrival.at)).await;
            let (reply, answer) = tokio::sync::oneshot::channel::<InferResult>();
            let model = arrival.model as usize;
            runtime.controller.do_send(Submit {
                model: names[model].clone(),
                inputs: std::sync::Arc::clone(&inputs[model]),
                items: 1,
                slo: None,
                edge: None,
                root: None,
                tally: None,
                reply,
            });
            answers.push(answer);
        }
        let offered = answers.len();
        let (mut ok, mut late, mut refused, mut failed) = (0, 0, 0, 0);
        for answer in answers {
            match answer.await {
                Ok(Ok(inferred)) if inferred.late => late += 1,
                Ok(Ok(_)) => ok += 1,
                Ok(Err(clockwork::actors::messages::InferError::Refused(_))) => refused += 1,
                _ => failed += 1,
            }
        }
        let mut errors: BTreeMap<String, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
        while let Ok(event) = events.try_recv() {
            let Event::ActionDone(done) = event else {
                continue;
            };
            let Some(measured) = done
                .measured
                .filter(|_| done.kind == clockwork::protocol::ActionTag::Infer)
            else {
                continue;
            };
            let name = names[done.model.0 as usize].clone();
            let entry = errors.entry(name).or_default();
            entry
                .0
                .push(measured.duration as f64 - done.expected as f64);
            entry.1.push(measured.duration as f64);
        }
        runtime.shutdown().await;
        let mut rows: Vec<PredictionRow> = errors
            .iter()
            .map(|(model, (error, measured))| PredictionRow {
                model: model.clone(),
                infers: error.len(),
                error: Summary::of(error).expect("non-empty"),
                measured: Summary::of(measured).expect("non-empty"),
            })
            .collect();
        let all_errors: Vec<f64> = errors.values().flat_map(|(e, _)| e.clone()).collect();
        let all_measured: Vec<f64> = errors.values().flat_map(|(_, m)| m.clone()).collect();
        if let (Some(error), Some(measured)) =
            (Summary::of(&all_errors), Summary::of(&all_measured))
        {
            rows.push(PredictionRow {
                model: "all".into(),
                infers: all_errors.len(),
                error,
                measured,
            });
        }
        Ok(Served {
            rate,
            seconds,
            offered,
            ok,
            late,
            refused,
            failed,
            rows,
        })
    })
}

fn us(nanos: f64) -> String {
    format!("{:.1}", nanos / 1e3)
}

fn ms(nanos: f64) -> String {
    format!("{:.3}", nanos / 1e6)
}

fn print_exec(rows: &[ExecRow], runs: u32) {
    println!("## Execution time on this CPU ({runs} runs per batch size, one thread)\n");
    println!("| model | batch | p50 ms | p99 ms | p99/p50 | CV |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for r in rows {
        let l = &r.latency;
        println!(
            "| {} | {} | {} | {} | {:.2} | {:.3} |",
            r.model,
            r.batch,
            ms(l.p50),
            ms(l.p99),
            l.p99 / l.p50,
            l.cv
        );
    }
}

fn print_served(s: &Served) {
    println!(
        "\n## Served run: {} req/s Poisson over the zoo for {} s on 2 cpu devices\n",
        s.rate, s.seconds
    );
    println!(
        "offered {}, ok {}, late {}, refused {}, failed {}\n",
        s.offered, s.ok, s.late, s.refused, s.failed
    );
    println!("| model | INFERs | measured p50 ms | error p50 ms | error p99 ms | error max ms | p99 error / p50 measured |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for r in &s.rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.2} |",
            r.model,
            r.infers,
            ms(r.measured.p50),
            ms(r.error.p50),
            ms(r.error.p99),
            ms(r.error.max),
            r.error.p99 / r.measured.p50
        );
    }
}

/// Where `scripts/onnx_testdata.sh` leaves the onnx wheel's squeezenet.
const SQUEEZENET: &str = "target/onnx-testdata/onnx/backend/test/data/light/light_squeezenet.onnx";

/// LOAD before and after, same run: `reps` plan builds (the old LOAD) and `reps` LOADs of
/// the shared plans onto a single-threaded cpu device (the new one), per model.
fn load_times(reps: u32) -> anyhow::Result<()> {
    let root = std::env::temp_dir().join(format!("clockwork-bench-load-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    zoo::write_missing(&root)?;
    let mut names: Vec<String> = zoo::MODELS.iter().map(|m| m.to_string()).collect();
    if std::path::Path::new(SQUEEZENET).exists() {
        let dir = root.join("squeezenet").join("1");
        std::fs::create_dir_all(&dir)?;
        std::fs::copy(SQUEEZENET, dir.join("model.onnx"))?;
        names.push("squeezenet".into());
    }
    let source = RepositorySource {
        repository: Repository::new(&root),
        settings: PrepareSettings {
            default_slo: Duration::from_millis(100),
            threads: vec![1],
            ort_threads: Vec::new(),
            profiling: ProfileSettings {
                runs: 1,
                warmup: 0,
                ..Default::default()
            },
        },
    };
    println!("## LOAD on a cpu device, before (plans built on LOAD) and after (built once at registration), {reps} each\n");
    println!("| model | batch sizes | build p50 ms | build p99 ms | LOAD p50 µs | LOAD p99 µs | build / LOAD (p50) |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for name in &names {
        let registration = source.prepare(name)?;
        let spec = &registration.spec;
        let bytes = &registration.bytes;
        let mut builds = Vec::new();
        for _ in 0..reps.max(1) {
            let begin = std::time::Instant::now();
            std::hint::black_box(ModelPlans::compile(bytes, spec)?);
            builds.push(begin.elapsed().as_nanos() as f64);
        }
        let build = Summary::of(&builds).expect("at least one build");
        let plans = registration
            .prepared
            .cpu
            .as_ref()
            .expect("cpu plans prepared");
        let settings = ProfileSettings {
            loads: reps.max(1),
            ..Default::default()
        };
        let load = time_loads(plans, spec, settings)?;
        let sizes: Vec<String> = plans.batches().map(|b| b.to_string()).collect();
        println!(
            "| {name} | {} | {} | {} | {} | {} | {:.0} |",
            sizes.join(","),
            ms(build.p50),
            ms(build.p99),
            us(load.p50),
            us(load.p99),
            build.p50 / load.p50.max(1.0)
        );
    }
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}
