//! HTTP overhead of the inference path: `POST /v2/models/zero/infer` (JSON, a model that
//! takes no time on an emulated device) against a bare actix-web handler that parses the
//! same body and answers a response of the same shape, measured in the same run, with the
//! same client at a fixed concurrency.
//!
//! `cargo bench --bench http -- [concurrency] [seconds]` (default 16 clients, 5 s each).
//! The difference between the two is what the runtime adds: decoding and checking the
//! tensors, the controller's admission and scheduling, the executor and the encoding.
//! Each phase also reports the CPU time of the whole process per request (clients
//! included), which a busy machine disturbs far less than the latencies.

/// mimalloc (the default feature `mimalloc`): glibc's malloc and free were a quarter of
/// the HTTP worker's time; the library itself leaves the choice to its binaries.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use actix_web::{web, App, HttpResponse, HttpServer};
use clockwork::actors::{Placement, RuntimeBuilder};
use clockwork::api::{self, ApiSettings, ApiState};
use clockwork::config::PolicyConfig;
use clockwork::gpu::profiles;
use clockwork::gpu::sim::{SimDevice, SimSettings};
use clockwork::time::{Clock, MS};
use serde_json::{json, Value};

/// The bare handler: parses the request, answers a response of the same shape.
async fn bare(body: web::Bytes) -> HttpResponse {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let data = request["inputs"][0]["data"].clone();
    HttpResponse::Ok().json(json!({
        "model_name": "zero", "model_version": "1",
        "parameters": {"emulated": true, "late": false, "batch_size": 1, "slo_ms": 100.0},
        "outputs": [{"name": "output", "datatype": "FP32", "shape": [1, 4], "data": data}]
    }))
}

#[derive(Default)]
struct Stats {
    latencies_us: Vec<u64>,
    errors: u64,
    /// CPU time the whole process (clients, servers, runtime) used meanwhile: on a busy
    /// machine latencies follow the other processes, the work per request does not.
    cpu: Duration,
}

/// CPU time (user and system) this process has used so far, from `/proc/self/stat`;
/// zero where that cannot be read.
fn cpu_time() -> Duration {
    let read = || -> Option<u64> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The fields after the command's name, from the third (the state) on.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        // utime and stime, the 14th and 15th fields, in ticks of 1/100 s (USER_HZ).
        let user: u64 = fields.get(11)?.parse().ok()?;
        let system: u64 = fields.get(12)?.parse().ok()?;
        Some(user + system)
    };
    Duration::from_millis(read().unwrap_or(0) * 10)
}

/// `concurrency` clients each calling `request` back to back for `seconds`; a request
/// returns whether it succeeded. Returns the latencies of the successes and the wall time.
async fn clients<F, R>(request: F, concurrency: usize, seconds: u64) -> (Stats, f64)
where
    F: Fn() -> R + Clone + 'static,
    R: std::future::Future<Output = bool> + 'static,
{
    let stats = Rc::new(RefCell::new(Stats::default()));
    let cpu = cpu_time();
    let start = Instant::now();
    let until = start + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (request, stats) = (request.clone(), stats.clone());
        tasks.push(actix_web::rt::spawn(async move {
            while Instant::now() < until {
                let sent = Instant::now();
                let ok = request().await;
                let mut s = stats.borrow_mut();
                if ok {
                    s.latencies_us.push(sent.elapsed().as_micros() as u64);
                } else {
                    s.errors += 1;
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let wall = start.elapsed().as_secs_f64();
    let mut stats = std::mem::take(&mut *stats.borrow_mut());
    stats.cpu = cpu_time().saturating_sub(cpu);
    (stats, wall)
}

/// `concurrency` clients posting `body` to `url` back to back for `seconds`.
async fn drive(url: String, body: Vec<u8>, concurrency: usize, seconds: u64) -> (Stats, f64) {
    let client = Rc::new(
        awc::Client::builder()
            .timeout(Duration::from_secs(10))
            .finish(),
    );
    let body = web::Bytes::from(body);
    let url = Rc::new(url);
    let request = move || {
        let (client, body, url) = (client.clone(), body.clone(), url.clone());
        async move {
            match client.post(url.as_str()).send_body(body).await {
                Ok(mut response) => response.body().await.is_ok() && response.status().is_success(),
                Err(_) => false,
            }
        }
    };
    clients(request, concurrency, seconds).await
}

/// The same requests sent to the controller directly, without HTTP: what the runtime
/// itself takes, so that the HTTP layer's share can be told apart.
async fn direct(
    controller: actix::Addr<clockwork::actors::Controller>,
    concurrency: usize,
    seconds: u64,
) -> (Stats, f64) {
    use clockwork::actors::messages::Infer;
    use clockwork::tensor::Tensor;
    let request = move || {
        let controller = controller.clone();
        async move {
            let inputs = vec![Tensor::from_f32("input", vec![4], &[1.0, 2.0, 3.0, 4.0])];
            let infer = Infer {
                model: "zero".into(),
                inputs,
                items: 1,
                slo: None,
                edge: None,
                root: None,
            };
            matches!(controller.send(infer).await, Ok(Ok(_)))
        }
    };
    clients(request, concurrency, seconds).await
}

fn percentile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64
}

/// What one phase measured.
struct Summary {
    p50: f64,
    p99: f64,
    rate: f64,
    /// CPU time of the whole process per successful request, µs.
    cpu_us: f64,
}

fn summary(name: &str, mut stats: Stats, wall: f64) -> Summary {
    stats.latencies_us.sort_unstable();
    let (p50, p99) = (
        percentile(&stats.latencies_us, 0.5),
        percentile(&stats.latencies_us, 0.99),
    );
    let ok = stats.latencies_us.len();
    let rate = ok as f64 / wall;
    let cpu_us = stats.cpu.as_secs_f64() * 1e6 / ok.max(1) as f64;
    println!(
        "{name:<10} {ok:>9} ok {:>5} errors   p50 {p50:>7.0} µs   p99 {p99:>7.0} µs   {rate:>8.0} req/s   cpu {cpu_us:>5.1} µs/req",
        stats.errors,
    );
    Summary {
        p50,
        p99,
        rate,
        cpu_us,
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let concurrency: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(16);
    let seconds: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    actix_web::rt::System::new().block_on(async move {
        let clock = Clock::start();
        let device = SimDevice::new(
            clock,
            SimSettings {
                profile: profiles::device("v100").expect("built-in"),
                pages: None,
                emulation: Default::default(),
            },
        );
        let spec = profiles::model("zero", "zero", 100 * MS).expect("built-in");
        let runtime = RuntimeBuilder::new(clock, PolicyConfig::default())
            .model(spec)
            .device(Box::new(device))
            .placement(Placement::Threads)
            .start()?;
        let state = ApiState::new(&runtime, ApiSettings::default())?;
        let served = HttpServer::new(move || api::app(state.clone()))
            .workers(1)
            .disable_signals()
            .bind("127.0.0.1:0")?;
        let served_at = served.addrs()[0];
        actix_web::rt::spawn(served.run());
        let plain = HttpServer::new(|| App::new().route("/infer", web::post().to(bare)))
            .workers(1)
            .disable_signals()
            .bind("127.0.0.1:0")?;
        let plain_at = plain.addrs()[0];
        actix_web::rt::spawn(plain.run());

        let body = serde_json::to_vec(&json!({
            "inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}]
        }))?;
        let clockwork_url = format!("http://{served_at}/v2/models/zero/infer");
        let bare_url = format!("http://{plain_at}/infer");
        // Warm up both (the first request loads the model).
        drive(clockwork_url.clone(), body.clone(), 2, 1).await;
        drive(bare_url.clone(), body.clone(), 2, 1).await;
        println!("concurrency {concurrency}, {seconds} s each, one HTTP worker per server");
        let (stats, wall) = drive(bare_url, body.clone(), concurrency, seconds).await;
        let bare = summary("bare", stats, wall);
        let (stats, wall) = drive(clockwork_url, body, concurrency, seconds).await;
        let ours = summary("clockwork", stats, wall);
        let (stats, wall) = direct(runtime.controller.clone(), concurrency, seconds).await;
        let actors = summary("no HTTP", stats, wall);
        println!(
            "HTTP layer's share of clockwork's p50: {:.0} µs of {:.0} µs (the rest is the controller and executor)",
            ours.p50 - actors.p50,
            ours.p50
        );
        println!(
            "ratio clockwork/bare: p50 {:.2}x  p99 {:.2}x  throughput {:.2}x  cpu per request {:.2}x",
            ours.p50 / bare.p50,
            ours.p99 / bare.p99,
            ours.rate / bare.rate,
            ours.cpu_us / bare.cpu_us
        );
        runtime.shutdown().await;
        anyhow::Ok(())
    })
}
