//! The reader of the Azure Functions 2019 file format: header
//! `HashOwner,HashApp,HashFunction,Trigger,1,2,...,1440`, then one row per function of four
//! id columns and 1440 per-minute invocation counts. It checks every line it reads and
//! reports a problem by file, line and column. Bytes, not `str`: counts are ASCII, and a
//! row is parsed without allocating.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::WorkloadError;

/// Minutes in one day file: the format's count columns. It lives here, in the reader of
/// the format, so that the replay and the writer depend on the reader and not the reverse.
pub const DAY_MINUTES: u64 = 1440;

/// The id columns before the counts.
const ID_COLUMNS: [&str; 4] = ["HashOwner", "HashApp", "HashFunction", "Trigger"];

/// Columns in every line.
const COLUMNS: usize = ID_COLUMNS.len() + DAY_MINUTES as usize;

/// Calls `f(key, base, counts)` for every function row of the files overlapping the first
/// `window` minutes: `key` is the three hash columns, `base` the trace minute the file
/// starts at, `counts` the row's counts inside the window. Checks every line of the files
/// it reads: header, column count, every count.
pub(crate) fn for_each_row(
    files: &[PathBuf],
    window: u64,
    mut f: impl FnMut(&[u8], usize, &[u32]),
) -> Result<(), WorkloadError> {
    let mut line = Vec::new();
    let mut counts = Vec::with_capacity(DAY_MINUTES as usize);
    for (day, path) in files.iter().enumerate() {
        let base = day as u64 * DAY_MINUTES;
        if base >= window {
            break;
        }
        let keep = (window - base).min(DAY_MINUTES) as usize;
        let io = |cause| WorkloadError::Io {
            path: path.clone(),
            cause,
        };
        let mut reader = BufReader::with_capacity(1 << 16, File::open(path).map_err(io)?);
        let mut number = 0;
        loop {
            line.clear();
            if reader.read_until(b'\n', &mut line).map_err(io)? == 0 {
                break;
            }
            number += 1;
            let text = trim_end(&line);
            if number == 1 {
                check_header(path, text)?;
                continue;
            }
            if text.is_empty() {
                continue; // a blank line, typically the last one
            }
            let key = parse_row(path, number, text, &mut counts)?;
            f(key, base as usize, &counts[..keep]);
        }
        if number == 0 {
            return Err(format_error(
                path,
                1,
                None,
                "empty file: expected the header line",
            ));
        }
    }
    Ok(())
}

/// `line` without its `\n` or `\r\n`.
fn trim_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Checks `HashOwner,HashApp,HashFunction,Trigger,1,...,1440` (a UTF-8 BOM is allowed).
fn check_header(path: &Path, text: &[u8]) -> Result<(), WorkloadError> {
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    let mut n = 0;
    for (i, field) in text.split(|&b| b == b',').enumerate() {
        n = i + 1;
        let want = match ID_COLUMNS.get(i) {
            Some(name) => (*name).to_string(),
            None => (i + 1 - ID_COLUMNS.len()).to_string(),
        };
        if i >= COLUMNS || field != want.as_bytes() {
            let message = if i >= COLUMNS {
                format!("header has more than {COLUMNS} columns")
            } else {
                format!("header column should be '{want}', found '{}'", show(field))
            };
            return Err(format_error(path, 1, Some(i + 1), &message));
        }
    }
    if n != COLUMNS {
        let message = format!(
            "header has {n} columns, expected {COLUMNS} (HashOwner,HashApp,HashFunction,Trigger,1,...,1440)"
        );
        return Err(format_error(path, 1, None, &message));
    }
    Ok(())
}

/// Splits a function row: returns its key (the three hash columns) and fills `counts`.
fn parse_row<'a>(
    path: &Path,
    number: usize,
    text: &'a [u8],
    counts: &mut Vec<u32>,
) -> Result<&'a [u8], WorkloadError> {
    counts.clear();
    let mut key_end = 0;
    let mut columns = 0;
    let mut at = 0;
    for (i, field) in text.split(|&b| b == b',').enumerate() {
        columns = i + 1;
        if i == 2 {
            key_end = at + field.len();
        }
        at += field.len() + 1;
        if i < ID_COLUMNS.len() || i >= COLUMNS {
            continue;
        }
        match parse_count(field) {
            Some(n) => counts.push(n),
            None => {
                let message = format!(
                    "'{}' is not an invocation count (a whole number >= 0) for minute {}",
                    show(field),
                    i + 1 - ID_COLUMNS.len()
                );
                return Err(format_error(path, number, Some(i + 1), &message));
            }
        }
    }
    if columns != COLUMNS {
        let message = format!(
            "row has {columns} columns, expected {COLUMNS} (4 id columns and 1440 minute counts)"
        );
        return Err(format_error(path, number, None, &message));
    }
    Ok(&text[..key_end])
}

/// A decimal count that fits `u32`; `None` for anything else.
#[inline]
fn parse_count(field: &[u8]) -> Option<u32> {
    if field.is_empty() || field.len() > 10 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in field {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        n = n * 10 + u64::from(d);
    }
    u32::try_from(n).ok()
}

/// A field for an error message, cut short if long.
fn show(field: &[u8]) -> String {
    let text = String::from_utf8_lossy(field);
    match text.char_indices().nth(40) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.into_owned(),
    }
}

/// A [`WorkloadError::Format`].
fn format_error(path: &Path, line: usize, column: Option<usize>, message: &str) -> WorkloadError {
    WorkloadError::Format {
        path: path.to_path_buf(),
        line,
        column,
        message: message.to_string(),
    }
}
