//! Does anything else run on a device thread's core? A real device thread (pinned to a
//! core of its own, `src/cores.rs`) measures each job's wall time and the time the
//! kernel kept it waiting for a core meanwhile (`/proc/thread-self/schedstat`, Linux).
//! A device whose runs wait is sharing its core, with a client or another program on the
//! same machine: its runs stretch by the waiting, its learned estimates (p99 of measured
//! runs) follow that noise, and requests are refused or time out at a light load. The
//! edge benchmark found exactly that (docs/EXPERIMENTS.md, "Where the light-load
//! refusals came from"), so the server says it, with the share of time lost, at most
//! once per [`WINDOW`].
//!
//! [`Contention`] is pure (times are passed in); [`waited_so_far`] reads the kernel's counter.

use crate::time::Nanos;

/// How often at most the device says that it shares its core, and the span its share
/// is measured over.
pub const WINDOW: Nanos = 10_000_000_000;

/// The share of its jobs' wall time a device may wait for its core before it says so:
/// below it, waiting is the kernel's own housekeeping.
pub const WARN_SHARE: f64 = 0.05;

/// One window's account, said when the share of waiting passed [`WARN_SHARE`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shared {
    /// Jobs in the window.
    pub jobs: u64,
    /// Their wall time.
    pub wall: Nanos,
    /// Of that, the time the thread waited for a core.
    pub waited: Nanos,
}

impl Shared {
    /// The share of the wall time spent waiting.
    pub fn share(&self) -> f64 {
        self.waited as f64 / self.wall.max(1) as f64
    }
}

/// Waiting per window of one device thread.
#[derive(Debug, Default)]
pub struct Contention {
    /// When the current window began (the first job's end after the last report).
    since: Option<Nanos>,
    jobs: u64,
    wall: Nanos,
    waited: Nanos,
}

impl Contention {
    /// Counts a job that ended at `now`, took `wall` and waited `waited` of it; at the end
    /// of a window, answers its account if the device waited more than [`WARN_SHARE`].
    pub fn observe(&mut self, now: Nanos, wall: Nanos, waited: Nanos) -> Option<Shared> {
        let since = *self.since.get_or_insert(now);
        self.jobs += 1;
        self.wall += wall;
        self.waited += waited.min(wall);
        if now.saturating_sub(since) < WINDOW {
            return None;
        }
        let account = Shared {
            jobs: self.jobs,
            wall: self.wall,
            waited: self.waited,
        };
        *self = Self::default();
        (account.share() > WARN_SHARE).then_some(account)
    }
}

/// The calling thread's time spent waiting for a core so far, in nanoseconds (the second
/// field of `/proc/thread-self/schedstat`); `None` where the kernel does not say.
pub fn waited_so_far() -> Option<Nanos> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    parse_waited(&text)
}

/// The waiting field of a `schedstat` line: "<on a core> <waiting> <time slices>".
fn parse_waited(text: &str) -> Option<Nanos> {
    text.split_whitespace().nth(1)?.parse().ok()
}

/// [`waited_so_far`] for a thread that asks before and after every job: the file is
/// opened once, on the thread it describes, and each reading is one `pread` (opening it
/// each time cost three system calls per reading, a visible share of a 50 µs batch).
#[derive(Debug)]
pub struct Sampler {
    file: Option<std::fs::File>,
}

impl Sampler {
    /// Opens the calling thread's counters; a sampler of a kernel without them says
    /// nothing.
    pub fn for_this_thread() -> Self {
        Self {
            file: std::fs::File::open("/proc/thread-self/schedstat").ok(),
        }
    }

    /// The thread's waiting so far (see [`waited_so_far`]).
    pub fn waited(&self) -> Option<Nanos> {
        use std::os::unix::fs::FileExt;
        let mut buffer = [0u8; 96];
        let n = self.file.as_ref()?.read_at(&mut buffer, 0).ok()?;
        parse_waited(std::str::from_utf8(&buffer[..n]).ok()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn a_device_that_waits_says_so_once_per_window() {
        let mut c = Contention::default();
        // 18 ms runs, 4 ms of each waiting for the core (22%), one every 50 ms.
        let said: Vec<(Nanos, Shared)> = (1..=700)
            .filter_map(|i| {
                c.observe(i * 50 * MS, 18 * MS, 4 * MS)
                    .map(|s| (i * 50 * MS, s))
            })
            .collect();
        // 35 s of jobs: three whole windows of 10 s (each from the first job after the last).
        assert_eq!(said.len(), 3, "{said:?}");
        let (_, first) = said[0];
        assert_eq!(first.jobs, 201);
        assert!((first.share() - 4.0 / 18.0).abs() < 1e-9);
    }

    #[test]
    fn a_device_alone_on_its_core_says_nothing() {
        let mut c = Contention::default();
        // 1% waiting: the kernel's own.
        let said = (1..=600)
            .filter_map(|i| c.observe(i * 50 * MS, 100 * MS, MS))
            .count();
        assert_eq!(said, 0);
    }

    #[test]
    fn waiting_is_counted_at_most_the_wall_time() {
        let mut c = Contention::default();
        c.observe(0, 10 * MS, 50 * MS);
        let s = c
            .observe(WINDOW, 10 * MS, 0)
            .expect("half the window's wall time waited");
        assert_eq!(s.waited, 10 * MS);
        assert_eq!(s.wall, 20 * MS);
    }

    #[test]
    fn this_thread_can_read_its_waiting() {
        // Linux only; elsewhere the sampler says nothing, which is allowed.
        let sampler = Sampler::for_this_thread();
        if let Some(before) = waited_so_far() {
            let again = sampler
                .waited()
                .expect("the same counter through the open file");
            let after = waited_so_far().expect("read once, readable again");
            assert!(before <= again && again <= after);
        }
        assert_eq!(parse_waited("123 456 7\n"), Some(456));
        assert_eq!(parse_waited("123"), None);
    }
}
