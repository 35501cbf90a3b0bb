//! `clockwork serve` as a real process: it listens on the port the OS gave it, answers
//! its health routes, and exits 0 on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"

[[devices]]
backend = "sim"
profile = "v100"

[[models]]
name = "resnet50"
profile = "resnet50"
"#;

/// Kills the server if the test fails half-way.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
    }
}

fn status(address: &str, path: &str) -> u16 {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let code = response.split_whitespace().nth(1).expect("status line");
    code.parse().expect("numeric status")
}

#[test]
fn serves_health_and_exits_cleanly_on_sigterm() {
    let config = std::env::temp_dir().join(format!("clockwork-serve-{}.toml", std::process::id()));
    std::fs::write(&config, CONFIG).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_clockwork"))
        .args(["serve", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("start clockwork serve");
    let mut server = Server(child);

    // The log line "listening address=..." names the port; read the log on a thread so a
    // silent server fails the test instead of hanging it.
    let stderr = server.0.stderr.take().unwrap();
    let (found, address) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("address=").nth(1) {
                let _ = found.send(
                    rest.split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_owned(),
                );
            }
        }
    });
    let address = address
        .recv_timeout(Duration::from_secs(30))
        .expect("server announces its address");

    assert_eq!(status(&address, "/v2/health/live"), 200);
    assert_eq!(status(&address, "/v2/health/ready"), 200);
    assert_eq!(status(&address, "/v2/nothing-here"), 404);

    let pid = server.0.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let exit = loop {
        if let Some(exit) = server.0.try_wait().unwrap() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "server did not stop after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "clean shutdown exits 0, got {exit}");
    let _ = std::fs::remove_file(config);
}
