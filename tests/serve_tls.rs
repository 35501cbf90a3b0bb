//! `clockwork serve` with `[server.tls]` and `[server.auth]` as a real process: HTTPS with
//! a certificate made here, a client trusting only that certificate, tokens from the file
//! and from the environment, none of them in the log; a missing certificate stops the
//! start with a message naming it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Kills the server if the test fails half-way.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn config(dir: &Path, cert: &Path, key: &Path) -> PathBuf {
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"
[server.tls]
cert = "{}"
key = "{}"
[server.auth]
admin_tokens = ["file-admin-token"]

[[devices]]
backend = "sim"
profile = "v100"

[[models]]
name = "resnet50"
profile = "resnet50"
"#,
        cert.display(),
        key.display()
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

/// Starts `clockwork serve --config <config>`; the address it announced and its log up to
/// then, or every line it wrote if it exited first.
fn spawn(config: &Path) -> (Server, Result<String, ()>, Vec<String>) {
    let child = Command::new(env!("CARGO_BIN_EXE_clockwork"))
        .args(["serve", "--config"])
        .arg(config)
        .env("RUST_LOG", "info")
        .env("CLOCKWORK_INFER_TOKENS", "env-user-token")
        .stderr(Stdio::piped())
        .spawn()
        .expect("start clockwork serve");
    let mut server = Server(child);
    let stderr = server.0.stderr.take().expect("stderr");
    let (lines, log) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = log.recv_timeout(left) else {
            return (server, Err(()), seen); // exited (or silent past the deadline)
        };
        if let Some(rest) = line.split("address=").nth(1) {
            let address = rest.split_whitespace().next().unwrap_or_default();
            let address = address.to_owned();
            seen.push(line);
            return (server, Ok(address), seen);
        }
        seen.push(line);
    }
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
    let (server, address, log) = spawn(&config(&dir, &cert, &key));
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
    let (mut server, address, log) = spawn(&config(&dir, &missing, &missing));
    assert!(address.is_err(), "started without its certificate: {log:?}");
    let exit = server.0.wait().expect("exit");
    assert!(!exit.success());
    let log = log.join("\n");
    assert!(log.contains("absent-cert.pem"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
