//! Replay of the Azure Functions 2019 trace ("MAF"), in its published file format.
//!
//! A directory holds day files `invocations_per_function_md.anon.dNN.csv`. Each has the
//! header `HashOwner,HashApp,HashFunction,Trigger,1,2,...,1440`, then one row per function:
//! four id columns and 1440 per-minute invocation counts.
//!
//! How a run is built from it:
//! - Day files are taken in name order and concatenated: the k-th file (from 0) covers
//!   trace minutes `1440 k ..`. A function is identified by its three hash columns across
//!   days. The run covers the first `ceil(duration * time_compression / 60 s)` trace
//!   minutes (the *window*); files wholly past the window are not read at all, and the run
//!   ends early if the trace is shorter than the window.
//! - Functions are ranked by their total count inside the window (descending; ties by the
//!   hash columns, so the ranking is deterministic), then mapped onto models in contiguous
//!   blocks of `ceil(F / models)`: the busiest functions become model 0. With fewer
//!   functions than models, the last models get no traffic.
//! - Trace minute `m` plays from `m * 60 s / time_compression`. A model's count `n` for that
//!   minute becomes `n` arrivals placed uniformly at random in it (a Poisson process
//!   conditioned on its count).
//! - With `rate > 0`, every count is multiplied by one factor, rounded stochastically, so the
//!   expected number of arrivals before `duration` is `rate * duration` exactly. `rate = 0`
//!   replays the counts as they are.
//!
//! Files are read twice (ranking, then per-minute counts) rather than held whole: a real
//! day has tens of thousands of functions, and only the per-model window is kept
//! (`minutes * models` counts). Arrivals are made one trace minute at a time, held (the
//! minute's times drawn at once, then its labels shuffled), or, for a minute of more than
//! [`HOLD_AT_MOST`] arrivals, streamed one at a time (`busy_minute.rs`), so that no count
//! in a file, however large, is ever held. The file format itself is read and checked by
//! `maf_csv.rs`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::Exp1;

use super::busy_minute::BusyMinute;
use super::maf_csv::{for_each_row, DAY_MINUTES};
use super::{check, check_models, Arrival, ArrivalStream, WorkloadError, WorkloadParams};
use crate::time::Nanos;

/// Every trace file's name starts with this (then the day number and `.csv`).
pub const TRACE_FILE_PREFIX: &str = "invocations_per_function_md.anon.d";

/// Nanoseconds in a trace minute before compression.
const MINUTE_NS: f64 = 60e9;

/// The trace files in `dir`, sorted by name.
pub fn trace_files(dir: &Path) -> Result<Vec<PathBuf>, WorkloadError> {
    let io = |cause| WorkloadError::Io {
        path: dir.to_path_buf(),
        cause,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with(TRACE_FILE_PREFIX) && name.ends_with(".csv") && path.is_file() {
            files.push(path);
        }
    }
    if files.is_empty() {
        return Err(WorkloadError::NoTraceFiles {
            dir: dir.to_path_buf(),
        });
    }
    files.sort();
    Ok(files)
}

/// Opens a replay of `files` (day files in order; `dir` only names the trace in errors).
pub(crate) fn replay(
    dir: &Path,
    files: &[PathBuf],
    params: &WorkloadParams,
) -> Result<TraceStream, WorkloadError> {
    check_models(params.models)?;
    let c = params.time_compression;
    check("time_compression", c, c > 0.0, "must be > 0")?;
    check(
        "rate",
        params.rate,
        params.rate >= 0.0,
        "must be >= 0 (0 = as recorded)",
    )?;
    let minute_ns = MINUTE_NS / c;
    let available = files.len() as u64 * DAY_MINUTES;
    // `as` saturates, and the trace's own length caps the window.
    let window = ((params.duration as f64 / minute_ns).ceil() as u64).min(available);
    let models = params.models as usize;
    let model_of = rank(files, window, models)?;
    let counts = model_counts(files, window, models, &model_of)?;

    // Expected arrivals before `duration` at factor 1: the last minute may be cut short.
    let end = params.duration as f64;
    let expected: f64 = counts
        .chunks(models.max(1))
        .enumerate()
        .map(|(m, row)| {
            let frac = ((end - m as f64 * minute_ns) / minute_ns).clamp(0.0, 1.0);
            row.iter().map(|&n| f64::from(n)).sum::<f64>() * frac
        })
        .sum();
    let factor = if params.rate == 0.0 || window == 0 {
        1.0
    } else if expected > 0.0 {
        params.rate * end / 1e9 / expected
    } else {
        return Err(WorkloadError::EmptyTrace {
            dir: dir.to_path_buf(),
            minutes: window,
            rate: params.rate,
        });
    };
    Ok(TraceStream {
        counts,
        models,
        minutes: window,
        minute_ns,
        end: params.duration,
        factor,
        rng: StdRng::seed_from_u64(params.seed),
        next_minute: 0,
        buf: Vec::new(),
        pos: 0,
        labels: Vec::new(),
        spacing: Vec::new(),
        minute: Vec::new(),
        busy: None,
    })
}

/// Arrivals of one minute a replay holds at once (about 36 bytes each with its scratch:
/// 36 MB); a busier minute is streamed (`busy_minute.rs`). A replay scaled to `rate`
/// makes about `60 * rate` arrivals a trace minute at most (fewer when compressed): the
/// simulator's experiments stay below it, and draw exactly as before streaming existed.
pub const HOLD_AT_MOST: u64 = 1_000_000;

/// Pass 1: the model of every function, from its rank by total count inside the window
/// (busiest first, ties by the hash columns), in contiguous blocks per model.
fn rank(
    files: &[PathBuf],
    window: u64,
    models: usize,
) -> Result<HashMap<Vec<u8>, u32>, WorkloadError> {
    let mut totals: HashMap<Vec<u8>, u64> = HashMap::new();
    for_each_row(files, window, |key, _, counts| {
        let total = counts.iter().map(|&n| u64::from(n)).sum::<u64>();
        match totals.get_mut(key) {
            Some(t) => *t += total,
            None => {
                totals.insert(key.to_vec(), total);
            }
        }
    })?;
    let mut ranked: Vec<(u64, Vec<u8>)> = totals.into_iter().map(|(k, t)| (t, k)).collect();
    ranked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let per_model = ranked.len().div_ceil(models).max(1);
    Ok(ranked
        .into_iter()
        .enumerate()
        .map(|(rank, (_, key))| (key, (rank / per_model) as u32))
        .collect())
}

/// Pass 2: per-model counts of every window minute, minute-major.
fn model_counts(
    files: &[PathBuf],
    window: u64,
    models: usize,
    model_of: &HashMap<Vec<u8>, u32>,
) -> Result<Vec<u32>, WorkloadError> {
    let mut counts = vec![0u32; window as usize * models];
    for_each_row(files, window, |key, base, row| {
        // Every key was ranked in pass 1, so the fallback never applies.
        let model = model_of.get(key).copied().unwrap_or(0) as usize;
        for (i, &n) in row.iter().enumerate() {
            let cell = &mut counts[(base + i) * models + model];
            *cell = cell.saturating_add(n);
        }
    })?;
    Ok(counts)
}

/// The replay stream (see the module docs).
pub(crate) struct TraceStream {
    /// Per-model counts, minute-major: `counts[m * models + model]`.
    counts: Vec<u32>,
    models: usize,
    /// Trace minutes in the window.
    minutes: u64,
    /// Simulated nanoseconds per trace minute.
    minute_ns: f64,
    end: Nanos,
    /// Multiplier of every count (1 = as recorded).
    factor: f64,
    rng: StdRng,
    next_minute: u64,
    /// The arrivals of the current minute, and how many were handed out.
    buf: Vec<Arrival>,
    pos: usize,
    /// Scratch: the model of each arrival of a minute, then cumulative exponential gaps.
    labels: Vec<u32>,
    spacing: Vec<f64>,
    /// Scratch: each model's arrivals in the current minute.
    minute: Vec<(u32, u64)>,
    /// The current minute, when it is too busy to hold.
    busy: Option<BusyMinute>,
}

impl TraceStream {
    /// Each model's arrivals in minute `m` into `self.minute`: its count, scaled by the
    /// factor with stochastic rounding (which keeps the expected count exact). Answers
    /// their sum.
    fn count_minute(&mut self, m: usize) -> u64 {
        self.minute.clear();
        let row = &self.counts[m * self.models..(m + 1) * self.models];
        for (model, &n) in row.iter().enumerate() {
            let k = if self.factor == 1.0 {
                u64::from(n)
            } else {
                let x = f64::from(n) * self.factor;
                let floor = x.floor();
                floor as u64 + u64::from(self.rng.random::<f64>() < x - floor)
            };
            self.minute.push((model as u32, k));
        }
        self.minute.iter().map(|&(_, k)| k).sum()
    }

    /// Fills `buf` with the arrivals of the next minute that has any, or starts streaming
    /// it into `busy` if it has more than [`HOLD_AT_MOST`].
    fn fill(&mut self) {
        self.buf.clear();
        self.pos = 0;
        while self.buf.is_empty() && self.busy.is_none() && self.next_minute < self.minutes {
            let m = self.next_minute as usize;
            self.next_minute += 1;
            let n = self.count_minute(m);
            if n == 0 {
                continue;
            }
            let start = m as f64 * self.minute_ns;
            if n > HOLD_AT_MOST {
                let counts = self.minute.iter().copied();
                let busy = BusyMinute::new((start, self.minute_ns), counts, &mut self.rng);
                self.busy = Some(busy);
                return;
            }
            self.labels.clear();
            for &(model, k) in &self.minute {
                self.labels.extend(std::iter::repeat_n(model, k as usize));
            }
            // n uniform times in the minute, already sorted: normalised partial sums of
            // n + 1 exponentials (cheaper than sorting); which model each belongs to is a
            // uniformly random permutation of the labels.
            self.labels.shuffle(&mut self.rng);
            self.spacing.clear();
            let mut sum = 0.0;
            for _ in 0..=n {
                sum += self.rng.sample::<f64, _>(Exp1);
                self.spacing.push(sum);
            }
            let scale = self.minute_ns / sum;
            for (&s, &model) in self.spacing.iter().zip(&self.labels) {
                let at = (start + s * scale) as Nanos;
                if at >= self.end {
                    break;
                }
                self.buf.push(Arrival {
                    at,
                    model,
                    slo: None,
                });
            }
        }
    }
}

impl ArrivalStream for TraceStream {
    fn next_arrival(&mut self) -> Option<Arrival> {
        loop {
            if let Some(busy) = &mut self.busy {
                match busy.next(&mut self.rng) {
                    Some(a) if a.at < self.end => return Some(a),
                    // The minute is out, or past the end of the run.
                    _ => self.busy = None,
                }
            }
            if self.pos == self.buf.len() {
                self.fill();
                if self.busy.is_some() {
                    continue;
                }
            }
            let a = self.buf.get(self.pos).copied()?;
            self.pos += 1;
            return Some(a);
        }
    }
}
