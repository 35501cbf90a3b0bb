//! Shared by the `serve_*` tests: `clockwork serve` as a real process, killed when the
//! test ends, and what it announced in its log.

#![allow(dead_code)] // each test file uses its own part

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Kills the server if the test fails half-way.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `command` (a `clockwork serve`, its log on stderr); the value after `key` (up
/// to the next space) on the first line of its log that has it, and the log up to then,
/// or every line it wrote if it exited first (or said nothing of it for 120 s).
pub fn spawn_until(mut command: Command, key: &str) -> (Server, Result<String, ()>, Vec<String>) {
    let child = command
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
            return (server, Err(()), seen);
        };
        if let Some(rest) = line.split(key).nth(1) {
            let value = rest.split_whitespace().next().unwrap_or_default();
            let value = value.to_owned();
            seen.push(line);
            return (server, Ok(value), seen);
        }
        seen.push(line);
    }
}
