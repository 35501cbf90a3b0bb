//! Memory the server keeps once it has touched it, and warms at start.
//!
//! A page a process writes for the first time costs a fault and a zeroing, and on a
//! virtual machine often a fault of the host too (the guest's free memory is handed back
//! to it). On the edge bench's host that was tens of milliseconds for a few tens of MiB:
//! the first cluster of JSON requests to need more bodies in flight at once than any
//! before it held the HTTP worker in page faults (12% of the server's samples in the
//! kernel's `clear_page`) and its first answers came 100-230 ms after arrival; the same
//! cluster a second later, its memory reused, was served within about 50 ms
//! (docs/EXPERIMENTS.md, "The first cluster and fresh memory").
//!
//! So the binary, which chooses the allocator, asks [`keep_and_warm`] at start: the
//! allocator keeps freed memory instead of handing it back to the system after a few
//! milliseconds (mimalloc's purge; the process's resident memory is then its high-water
//! mark, itself bounded by the front end's bounds), and `[server] warm_memory_bytes` are
//! written once, then freed to it, so that the first bursts reuse them.

use std::time::{Duration, Instant};

/// What [`keep_and_warm`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Warmed {
    /// Bytes written and freed back to the allocator.
    pub bytes: usize,
    /// How long writing them took.
    pub took: Duration,
    /// Whether the allocator keeps freed memory from now on (mimalloc, the `mimalloc`
    /// feature); with another allocator the warmed memory may go back to the system.
    pub kept: bool,
}

/// Allocated and written at a time: large enough that the allocator takes it from the
/// same regions as a large request body, small enough to stay below the size it gives a
/// mapping of its own.
const CHUNK: usize = 1 << 20;

/// Keeps freed memory in the process from now on (where the allocator allows it) and
/// writes `bytes` of fresh memory once, freeing it back to the allocator.
pub fn keep_and_warm(bytes: usize) -> Warmed {
    let kept = keep_freed_memory();
    let begun = Instant::now();
    let chunks: Vec<Vec<u8>> = (0..bytes.div_ceil(CHUNK))
        .map(|_| {
            // Written, not only allocated: a zeroed allocation of fresh memory is
            // mapped without touching a page.
            let mut chunk = Vec::with_capacity(CHUNK);
            chunk.resize(CHUNK, 0xA5_u8);
            chunk
        })
        .collect();
    let bytes = chunks.len() * CHUNK;
    drop(std::hint::black_box(chunks));
    Warmed {
        bytes,
        took: begun.elapsed(),
        kept,
    }
}

/// mimalloc's purge delay set to "never": freed pages stay with the process for reuse.
#[cfg(feature = "mimalloc")]
fn keep_freed_memory() -> bool {
    // `mi_option_purge_delay` in mimalloc 2's `mi_option_t` (the crate names options
    // only up to `max_segment_reclaim`); -1 is "no purging at all".
    const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: sets one of mimalloc's options, which it reads when it next considers a
    // purge; any value is valid for this option.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    true
}

#[cfg(not(feature = "mimalloc"))]
fn keep_freed_memory() -> bool {
    false
}
