//! Fuzzing the Azure Functions trace reader (`src/workload/maf_csv.rs`) and its replay
//! (`src/workload/trace.rs`): mutated day files are replayed or refused with an error
//! naming file, line and column, never a panic, and never with an allocation out of
//! proportion to the file.

mod fuzz_support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use clockwork::time::MS;
use clockwork::workload::{self, WorkloadKind, WorkloadParams, DAY_MINUTES, TRACE_FILE_PREFIX};
use fuzz_support::{apply, config, edits, largest_allocation, ALLOCATION_LIMIT};
use proptest::prelude::*;

/// A day file of three functions with a few invocations in the first minutes.
fn day_file() -> Vec<u8> {
    let mut text = String::from("HashOwner,HashApp,HashFunction,Trigger");
    for m in 1..=DAY_MINUTES {
        text.push_str(&format!(",{m}"));
    }
    text.push('\n');
    for (f, trigger) in ["http", "timer", "queue"].iter().enumerate() {
        text.push_str(&format!("o{f},a{f},f{f},{trigger}"));
        for m in 0..DAY_MINUTES {
            let count = if m < 4 { (m + f as u64) % 3 } else { 0 };
            text.push_str(&format!(",{count}"));
        }
        text.push('\n');
    }
    text.into_bytes()
}

/// A fresh directory of this process for one case.
fn scratch() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("clockwork-fuzz-trace-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Replays `days` (one file each) at `rate` for four trace minutes; returns the
/// arrivals or the error.
fn replay(dir: &Path, days: &[Vec<u8>], rate: f64) -> Result<usize, String> {
    for (d, bytes) in days.iter().enumerate() {
        let path = dir.join(format!("{TRACE_FILE_PREFIX}{:02}.csv", d + 1));
        std::fs::write(path, bytes).expect("write day file");
    }
    let params = WorkloadParams {
        models: 2,
        rate,
        duration: 4_000 * MS,
        time_compression: 60.0,
        ..WorkloadParams::default()
    };
    let mut stream = workload::open(&WorkloadKind::Maf(dir.to_path_buf()), &params)
        .map_err(|e| e.to_string())?;
    // A bounded drain: a hostile count must not make the run endless either.
    Ok(std::iter::from_fn(|| stream.next_arrival())
        .take(10_000)
        .count())
}

fn check(days: &[Vec<u8>], rate: f64) {
    let dir = scratch();
    let (result, largest) = largest_allocation(|| replay(&dir, days, rate));
    let _ = std::fs::remove_dir_all(&dir);
    let size: usize = days.iter().map(Vec::len).sum();
    assert!(
        largest <= ALLOCATION_LIMIT.max(size * 64),
        "{largest} bytes allocated replaying {size} bytes: {result:?}"
    );
}

#[test]
fn the_seed_replays() {
    let dir = scratch();
    let arrivals = replay(&dir, &[day_file()], 0.0).expect("a valid trace");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(arrivals > 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: config().cases.div_ceil(4), ..config() })]

    #[test]
    fn mutated_day_files_replay_or_are_refused(
        edits in edits(6),
        rate in prop_oneof![Just(0.0), Just(50.0)],
    ) {
        check(&[apply(&day_file(), &edits)], rate);
    }

    #[test]
    fn a_cut_first_day_and_a_mutated_second_replay_or_are_refused(
        cut in any::<usize>(),
        edits in edits(4),
    ) {
        let day = day_file();
        let first = day[..cut % day.len()].to_vec();
        check(&[first, apply(&day, &edits)], 0.0);
    }
}

/// The largest count the format allows, in one minute, replayed as it is: streamed, its
/// first arrivals at once and without a large allocation (held, a minute's
/// arrivals cost ~36 bytes each: 2^32 - 1 of them would ask for ~150 GB). Mutation: a
/// `trace::HOLD_AT_MOST` of `u64::MAX` (every minute held) asks for tens of gigabytes at
/// the first minute (not run: it takes the machine's memory).
#[test]
fn a_minute_too_busy_to_hold_is_streamed() {
    let text = String::from_utf8(day_file()).expect("text");
    let huge = text.replacen(",o0,a0,f0,http,0,", ",o0,a0,f0,http,4294967295,", 1);
    let huge = huge.replacen("\no0,a0,f0,http,0,", "\no0,a0,f0,http,4294967295,", 1);
    assert_ne!(huge, text);
    let dir = scratch();
    let (result, largest) = largest_allocation(|| replay(&dir, &[huge.into_bytes()], 0.0));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(result, Ok(10_000), "the bounded drain takes its 10,000");
    assert!(largest <= ALLOCATION_LIMIT, "{largest} bytes");
}
