//! Workload generators for the simulator: what requests arrive, when, for which model and
//! with which latency objective.
//!
//! Every generator is seeded and deterministic (same [`WorkloadParams`] ⇒ same stream) and
//! lazy: an [`ArrivalStream`] produces a bounded chunk at a time, so a 30-minute run with
//! tens of millions of requests never sits in memory whole.
//!
//! | kind | file | what |
//! | --- | --- | --- |
//! | `poisson`, `fixed`, `bursty`, `ramp` | `synthetic.rs` | open-loop arrivals from a rate shape, models drawn from a Zipf popularity |
//! | `closed` | `closed.rs` | [`ClosedLoop`]: the driver owns the loop, this picks each request's model |
//! | `maf:DIR` | `trace.rs`, `maf_csv.rs` | replay of the Azure Functions 2019 trace (`invocations_per_function_md.anon.dNN.csv`) |
//! | `maf-synth` | `synth.rs` | writes a trace of that shape in the real format, then replays it through `trace.rs` |
//!
//! `popularity.rs` holds the Zipf model picker the synthetic kinds share.

mod busy_minute;
mod closed;
mod maf_csv;
mod popularity;
mod synth;
mod synthetic;
mod trace;

use std::fmt;
use std::path::PathBuf;

use crate::time::{Nanos, MS};

pub use closed::ClosedLoop;
pub use maf_csv::DAY_MINUTES;
pub use trace::{trace_files, TRACE_FILE_PREFIX};

/// One request to send: when, to which model (index `0..models`), with which SLO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// When the request arrives, in simulated time from the start of the run.
    pub at: Nanos,
    /// Which model it asks for: an index in `0..models`.
    pub model: u32,
    /// Its latency objective; `None` means the driver's default.
    pub slo: Option<Nanos>,
}

/// A lazily generated, time-ordered (non-decreasing `at`) stream of arrivals.
///
/// Implementations generate a bounded chunk (a trace minute, or one arrival) at a time.
pub trait ArrivalStream {
    /// The next arrival, or `None` once the run's duration is reached.
    fn next_arrival(&mut self) -> Option<Arrival>;
}

/// Lets a stream be consumed with iterator adapters (`take`, `count`, `collect`).
impl Iterator for dyn ArrivalStream + '_ {
    type Item = Arrival;

    fn next(&mut self) -> Option<Arrival> {
        self.next_arrival()
    }
}

/// Which workload the command line asks for (see [`WorkloadKind::parse`]).
#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadKind {
    /// Open loop, exponential gaps at `rate`.
    Poisson,
    /// Open loop, a request exactly every `1 / rate` seconds.
    Fixed,
    /// Closed loop: see [`ClosedLoop`].
    Closed,
    /// Poisson whose rate alternates between an on and an off level, mean preserved.
    Bursty,
    /// Poisson whose rate, and the SLO, move linearly over the run.
    Ramp,
    /// A synthetic trace in the Azure Functions format, written to `scratch_dir` and replayed.
    MafSynth,
    /// Replay of the Azure Functions 2019 trace files in this directory.
    Maf(PathBuf),
}

impl WorkloadKind {
    /// Parses `poisson`, `fixed`, `closed`, `bursty`, `ramp`, `maf-synth` or `maf:DIR`.
    pub fn parse(s: &str) -> Result<Self, WorkloadError> {
        Ok(match s {
            "poisson" => Self::Poisson,
            "fixed" => Self::Fixed,
            "closed" => Self::Closed,
            "bursty" => Self::Bursty,
            "ramp" => Self::Ramp,
            "maf-synth" => Self::MafSynth,
            _ => match s.strip_prefix("maf:") {
                Some(dir) if !dir.is_empty() => Self::Maf(PathBuf::from(dir)),
                _ => return Err(WorkloadError::UnknownKind(s.to_string())),
            },
        })
    }
}

impl std::str::FromStr for WorkloadKind {
    type Err = WorkloadError;

    fn from_str(s: &str) -> Result<Self, WorkloadError> {
        Self::parse(s)
    }
}

/// Writes the form [`WorkloadKind::parse`] reads back.
impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Poisson => f.write_str("poisson"),
            Self::Fixed => f.write_str("fixed"),
            Self::Closed => f.write_str("closed"),
            Self::Bursty => f.write_str("bursty"),
            Self::Ramp => f.write_str("ramp"),
            Self::MafSynth => f.write_str("maf-synth"),
            Self::Maf(dir) => write!(f, "maf:{}", dir.display()),
        }
    }
}

/// Everything a generator needs; [`Default`] gives a one-minute run of 1000 requests/s
/// over 100 models.
#[derive(Clone, Debug)]
pub struct WorkloadParams {
    /// Number of models; arrivals name models `0..models`. Must be at least 1.
    pub models: u32,
    /// Mean offered rate over the run, requests per simulated second. Synthetic kinds need
    /// it above 0. Trace kinds scale the trace's counts so the mean over the run is exactly
    /// this in expectation; 0 replays the trace's counts as they are.
    pub rate: f64,
    /// Length of the run in simulated time; no arrival is at or after it.
    pub duration: Nanos,
    /// Default SLO; only `ramp` puts it on arrivals (and moves it), others leave `slo: None`.
    pub slo: Nanos,
    /// Seed of every random choice.
    pub seed: u64,
    /// Zipf exponent of model popularity for synthetic kinds and closed loop (0 = uniform):
    /// model `k` is drawn with weight `1 / (k + 1)^popularity`, so model 0 is the most popular.
    pub popularity: f64,
    /// Trace minutes per simulated minute: a factor of 60 plays one trace minute per
    /// simulated second.
    pub time_compression: f64,
    /// Bursty: length of each on period.
    pub burst_on: Nanos,
    /// Bursty: length of each off period.
    pub burst_off: Nanos,
    /// Bursty: off-period rate as a fraction of the on-period rate, in `[0, 1]`.
    pub burst_off_fraction: f64,
    /// Ramp: the rate starts at `rate * ramp_from` ...
    pub ramp_from: f64,
    /// ... and moves linearly to `rate * ramp_to` at the end of the run (the mean is
    /// `rate * (ramp_from + ramp_to) / 2`).
    pub ramp_to: f64,
    /// Ramp: the SLO starts at `slo * slo_from` ...
    pub slo_from: f64,
    /// ... and moves linearly to `slo * slo_to` at the end of the run.
    pub slo_to: f64,
    /// Where `maf-synth` writes its trace files (created if missing; existing day files it
    /// writes are replaced). The default is a per-process folder in the system temp dir.
    pub scratch_dir: PathBuf,
}

impl Default for WorkloadParams {
    fn default() -> Self {
        Self {
            models: 100,
            rate: 1000.0,
            duration: 60_000 * MS,
            slo: 100 * MS,
            seed: 1,
            popularity: 1.0,
            time_compression: 60.0,
            burst_on: 1_000 * MS,
            burst_off: 4_000 * MS,
            burst_off_fraction: 0.1,
            // Symmetric around 1 so the ramp's mean rate is `rate`.
            ramp_from: 0.5,
            ramp_to: 1.5,
            slo_from: 1.0,
            slo_to: 1.0,
            // Per process, so concurrent simulations never overwrite each other's trace.
            scratch_dir: std::env::temp_dir()
                .join(format!("clockwork-maf-synth-{}", std::process::id())),
        }
    }
}

/// Opens an open-loop stream for every kind except [`WorkloadKind::Closed`], which is an
/// error telling the caller to use [`ClosedLoop`].
pub fn open(
    kind: &WorkloadKind,
    params: &WorkloadParams,
) -> Result<Box<dyn ArrivalStream>, WorkloadError> {
    check_models(params.models)?;
    match kind {
        WorkloadKind::Poisson => Ok(Box::new(synthetic::poisson(params)?)),
        WorkloadKind::Fixed => Ok(Box::new(synthetic::fixed(params)?)),
        WorkloadKind::Bursty => Ok(Box::new(synthetic::bursty(params)?)),
        WorkloadKind::Ramp => Ok(Box::new(synthetic::ramp(params)?)),
        WorkloadKind::Closed => Err(WorkloadError::ClosedIsNotOpen),
        WorkloadKind::MafSynth => Ok(Box::new(synth::open(params)?)),
        WorkloadKind::Maf(dir) => {
            let files = trace_files(dir)?;
            Ok(Box::new(trace::replay(dir, &files, params)?))
        }
    }
}

/// What went wrong opening a workload: each message names the parameter, or the file,
/// line and column.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The workload name is none of the known kinds.
    #[error(
        "unknown workload '{0}': expected poisson, fixed, closed, bursty, ramp, maf-synth or maf:DIR"
    )]
    UnknownKind(String),
    /// A parameter is out of its range.
    #[error("workload parameter {name} = {value}: {reason}")]
    BadParam {
        /// The field of [`WorkloadParams`] (or argument) at fault.
        name: &'static str,
        /// Its value, as written by `Debug`.
        value: String,
        /// What it must be.
        reason: &'static str,
    },
    /// [`open`] was asked for the closed loop.
    #[error("the closed workload is driven by the simulator's loop: use workload::ClosedLoop, not workload::open")]
    ClosedIsNotOpen,
    /// A file or directory could not be read or written.
    #[error("{}: {cause}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the operating system said.
        cause: std::io::Error,
    },
    /// The directory holds no trace file.
    #[error("{}: no trace files ({TRACE_FILE_PREFIX}*.csv) in this directory", dir.display())]
    NoTraceFiles {
        /// The directory searched.
        dir: PathBuf,
    },
    /// A trace file is not in the Azure Functions 2019 format.
    #[error("{}: line {line}{}: {message}", path.display(), column_text(*column))]
    Format {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// 1-based comma-separated column, when one column is at fault.
        column: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// A rate was asked for but the replayed part of the trace has no invocation to scale.
    #[error("trace in {}: no invocations in the replayed {minutes} trace minutes, cannot scale to {rate} requests/s", dir.display())]
    EmptyTrace {
        /// The trace directory.
        dir: PathBuf,
        /// How many trace minutes the run covers.
        minutes: u64,
        /// The rate asked for.
        rate: f64,
    },
}

/// `", column N"` or nothing, for [`WorkloadError::Format`].
fn column_text(column: Option<usize>) -> String {
    column.map(|c| format!(", column {c}")).unwrap_or_default()
}

/// Refuses zero models: every arrival must name one.
fn check_models(models: u32) -> Result<(), WorkloadError> {
    if models == 0 {
        return Err(WorkloadError::BadParam {
            name: "models",
            value: "0".into(),
            reason: "must be at least 1",
        });
    }
    Ok(())
}

/// Refuses a parameter that fails `ok`, naming it.
fn check(
    name: &'static str,
    value: f64,
    ok: bool,
    reason: &'static str,
) -> Result<(), WorkloadError> {
    if ok && value.is_finite() {
        Ok(())
    } else {
        Err(WorkloadError::BadParam {
            name,
            value: format!("{value:?}"),
            reason,
        })
    }
}

#[cfg(test)]
mod tests;
