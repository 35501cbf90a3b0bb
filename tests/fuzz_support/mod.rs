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
