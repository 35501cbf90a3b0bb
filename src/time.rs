//! Time as the whole runtime sees it: integer nanoseconds since the clock's epoch.
//!
//! Every timestamp in a message, an action or a policy decision is a [`Nanos`]. Only
//! [`Clock`] reads the time, and it reads it through tokio, so the same actors run in real
//! time under `clockwork serve` and in virtual time under tokio's paused clock (tests and
//! the simulator). The scheduling policy never reads a clock: it is handed `now`.

use std::time::Duration;

mod precise;

/// Nanoseconds since the epoch of the [`Clock`] that produced them.
pub type Nanos = u64;

/// One millisecond in [`Nanos`].
pub const MS: Nanos = 1_000_000;

/// One microsecond in [`Nanos`].
pub const US: Nanos = 1_000;

/// The longest duration an estimate may hold: an hour. Far above any objective, so an
/// estimate held to it refuses what a longer one would; small enough that a timestamp plus
/// a few estimates never overflows. A profile or a report claiming more counts as this
/// (`Estimator`), or is not trusted at all (a stored profile is measured anew).
pub const LONGEST: Nanos = 3_600_000 * MS;

/// Converts a configured duration to [`Nanos`], saturating at the far future.
pub fn nanos(duration: Duration) -> Nanos {
    u64::try_from(duration.as_nanos()).unwrap_or(Nanos::MAX)
}

/// How many tokio nanoseconds a virtual nanosecond lasts.
///
/// tokio's timers fire on whole milliseconds, which would round every emulated 2.73 ms
/// execution up to 3 ms. A virtual clock therefore runs tokio's paused clock 1000 times
/// slower than the time it reports, so timers land on the exact microsecond.
const VIRTUAL_SCALE: u32 = 1_000;

/// The injected source of time for actors.
///
/// It is a cheap handle: clones share the epoch, so timestamps from different actors on
/// different threads are comparable. Every timer in the runtime takes its duration from
/// [`Clock::until`], never from tokio directly, so the virtual clock's scale holds.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// The instant that is `0` nanoseconds.
    epoch: tokio::time::Instant,
    /// tokio nanoseconds per reported nanosecond: 1 in real time.
    scale: u32,
}

impl Clock {
    /// Starts a real-time clock whose epoch is now.
    pub fn start() -> Self {
        Self {
            epoch: tokio::time::Instant::now(),
            scale: 1,
        }
    }

    /// Starts a virtual clock whose epoch is now, for a paused tokio runtime (see
    /// [`virtual_system`]); it resolves time to the microsecond. Under a running runtime it
    /// would crawl at a thousandth of real time.
    pub fn start_virtual() -> Self {
        Self {
            epoch: tokio::time::Instant::now(),
            scale: VIRTUAL_SCALE,
        }
    }

    /// Nanoseconds elapsed since the epoch.
    pub fn now(&self) -> Nanos {
        nanos(self.epoch.elapsed()) / Nanos::from(self.scale)
    }

    /// The tokio instant of a timestamp, for timers.
    pub fn instant(&self, at: Nanos) -> tokio::time::Instant {
        self.epoch + Duration::from_nanos(at.saturating_mul(Nanos::from(self.scale)))
    }

    /// How long, in tokio's time, from now until `at` (zero if it has passed).
    pub fn until(&self, at: Nanos) -> Duration {
        let wait = at.saturating_sub(self.now());
        Duration::from_nanos(wait.saturating_mul(Nanos::from(self.scale)))
    }

    /// Sleeps until the timestamp `at`.
    ///
    /// In real time tokio's timers fire on whole milliseconds, which would stretch an
    /// emulated 0.12 ms execution to 1 ms: the clock sleeps the bulk on a tokio timer and
    /// the last millisecond on the process's timer thread (`time/precise.rs`), so it wakes a
    /// thread's wake-up after `at` (never before) and leaves the core to others while it
    /// waits. A virtual clock needs none of that.
    pub async fn sleep_until(&self, at: Nanos) {
        if self.scale != 1 {
            tokio::time::sleep_until(self.instant(at)).await;
            return;
        }
        let coarse = at.saturating_sub(MS);
        if coarse > self.now() {
            tokio::time::sleep_until(self.instant(coarse)).await;
        }
        precise::until(self.instant(at).into_std()).await;
    }
}

/// An actix system on a single-threaded tokio runtime whose clock is paused: time jumps to
/// the next timer whenever every actor is idle, so runs are fast and deterministic.
/// Everything must be placed on this one thread (see `actors::Placement::CurrentThread`).
pub fn virtual_system() -> std::io::Result<actix::SystemRunner> {
    // Timers only: without the I/O driver, advancing virtual time parks without a
    // system call, which is most of the cost of a simulated event.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    Ok(actix::System::with_tokio_rt(move || runtime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn real_time_sleeps_are_never_early_nor_rounded_to_milliseconds() {
        let clock = Clock::start();
        for wait in [0, 120 * US, 1_300 * US] {
            let target = clock.now() + wait;
            clock.sleep_until(target).await;
            assert!(clock.now() >= target, "woke before {target}");
        }
        assert_eq!(clock.until(0), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn virtual_clock_resolves_microseconds() {
        let clock = Clock::start_virtual();
        let at = 2_730 * US;
        tokio::time::sleep(clock.until(at)).await;
        assert_eq!(
            clock.now(),
            at,
            "a real-time clock would have rounded to 3 ms"
        );
        clock.sleep_until(at + 17 * US).await;
        assert_eq!(clock.now(), at + 17 * US);
    }
}
