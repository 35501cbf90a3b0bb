//! The `clockwork` command line: a thin shell over the library.

/// mimalloc (the default feature `mimalloc`): glibc's malloc and free were a quarter of
/// the HTTP worker's time; the library itself leaves the choice to its binaries.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use std::time::Duration;

use clockwork::config::{Config, PolicyConfig};
use clockwork::pipeline::BudgetKind;
use clockwork::simulate::pipelines::{BuiltinPipeline, EmulatedFanOut, PipelineArgs};
use clockwork::simulate::SimulateArgs;
use clockwork::time::nanos;
use clockwork::workload::{WorkloadKind, WorkloadParams};
use tracing_subscriber::EnvFilter;

/// A model-serving runtime with predictable latency.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the configured models on the configured devices over HTTP.
    Serve {
        /// Configuration file.
        #[arg(long, default_value = "config.toml")]
        config: PathBuf,
        /// Overrides `server.listen` (port 0 picks a free port).
        #[arg(long)]
        listen: Option<String>,
    },
    /// Run this machine's devices for a controller elsewhere (`[cluster] listen` on it):
    /// dial it, join, and execute what it sends; reconnect when the connection is lost.
    Worker {
        /// The controller's worker address, HOST:PORT.
        #[arg(long)]
        controller: String,
        /// Configuration file: `[[devices]]`, `[runtime] page_bytes`, `[cluster] token`
        /// (the environment's CLOCKWORK_CLUSTER_TOKEN wins). None: one sim device.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Its name in the controller's logs and metrics (default: the host name).
        #[arg(long)]
        name: Option<String>,
    },
    /// Replay a workload through the real actors on emulated devices, in virtual time, for
    /// each policy, and write a report (report.json, report.md, SVG plots).
    Simulate(Box<SimulateCli>),
    /// Send a workload to a running server over HTTP and write the same report as
    /// `simulate`, with client-side latencies.
    Loadgen(Box<LoadgenCli>),
    /// The model repository: write the built-in zoo, or profile a model.
    #[command(subcommand)]
    Models(ModelsCommand),
}

#[derive(Subcommand)]
enum ModelsCommand {
    /// Write the built-in zoo (real ONNX models with seeded random weights) into a
    /// repository: <dir>/<name>/1/model.onnx and <dir>/<name>/config.toml.
    Generate {
        /// Repository root.
        #[arg(long, default_value = "models")]
        dir: PathBuf,
        /// Models to write (default: the whole zoo: mlp, cnn, resnet).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Seed of the weights.
        #[arg(long, default_value_t = clockwork::repository::zoo::SEED)]
        seed: u64,
        /// Replace models that exist already.
        #[arg(long)]
        force: bool,
    },
    /// Read, check and profile the models of a repository on this CPU, print their
    /// profiles and store them beside the models (as registration does).
    Profile {
        /// Repository root.
        #[arg(long, default_value = "models")]
        dir: PathBuf,
        /// Measured runs per batch size.
        #[arg(long, default_value_t = 20)]
        runs: u32,
        /// Threads tract uses (as the devices that will serve them).
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
}

/// Flags of `clockwork loadgen`.
#[derive(clap::Args)]
struct LoadgenCli {
    /// Base URL of the server.
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    url: String,
    /// Models or pipelines to send to, comma separated (default: every ready one).
    #[arg(long, value_delimiter = ',')]
    model: Vec<String>,
    /// poisson, fixed, closed, bursty, ramp, maf-synth, or maf:DIR.
    #[arg(long, default_value = "poisson")]
    workload: WorkloadKind,
    /// Mean offered rate, requests per second (open-loop kinds).
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Length of the run, e.g. 30s, 10m.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Closed loop: number of clients.
    #[arg(long, default_value_t = 8)]
    clients: u32,
    /// Closed loop: wait between an answer and the client's next request, milliseconds.
    #[arg(long, default_value_t = 0.0)]
    think_ms: f64,
    /// Latency objective put on requests by the ramp workload, milliseconds (others use
    /// the server's).
    #[arg(long, default_value_t = 100.0)]
    slo_ms: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Zipf exponent of model popularity (0 = uniform).
    #[arg(long, default_value_t = 1.0)]
    popularity: f64,
    /// Client-side timeout of one request.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Requests outstanding at most (and connections open): an arrival beyond them is
    /// not sent and counted `client_overflow`, never queued inside the client.
    #[arg(long, default_value_t = 1024)]
    max_in_flight: usize,
    #[command(flatten)]
    burst: BurstCli,
    /// Output directory of the report.
    #[arg(long, default_value = "loadgen-out")]
    out: PathBuf,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// The bursty workload's shape (the load generator's and the simulator's alike, so a
/// burst replayed in virtual time is the one sent over HTTP). The run starts on.
#[derive(clap::Args)]
struct BurstCli {
    /// Bursty: length of each on period.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    burst_on: Duration,
    /// Bursty: length of each off period.
    #[arg(long, default_value = "4s", value_parser = humantime::parse_duration)]
    burst_off: Duration,
    /// Bursty: the off periods' rate as a fraction of the on periods' (--rate is the
    /// mean of the two).
    #[arg(long, default_value_t = 0.1)]
    burst_off_fraction: f64,
}

impl BurstCli {
    /// `params` with this shape.
    fn apply(&self, params: WorkloadParams) -> WorkloadParams {
        WorkloadParams {
            burst_on: nanos(self.burst_on),
            burst_off: nanos(self.burst_off),
            burst_off_fraction: self.burst_off_fraction,
            ..params
        }
    }
}

/// Flags of `clockwork simulate`.
#[derive(clap::Args)]
struct SimulateCli {
    /// poisson, fixed, closed, bursty, ramp, maf-synth, or maf:DIR (Azure Functions trace files).
    #[arg(long, default_value = "poisson")]
    workload: WorkloadKind,
    /// Number of models (copies of the model profile).
    #[arg(long, default_value_t = 100)]
    models: u32,
    /// Number of emulated devices.
    #[arg(long, default_value_t = 2)]
    devices: u32,
    /// Built-in device profile.
    #[arg(long, default_value = "v100")]
    device_profile: String,
    /// Overrides the device profile's weight pages.
    #[arg(long)]
    pages: Option<u32>,
    /// Built-in model profile.
    #[arg(long, default_value = "resnet50")]
    model_profile: String,
    /// Mean offered rate, requests per simulated second (trace kinds: 0 replays as is).
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Simulated duration, e.g. 30s, 10m.
    #[arg(long, default_value = "1m", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Latency objective of every request, milliseconds.
    #[arg(long, default_value_t = 100.0)]
    slo_ms: f64,
    /// Policies to compare, comma separated: clockwork, clockwork-nodrop, reactive,
    /// triton. With --pipeline also the pipeline systems: slopt, slopt-noest,
    /// slopt-notune, slopt-nodrop, nexus-like, inferline-like, triton-like, even-split.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "clockwork,clockwork-nodrop,reactive"
    )]
    policy: Vec<String>,
    /// A server configuration file whose `[policy]` table every run starts from (its
    /// name is replaced by each of --policy; devices and models come from these flags).
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    burst: BurstCli,
    /// Output directory of the report.
    #[arg(long, default_value = "sim-out")]
    out: PathBuf,
    /// Zipf exponent of model popularity (0 = uniform).
    #[arg(long, default_value_t = 1.0)]
    popularity: f64,
    /// Trace minutes played per simulated minute (maf kinds).
    #[arg(long, default_value_t = 1.0)]
    time_compression: f64,
    /// Closed loop: number of clients.
    #[arg(long, default_value_t = 16)]
    clients: u32,
    /// Closed loop: think time between an answer and the next request, milliseconds.
    #[arg(long, default_value_t = 0.0)]
    think_ms: f64,
    /// Relative spread of emulated execution times (0 = exact).
    #[arg(long, default_value_t = 0.0)]
    noise_cv: f64,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Send root requests to a built-in emulated pipeline instead of models: traffic
    /// (detector, then car and person classifiers) or cascade (cheap classifier, expensive
    /// one when unsure). --slo-ms is then the end-to-end objective; --models and
    /// --model-profile are ignored.
    #[arg(long)]
    pipeline: Option<BuiltinPipeline>,
    /// traffic: mean number of cars (and of people) per frame.
    #[arg(long, default_value_t = 2.0)]
    fanout_mean: f64,
    /// traffic: variance of that number (above the mean: burstier than Poisson).
    #[arg(long, default_value_t = 3.0)]
    fanout_var: f64,
    /// cascade: fraction of images the expensive model also runs on.
    #[arg(long, default_value_t = 0.3)]
    escalate: f64,
    /// The pipeline's budget split for the plain policies: even (batch-1 proportional)
    /// or tuned (SLOpt's plan from the cascade's estimated rates). The pipeline systems
    /// of --policy bring their own.
    #[arg(long, default_value = "even")]
    budget: BudgetKind,
}

fn main() -> ExitCode {
    // tract announces its kernels at info level; that is noise for an operator.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,tract_linalg=warn"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
    let result = match Cli::parse().command {
        Command::Serve { config, listen } => serve(config, listen),
        Command::Worker {
            controller,
            config,
            name,
        } => worker(controller, config, name),
        Command::Simulate(cli) => simulate(*cli),
        Command::Loadgen(cli) => loadgen(*cli),
        Command::Models(command) => models(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(path: PathBuf, listen: Option<String>) -> anyhow::Result<()> {
    let mut config = Config::load(&path)?;
    if let Some(listen) = listen {
        config.server.listen = listen;
    }
    let warmed = clockwork::memory::keep_and_warm(config.server.warm_memory_bytes)?;
    // Beside the server's own start-up lines (their target), which deployments keep.
    tracing::info!(
        target: "clockwork::serve",
        mib = warmed.bytes >> 20,
        took_ms = warmed.took.as_millis() as u64,
        kept = warmed.kept,
        "memory: {} MiB written at start for the request path (`warm_memory_bytes`); {}",
        warmed.bytes >> 20,
        if warmed.kept {
            "freed memory stays with the process"
        } else {
            "freed memory may go back to the system (another allocator)"
        }
    );
    actix_web::rt::System::new().block_on(clockwork::serve::run(config))
}

fn worker(controller: String, config: Option<PathBuf>, name: Option<String>) -> anyhow::Result<()> {
    let config = match config {
        Some(path) => Config::load(&path)?,
        None => Config::parse("[[devices]]\nbackend = \"sim\"\nprofile = \"v100\"\n")?,
    };
    let settings = clockwork::remote::worker::WorkerSettings {
        controller,
        name: name.unwrap_or_else(clockwork::remote::worker::host_name),
        config,
    };
    actix_web::rt::System::new().block_on(clockwork::remote::worker::run(settings))
}

fn simulate(cli: SimulateCli) -> anyhow::Result<()> {
    let ms = |v: f64| (v * 1e6).round() as u64;
    let pipeline = cli.pipeline.map(|which| PipelineArgs {
        which,
        fan_out: EmulatedFanOut {
            mean: cli.fanout_mean,
            variance: cli.fanout_var,
        },
        escalate: cli.escalate,
        budget: cli.budget,
    });
    let params = WorkloadParams {
        // A pipeline run sends to one pipeline.
        models: if pipeline.is_some() { 1 } else { cli.models },
        rate: cli.rate,
        duration: nanos(cli.duration),
        slo: ms(cli.slo_ms),
        seed: cli.seed,
        popularity: cli.popularity,
        time_compression: cli.time_compression,
        ..cli.burst.apply(WorkloadParams::default())
    };
    let args = SimulateArgs {
        workload: cli.workload,
        params,
        devices: cli.devices,
        device_profile: cli.device_profile,
        pages: cli.pages,
        model_profile: cli.model_profile,
        noise_cv: cli.noise_cv,
        policies: cli.policy,
        policy: match &cli.config {
            Some(path) => Config::load(path)?.policy,
            None => PolicyConfig::default(),
        },
        clients: cli.clients,
        think: ms(cli.think_ms),
        out: cli.out,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        progress: !cli.quiet,
        pipeline,
    };
    let report = clockwork::simulate::run(&args)?;
    print!("{}", clockwork::report::markdown(&report));
    eprintln!("report written to {}", args.out.display());
    Ok(())
}

fn loadgen(cli: LoadgenCli) -> anyhow::Result<()> {
    let ms = |v: f64| nanos(Duration::from_secs_f64(v.max(0.0) / 1e3));
    let params = WorkloadParams {
        rate: cli.rate,
        duration: nanos(cli.duration),
        slo: ms(cli.slo_ms),
        seed: cli.seed,
        popularity: cli.popularity,
        ..cli.burst.apply(WorkloadParams::default())
    };
    let args = clockwork::loadgen::LoadgenArgs {
        url: cli.url,
        models: cli.model,
        workload: cli.workload,
        params,
        clients: cli.clients,
        think: ms(cli.think_ms),
        timeout: cli.timeout,
        max_in_flight: cli.max_in_flight,
        out: cli.out.clone(),
        progress: !cli.quiet,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let report = actix_web::rt::System::new().block_on(clockwork::loadgen::run(args))?;
    println!("{}", clockwork::report::markdown(&report));
    eprintln!("report written to {}", cli.out.display());
    Ok(())
}

fn models(command: ModelsCommand) -> anyhow::Result<()> {
    use clockwork::repository::{zoo, PrepareSettings, Repository, RepositorySource};
    match command {
        ModelsCommand::Generate {
            dir,
            only,
            seed,
            force,
        } => {
            let names: Vec<String> = if only.is_empty() {
                zoo::MODELS.iter().map(|m| m.to_string()).collect()
            } else {
                only
            };
            for name in names {
                if !force && dir.join(&name).exists() {
                    eprintln!("{name}: exists, left alone (--force replaces it)");
                    continue;
                }
                zoo::write(&dir, &name, zoo::Batch::Dynamic, seed)?;
                println!("{}", dir.join(&name).display());
            }
            Ok(())
        }
        ModelsCommand::Profile { dir, runs, threads } => {
            let source = RepositorySource {
                repository: Repository::new(&dir),
                settings: PrepareSettings {
                    default_slo: Duration::from_millis(100),
                    threads: vec![threads],
                    ort_threads: Vec::new(),
                    profiling: clockwork::gpu::cpu::profile::ProfileSettings {
                        runs,
                        ..Default::default()
                    },
                },
            };
            let mut failed = 0;
            println!("| model | version | batch | p50 ms | p99 ms | CV | build ms | load ms | memory MB |");
            println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
            for name in source.repository.names()? {
                match source.prepare(&name) {
                    Ok(r) => {
                        let profile = r.profile();
                        let (load, memory) = (profile.load.p50 / 1e6, profile.weight_bytes);
                        let build = r.build as f64 / 1e6;
                        for b in &profile.batches {
                            let l = &b.latency;
                            println!(
                                "| {name} | {} | {} | {:.3} | {:.3} | {:.3} | {build:.1} | {load:.3} | {:.1} |",
                                r.spec.version,
                                b.batch,
                                l.p50 / 1e6,
                                l.p99 / 1e6,
                                l.cv,
                                memory as f64 / 1e6
                            );
                        }
                    }
                    Err(error) => {
                        failed += 1;
                        eprintln!("{error}");
                    }
                }
            }
            anyhow::ensure!(failed == 0, "{failed} model(s) refused");
            Ok(())
        }
    }
}
