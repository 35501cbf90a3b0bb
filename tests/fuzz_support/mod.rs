//! Shared by the `fuzz_*` tests: how many inputs to try, and structure-aware mutations of
//! valid inputs (byte flips, cuts, splices of the tokens that break parsers: huge and
//! negative numbers, deep nesting, stray quotes and brackets).
//!
//! `cargo test` tries `FUZZ_CASES` inputs per target (256 unless set); `bench/fuzz.sh`
//! sets it high for the long run.

#![allow(dead_code)] // each test file uses its own part

use proptest::prelude::*;

/// Inputs per target: `FUZZ_CASES`, else 256 (seconds in CI).
pub fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// The proptest configuration of every fuzz target.
pub fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        // A long run should report what it found, not spend its time shrinking.
        max_shrink_iters: 512,
        ..ProptestConfig::default()
    }
}

/// Text that breaks parsers when spliced into a valid input.
pub const TOKENS: &[&str] = &[
    "-1",
    "0",
    "1099511627776",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "1e309",
    "-1e309",
    "NaN",
    "inf",
    "\"",
    "\\",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "=",
    "\n",
    "\n[",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
    "\u{0}",
    "\u{feff}",
    "é",
    "null",
    "true",
    "\"\"",
    "[]",
    "{}",
];

/// One edit of an input.
#[derive(Clone, Debug)]
pub enum Edit {
    /// Flips one bit of the byte at this position.
    Flip(usize, u8),
    /// Overwrites the byte at this position.
    Set(usize, u8),
    /// Removes this many bytes from this position.
    Delete(usize, usize),
    /// Inserts a token from [`TOKENS`] at this position.
    Token(usize, usize),
    /// Inserts these bytes at this position.
    Insert(usize, Vec<u8>),
    /// Repeats the bytes between two positions at the second one (duplicated fields,
    /// nesting).
    Repeat(usize, usize),
    /// Cuts the input at this position.
    Truncate(usize),
}

/// Edits of any kind.
pub fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        4 => (any::<usize>(), 0u8..8).prop_map(|(i, b)| Edit::Flip(i, b)),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        2 => (any::<usize>(), 1usize..16).prop_map(|(i, n)| Edit::Delete(i, n)),
        4 => (any::<usize>(), 0..TOKENS.len()).prop_map(|(i, t)| Edit::Token(i, t)),
        1 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(i, b)| Edit::Insert(i, b)),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::Repeat(a, b)),
        1 => any::<usize>().prop_map(Edit::Truncate),
    ]
}

/// One to `max` edits.
pub fn edits(max: usize) -> impl Strategy<Value = Vec<Edit>> {
    proptest::collection::vec(edit(), 1..=max)
}

/// `input` with `edits` applied in order (positions taken modulo the length).
pub fn apply(input: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = input.to_vec();
    for edit in edits {
        let at = |i: usize, out: &Vec<u8>| i % (out.len() + 1);
        match edit {
            Edit::Flip(i, bit) if !out.is_empty() => {
                let i = i % out.len();
                out[i] ^= 1 << bit;
            }
            Edit::Set(i, b) if !out.is_empty() => {
                let i = i % out.len();
                out[i] = *b;
            }
            Edit::Flip(..) | Edit::Set(..) => {}
            Edit::Delete(i, n) => {
                let i = at(*i, &out);
                let end = (i + n).min(out.len());
                out.drain(i..end);
            }
            Edit::Token(i, t) => {
                let i = at(*i, &out);
                out.splice(i..i, TOKENS[*t].bytes());
            }
            Edit::Insert(i, bytes) => {
                let i = at(*i, &out);
                out.splice(i..i, bytes.iter().copied());
            }
            Edit::Repeat(a, b) => {
                let (a, b) = (at(*a, &out), at(*b, &out));
                let (from, to) = (a.min(b), a.max(b));
                let piece: Vec<u8> = out[from..to.min(from + 256)].to_vec();
                out.splice(to..to, piece);
            }
            Edit::Truncate(i) => {
                let i = at(*i, &out);
                out.truncate(i);
            }
        }
    }
    out
}

/// `input` mutated, as text (lossy: parsers of text files get text).
pub fn apply_text(input: &str, edits: &[Edit]) -> String {
    String::from_utf8_lossy(&apply(input.as_bytes(), edits)).into_owned()
}

/// The largest single allocation this thread made, so a test can check that a small
/// hostile input never makes a parser reserve memory out of proportion to it.
mod allocations {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        // Const-initialised and without a destructor: safe to touch from the allocator.
        pub static LARGEST: Cell<usize> = const { Cell::new(0) };
    }

    /// The system allocator, noting each thread's largest request.
    pub struct Tracking;

    unsafe impl GlobalAlloc for Tracking {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            note(layout.size());
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            note(layout.size());
            unsafe { System.alloc_zeroed(layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            note(new_size);
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    fn note(size: usize) {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
    }
}

#[global_allocator]
static TRACKING: allocations::Tracking = allocations::Tracking;

/// Runs `f` and returns what it returned with the largest single allocation it made on
/// this thread.
pub fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    allocations::LARGEST.with(|l| l.set(0));
    let out = f();
    (out, allocations::LARGEST.with(|l| l.get()))
}

/// Most bytes one allocation may take while parsing a fuzzed input of a few KiB.
pub const ALLOCATION_LIMIT: usize = 16 << 20;
