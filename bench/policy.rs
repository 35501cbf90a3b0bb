//! Decisions per second of the pure Clockwork policy on one core.
//!
//! 4000 ResNet50-profile models on 16 emulated V100s (1376 pages each, so only ~3100 fit at
//! once), a steady Poisson stream with Zipf popularity, replayed through the in-memory
//! testbed (executor semantics, exact durations, no actors). A decision is one answer or one
//! action the policy produced. The time includes the testbed's own bookkeeping, so the
//! policy alone is faster than reported.
//!
//! Three runs in one command: the headline stream (8000 req/s for 60 s unless given), then
//! the same scale at 0.5x and 1.5x of nominal capacity (16 devices, each 16 requests per
//! batch-16 run, as `bench/simulate/load_sweep.sh` counts it), to compare the cost per
//! request under overload with its cost at half load. Before each, a fixed reference loop
//! (no project code) measures how fast this core is right now: the machine is shared, so
//! each rate is also printed as a ratio to the reference measured next to it. Times are
//! the thread's own CPU time where Linux reports it (`/proc/thread-self/schedstat`), so
//! that time spent waiting for a shared core is not counted; wall time is printed too.
//!
//! Run: `cargo bench --bench policy` (optionally `-- RATE SECONDS SCALE_SECONDS`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use clockwork::config::PolicyConfig;
use clockwork::gpu::profiles;
use clockwork::model::{ModelId, RequestId};
use clockwork::scheduler::testbed::{Report, Testbed};
use clockwork::scheduler::{ClockworkPolicy, DeviceInfo, ModelInfo, Policy, Request};
use clockwork::time::{Nanos, MS};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp, Zipf};

const MODELS: usize = 4000;
const DEVICES: usize = 16;
/// Steps of the reference loop: about a quarter of a second on the development machine.
const REFERENCE_STEPS: u64 = 8_000_000;

/// What one run of the policy measured.
struct Run {
    requests: usize,
    decisions: usize,
    /// CPU seconds of the replay (wall seconds where CPU time is not available).
    cpu: f64,
    wall: f64,
    report: Report,
    /// Reference steps per second measured just before the run.
    reference: f64,
}

impl Run {
    fn decisions_per_s(&self) -> f64 {
        self.decisions as f64 / self.cpu
    }

    /// CPU time per request, in microseconds.
    fn cost_us(&self) -> f64 {
        self.cpu * 1e6 / self.requests as f64
    }

    /// Decisions per second over reference steps per second: comparable between runs on
    /// a machine whose speed varies.
    fn ratio(&self) -> f64 {
        self.decisions_per_s() / self.reference
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let arg = |i: usize, default: f64| -> f64 {
        args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default)
    };
    let (rate, seconds, scale_seconds) = (arg(0, 8000.0), arg(1, 60.0), arg(2, 20.0));

    let headline = run(rate, seconds);
    print_run(
        &format!("{rate} req/s for {seconds} s simulated"),
        &headline,
    );

    // Nominal capacity as the load sweep counts it: each device runs batches of 16.
    let spec = profiles::model("resnet50", "resnet50", 100 * MS).expect("built-in profile");
    let batch16 = spec.profile.latency(16).expect("profiled batch 16");
    let capacity = (DEVICES * 16) as f64 * 1e9 / batch16 as f64;
    let half = run(0.5 * capacity, scale_seconds);
    print_run(
        &format!("0.5x capacity ({capacity:.0} req/s nominal) for {scale_seconds} s"),
        &half,
    );
    let over = run(1.5 * capacity, scale_seconds);
    print_run(&format!("1.5x capacity for {scale_seconds} s"), &over);

    println!("summary (the machine may be shared: compare ratios between runs)");
    println!(
        "  headline        {:.0} decisions per CPU second, ratio to reference {:.4}",
        headline.decisions_per_s(),
        headline.ratio()
    );
    println!(
        "  cost/request    {:.3} us at 0.5x, {:.3} us at 1.5x: 1.5x/0.5x = {:.2} (after normalising by the reference: {:.2})",
        half.cost_us(),
        over.cost_us(),
        over.cost_us() / half.cost_us(),
        (over.cost_us() * over.reference) / (half.cost_us() * half.reference)
    );
    for r in [&headline, &half, &over] {
        if !r.report.violations.is_empty() {
            eprintln!("violations: {:?}", r.report.violations);
            std::process::exit(1);
        }
    }
}

/// Builds the policy and the testbed, makes the stream, measures the reference and then
/// the replay.
fn run(rate: f64, seconds: f64) -> Run {
    let config = PolicyConfig::default();
    let spec = profiles::model("resnet50", "resnet50", 100 * MS).expect("built-in profile");
    let device = profiles::device("v100").expect("built-in profile");
    let pages = spec
        .profile
        .pages(clockwork::config::RuntimeConfig::default().page_bytes);
    let mut policy = ClockworkPolicy::new(&config);
    for _ in 0..DEVICES {
        policy.add_device(DeviceInfo {
            kind: device.kind.into(),
            pages: device.pages,
        });
    }
    for _ in 0..MODELS {
        policy.add_model(ModelInfo {
            pages,
            profile: spec.profile.clone(),
            by_kind: Vec::new(),
            devices: None,
        });
    }
    let truth = vec![(pages, spec.profile.clone()); MODELS];
    let mut testbed = Testbed::new(
        policy,
        &[device.pages; DEVICES],
        truth,
        config.max_batch as usize,
    );
    let requests = stream(rate, seconds);
    let reference = reference();

    let clock = Clock::start();
    let report = testbed.run(requests.iter().copied());
    let (cpu, wall) = clock.seconds();

    let refused: usize = report.refused.values().sum();
    Run {
        requests: requests.len(),
        decisions: report.completed + refused + report.failed + report.actions,
        cpu,
        wall,
        report,
        reference,
    }
}

/// Poisson arrivals at `rate` with Zipf(1.0) popularity over the models, 100 ms objective.
fn stream(rate: f64, seconds: f64) -> Vec<Request> {
    let mut rng = StdRng::seed_from_u64(42);
    let gaps = Exp::new(rate).expect("positive rate");
    let popularity = Zipf::new(MODELS as f64, 1.0).expect("valid Zipf");
    let horizon = (seconds * 1e9) as Nanos;
    let mut arrival: Nanos = 0;
    let mut requests = Vec::new();
    while arrival < horizon {
        arrival += (gaps.sample(&mut rng) * 1e9) as Nanos;
        let model = ModelId(popularity.sample(&mut rng) as u32 - 1);
        let id = RequestId(requests.len() as u64);
        requests.push(Request {
            id,
            model,
            arrival,
            slo: 100 * MS,
            latest_finish: None,
            items: 1,
        });
    }
    requests
}

/// A fixed amount of work shaped like the policy's (a priority queue of timed entries over
/// 4000 keys, a table indexed by key), using no project code: its speed tracks how fast
/// this core runs now, not the project's changes. Answers steps per second.
fn reference() -> f64 {
    let clock = Clock::start();
    let mut heap: BinaryHeap<Reverse<(u64, u32)>> = (0..MODELS as u32)
        .map(|k| Reverse((u64::from(k), k)))
        .collect();
    let mut table = vec![0u64; MODELS];
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..REFERENCE_STEPS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if let Some(Reverse((t, k))) = heap.pop() {
            let slot = &mut table[(x % MODELS as u64) as usize];
            *slot = slot.wrapping_add(t);
            heap.push(Reverse((t + (x >> 40), k)));
        }
    }
    let checksum: u64 = table.iter().fold(0, |a, &v| a ^ v);
    std::hint::black_box(checksum);
    REFERENCE_STEPS as f64 / clock.seconds().0
}

/// CPU and wall time since a start.
struct Clock {
    cpu: Option<u64>,
    wall: Instant,
}

impl Clock {
    fn start() -> Self {
        Self {
            cpu: thread_cpu_ns(),
            wall: Instant::now(),
        }
    }

    /// (CPU seconds, or wall seconds where CPU time is not available; wall seconds).
    fn seconds(&self) -> (f64, f64) {
        let wall = self.wall.elapsed().as_secs_f64();
        let cpu = match (self.cpu, thread_cpu_ns()) {
            (Some(a), Some(b)) => (b - a) as f64 / 1e9,
            _ => wall,
        };
        (cpu, wall)
    }
}

/// Nanoseconds this thread has run on a CPU (Linux only).
fn thread_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

fn print_run(what: &str, r: &Run) {
    let report = &r.report;
    println!("policy bench: {MODELS} models, {DEVICES} devices, {what}");
    println!("  requests        {}", r.requests);
    println!(
        "  completed       {} (late {})",
        report.completed, report.late
    );
    println!(
        "  refused         {:?} (on arrival {})",
        report.refused, report.refused_on_arrival
    );
    println!(
        "  actions         {} (batches {}, loads {}, unloads {})",
        report.actions, report.batches, report.loads, report.unloads
    );
    println!(
        "  mean batch      {:.2}",
        report.batched_requests as f64 / report.batches.max(1) as f64
    );
    println!(
        "  goodput         {:.4}",
        report.completed as f64 / r.requests as f64
    );
    println!("  cpu             {:.3} s (wall {:.3} s)", r.cpu, r.wall);
    println!("  decisions/s     {:.0}", r.decisions_per_s());
    println!("  requests/s      {:.0}", r.requests as f64 / r.cpu);
    println!("  cost/request    {:.3} us", r.cost_us());
    println!(
        "  reference       {:.1} M steps/s; ratio decisions/s : reference {:.4}",
        r.reference / 1e6,
        r.ratio()
    );
}
