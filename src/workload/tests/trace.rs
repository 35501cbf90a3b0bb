//! Trace replay (`maf:DIR`) and maf-synth tests: small trace files written into a
//! per-test temporary directory.

use std::path::{Path, PathBuf};

use super::{all, assert_ordered, params, per_model, SECOND};
use crate::time::MS;
use crate::workload::*;

/// A fresh, empty directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "clockwork-workload-test-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const HEADER_IDS: &str = "HashOwner,HashApp,HashFunction,Trigger";

fn header() -> String {
    let mut h = HEADER_IDS.to_string();
    for m in 1..=1440 {
        h += &format!(",{m}");
    }
    h
}

/// A function row with `counts` as (1-based minute, count); other minutes 0.
fn row(id: &str, counts: &[(usize, u32)]) -> String {
    let mut cells = vec![0u32; 1440];
    for &(m, n) in counts {
        cells[m - 1] = n;
    }
    let mut r = format!("o{id},a{id},f{id},http");
    for n in cells {
        r += &format!(",{n}");
    }
    r
}

fn write_day(dir: &Path, day: u32, rows: &[String]) {
    let mut text = header() + "\n";
    for r in rows {
        text += r;
        text += "\n";
    }
    let name = format!("{TRACE_FILE_PREFIX}{day:02}.csv");
    std::fs::write(dir.join(name), text).unwrap();
}

#[test]
fn trace_maps_ranked_functions_onto_model_blocks_and_places_minutes() {
    let dir = scratch("blocks");
    // Totals: b 35 > a 30 > c 10. Two models: blocks of 2, so b and a are model 0.
    write_day(
        &dir,
        1,
        &[
            row("a", &[(1, 30)]),
            row("b", &[(2, 20), (3, 15)]),
            row("c", &[(1, 10)]),
        ],
    );
    let kind = WorkloadKind::Maf(dir.clone());
    // Compression 60: trace minute m plays during simulated second m.
    let p = WorkloadParams {
        models: 2,
        rate: 0.0,
        duration: 3 * SECOND,
        ..WorkloadParams::default()
    };
    let v = all(&kind, &p);
    assert_ordered(&v, &p);
    assert_eq!(v, all(&kind, &p));
    assert_eq!(per_model(&v, 2, 0, SECOND), [30, 10]);
    assert_eq!(per_model(&v, 2, SECOND, 2 * SECOND), [20, 0]);
    assert_eq!(per_model(&v, 2, 2 * SECOND, 3 * SECOND), [15, 0]);
    // More models than functions: one each by rank, the rest idle.
    let five = WorkloadParams {
        models: 5,
        ..p.clone()
    };
    let v = all(&kind, &five);
    assert_eq!(per_model(&v, 5, 0, 3 * SECOND), [35, 30, 10, 0, 0]);
    // The run stops at its duration, inside minute 2.
    let short = WorkloadParams {
        duration: 1_500 * MS,
        ..p.clone()
    };
    let v = all(&kind, &short);
    assert_eq!(per_model(&v, 2, 0, SECOND), [30, 10]);
    assert!(
        (41..60).contains(&v.len()),
        "about half of minute 1: {}",
        v.len()
    );
    assert!(v.iter().all(|a| a.at < 1_500 * MS));
    // No compression: a trace minute lasts a simulated minute.
    let real = WorkloadParams {
        time_compression: 1.0,
        duration: 180 * SECOND,
        ..p
    };
    let v = all(&kind, &real);
    assert_eq!(per_model(&v, 2, 0, 60 * SECOND), [30, 10]);
    assert_eq!(per_model(&v, 2, 60 * SECOND, 120 * SECOND), [20, 0]);
    let spread = v.iter().filter(|a| a.at < 30 * SECOND).count();
    assert!(
        (8..32).contains(&spread),
        "uniform in the minute: {spread} of 40 in its first half"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn trace_days_concatenate_and_rate_scales() {
    let dir = scratch("days");
    write_day(&dir, 1, &[row("a", &[(1440, 7)])]);
    write_day(&dir, 2, &[row("a", &[(1, 5)]), row("b", &[(1, 100)])]);
    // Compression 1440: a trace day per simulated minute.
    let p = WorkloadParams {
        models: 2,
        rate: 0.0,
        time_compression: 1440.0,
        duration: 120 * SECOND,
        ..WorkloadParams::default()
    };
    let kind = WorkloadKind::Maf(dir.clone());
    let v = all(&kind, &p);
    let minute = 60 * SECOND / 1440;
    // b (100) outranks a (12): b is model 0.
    assert_eq!(per_model(&v, 2, 1439 * minute, 1440 * minute), [0, 7]);
    assert_eq!(per_model(&v, 2, 1440 * minute, 1441 * minute + 1), [100, 5]);
    assert_eq!(v.len(), 112);
    // Scaled to a rate: 50/s over 120 s is 6000 in expectation.
    let scaled = all(&kind, &WorkloadParams { rate: 50.0, ..p });
    assert!((5_700..6_300).contains(&scaled.len()), "{}", scaled.len());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn trace_errors_name_file_line_and_column() {
    let p = WorkloadParams {
        rate: 0.0,
        ..params(0.0, 1)
    };
    let missing = WorkloadKind::Maf("/nonexistent/clockwork-trace".into());
    let e = open(&missing, &p).err().unwrap().to_string();
    assert!(e.starts_with("/nonexistent/clockwork-trace: "), "{e}");

    let dir = scratch("errors");
    let kind = WorkloadKind::Maf(dir.clone());
    std::fs::write(dir.join("notes.csv"), "x").unwrap();
    let e = open(&kind, &p).err().unwrap().to_string();
    assert!(e.contains("no trace files"), "{e}");

    let file = dir.join(format!("{TRACE_FILE_PREFIX}01.csv"));
    let name = file.display().to_string();
    write_day(&dir, 1, &[row("a", &[(1, 3)]), "o,a,f,http,1".into()]);
    let e = open(&kind, &p).err().unwrap().to_string();
    assert!(
        e.starts_with(&format!("{name}: line 3: row has 5 columns, expected 1444")),
        "{e}"
    );

    let mut bad: Vec<String> = row("b", &[]).split(',').map(String::from).collect();
    bad[6] = "x7".into();
    let bad = bad.join(",");
    write_day(&dir, 1, &[row("a", &[]), bad]);
    let e = open(&kind, &p).err().unwrap().to_string();
    assert_eq!(
        e,
        format!("{name}: line 3, column 7: 'x7' is not an invocation count (a whole number >= 0) for minute 3")
    );

    std::fs::write(&file, header().replace("Trigger", "Kind") + "\n").unwrap();
    let e = open(&kind, &p).err().unwrap().to_string();
    assert!(
        e.starts_with(&format!(
            "{name}: line 1, column 4: header column should be 'Trigger'"
        )),
        "{e}"
    );

    // Rate scaling needs something to scale.
    write_day(&dir, 1, &[row("a", &[])]);
    let e = open(&kind, &WorkloadParams { rate: 10.0, ..p })
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no invocations"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn maf_synth_writes_the_real_format_and_replays_it() {
    let dir = scratch("synth");
    let p = WorkloadParams {
        models: 30,
        rate: 500.0,
        duration: 120 * SECOND,
        scratch_dir: dir.clone(),
        ..WorkloadParams::default()
    };
    let v = all(&WorkloadKind::MafSynth, &p);
    assert_ordered(&v, &p);
    assert!(
        (v.len() as f64 / 60_000.0 - 1.0).abs() < 0.03,
        "{}",
        v.len()
    );
    assert_eq!(v, all(&WorkloadKind::MafSynth, &p));
    // 120 s at compression 60 is 120 trace minutes: one day file.
    let files = trace_files(&dir).unwrap();
    assert_eq!(files.len(), 1);
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], header());
    assert_eq!(lines.len(), 101, "max(2 * 30, 100) functions");
    assert!(lines.iter().all(|l| l.split(',').count() == 1444));
    let trigger = lines[1].split(',').nth(3).unwrap();
    assert!([
        "http",
        "timer",
        "queue",
        "event",
        "storage",
        "orchestration",
        "others"
    ]
    .contains(&trigger));
    // The same directory through the plain replay gives the same stream.
    assert_eq!(v, all(&WorkloadKind::Maf(dir.clone()), &p));
    // Heavy tail: the busiest model block takes far more than its 1/30 share.
    let n = per_model(&v, 30, 0, p.duration);
    assert!(n[0] > v.len() / 10, "{n:?}");
    let _ = std::fs::remove_dir_all(dir);
}
