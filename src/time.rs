//! Time as the whole runtime sees it: integer nanoseconds since the clock's epoch.
//!
//! Every timestamp in a message, an action or a policy decision is a [`Nanos`]. Only
//! [`Clock`] reads the time, and it reads it through tokio, so the same actors run in real
//! time under `clockwork serve` and in virtual time under tokio's paused clock (tests and
//! the simulator). The scheduling policy never reads a clock: it is handed `now`.

use std::time::Duration;

/// Nanoseconds since the epoch of the [`Clock`] that produced them.
pub type Nanos = u64;

/// One millisecond in [`Nanos`].
pub const MS: Nanos = 1_000_000;

/// One microsecond in [`Nanos`].
pub const US: Nanos = 1_000;

/// Converts a configured duration to [`Nanos`], saturating at the far future.
pub fn nanos(duration: Duration) -> Nanos {
    u64::try_from(duration.as_nanos()).unwrap_or(Nanos::MAX)
}

/// The injected source of time for actors.
///
/// It is a cheap handle: clones share the epoch, so timestamps from different actors on
/// different threads are comparable. Under a paused tokio runtime it returns virtual time.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// The instant that is `0` nanoseconds.
    epoch: tokio::time::Instant,
}

impl Clock {
    /// Starts a clock whose epoch is now.
    pub fn start() -> Self {
        Self {
            epoch: tokio::time::Instant::now(),
        }
    }

    /// Nanoseconds elapsed since the epoch.
    pub fn now(&self) -> Nanos {
        nanos(self.epoch.elapsed())
    }

    /// The tokio instant of a timestamp, for timers.
    pub fn instant(&self, at: Nanos) -> tokio::time::Instant {
        self.epoch + Duration::from_nanos(at)
    }

    /// How long from now until `at` (zero if it has passed).
    pub fn until(&self, at: Nanos) -> Duration {
        Duration::from_nanos(at.saturating_sub(self.now()))
    }

    /// Sleeps until the timestamp `at`.
    pub async fn sleep_until(&self, at: Nanos) {
        tokio::time::sleep_until(self.instant(at)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn virtual_time_advances_exactly() {
        let clock = Clock::start();
        assert_eq!(clock.now(), 0);
        clock.sleep_until(7 * MS).await;
        assert_eq!(clock.now(), 7 * MS);
        tokio::time::sleep(Duration::from_micros(3)).await;
        assert_eq!(clock.now(), 7 * MS + 3 * US);
        assert_eq!(clock.until(5 * MS), Duration::ZERO);
    }
}
