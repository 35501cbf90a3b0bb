//! The connections of `clockwork serve`, a real process: its gRPC port against clients
//! that open connections and say nothing (each closed when it has not sent HTTP/2's
//! preface within `request_head_timeout`, at most `grpc_max_connections` served at once,
//! and a process out of file descriptors accepting again once some are freed, where the
//! port used to close for good), and the open-file limit it raises at start.

mod serve_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clockwork::api::grpc::proto::grpc_inference_service_client::GrpcInferenceServiceClient;
use clockwork::api::grpc::proto::ServerLiveRequest;
use serve_support::{spawn_until, Server};

/// One emulated V100 serving `mlp`, gRPC on, with `connections` (TOML lines of
/// `[server.connections]`).
fn config(name: &str, connections: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("clockwork-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"
grpc_listen = "127.0.0.1:0"

[server.connections]
{connections}

[[devices]]
backend = "sim"
profile = "v100"

[[models]]
name = "mlp"
profile = "mlp-small"
"#
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

/// Starts the server under `sh` after `ulimit <limit>` (`-n 256`: at most 256 file
/// descriptors); its gRPC address and its log.
fn spawn(config: &Path, limit: &str) -> (Server, String, Vec<String>) {
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!(
            "ulimit {limit} && exec \"$0\" serve --config \"$1\""
        ))
        .arg(env!("CARGO_BIN_EXE_clockwork"))
        .arg(config)
        .env("RUST_LOG", "info");
    let (server, address, log) = spawn_until(command, "grpc=");
    let address = address.unwrap_or_else(|()| panic!("no gRPC address announced: {log:#?}"));
    (server, address, log)
}

/// Connections that send half of HTTP/2's preface and then nothing.
fn silent(address: &str, n: usize) -> Vec<TcpStream> {
    let address: std::net::SocketAddr = address.parse().expect("an address");
    let open = |_| {
        let connected = TcpStream::connect_timeout(&address, Duration::from_secs(5));
        let mut stream = connected.expect("the gRPC port takes the connection");
        stream
            .write_all(b"PRI * HTTP/2.0\r\n")
            .expect("half a preface");
        stream
    };
    (0..n).map(open).collect()
}

/// How long a `ServerLive` call took on a new connection, or why it failed.
fn live(address: &str) -> Result<Duration, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let began = Instant::now();
    runtime.block_on(async {
        let call = async {
            let url = format!("http://{address}");
            let mut client = GrpcInferenceServiceClient::connect(url).await?;
            client.server_live(ServerLiveRequest {}).await?;
            Ok::<_, Box<dyn std::error::Error>>(())
        };
        match tokio::time::timeout(Duration::from_secs(10), call).await {
            Ok(Ok(())) => Ok(began.elapsed()),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err("no answer in 10 s".into()),
        }
    })
}

#[test]
fn a_port_out_of_descriptors_serves_again_once_silent_clients_are_closed() {
    let config = config("grpc-fds", "request_head_timeout = \"1s\"");
    let (server, address, _) = spawn(&config, "-n 256");
    live(&address).expect("served before");
    // More silent connections than the process has descriptors: its accepts fail.
    let mut stuck = silent(&address, 400);
    std::thread::sleep(Duration::from_millis(500));
    // Each is closed once its second is over, which frees descriptors for the next (those
    // left in the listen backlog are accepted then, and closed a second later).
    let mut first = stuck.swap_remove(0);
    first
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    // The server's own preface (its settings) comes first, then the close.
    let mut closed = first.read(&mut [0u8; 256]);
    while matches!(closed, Ok(n) if n > 0) {
        closed = first.read(&mut [0u8; 256]);
    }
    let reset = |e: &std::io::Error| e.kind() == std::io::ErrorKind::ConnectionReset;
    assert!(
        matches!(&closed, Ok(0)) || closed.as_ref().is_err_and(reset),
        "a silent connection is closed: {closed:?}"
    );
    std::thread::sleep(Duration::from_millis(2500));
    // Mutation that breaks it: an accept error ending the incoming stream (as tonic's
    // own listener stream did): the port is closed, the call refused.
    let took = live(&address).expect("the port serves again");
    assert!(took < Duration::from_secs(5), "{took:?}");
    drop(stuck);
    drop(server);
}

#[test]
fn at_most_grpc_max_connections_are_served_at_once() {
    let limits = "request_head_timeout = \"1s\"\ngrpc_max_connections = 2";
    let config = config("grpc-max", limits);
    let (server, address, _) = spawn(&config, "-n 1024");
    live(&address).expect("served before");
    std::thread::sleep(Duration::from_millis(200));
    // Two silent connections fill the port: a call waits until one is closed (1 s).
    // Mutation that breaks it: the bound left out (the call answered at once).
    let stuck = silent(&address, 2);
    std::thread::sleep(Duration::from_millis(100));
    let took = live(&address).expect("served once a place frees");
    assert!(took >= Duration::from_millis(700), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    drop(stuck);
    drop(server);
}

/// The soft and hard open-file limits of process `pid`, as /proc shows them.
fn open_files(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("an open-files line");
    let mut values = line["Max open files".len()..].split_whitespace();
    let soft = values.next().expect("soft").to_owned();
    (soft, values.next().expect("hard").to_owned())
}

#[test]
fn the_soft_open_file_limit_is_raised_to_the_hard_one() {
    let config = config("files", "");
    // A soft limit below the connection bounds, the hard one left as it is.
    let (server, address, log) = spawn(&config, "-S -n 256");
    live(&address).expect("served");
    let (soft, hard) = open_files(server.0.id());
    // Mutation that breaks it: `files::raise` not called in `serve::run`.
    assert_eq!(soft, hard, "raised: {log:#?}");
    let said = log
        .iter()
        .any(|l| l.contains("open files: the process may hold"));
    assert!(said, "the limit is logged: {log:#?}");
    drop(server);
}
