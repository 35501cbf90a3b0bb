//! Helpers of the remote-worker process tests: a controller and workers as real
//! processes, a minimal HTTP client, HTTP load that records every answer, and a TCP proxy
//! that delays every byte by a fixed time each way (netem is not available here).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// A child process killed when dropped (a failed test leaves nothing running).
pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Process {
    /// SIGKILL, as a crashed machine.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free port on 127.0.0.1 (bound and released: the caller binds it next).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    listener.local_addr().expect("bound address").port()
}

/// A file in a fresh temporary directory of this test process.
pub fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("clockwork-remote-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write temp file");
    path
}

/// Starts `clockwork <args>`; its log lines go to the returned channel.
pub fn start(args: &[&str]) -> (Process, mpsc::Receiver<String>) {
    let child = Command::new(env!("CARGO_BIN_EXE_clockwork"))
        .args(args)
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("start clockwork");
    let mut process = Process(child);
    let stderr = process.0.stderr.take().expect("stderr piped");
    let (lines, log) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    (process, log)
}

/// Waits for the log line containing `what` and answers it.
pub fn wait_for_line(log: &mpsc::Receiver<String>, what: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = log
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no log line with '{what}'"));
        if line.contains(what) {
            return line;
        }
    }
}

/// The controller: `clockwork serve` with `config`; answers its HTTP address.
pub fn controller(config: &str) -> (Process, String, mpsc::Receiver<String>) {
    let path = temp_file("controller.toml", config);
    let (process, log) = start(&["serve", "--config", path.to_str().expect("utf-8 path")]);
    let line = wait_for_line(&log, "listening", Duration::from_secs(60));
    let address = line
        .split("address=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("listening line names the address")
        .to_owned();
    (process, address, log)
}

/// A worker named `name` with one sim device and the tests' token, dialling `controller`.
pub fn worker(name: &str, controller: &str) -> (Process, mpsc::Receiver<String>) {
    worker_with(name, controller, "")
}

/// As [`worker`], with `device` appended to its device group's configuration (a
/// `[devices.faults]` table, say).
pub fn worker_with(
    name: &str,
    controller: &str,
    device: &str,
) -> (Process, mpsc::Receiver<String>) {
    let config = temp_file(
        &format!("{name}.toml"),
        &format!(
            "[cluster]\ntoken = \"t0k3n\"\n\n[[devices]]\nbackend = \"sim\"\nprofile = \"v100\"\n{device}"
        ),
    );
    start(&[
        "worker",
        "--controller",
        controller,
        "--name",
        name,
        "--config",
        config.to_str().expect("utf-8 path"),
    ])
}

/// One HTTP exchange with `Connection: close`: (status, body).
pub fn http(address: &str, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    Ok((code, body))
}

/// Waits until `path` answers 200.
pub fn wait_ok(address: &str, path: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if matches!(http(address, "GET", path, ""), Ok((200, _))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{path} never answered 200");
}

/// The value of a metric line starting with `series` (0 if absent).
pub fn metric(address: &str, series: &str) -> f64 {
    let (_, text) = http(address, "GET", "/metrics", "").expect("metrics");
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// One request's fate, as the client saw it.
#[derive(Clone, Debug)]
pub struct Sent {
    /// When it was sent, from the start of the load.
    pub at: Duration,
    pub latency: Duration,
    /// 0: no HTTP answer at all.
    pub status: u16,
    /// The answer said `late`.
    pub late: bool,
}

/// A body for the built-in `mlp-small` with objective `slo_ms`.
pub fn mlp_body(slo_ms: u64) -> String {
    let data = vec!["0.5"; 64].join(",");
    format!(
        "{{\"parameters\":{{\"slo_ms\":{slo_ms}}},\"inputs\":[{{\"name\":\"input\",\"shape\":[1,64],\"datatype\":\"FP32\",\"data\":[{data}]}}]}}"
    )
}

/// Closed-loop HTTP load from `clients` threads until `stop` is set.
pub struct Load {
    pub sent: Arc<Mutex<Vec<Sent>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    pub start: Instant,
}

impl Load {
    pub fn start(address: &str, clients: usize, slo_ms: u64) -> Self {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let start = Instant::now();
        let threads = (0..clients)
            .map(|_| {
                let (sent, stop, address) =
                    (Arc::clone(&sent), Arc::clone(&stop), address.to_owned());
                std::thread::spawn(move || {
                    let body = mlp_body(slo_ms);
                    while !stop.load(Ordering::Relaxed) {
                        let at = start.elapsed();
                        let answer = http(&address, "POST", "/v2/models/mlp-small/infer", &body);
                        let latency = start.elapsed() - at;
                        let (status, late) = match answer {
                            Ok((status, body)) => (status, body.contains("\"late\":true")),
                            Err(_) => (0, false),
                        };
                        sent.lock().unwrap().push(Sent {
                            at,
                            latency,
                            status,
                            late,
                        });
                        std::thread::sleep(Duration::from_millis(2));
                    }
                })
            })
            .collect();
        Self {
            sent,
            stop,
            threads,
            start,
        }
    }

    pub fn stop(self) -> Vec<Sent> {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            let _ = thread.join();
        }
        let sent = self.sent.lock().unwrap().clone();
        sent
    }
}

/// A TCP proxy on a free port to `upstream` that delays every byte by `delay` each way.
pub fn delaying_proxy(upstream: String, delay: Duration) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
    let port = listener.local_addr().expect("proxy address").port();
    std::thread::spawn(move || {
        for client in listener.incoming().map_while(Result::ok) {
            let Ok(server) = TcpStream::connect(&upstream) else {
                continue;
            };
            let _ = (client.set_nodelay(true), server.set_nodelay(true));
            let (c2, s2) = (
                client.try_clone().expect("clone"),
                server.try_clone().expect("clone"),
            );
            pipe(client, s2, delay);
            pipe(server, c2, delay);
        }
    });
    port
}

/// Copies `from` to `to`, each chunk sent `delay` after it was read, in order.
fn pipe(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (chunks, due) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buffer = vec![0u8; 64 << 10];
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if chunks
                        .send((Instant::now() + delay, buffer[..n].to_vec()))
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    });
    std::thread::spawn(move || {
        for (at, chunk) in due {
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            if to.write_all(&chunk).is_err() {
                return;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Both);
    });
}
