//! Decisions per second of the pure Clockwork policy on one core.
//!
//! 4000 ResNet50-profile models on 16 emulated V100s (1376 pages each, so only ~3100 fit at
//! once), a steady Poisson stream with Zipf popularity, replayed through the in-memory
//! testbed (executor semantics, exact durations, no actors). A decision is one answer or one
//! action the policy produced. The time includes the testbed's own bookkeeping, so the
//! policy alone is faster than reported.
//!
//! Run: `cargo bench --bench policy` (optionally `-- RATE SECONDS`).

use std::time::Instant;

use clockwork::config::PolicyConfig;
use clockwork::gpu::profiles;
use clockwork::model::{ModelId, RequestId};
use clockwork::scheduler::testbed::Testbed;
use clockwork::scheduler::{ClockworkPolicy, DeviceInfo, ModelInfo, Policy, Request};
use clockwork::time::{Nanos, MS};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp, Zipf};

const MODELS: usize = 4000;
const DEVICES: usize = 16;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let rate: f64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(8000.0);
    let seconds: f64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(60.0);

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

    let started = Instant::now();
    let report = testbed.run(requests.iter().copied());
    let wall = started.elapsed().as_secs_f64();

    let refused: usize = report.refused.values().sum();
    let decisions = report.completed + refused + report.failed + report.actions;
    println!(
        "policy bench: {MODELS} models, {DEVICES} devices, {rate} req/s for {seconds} s simulated"
    );
    println!("  requests        {}", requests.len());
    println!(
        "  completed       {} (late {})",
        report.completed, report.late
    );
    println!("  refused         {:?}", report.refused);
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
        report.completed as f64 / requests.len() as f64
    );
    println!("  wall            {wall:.3} s");
    println!("  decisions/s     {:.0}", decisions as f64 / wall);
    println!("  requests/s      {:.0}", requests.len() as f64 / wall);
    if !report.violations.is_empty() {
        eprintln!("violations: {:?}", report.violations);
        std::process::exit(1);
    }
}
