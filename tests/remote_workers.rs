//! Remote workers as real processes on 127.0.0.1: a controller with no devices of its
//! own and two `clockwork worker`s with one sim device each, under HTTP load.
//!
//! - One worker is SIGKILLed mid-run: every request gets exactly one answer, none late
//!   and none failed (its batches are re-planned on the survivor or refused), the survivor
//!   serves what comes after, and the killed worker rejoins when restarted.
//! - One worker sits behind a proxy that delays each way: the controller's estimate of
//!   its round trip follows the delay, and nothing is late.

mod remote_support;

use std::time::{Duration, Instant};

use remote_support::*;

const SLO_MS: u64 = 100;

fn controller_config(cluster_port: u16) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\n[cluster]\nlisten = \"127.0.0.1:{cluster_port}\"\ntoken = \"t0k3n\"\nwait_for_devices = 2\n\n[[models]]\nname = \"mlp-small\"\nprofile = \"mlp-small\"\n"
    )
}

/// Starts a controller and waits until `workers` have joined and the model is ready.
fn ready_cluster(address: &str) {
    wait_ok(address, "/v2/health/ready", Duration::from_secs(20));
    wait_ok(
        address,
        "/v2/models/mlp-small/ready",
        Duration::from_secs(20),
    );
}

/// What the load saw, as counts.
fn summary(sent: &[Sent]) -> String {
    let count = |f: &dyn Fn(&Sent) -> bool| sent.iter().filter(|s| f(s)).count();
    format!(
        "{} sent, {} ok, {} refused (503), {} failed (5xx other), {} unanswered, {} late",
        sent.len(),
        count(&|s| s.status == 200),
        count(&|s| s.status == 503),
        count(&|s| s.status >= 500 && s.status != 503),
        count(&|s| s.status == 0),
        count(&|s| s.late),
    )
}

/// The process tests run one at a time: each times its answers against an objective.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn a_killed_worker_loses_nothing_and_rejoins() {
    let _one = serial();
    let cluster = format!("127.0.0.1:{}", free_port());
    let port: u16 = cluster.rsplit(':').next().unwrap().parse().unwrap();
    let (_controller, address, log) = controller(&controller_config(port));
    assert_eq!(
        http(&address, "GET", "/v2/health/ready", "").unwrap().0,
        503,
        "not ready before the workers' devices joined"
    );
    let (mut w1, _l1) = worker("w1", &cluster);
    let (_w2, _l2) = worker("w2", &cluster);
    ready_cluster(&address);

    let load = Load::start(&address, 4, SLO_MS);
    std::thread::sleep(Duration::from_millis(1500));
    let killed_at = load.start.elapsed();
    w1.kill();
    // The controller takes its devices out (not only its watchdog's suspicion) at once.
    let left = wait_for_line(&log, "worker's devices left", Duration::from_secs(2));
    assert!(left.contains("worker=w1"), "{left}");
    std::thread::sleep(Duration::from_millis(2500));
    let restarted_at = load.start.elapsed();
    let (_w1, l1) = worker("w1", &cluster);
    wait_for_line(&l1, "connected to the controller", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(1000));
    let sent = load.stop();
    let report = summary(&sent);
    eprintln!("{report}; killed at {killed_at:?}, restarted at {restarted_at:?}");

    assert!(sent.len() > 100, "{report}");
    assert!(
        sent.iter().all(|s| s.status != 0),
        "every request answered: {report}"
    );
    assert!(sent.iter().all(|s| !s.late), "none late: {report}");
    let failed = sent
        .iter()
        .filter(|s| s.status >= 500 && s.status != 503)
        .count();
    assert_eq!(failed, 0, "re-planned or refused, never failed: {report}");
    for s in sent.iter().filter(|s| s.status == 200) {
        assert!(
            s.latency <= Duration::from_millis(SLO_MS + 50),
            "an answer in time reaches the client in time: {s:?}"
        );
    }
    // Loss is noticed within a second of silence; after that the survivor serves.
    let survivor = sent
        .iter()
        .filter(|s| s.at > killed_at + Duration::from_millis(1300) && s.at < restarted_at)
        .filter(|s| s.status == 200)
        .count();
    assert!(
        survivor > 20,
        "the survivor takes the load: {survivor} ok; {report}"
    );
    // Server side: exactly one answer per request, none late.
    assert_eq!(
        metric(
            &address,
            "clockwork_requests{model=\"mlp-small\",outcome=\"late\"}"
        ),
        0.0
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(&address, "clockwork_workers_connected") < 2.0 {
        assert!(Instant::now() < deadline, "the restarted worker rejoins");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        metric(&address, "clockwork_worker_losses_total{worker=\"w1\"}"),
        1.0
    );
    assert_eq!(
        metric(&address, "clockwork_worker_losses_total{worker=\"w2\"}"),
        0.0
    );
}

#[test]
fn the_round_trip_follows_a_delaying_proxy_and_nothing_is_late() {
    let _one = serial();
    let port = free_port();
    let cluster = format!("127.0.0.1:{port}");
    let (_controller, address, _log) = controller(&controller_config(port));
    let delay = Duration::from_millis(15);
    let proxy = delaying_proxy(cluster.clone(), delay);
    let (_w1, _l1) = worker("near", &cluster);
    let (_w2, _l2) = worker("far", &format!("127.0.0.1:{proxy}"));
    ready_cluster(&address);
    let load = Load::start(&address, 4, SLO_MS);
    std::thread::sleep(Duration::from_millis(2500));
    let sent = load.stop();
    let report = summary(&sent);
    let far = metric(
        &address,
        "clockwork_worker_round_trip_seconds{worker=\"far\"}",
    );
    let near = metric(
        &address,
        "clockwork_worker_round_trip_seconds{worker=\"near\"}",
    );
    eprintln!("{report}; round trip near {near} s, far {far} s (injected {delay:?} each way)");
    let injected = 2.0 * delay.as_secs_f64();
    assert!(
        far >= injected && far < injected + 0.010,
        "far round trip {far} s"
    );
    assert!(near < 0.005, "near round trip {near} s");
    assert!(sent.iter().all(|s| s.status != 0 && !s.late), "{report}");
    let failed = sent
        .iter()
        .filter(|s| s.status >= 500 && s.status != 503)
        .count();
    assert_eq!(failed, 0, "{report}");
}

#[test]
fn a_worker_with_the_wrong_token_is_refused_with_the_reason() {
    let _one = serial();
    let port = free_port();
    let (_controller, _address, log) = controller(&controller_config(port));
    let config = temp_file(
        "bad.toml",
        "[[devices]]\nbackend = \"sim\"\nprofile = \"v100\"\n[cluster]\ntoken = \"wrong\"\n",
    );
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_clockwork"))
        .args([
            "worker",
            "--controller",
            &format!("127.0.0.1:{port}"),
            "--config",
        ])
        .arg(&config)
        .env_remove("CLOCKWORK_CLUSTER_TOKEN")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the worker");
    let status = child.wait().expect("the worker exits");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    assert!(stderr.contains("token"), "{stderr}");
    wait_for_line(&log, "worker not joined", Duration::from_secs(5));
}

/// Waits (bounded) until the controller's `series` reads `value`.
fn until_metric(address: &str, series: &str, value: f64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let now = metric(address, series);
        if now == value {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{series} stayed at {now}, not {value}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A worker's device that hangs is taken out (the watchdog's `hung`: the LOAD it was sent
/// as it joined never reports); when the worker is then killed, its device leaves the
/// pool and is no longer counted out of service.
///
/// Mutation that breaks it: `lose_device` leaving the device's outage as it was (the
/// gauge stays at 1 for good).
#[test]
fn a_device_out_of_service_that_leaves_is_no_longer_counted_out() {
    let _one = serial();
    let cluster = format!("127.0.0.1:{}", free_port());
    let port: u16 = cluster.rsplit(':').next().unwrap().parse().unwrap();
    let config = controller_config(port).replace("wait_for_devices = 2", "wait_for_devices = 1");
    let (_controller, address, log) = controller(&config);
    // w1 alone first, its device hanging from the start: the model's LOAD goes to it.
    let hangs = "\n[devices.faults]\nhang = { from = \"0s\" }\n";
    let (mut w1, _l1) = worker_with("w1", &cluster, hangs);
    until_metric(
        &address,
        "clockwork_devices_out",
        1.0,
        Duration::from_secs(10),
    );
    let (_w2, _l2) = worker("w2", &cluster);
    ready_cluster(&address);
    w1.kill();
    let left = wait_for_line(&log, "worker's devices left", Duration::from_secs(5));
    assert!(left.contains("worker=w1"), "{left}");
    until_metric(
        &address,
        "clockwork_devices_out",
        0.0,
        Duration::from_secs(5),
    );
    assert_eq!(
        metric(&address, "clockwork_device_outages{cause=\"hung\"}"),
        1.0
    );
}
