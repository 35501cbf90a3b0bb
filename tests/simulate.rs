//! `clockwork simulate`: the report's contract, determinism, and clear errors.

use std::path::PathBuf;
use std::process::Command;

use clockwork::config::PolicyConfig;
use clockwork::simulate::{self, SimulateArgs};
use clockwork::time::MS;
use clockwork::workload::{WorkloadKind, WorkloadParams};

fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("clockwork-test-{name}-{}", std::process::id()))
}

fn args(out: PathBuf) -> SimulateArgs {
    SimulateArgs {
        workload: WorkloadKind::Poisson,
        params: WorkloadParams {
            models: 12,
            rate: 300.0,
            duration: 5_000 * MS,
            slo: 100 * MS,
            seed: 3,
            ..WorkloadParams::default()
        },
        devices: 2,
        device_profile: "v100".into(),
        pages: Some(40),
        model_profile: "resnet50".into(),
        noise_cv: 0.0,
        policies: vec![
            "clockwork".into(),
            "reactive".into(),
            "clockwork-nodrop".into(),
        ],
        policy: PolicyConfig::default(),
        clients: 4,
        think: 0,
        out,
        command: "test".into(),
        progress: false,
        pipeline: None,
    }
}

#[test]
fn writes_the_report_and_repeats_itself() {
    let out = scratch("report");
    let first = simulate::run(&args(out.clone())).unwrap();
    for file in [
        "report.json",
        "report.md",
        "latency_cdf.svg",
        "goodput.svg",
        "timeline_clockwork.svg",
    ] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let policies = json["policies"].as_array().unwrap();
    assert_eq!(policies.len(), 3);
    for key in [
        "offered",
        "ok_in_slo",
        "late",
        "refused",
        "goodput",
        "latency_ms",
        "cold_loads",
        "mean_batch",
        "prediction_error_ms",
        "sim_requests_per_wall_s",
    ] {
        assert!(policies[0].get(key).is_some(), "report lacks {key}");
    }
    let clockwork = &first.policies[0];
    assert!(clockwork.offered > 1_000, "5 s at 300/s");
    assert_eq!(clockwork.late, 0, "exact devices: nothing late");
    assert!(clockwork.goodput > 0.95, "{clockwork:?}");
    assert!(
        clockwork.cold_loads >= 12,
        "every model was loaded at least once"
    );
    // Every request is answered once: counted answers add up to what was offered.
    for p in &first.policies {
        let refused: u64 = p.refused.values().sum();
        assert_eq!(
            p.ok_in_slo + p.late + refused + p.failed,
            p.offered,
            "{}",
            p.policy
        );
    }
    let second = simulate::run(&args(scratch("again"))).unwrap();
    for (a, b) in first.policies.iter().zip(&second.policies) {
        assert_eq!(
            (a.offered, a.ok_in_slo, a.late, &a.refused),
            (b.offered, b.ok_in_slo, b.late, &b.refused)
        );
        assert_eq!(a.latency_ms, b.latency_ms, "same seed, same numbers");
    }
    let _ = std::fs::remove_dir_all(out);
    let _ = std::fs::remove_dir_all(scratch("again"));
}

#[test]
fn closed_loop_runs() {
    let mut args = args(scratch("closed"));
    args.workload = WorkloadKind::Closed;
    args.policies = vec!["clockwork".into()];
    let report = simulate::run(&args).unwrap();
    let p = &report.policies[0];
    assert!(p.offered > 100 && p.ok_in_slo > 0, "{p:?}");
    let _ = std::fs::remove_dir_all(&args.out);
}

fn cli(extra: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_clockwork"))
        .args(["simulate", "--quiet", "--out"])
        .arg(scratch("cli"))
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_flags_and_files_are_named_not_panicked_on() {
    let (ok, err) = cli(&["--policy", "clockwork,fifo"]);
    assert!(!ok && err.contains("unknown policy 'fifo'"), "{err}");
    let (ok, err) = cli(&["--workload", "maf:/nonexistent/trace"]);
    assert!(!ok && err.contains("/nonexistent/trace"), "{err}");
    let (ok, err) = cli(&["--device-profile", "tpu9"]);
    assert!(!ok && err.contains("tpu9"), "{err}");
    let (ok, err) = cli(&["--workload", "zigzag"]);
    assert!(!ok && err.contains("zigzag"), "{err}");
    let (ok, err) = cli(&["--config", "/nonexistent/policy.toml"]);
    assert!(!ok && err.contains("/nonexistent/policy.toml"), "{err}");
    let policy = scratch("policy.toml");
    std::fs::write(&policy, "[policy]\nhindsight_weight = 0\n").unwrap();
    let (ok, err) = cli(&["--config", &policy.display().to_string()]);
    assert!(!ok && err.contains("hindsight_weight"), "{err}");
    let _ = std::fs::remove_file(policy);
    let dir = scratch("badtrace");
    std::fs::create_dir_all(&dir).unwrap();
    let header: Vec<String> = ["HashOwner", "HashApp", "HashFunction", "Trigger"]
        .iter()
        .map(|s| s.to_string())
        .chain((1..=1440).map(|m| m.to_string()))
        .collect();
    let row = "a,b,c,http,x,".to_owned() + &["1"; 1439].join(",");
    let text = format!("{}\n{row}\n", header.join(","));
    std::fs::write(dir.join("invocations_per_function_md.anon.d01.csv"), text).unwrap();
    let trace = format!("maf:{}", dir.display());
    let (ok, err) = cli(&[
        "--workload",
        &trace,
        "--duration",
        "10s",
        "--time-compression",
        "60",
    ]);
    assert!(!ok && err.contains("line 2, column 5"), "{err}");
    assert!(!err.contains("panicked"));
    let _ = std::fs::remove_dir_all(dir);
}
