//! Panics that are answers rather than accidents. tract panics on some values a client may
//! send (a `Gather` index out of range): the cpu backend catches that as the model failing
//! on the batch's inputs (`DeviceError::Model`). The process's panic hook would still
//! print it, with a backtrace if `RUST_BACKTRACE` is set, on the device's own thread: in
//! a run of bench/hostile_values.sh symbolising those backtraces held the device past
//! other requests' deadlines (docs/RELIABILITY.md). Inside [`catch_quietly`] the
//! hook stays silent; the failure is the action's error, counted and answered. So does
//! it for a panic on a thread of tract's pool (a device with more than one thread) while
//! a run is inside [`catch_quietly`]: the pool hands the panic to the run's thread, which
//! catches it.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

/// The name of the threads of tract's pools (each thread's name starts with it): their
/// panics go back to the thread that ran the pool's work.
pub const POOL_THREADS: &str = "cpu-pool";

/// Runs inside [`catch_quietly`] now, on any thread.
static QUIET_RUNS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether this thread is inside [`catch_quietly`].
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Installs, once, a hook that passes every panic to the hook it replaces, except those
/// of a thread inside [`catch_quietly`].
static HOOK: Once = Once::new();

/// Runs `work`, its panic (on this thread) caught as the panic's message and not printed;
/// nor is a panic on a thread of tract's pool meanwhile ([`POOL_THREADS`]), which the
/// pool hands back to `work`. (With two devices, a pool's panic while the other device
/// runs inside this is not printed either; pools run only inside runs.)
pub fn catch_quietly<T>(work: impl FnOnce() -> T) -> Result<T, String> {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !quiet_here() {
                previous(info);
            }
        }));
    });
    let outer = QUIET.with(|quiet| quiet.replace(true));
    QUIET_RUNS.fetch_add(1, Ordering::SeqCst);
    let result = catch_unwind(AssertUnwindSafe(work));
    QUIET_RUNS.fetch_sub(1, Ordering::SeqCst);
    QUIET.with(|quiet| quiet.set(outer));
    result.map_err(|panic| panic_text(&panic))
}

/// Whether a panic on this thread now is one [`catch_quietly`] answers for.
fn quiet_here() -> bool {
    if QUIET.with(Cell::get) {
        return true;
    }
    let pool = std::thread::current()
        .name()
        .is_some_and(|name| name.starts_with(POOL_THREADS));
    pool && QUIET_RUNS.load(Ordering::SeqCst) > 0
}

/// The message a panic carries, as far as it can be told.
pub fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_inside_is_its_message_and_the_thread_goes_on() {
        let caught = catch_quietly(|| -> u32 { panic!("index {} out of range", 7) });
        assert_eq!(caught, Err("index 7 out of range".to_owned()));
        assert_eq!(catch_quietly(|| 3), Ok(3));
        assert!(!QUIET.with(Cell::get), "the scope ends with the call");
    }

    /// Asks `quiet_here` on a new thread named `name`.
    fn quiet_on(name: &str) -> bool {
        let thread = std::thread::Builder::new().name(name.to_owned());
        thread.spawn(quiet_here).unwrap().join().unwrap()
    }

    #[test]
    fn a_pool_thread_is_quiet_while_a_run_is_inside() {
        let inside = catch_quietly(|| (quiet_on("cpu-pool-1"), quiet_on("other-1")));
        assert_eq!(inside, Ok((true, false)));
    }
}
