//! Fault injection around any [`Backend`]: a device that misbehaves on purpose.
//!
//! [`Faulty`] wraps a backend (a `sim` device, a `cpu` device thread, a test double) and,
//! as its [`FaultConfig`] says, fails actions at a seeded rate, fails LOADs (weights that
//! cannot be copied in), stretches every action inside a time window, hangs from a time on
//! (actions wait without a word until the episode ends, or forever), or panics in the
//! backend from a time on. Time is the injected clock's, so under a paused runtime the
//! faults fire at the same virtual instants every run.
//!
//! A panic here is real: it unwinds out of the backend's future. The executor catches
//! panics of any backend ([`catch_panics`]) and fails the action as
//! [`DeviceError::Panicked`], so a crashing device never takes the server down.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::thread::panic_message;
use super::ModelArtifact;
use super::{Backend, BackendFuture, BackendInfo, BatchOutputs, DeviceError, Executed, InferJob};
use crate::config::{FaultConfig, FaultEpisode};
use crate::model::ModelId;
use crate::time::{nanos, Clock, Nanos};

/// A backend with faults injected.
pub struct Faulty {
    /// Behind a lock only to be `Sync` for the futures that call it after a hang.
    inner: Arc<Mutex<Box<dyn Backend>>>,
    clock: Clock,
    faults: Faults,
    rng: Arc<Mutex<StdRng>>,
}

/// The configuration in the clock's nanoseconds.
#[derive(Clone, Copy, Debug)]
struct Faults {
    failure_rate: f64,
    load_failure_rate: f64,
    /// (from, until, factor).
    slowdown: Option<(Nanos, Nanos, f64)>,
    hang: Option<(Nanos, Nanos)>,
    panic: Option<(Nanos, Nanos)>,
    failing_runs: Option<(Nanos, Nanos)>,
    failing_loads: Option<(Nanos, Nanos)>,
}

/// (from, until) of an episode; `Nanos::MAX` for one without an end.
fn window(episode: &FaultEpisode) -> (Nanos, Nanos) {
    let from = nanos(episode.from);
    let until = episode
        .lasting
        .map_or(Nanos::MAX, |d| from.saturating_add(nanos(d)));
    (from, until)
}

fn within(window: Option<(Nanos, Nanos)>, now: Nanos) -> bool {
    window.is_some_and(|(from, until)| (from..until).contains(&now))
}

/// Which operation a fault applies to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Load,
    Infer,
    Other,
}

impl Faulty {
    /// Wraps `inner`; `seed` is added to the configuration's (one device of a group each).
    pub fn new(inner: Box<dyn Backend>, clock: Clock, config: &FaultConfig, seed: u64) -> Self {
        let faults = Faults {
            failure_rate: config.failure_rate,
            load_failure_rate: config.load_failure_rate,
            slowdown: config
                .slowdown
                .map(|s| (nanos(s.from), nanos(s.until), s.factor)),
            hang: config.hang.as_ref().map(window),
            panic: config.panic.as_ref().map(window),
            failing_runs: config.failing_runs.as_ref().map(window),
            failing_loads: config.failing_loads.as_ref().map(window),
        };
        let rng = StdRng::seed_from_u64(config.seed.wrapping_add(seed));
        Self {
            inner: Arc::new(Mutex::new(inner)),
            clock,
            faults,
            rng: Arc::new(Mutex::new(rng)),
        }
    }

    /// Whether this operation fails by draw (decided when it is asked for, in order).
    fn draw_failure(&self, op: Op) -> Option<DeviceError> {
        let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        let f = &self.faults;
        if f.failure_rate > 0.0 && rng.random_bool(f.failure_rate.min(1.0)) {
            return Some(DeviceError::Injected("action failed"));
        }
        let load = op == Op::Load && f.load_failure_rate > 0.0;
        if load && rng.random_bool(f.load_failure_rate.min(1.0)) {
            return Some(DeviceError::Injected("weights failed to load"));
        }
        None
    }

    /// Runs `work` on the inner backend with the faults of the moment applied.
    fn wrap<T: 'static>(
        &self,
        op: Op,
        work: impl FnOnce(&dyn Backend) -> BackendFuture<Executed<T>> + 'static,
    ) -> BackendFuture<Executed<T>> {
        let failure = self.draw_failure(op);
        let (inner, clock, faults) = (Arc::clone(&self.inner), self.clock, self.faults);
        Box::pin(async move {
            let asked = clock.now();
            if let Some((_, until)) = faults.hang.filter(|_| within(faults.hang, asked)) {
                // A device stuck in a driver call: nothing, until the episode ends.
                clock.sleep_until(until).await;
            }
            let begin = clock.now();
            if within(faults.panic, begin) {
                panic!("injected fault: the device panicked");
            }
            if let Some(error) = failure {
                return Err(error);
            }
            if op == Op::Infer && within(faults.failing_runs, begin) {
                return Err(DeviceError::Injected("the run failed"));
            }
            if op == Op::Load && within(faults.failing_loads, begin) {
                return Err(DeviceError::Injected("weights failed to load"));
            }
            let started = work(
                inner
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .as_ref(),
            );
            let mut done = started.await?;
            if let Some((from, until, factor)) = faults.slowdown {
                if (from..until).contains(&begin) && factor > 1.0 {
                    let took = done.device_time.unwrap_or(clock.now() - begin);
                    let extra = (took as f64 * (factor - 1.0)).round() as Nanos;
                    clock.sleep_until(clock.now() + extra).await;
                    done.device_time = Some(took + extra);
                }
            }
            Ok(done)
        })
    }
}

impl Backend for Faulty {
    fn info(&self) -> BackendInfo {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .info()
    }

    fn load(&self, artifact: Arc<ModelArtifact>) -> BackendFuture<Executed<()>> {
        self.wrap(Op::Load, move |b| b.load(artifact))
    }

    fn unload(&self, model: ModelId) -> BackendFuture<Executed<()>> {
        self.wrap(Op::Other, move |b| b.unload(model))
    }

    fn core(&self) -> Option<crate::cores::Core> {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .core()
    }

    fn infer(&self, job: InferJob) -> BackendFuture<Executed<BatchOutputs>> {
        self.wrap(Op::Infer, move |b| b.infer(job))
    }
}

/// A backend future whose panic becomes [`DeviceError::Panicked`].
struct CatchPanic<T>(Option<BackendFuture<T>>);

impl<T> Future for CatchPanic<T> {
    type Output = Result<T, DeviceError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(work) = this.0.as_mut() else {
            return Poll::Ready(Err(DeviceError::Panicked("polled after a panic".into())));
        };
        match catch_unwind(AssertUnwindSafe(|| work.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(panic) => {
                // The future is left half-way: drop it, never poll it again.
                this.0 = None;
                Poll::Ready(Err(DeviceError::Panicked(panic_message(&panic))))
            }
        }
    }
}

/// `work`, with a panic while it runs turned into a failed action.
pub fn catch_panics<T: 'static>(work: BackendFuture<T>) -> BackendFuture<T> {
    Box::pin(CatchPanic(Some(work)))
}

#[cfg(test)]
#[path = "fault_tests.rs"]
mod tests;
