//! How far behind its own work an HTTP worker is: the edge counts it in every request's
//! time, once for the way back (the worker must get back to the request to write its
//! answer) and again for a body that does not come with its head (the worker must get
//! back to it to read that; `front::Body`).
//!
//! Why: under overload the front end's core may saturate (on a small machine it also runs
//! the controller, and in the benches the load generator). Then each request waits for
//! the worker before its head is even stamped, and again after its answer is ready; the
//! edge's estimates, learned from requests that were served, do not see that wait, so it
//! let through work the worker could not finish in time, and answers ready in time were
//! written after their deadline (docs/EXPERIMENTS.md, "The session's build under
//! overload, at one rate").
//!
//! A probe task on each worker sleeps [`PERIOD`] at a time and measures how late it wakes
//! (beyond the timer's [`RESOLUTION`]): the time a task ready now waits for the worker.
//! The lag the edge uses is the second largest of the last [`WINDOW`] wake-ups, read from
//! the calling worker's own thread: a worker that is behind is late at every wake-up, while
//! one stall (another process starting on the core, a page fault) is late once and over.
//! Taking the largest, one such stall of ~45 ms refused the next requests on an idle
//! server: with the lag counted on the way in and on the way back, and the device's
//! backlog, nothing was left of a 100 ms objective (perf_analyzer's first request, or all
//! four of its threads at concurrency 4, on the edge bench; docs/EXPERIMENTS.md). The gRPC
//! server's thread has a probe too: its calls run on it, a runtime of one thread, and
//! wait for it as an HTTP worker's requests wait for theirs (`start_runtime_probe`); a
//! gRPC server on a runtime of several threads (tests) has none, and no lag. Under a
//! paused clock the probe wakes exactly on time.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use crate::time::Nanos;

/// How often the probe wakes: 200 times a second, a few microseconds each.
pub const PERIOD: Duration = Duration::from_millis(5);

/// Wake-ups the lag is read from: the last 50 ms.
pub const WINDOW: usize = 10;

/// The timer's own resolution (tokio's timer wheel ticks in milliseconds): a wake-up this
/// much late is on time.
pub const RESOLUTION: Nanos = 1_000_000;

/// The last [`WINDOW`] lateness measurements, in a ring.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recent {
    ring: [Nanos; WINDOW],
    next: usize,
}

impl Recent {
    /// Adds one wake-up's lateness.
    pub fn observe(&mut self, late: Nanos) {
        self.ring[self.next] = late;
        self.next = (self.next + 1) % WINDOW;
    }

    /// The second largest in the window: lateness seen at least twice in it.
    pub fn lag(&self) -> Nanos {
        let (mut first, mut second) = (0, 0);
        for &late in &self.ring {
            if late > first {
                (first, second) = (late, first);
            } else if late > second {
                second = late;
            }
        }
        second
    }
}

thread_local! {
    /// This worker's recent lateness; zero until its probe has run.
    static RECENT: RefCell<Recent> = RefCell::new(Recent::default());
    /// Whether this thread's probe has been started.
    static PROBING: Cell<bool> = const { Cell::new(false) };
}

/// Starts the calling worker's probe, once per thread: called where each HTTP worker
/// builds its application (`api::app`), inside the worker's task set.
pub fn start_probe() {
    once_per_thread(|| {
        actix_web::rt::spawn(probe());
    });
}

/// Starts the probe of the thread that runs the calling task, once per thread, if the
/// runtime has only that thread (the gRPC server's, `serve::start_grpc`): on one of
/// several threads, the probe would measure whichever thread ran it at each wake-up.
pub fn start_runtime_probe() {
    let handle = tokio::runtime::Handle::current();
    if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread {
        once_per_thread(|| {
            handle.spawn(probe());
        });
    }
}

/// Runs `start` unless this thread's probe was started already.
fn once_per_thread(start: impl FnOnce()) {
    if !PROBING.get() {
        PROBING.set(true);
        start();
    }
}

/// The calling worker's lag: how long a task ready now waits for it, as its wake-ups
/// repeat it (see the module); zero on a thread without a probe.
pub fn current() -> Nanos {
    RECENT.with_borrow(Recent::lag)
}

/// Sleeps [`PERIOD`] at a time, for as long as the worker runs, and records how late each
/// wake-up came.
async fn probe() {
    loop {
        let due = tokio::time::Instant::now() + PERIOD;
        tokio::time::sleep_until(due).await;
        let late = tokio::time::Instant::now().saturating_duration_since(due);
        let late = Nanos::try_from(late.as_nanos()).unwrap_or(Nanos::MAX);
        RECENT.with_borrow_mut(|r| r.observe(late.saturating_sub(RESOLUTION)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mutation that breaks it: the largest in the window (one stall refuses requests).
    #[test]
    fn one_stall_is_no_lag_and_a_repeated_one_is() {
        let mut recent = Recent::default();
        assert_eq!(recent.lag(), 0);
        recent.observe(45);
        assert_eq!(
            recent.lag(),
            0,
            "one late wake-up is a stall, not a busy worker"
        );
        recent.observe(7);
        for _ in 0..WINDOW - 2 {
            recent.observe(1);
        }
        assert_eq!(recent.lag(), 7, "the 45 and the 7 are both in the window");
        recent.observe(1);
        assert_eq!(
            recent.lag(),
            1,
            "the 45 has left the window: the 7 alone is a stall"
        );
        recent.observe(9);
        recent.observe(8);
        assert_eq!(recent.lag(), 8);
    }

    #[actix_web::test]
    async fn a_worker_blocked_for_a_while_shows_it_as_lag() {
        start_probe();
        assert_blocking_shows_as_lag().await;
    }

    /// The gRPC server's thread, a runtime of one thread as `#[tokio::test]` makes.
    ///
    /// Mutation that breaks it: `start_runtime_probe` starting nothing.
    #[tokio::test]
    async fn a_runtime_of_one_thread_blocked_for_a_while_shows_it_as_lag() {
        start_runtime_probe();
        assert_blocking_shows_as_lag().await;
    }

    /// Keeps the thread from waking its probe twice, then expects the lag to show it.
    async fn assert_blocking_shows_as_lag() {
        assert_eq!(current(), 0);
        // Let the probe take its first sleep, then keep the worker from waking it, twice.
        tokio::time::sleep(Duration::from_millis(1)).await;
        std::thread::sleep(Duration::from_millis(40));
        tokio::time::sleep(Duration::from_millis(1)).await;
        std::thread::sleep(Duration::from_millis(40));
        tokio::time::sleep(2 * PERIOD).await;
        let lag = current();
        assert!(
            lag >= 30_000_000,
            "lag {lag} ns after blocking the worker 40 ms twice"
        );
    }
}
