//! `clockwork serve` as a real process: it listens on the port the OS gave it, answers
//! its health routes, and exits 0 on SIGTERM.

mod serve_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serve_support::{spawn_until, Server};

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

/// Starts `clockwork serve` with `args` in `cwd`; returns it with the address it
/// announced and its log up to then (read on a thread, so a silent server fails the test
/// instead of hanging it).
fn spawn(args: &[&str], cwd: &Path) -> (Server, String, Vec<String>) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_clockwork"));
    command
        .arg("serve")
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "info");
    let (server, address, startup) = spawn_until(command, "address=");
    let address = address.unwrap_or_else(|()| panic!("no address announced: {startup:#?}"));
    (server, address, startup)
}

/// SIGTERM, then the exit status must be 0.
fn terminate(mut server: Server) {
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
}

#[test]
fn serves_health_and_exits_cleanly_on_sigterm() {
    let config = std::env::temp_dir().join(format!("clockwork-serve-{}.toml", std::process::id()));
    std::fs::write(&config, CONFIG).unwrap();
    let path = config.to_str().unwrap();
    let (server, address, _log) = spawn(&["--config", path], &std::env::temp_dir());
    assert_eq!(status(&address, "/v2/health/live"), 200);
    assert_eq!(status(&address, "/v2/health/ready"), 200);
    assert_eq!(status(&address, "/v2/nothing-here"), 404);
    terminate(server);
    let _ = std::fs::remove_file(config);
}

/// POSTs a JSON body; answers the status and the parsed JSON answer.
fn post_json(address: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let code = response.split_whitespace().nth(1).expect("status line");
    let json = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    (
        code.parse().expect("numeric status"),
        serde_json::from_str(json).unwrap_or(serde_json::Value::Null),
    )
}

/// The README's first command: `clockwork serve` on the repository's config.toml, on a
/// fresh directory, writes the zoo, profiles it and serves real outputs over HTTP (equal
/// to tract's, run here directly, within ONNX Runtime's rounding where `auto` chose it); a
/// restart reuses the stored profiles.
#[test]
fn the_default_config_serves_the_zoo_with_real_outputs() {
    let cwd = std::env::temp_dir().join(format!("clockwork-default-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cwd);
    std::fs::create_dir_all(&cwd).unwrap();
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.toml");
    let args = [
        "--config",
        config.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ];
    let (server, address, log) = spawn(&args, &cwd);
    executors_share_their_devices_cores(server.0.id(), &log);
    auto_chose_the_runtime_found(server.0.id(), &log);
    let input: Vec<f32> = (0..256).map(|i| (i as f32 / 128.0) - 1.0).collect();
    // A slack objective: this test checks what is computed, not how fast (a cold load
    // on a busy test machine could miss the mlp's own 50 ms and be refused).
    let body = serde_json::json!({
        "parameters": {"slo_ms": 10000},
        "inputs": [{"name": "input", "shape": [1, 256], "datatype": "FP32", "data": input}]
    });
    let (code, answer) = post_json(&address, "/v2/models/mlp/infer", &body.to_string());
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["parameters"]["emulated"], false, "{answer}");
    let served: Vec<f32> = answer["outputs"][0]["data"]
        .as_array()
        .expect("output data")
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    let direct = tract_mlp(&cwd.join("models/mlp/1/model.onnx"), &input);
    assert_eq!(served.len(), 10);
    for (s, d) in served.iter().zip(&direct) {
        assert!(
            (s - d).abs() <= 1e-5 + 1e-4 * d.abs(),
            "{served:?} vs {direct:?}"
        );
    }
    terminate(server);

    let (server, _, startup) = spawn(&args, &cwd);
    let stored = startup
        .iter()
        .filter(|line| line.contains("model prepared") && line.contains("stored"))
        .count();
    let zoo = clockwork::repository::zoo::MODELS.len();
    assert_eq!(stored, zoo, "the restart reuses every stored profile");
    terminate(server);
    let _ = std::fs::remove_dir_all(&cwd);
}

/// Each pinned cpu (or ort) device's executor thread runs on the device's core, not on the front
/// end's (read from the system: each thread's name and allowed cores). Nothing to check
/// where the machine has too few cores to pin the devices (the `cores:` line says).
fn executors_share_their_devices_cores(pid: u32, log: &[String]) {
    let cores = log
        .iter()
        .find_map(|line| line.split("device_cores=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the start-up log names the devices' cores");
    if cores.split(',').any(|c| c.parse::<usize>().is_err()) {
        return;
    }
    // The allowed cores of each thread whose name `named` accepts, sorted.
    let allowed = |named: &dyn Fn(&str) -> bool| -> Vec<String> {
        let mut found = Vec::new();
        for (name, task) in threads(pid) {
            if !named(&name) {
                continue;
            }
            let status = std::fs::read_to_string(task.join("status")).unwrap_or_default();
            let list = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .expect("status names the allowed cores");
            found.push(list.trim().to_owned());
        }
        found.sort();
        found
    };
    // tract's or ONNX Runtime's, whichever `backend = "auto"` chose here.
    let devices =
        allowed(&|name| name.starts_with("cpu-device-") || name.starts_with("ort-device-"));
    let mut expected: Vec<String> = cores.split(',').map(str::to_owned).collect();
    expected.sort();
    assert_eq!(devices, expected, "each device on its own core");
    assert_eq!(
        allowed(&|name| name == "executor"),
        devices,
        "each executor on its device's core"
    );
}

/// Each thread of process `pid`: its name and its `/proc` directory.
fn threads(pid: u32) -> Vec<(String, std::path::PathBuf)> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .map(|task| {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            (comm.trim_end().to_owned(), task.path())
        })
        .collect()
}

/// `backend = "auto"` runs ONNX Runtime where its library is named (`ORT_DYLIB_PATH`, as
/// CI sets it), tract elsewhere, and says so: read from the device threads' names.
fn auto_chose_the_runtime_found(pid: u32, log: &[String]) {
    let ort = std::env::var_os("ORT_DYLIB_PATH").is_some_and(|p| Path::new(&p).is_file());
    let (said, thread) = if ort {
        ("runs ONNX Runtime (ort)", "ort-device-0")
    } else {
        ("runs tract (cpu)", "cpu-device-0")
    };
    assert!(
        log.iter().any(|line| line.contains(said)),
        "the start-up log says `auto` {said}: {log:?}"
    );
    let names: Vec<String> = threads(pid).into_iter().map(|(name, _)| name).collect();
    assert!(
        names.iter().any(|n| n == thread),
        "a thread {thread}: {names:?}"
    );
}

/// The zoo's mlp run by tract directly on one item.
fn tract_mlp(model: &Path, input: &[f32]) -> Vec<f32> {
    use tract_onnx::prelude::*;
    let plan = tract_onnx::onnx()
        .model_for_path(model)
        .and_then(|m| m.with_input_fact(0, f32::fact([1, 256]).into()))
        .and_then(|m| m.into_optimized())
        .and_then(|m| m.into_runnable())
        .expect("tract plans the mlp");
    let x = tract_ndarray::Array2::from_shape_vec((1, 256), input.to_vec()).unwrap();
    let out = plan.run(tvec!(Tensor::from(x).into())).expect("tract runs");
    out[0].as_slice::<f32>().unwrap().to_vec()
}
