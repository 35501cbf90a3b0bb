//! `maf-synth`: a synthetic trace of the Azure Functions 2019 shape, written in the real file
//! format and replayed through the same reader as real trace files, so a run without the
//! (large, separately downloaded) trace still exercises the replay path end to end.
//!
//! The shape, all drawn from the seed:
//! - `F = max(2 * models, 100)` functions with log-normal (σ = 2) mean rates: a heavy tail
//!   where a few functions carry most invocations, as in the real trace;
//! - a diurnal swing: each function's rate is multiplied by `1 + 0.5 sin(2π t / day + φ)`,
//!   with a phase `φ` shared by all functions plus a small per-function jitter;
//! - bursts: about one an hour, a random function gets extra invocations (2 % to 10 % of the
//!   whole trace's mean rate) for 1 to 10 minutes;
//! - each cell is a Poisson draw of its rate.
//!
//! Cells past the run's window (the trace minutes `duration` never reaches) are written as
//! 0 without drawing them: they would never be replayed, and drawing a whole day of
//! thousands of functions costs more than replaying a short run.
//!
//! Counts are sized so a replay at `time_compression` offers about `rate`; the replay's rate
//! scaling then makes it exact. One day file is written per 1440 trace minutes the run
//! covers (at least one, at most 14, the real trace's length), named like the real ones
//! (`invocations_per_function_md.anon.d01.csv`, ...), each through a temporary file and a
//! rename so a reader never sees half a file.

use std::f64::consts::TAU;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal, Normal, Poisson};

use super::maf_csv::DAY_MINUTES;
use super::trace::{self, TraceStream, TRACE_FILE_PREFIX};
use super::{check, check_models, WorkloadError, WorkloadParams};

/// The most day files written: the real trace has 14 days.
const MAX_DAYS: u64 = 14;

/// Trigger column values, with their share of functions (roughly the real trace's mix).
const TRIGGERS: [(&str, f64); 7] = [
    ("http", 0.36),
    ("timer", 0.16),
    ("queue", 0.12),
    ("event", 0.10),
    ("storage", 0.06),
    ("orchestration", 0.12),
    ("others", 0.08),
];

/// One function's fixed identity and mean rate.
struct Function {
    owner: String,
    app: String,
    name: String,
    trigger: &'static str,
    /// Mean invocations per trace minute.
    rate: f64,
    /// Cosine and sine of the function's diurnal phase.
    phase: (f64, f64),
}

/// Writes the trace into `params.scratch_dir` and opens its replay.
pub(crate) fn open(params: &WorkloadParams) -> Result<TraceStream, WorkloadError> {
    let files = write(params)?;
    trace::replay(&params.scratch_dir, &files, params)
}

/// Writes the day files; returns their paths in day order.
pub(crate) fn write(params: &WorkloadParams) -> Result<Vec<PathBuf>, WorkloadError> {
    check_models(params.models)?;
    let c = params.time_compression;
    check("time_compression", c, c > 0.0, "must be > 0")?;
    check(
        "rate",
        params.rate,
        params.rate > 0.0,
        "must be > 0 requests/s for maf-synth",
    )?;
    // A trace minute lasts 60 s / c of simulated time.
    let per_minute = params.rate * 60.0 / c;
    let window = (params.duration as f64 * c / 60e9).ceil() as u64;
    let days = window.div_ceil(DAY_MINUTES).clamp(1, MAX_DAYS);

    // Distinct from the replay's stream, which is seeded with the seed itself.
    let mut rng = StdRng::seed_from_u64(params.seed ^ 0x6d61_662d_7379_6e74);
    let functions = make_functions(&mut rng, params.models, per_minute);
    let dir = &params.scratch_dir;
    std::fs::create_dir_all(dir).map_err(|cause| WorkloadError::Io {
        path: dir.clone(),
        cause,
    })?;
    let mut files = Vec::new();
    for day in 0..days {
        let path = dir.join(format!("{TRACE_FILE_PREFIX}{:02}.csv", day + 1));
        write_day(&mut rng, &path, &functions, day, per_minute, window)?;
        files.push(path);
    }
    Ok(files)
}

/// Draws the functions: ids, triggers, heavy-tailed rates summing to `per_minute`, phases.
fn make_functions(rng: &mut StdRng, models: u32, per_minute: f64) -> Vec<Function> {
    let count = (models as usize * 2).max(100);
    let weights = LogNormal::new(0.0, 2.0).map_or_else(
        |_| vec![1.0; count],
        |d| (0..count).map(|_| d.sample(rng)).collect(),
    );
    let total: f64 = weights.iter().sum();
    let phase = rng.random::<f64>() * TAU;
    let jitter = Normal::new(0.0, 0.3).ok();
    let mut owner = hex_id(rng);
    let mut app = hex_id(rng);
    weights
        .iter()
        .map(|w| {
            // Apps hold a few functions and owners a few apps, as in the real trace.
            if rng.random::<f64>() < 0.3 {
                if rng.random::<f64>() < 0.3 {
                    owner = hex_id(rng);
                }
                app = hex_id(rng);
            }
            Function {
                owner: owner.clone(),
                app: app.clone(),
                name: hex_id(rng),
                trigger: pick_trigger(rng.random()),
                rate: per_minute * w / total,
                phase: {
                    let p = phase + jitter.map_or(0.0, |j| j.sample(rng));
                    (p.cos(), p.sin())
                },
            }
        })
        .collect()
}

/// 64 hex digits, like the trace's SHA-256 ids.
fn hex_id(rng: &mut StdRng) -> String {
    let [a, b, c, d]: [u64; 4] = rng.random();
    format!("{a:016x}{b:016x}{c:016x}{d:016x}")
}

/// The trigger whose cumulative share first exceeds `u` in `[0, 1)`.
fn pick_trigger(mut u: f64) -> &'static str {
    for (name, share) in TRIGGERS {
        if u < share {
            return name;
        }
        u -= share;
    }
    "others"
}

/// Writes one day file, through a temporary file renamed into place.
fn write_day(
    rng: &mut StdRng,
    path: &Path,
    functions: &[Function],
    day: u64,
    per_minute: f64,
    window: u64,
) -> Result<(), WorkloadError> {
    let day_minutes = DAY_MINUTES as usize;
    // Minutes of this day the run replays; the rest are written as 0 (see the module docs).
    let live = window.saturating_sub(day * DAY_MINUTES).min(DAY_MINUTES) as usize;
    // sin(a + φ) = sin a cos φ + cos a sin φ: one table per day instead of a sine per cell.
    let angle: Vec<(f64, f64)> = (0..live)
        .map(|m| {
            let a = TAU * (day * DAY_MINUTES + m as u64) as f64 / DAY_MINUTES as f64;
            (a.sin(), a.cos())
        })
        .collect();
    let bursts = day_bursts(rng, functions.len(), per_minute);

    let tmp = path.with_extension(format!("csv.tmp-{}", std::process::id()));
    let io = |cause| WorkloadError::Io {
        path: tmp.clone(),
        cause,
    };
    let mut out = BufWriter::with_capacity(1 << 20, File::create(&tmp).map_err(io)?);
    let mut line = Vec::with_capacity(8 * day_minutes);
    line.extend_from_slice(b"HashOwner,HashApp,HashFunction,Trigger");
    for m in 1..=day_minutes {
        line.push(b',');
        push_number(&mut line, m as u64);
    }
    line.push(b'\n');
    out.write_all(&line).map_err(io)?;

    let mut extra = vec![0.0; day_minutes];
    let mut next_burst = 0;
    for (f, func) in functions.iter().enumerate() {
        extra.fill(0.0);
        while let Some(&(bf, start, len, add)) = bursts.get(next_burst) {
            if bf != f {
                break;
            }
            for e in extra.iter_mut().skip(start).take(len) {
                *e += add;
            }
            next_burst += 1;
        }
        line.clear();
        push_row(&mut line, rng, func, &angle, &extra);
        out.write_all(&line).map_err(io)?;
    }
    out.flush().map_err(io)?;
    drop(out);
    std::fs::rename(&tmp, path).map_err(|cause| WorkloadError::Io {
        path: path.to_path_buf(),
        cause,
    })
}

/// The bursts of one day, as (function, start minute, minutes, extra rate), sorted by
/// function so that each row gathers its own in one pass.
fn day_bursts(
    rng: &mut StdRng,
    functions: usize,
    per_minute: f64,
) -> Vec<(usize, usize, usize, f64)> {
    let mut bursts: Vec<(usize, usize, usize, f64)> = (0..24)
        .map(|_| {
            let f = rng.random_range(0..functions);
            let start = rng.random_range(0..DAY_MINUTES as usize);
            let len = rng.random_range(1..=10);
            let extra = per_minute * rng.random_range(0.02..0.10);
            (f, start, len, extra)
        })
        .collect();
    bursts.sort_unstable_by_key(|b| b.0);
    bursts
}

/// Appends one function's row: its id columns, a drawn count for each live minute (one
/// `angle` per live minute, `extra` the day's burst rates), then 0 for the rest of the day.
fn push_row(
    line: &mut Vec<u8>,
    rng: &mut StdRng,
    func: &Function,
    angle: &[(f64, f64)],
    extra: &[f64],
) {
    for id in [&func.owner, &func.app, &func.name] {
        line.extend_from_slice(id.as_bytes());
        line.push(b',');
    }
    line.extend_from_slice(func.trigger.as_bytes());
    let (cos_p, sin_p) = func.phase;
    for (&(sin_a, cos_a), add) in angle.iter().zip(extra) {
        let lambda = func.rate * (1.0 + 0.5 * (sin_a * cos_p + cos_a * sin_p)) + add;
        line.push(b',');
        // The reader takes counts that fit u32, as the real trace's do.
        push_number(line, poisson(rng, lambda).min(u64::from(u32::MAX)));
    }
    for _ in angle.len()..DAY_MINUTES as usize {
        line.extend_from_slice(b",0");
    }
    line.push(b'\n');
}

/// A Poisson draw of mean `lambda` (0 for a rate too small to matter).
///
/// Most cells of a heavy-tailed trace have a mean well under 1, so small means use
/// inversion with one uniform and one `exp`, cheaper than building a sampler per cell.
fn poisson(rng: &mut StdRng, lambda: f64) -> u64 {
    if lambda < 1e-9 {
        return 0;
    }
    if lambda < 10.0 {
        let u: f64 = rng.random();
        let mut p = (-lambda).exp();
        let mut cdf = p;
        let mut k = 0;
        // The cap only guards rounding of `cdf` short of 1; the tail past it is negligible.
        while u > cdf && k < 100 {
            k += 1;
            p *= lambda / k as f64;
            cdf += p;
        }
        return k;
    }
    // `new` refuses only absurdly large means; the mean itself is then the count.
    Poisson::new(lambda).map_or(lambda, |p| p.sample(rng)) as u64
}

/// Appends `n` in decimal.
fn push_number(line: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    line.extend_from_slice(&digits[i..]);
}
