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
//! allocator keeps freed memory instead of handing it back to the system after a delay
//! (mimalloc's purge, a second by default; the process's resident memory is then its
//! high-water mark, itself bounded by the front end's bounds), and `[server] warm_memory_bytes` are
//! written once, then freed to it, so that the first bursts reuse them.

use std::time::{Duration, Instant};

/// What [`keep_and_warm`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Warmed {
    /// Bytes written and freed back to the allocator.
    pub bytes: usize,
    /// How long writing them took.
    pub took: Duration,
    /// Whether mimalloc was told to keep freed memory from now on (the `mimalloc`
    /// feature; it does so where it is the global allocator, as in `clockwork serve`);
    /// with another allocator the warmed memory may go back to the system.
    pub kept: bool,
}

/// Allocated and written at a time: large enough that the allocator takes it from the
/// same regions as a large request body, small enough to stay below the size it gives a
/// mapping of its own.
const CHUNK: usize = 1 << 20;

/// Why nothing was warmed.
#[derive(Debug, thiserror::Error)]
pub enum WarmError {
    #[error(
        "[server] warm_memory_bytes = {asked} is more than half of this machine's memory \
         ({physical} bytes): lower it (or set 0 to write none)"
    )]
    TooLarge { asked: usize, physical: usize },
}

/// Keeps freed memory in the process from now on (where the allocator allows it) and
/// writes `bytes` of fresh memory once, freeing it back to the allocator. More than half
/// of the machine's memory is refused before anything is allocated: on a system that
/// overcommits, the allocation would succeed and writing it end in the OOM killer.
pub fn keep_and_warm(bytes: usize) -> Result<Warmed, WarmError> {
    if let Some(physical) = physical_memory().filter(|&p| bytes > p / 2) {
        return Err(WarmError::TooLarge {
            asked: bytes,
            physical,
        });
    }
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
    Ok(Warmed {
        bytes,
        took: begun.elapsed(),
        kept,
    })
}

/// The machine's physical memory in bytes, where the system says.
fn physical_memory() -> Option<usize> {
    // SAFETY: sysconf reads constants of the system.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let pages = usize::try_from(pages).ok()?;
    let page = usize::try_from(page).ok()?;
    pages.checked_mul(page)
}

/// mimalloc's purge delay set to "never": freed pages stay with the process for reuse.
/// Answers whether it was set: only for mimalloc 2 and 3 (the crate builds 3 by
/// default), which number this option alike; another version may number its options
/// otherwise (`tests/warm_memory.rs` then fails).
#[cfg(feature = "mimalloc")]
fn keep_freed_memory() -> bool {
    // `mi_option_purge_delay` in the `mi_option_t` of mimalloc 2 and 3 (the crate names
    // options only up to `max_segment_reclaim`); -1 is "no purging at all".
    const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: reads the linked library's version (major * 10000 + minor * 100 + patch).
    if !matches!(unsafe { libmimalloc_sys::mi_version() } / 10_000, 2 | 3) {
        return false;
    }
    // SAFETY: sets one of mimalloc's options, which it reads when it next considers a
    // purge; any value is valid for this option.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    true
}

#[cfg(not(feature = "mimalloc"))]
fn keep_freed_memory() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mutation that breaks it: the check removed (allocating 2^62 bytes aborts the test
    /// binary).
    #[test]
    fn more_than_half_the_machine_is_refused_before_allocating() {
        let physical = physical_memory().expect("this system reports its memory");
        let error = keep_and_warm(usize::MAX / 4).unwrap_err();
        assert!(matches!(error, WarmError::TooLarge { physical: p, .. } if p == physical));
        assert!(error.to_string().contains("warm_memory_bytes"));
        let fine = keep_and_warm(1 << 20).expect("1 MiB is not refused");
        assert_eq!(fine.bytes, 1 << 20);
    }
}
