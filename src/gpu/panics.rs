//! Panics that are answers rather than accidents. tract panics on some values a client may
//! send (a `Gather` index out of range): the cpu backend catches that as the model failing
//! on the batch's inputs (`DeviceError::Model`). The process's panic hook would still
//! print it, with a backtrace if `RUST_BACKTRACE` is set, on the device's own thread: in
//! a run of bench/hostile_values.sh symbolising those backtraces held the device past
//! other requests' deadlines (docs/RELIABILITY.md). Inside [`catch_quietly`] the
//! hook stays silent; the failure is the action's error, counted and answered.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// Whether this thread is inside [`catch_quietly`].
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Installs, once, a hook that passes every panic to the hook it replaces, except those
/// of a thread inside [`catch_quietly`].
static HOOK: Once = Once::new();

/// Runs `work`, its panic (on this thread) caught as the panic's message and not printed.
/// A panic on another thread that `work` starts (tract's pool, with more than one
/// thread per device) is printed as usual.
pub fn catch_quietly<T>(work: impl FnOnce() -> T) -> Result<T, String> {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
    let outer = QUIET.with(|quiet| quiet.replace(true));
    let result = catch_unwind(AssertUnwindSafe(work));
    QUIET.with(|quiet| quiet.set(outer));
    result.map_err(|panic| panic_text(&panic))
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
}
