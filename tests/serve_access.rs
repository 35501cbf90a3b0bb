//! `clockwork serve` as a real process, for who may reach it and how: HTTPS with a
//! certificate made here and a client trusting only that certificate; tokens from the file
//! and from the environment, none of them in the log; a missing certificate stops the
//! start with a message naming it; idle and slow clients do not keep others from being
//! served in time, and are dropped.

mod serve_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serve_support::{spawn_until, Server};

fn tls(cert: &Path, key: &Path) -> String {
    format!(
        "[server.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
        cert.display(),
        key.display()
    )
}

/// A configuration of one emulated V100 serving `resnet50` and `mlp`, with `server` (TOML
/// of `[server.*]` tables) and an admin token.
fn config(dir: &Path, server: &str) -> PathBuf {
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"
{server}
[server.auth]
admin_tokens = ["file-admin-token"]

[[devices]]
backend = "sim"
profile = "v100"

[[models]]
name = "resnet50"
profile = "resnet50"

[[models]]
name = "mlp"
profile = "mlp-small"
slo = "100ms"
"#
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

/// Starts `clockwork serve --config <config>`; the address it announced and its log up to
/// then, or every line it wrote if it exited first.
fn spawn(config: &Path) -> (Server, Result<String, ()>, Vec<String>) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_clockwork"));
    command
        .args(["serve", "--config"])
        .arg(config)
        .env("RUST_LOG", "info")
        .env("CLOCKWORK_INFER_TOKENS", "env-user-token");
    spawn_until(command, "address=")
}

/// An HTTPS client that trusts `cert` alone.
fn client(cert: &rcgen::Certificate) -> awc::Client {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(cert.der().clone())
        .expect("trust the certificate");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_root_certificates(roots)
        .with_no_client_auth();
    awc::Client::builder()
        .connector(awc::Connector::new().rustls_0_23(Arc::new(tls)))
        .timeout(Duration::from_secs(10))
        .finish()
}

#[test]
fn serves_https_with_tokens_from_file_and_environment() {
    let dir = std::env::temp_dir().join(format!("clockwork-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pair = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, pair.cert.pem()).expect("cert");
    std::fs::write(&key, pair.signing_key.serialize_pem()).expect("key");
    let (server, address, log) = spawn(&config(&dir, &tls(&cert, &key)));
    let address = address.unwrap_or_else(|()| panic!("no address announced: {log:#?}"));
    let port = address.rsplit(':').next().expect("port");
    let base = format!("https://localhost:{port}");
    let log = log.join("\n");
    assert!(log.contains("https=true"), "{log}");
    assert!(!log.contains("-token"), "a token in the log: {log}");

    actix_web::rt::System::new().block_on(async {
        let client = client(&pair.cert);
        let ready = client.get(format!("{base}/v2/health/ready")).send().await;
        assert_eq!(ready.expect("HTTPS").status().as_u16(), 200);
        let infer = format!("{base}/v2/models/resnet50/infer");
        let status = |token: Option<&'static str>| {
            let mut request = client.post(&infer);
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            async move {
                request
                    .send_body("{}")
                    .await
                    .expect("HTTPS")
                    .status()
                    .as_u16()
            }
        };
        assert_eq!(status(None).await, 401);
        assert_eq!(status(Some("wrong")).await, 403);
        // Past the check, the body is wrong: the token from the environment was accepted,
        // and so is the admin token of the file.
        assert_eq!(status(Some("env-user-token")).await, 400);
        assert_eq!(status(Some("file-admin-token")).await, 400);
    });
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_certificate_stops_the_start() {
    let dir = std::env::temp_dir().join(format!("clockwork-notls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let missing = dir.join("absent-cert.pem");
    let (mut server, address, log) = spawn(&config(&dir, &tls(&missing, &missing)));
    assert!(address.is_err(), "started without its certificate: {log:?}");
    let exit = server.0.wait().expect("exit");
    assert!(!exit.success());
    let log = log.join("\n");
    assert!(log.contains("absent-cert.pem"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Opens a connection to `address` and writes `sent` (then says nothing more).
fn stalled(address: &str, sent: &str) -> TcpStream {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream.write_all(sent.as_bytes()).expect("write");
    stream
}

/// What the server sent on `stream` before closing it (or within 5 s).
fn answer_of(mut stream: TcpStream) -> String {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// One inference on a fresh connection (with the inference token `spawn` sets): its
/// status, how long it took the client and how long the server held it (`Server-Timing`).
fn infer(address: &str) -> (u16, Duration, Duration) {
    let body = serde_json::json!({
        "inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": vec![0.5; 64]}]
    })
    .to_string();
    let started = Instant::now();
    let mut stream = TcpStream::connect(address).expect("connect");
    write!(
        stream,
        "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer env-user-token\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let answer = answer_of(stream);
    let took = started.elapsed();
    let status = answer.split_whitespace().nth(1).unwrap_or("0");
    let held_ms: f64 = answer
        .split("edge;dur=")
        .nth(1)
        .and_then(|rest| rest.split([',', '\r']).next())
        .and_then(|ms| ms.trim().parse().ok())
        .unwrap_or(f64::INFINITY);
    let held = Duration::from_secs_f64(held_ms.min(1e6) / 1000.0);
    (status.parse().unwrap_or(0), took, held)
}

/// 300 connections that are idle, stuck in their headers or stuck in their body: another
/// client is still answered within its 100 ms objective, and the server drops the stuck
/// ones (408 for headers not received in time, 503 for an inference body that came too
/// slowly to be answered in time, a close for the idle ones).
#[test]
fn idle_and_slow_clients_do_not_hold_the_server() {
    let dir = std::env::temp_dir().join(format!("clockwork-slow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let limits = "[server.connections]\nrequest_head_timeout = \"1s\"\nkeep_alive = \"1s\"\n";
    let (server, address, log) = spawn(&config(&dir, limits));
    let address = address.unwrap_or_else(|()| panic!("no address announced: {log:#?}"));
    // The first answer waits for the model's weights to reach the device: a cold start,
    // not what is measured here.
    assert_eq!(infer(&address).0, 200);
    let head =
        "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer env-user-token\r\n";
    let body_head = format!("{head}Content-Length: 100000\r\n\r\n{{\"inputs\": [");
    let mut stuck = Vec::new();
    for i in 0..300 {
        let sent = match i % 3 {
            0 => "",
            1 => head,
            _ => body_head.as_str(),
        };
        stuck.push((i % 3, stalled(&address, sent)));
    }
    // The stalled bodies' time to come runs out (a 100 ms objective): they are refused
    // while reading, and the timed requests come after, while the headers and the idle
    // connections still stall (1 s). A body the client did not send in time must not make
    // the server shed others' requests to the model (mutation that breaks it: reading
    // refusals counted in `shed::Throttle`, in `Front::refuse`); the wait also lets this
    // busy machine's scheduling of the 300 accepts pass, which the HTTP worker's lag
    // counts against a request's time (a refusal `front_end_behind` otherwise).
    std::thread::sleep(Duration::from_millis(200));
    // The server's own time (Server-Timing) is held to the objective for every answer;
    // the client's, which adds this busy test machine's scheduling of 300 accepts, at
    // the median.
    let objective = Duration::from_millis(100);
    let mut took = Vec::new();
    for _ in 0..20 {
        let (status, client, server) = infer(&address);
        assert_eq!(status, 200, "refused while others stall");
        assert!(server < objective, "held {server:?}");
        took.push(client);
    }
    took.sort();
    assert!(
        took[took.len() / 2] < objective,
        "client latencies {took:?}"
    );
    // Every connection was counted as accepted: the first inference, the 300 stalled,
    // the 20 timed and this one (mutation that breaks it: `on_connect` left out in
    // `serve::run`, the series stays at zero).
    let metrics = answer_of(stalled(
        &address,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ));
    let accepted: u64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("clockwork_http_connections_total ")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0);
    assert!(accepted >= 322, "{accepted} connections counted");
    let answers: Vec<(usize, String)> = stuck
        .into_iter()
        .take(3)
        .map(|(kind, stream)| (kind, answer_of(stream)))
        .collect();
    for (kind, answer) in answers {
        match kind {
            0 => assert!(answer.is_empty() || answer.contains(" 408 "), "{answer}"),
            1 => assert!(answer.contains(" 408 "), "{answer}"),
            _ => assert!(answer.contains(" 503 "), "{answer}"),
        }
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
