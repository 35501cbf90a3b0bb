//! Sleeps that end microseconds after their instant in real time, without spinning.
//!
//! tokio's timers fire on whole milliseconds, and an emulated device (`gpu::sim`) runs for
//! tens of microseconds, so [`Clock::sleep_until`](super::Clock::sleep_until) sleeps the
//! bulk of a wait on a tokio timer and hands the last millisecond here. It used to yield
//! in a loop through that millisecond instead, which kept the thread runnable for the
//! whole of every emulated run: under the emulated overload bench's 10x burst the device's
//! executor, on the server's core, took 7 of that core's 20 CPU seconds, more than half of
//! what the HTTP worker got (docs/EXPERIMENTS.md, "Emulated devices that sleep").
//!
//! One thread per process keeps the waiting instants in a heap and sleeps until the
//! earliest on the kernel's high-resolution timer (a futex wait), its timer slack lowered
//! to a nanosecond where the system allows it (Linux), then wakes each waiter whose
//! instant has passed: never before its instant, a thread's wake-up later. No crate here
//! did this without bringing an I/O reactor of its own; a `timerfd` on each caller's
//! runtime would need that runtime's I/O driver, which the virtual systems leave out.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// A future that completes once `Instant::now()` has reached its instant.
pub(super) struct Sleep {
    at: Instant,
    /// Its place in the timer thread's heap, once it has waited.
    slot: Option<Arc<Slot>>,
}

/// Sleeps until `at` on the timer thread (at once if it has passed).
pub(super) fn until(at: Instant) -> Sleep {
    Sleep { at, slot: None }
}

/// Where the timer thread finds a waiter's waker: replaced on each poll, taken when the
/// instant passes, cleared when the waiter is dropped first.
struct Slot {
    waker: Mutex<Option<Waker>>,
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.at {
            return Poll::Ready(());
        }
        match &self.slot {
            Some(slot) => *lock(&slot.waker) = Some(cx.waker().clone()),
            None => {
                let slot = Arc::new(Slot {
                    waker: Mutex::new(Some(cx.waker().clone())),
                });
                timers().add(self.at, Arc::clone(&slot));
                self.slot = Some(slot);
            }
        }
        // The thread may have fired between the first check and the waker's store, taking
        // the previous waker: it fires only once the instant has passed, so look again.
        if Instant::now() >= self.at {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        // A sleep given up (its task cancelled) leaves its entry in the heap until its
        // instant, at most a millisecond away, but nobody to wake.
        if let Some(slot) = &self.slot {
            lock(&slot.waker).take();
        }
    }
}

/// One waiting instant; `seq` orders equal instants by arrival, so the heap needs no
/// order on slots.
struct Entry {
    at: Instant,
    seq: u64,
    slot: Arc<Slot>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// The heap of waiting instants, earliest first, and the condition the thread sleeps on.
struct Timers {
    state: Mutex<State>,
    /// Signalled when an instant earlier than every other arrives.
    earlier: Condvar,
}

#[derive(Default)]
struct State {
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
}

impl Timers {
    fn add(&self, at: Instant, slot: Arc<Slot>) {
        let mut state = lock(&self.state);
        let first = state.heap.peek().is_none_or(|Reverse(e)| at < e.at);
        state.seq += 1;
        let seq = state.seq;
        state.heap.push(Reverse(Entry { at, seq, slot }));
        drop(state);
        if first {
            self.earlier.notify_one();
        }
    }

    /// The timer thread: wakes whoever is due, sleeps until the next instant.
    fn run(&self) {
        lower_timer_slack();
        let mut due: Vec<Arc<Slot>> = Vec::new();
        let mut state = lock(&self.state);
        loop {
            let now = Instant::now();
            while state.heap.peek().is_some_and(|Reverse(e)| e.at <= now) {
                if let Some(Reverse(entry)) = state.heap.pop() {
                    due.push(entry.slot);
                }
            }
            if !due.is_empty() {
                // Wakers run outside the lock: waking a task may add a sleep.
                drop(state);
                for slot in due.drain(..) {
                    if let Some(waker) = lock(&slot.waker).take() {
                        waker.wake();
                    }
                }
                state = lock(&self.state);
                continue;
            }
            state = match state.heap.peek() {
                Some(Reverse(next)) => {
                    let wait = next.at.saturating_duration_since(now);
                    let (state, _) = self
                        .earlier
                        .wait_timeout(state, wait)
                        .unwrap_or_else(PoisonError::into_inner);
                    state
                }
                None => self
                    .earlier
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }
}

/// The process's timer thread, started on first use.
fn timers() -> &'static Timers {
    static TIMERS: OnceLock<&'static Timers> = OnceLock::new();
    TIMERS.get_or_init(|| {
        let timers: &'static Timers = Box::leak(Box::new(Timers {
            state: Mutex::new(State::default()),
            earlier: Condvar::new(),
        }));
        // Without the thread every sleep would hang: failing to start one is as fatal as
        // failing to start the runtime.
        std::thread::Builder::new()
            .name("clockwork-timer".into())
            .spawn(move || timers.run())
            .expect("start the precise timer thread");
        timers
    })
}

/// Linux rounds a sleeping thread's wake-up up by its timer slack (50 us by default) to
/// batch wake-ups; the emulated runs this thread times are of that order.
fn lower_timer_slack() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes one integer and changes only this thread's slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

/// The heap and the slots hold no invariant a panic could break half-way.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// CPU time the calling thread has used.
    fn thread_cpu() -> Duration {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the timespec it is given.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    }

    #[test]
    fn a_sleep_ends_after_its_instant_and_leaves_the_core_to_others() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let (slept, cpu) = runtime.block_on(async {
            let cpu = thread_cpu();
            let mut slept = Duration::ZERO;
            for _ in 0..40 {
                let start = Instant::now();
                let at = start + Duration::from_micros(400);
                until(at).await;
                assert!(Instant::now() >= at, "woke before its instant");
                slept += start.elapsed();
            }
            (slept, thread_cpu() - cpu)
        });
        // A loop that yields until the instant uses about all of it; a sleep, a few
        // microseconds a wake-up.
        assert!(
            cpu < slept / 4,
            "the sleeping thread used {cpu:?} of CPU over {slept:?} of sleep"
        );
    }

    #[test]
    fn many_sleeps_in_any_order_each_end_after_their_own_instant() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let start = Instant::now();
            let sleeps = (0..64u64).map(|i| {
                // Instants out of order, in equal pairs, the first pair already past.
                let at = start + Duration::from_micros((i / 2 * 7919) % 1500);
                async move {
                    until(at).await;
                    assert!(Instant::now() >= at, "sleep {i} woke before its instant");
                }
            });
            let handles: Vec<_> = sleeps.map(tokio::spawn).collect();
            for handle in handles {
                handle.await.expect("sleep");
            }
        });
    }
}
