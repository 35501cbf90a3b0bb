//! `memory::keep_and_warm` under the binary's allocator: the warmed memory stays with the
//! process after it is freed, even when the allocator is told to purge what it can.
#![cfg(all(feature = "mimalloc", target_os = "linux"))]

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// This process's resident memory, in bytes (`/proc/self/statm`, in pages).
fn resident() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("resident pages");
    // SAFETY: sysconf reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    pages * page
}

/// Mutation that breaks it: `keep_freed_memory` not setting the purge delay (mimalloc's
/// default, a second): the forced collection hands the warmed pages back and the
/// resident memory falls to where it was.
#[test]
fn warmed_memory_stays_resident_after_it_is_freed() {
    const MIB: usize = 1 << 20;
    let before = resident();
    let warmed = clockwork::memory::keep_and_warm(64 * MIB).expect("64 MiB fits");
    assert_eq!(warmed.bytes, 64 * MIB);
    assert!(warmed.kept, "mimalloc keeps freed memory");
    // A forced collection: what mimalloc would purge after its delay it purges now.
    std::thread::sleep(std::time::Duration::from_millis(50));
    // SAFETY: a collection of this thread's heap; nothing else runs in this test binary.
    unsafe { libmimalloc_sys::mi_collect(true) };
    let grown = resident().saturating_sub(before);
    assert!(
        grown >= 60 * MIB,
        "resident memory grew by {} MiB, not the 64 MiB warmed",
        grown / MIB
    );
}
