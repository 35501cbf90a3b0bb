//! The JSON text of an input's `data` (flat or nested arrays, or one scalar) read straight
//! into the little-endian bytes of its datatype, in one pass over the text, without a
//! tree of `serde_json::Value`s.
//!
//! The text is checked against JSON's grammar as it is read (it was cut from the body
//! unparsed): a text that is not JSON is `Malformed`, which the request answers as invalid
//! JSON, as when `serde_json` read the whole body. A value the datatype cannot take is not
//! an error here: reading goes on, counting elements, so that the caller can say first
//! that the count is wrong and else which value was (the order of the checks before).
//! Numbers outside the fast path of `number.rs`, strings, objects and `null` are read by
//! `serde_json` itself, one value at a time.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::number::{number, Malformed, Number};
use crate::api::v2::ReadData;
use crate::model::DataType;

/// Where the text stops being JSON, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Syntax {
    /// Byte offset in the data's text.
    pub(super) at: usize,
    /// What was expected there, or `serde_json`'s complaint.
    pub(super) problem: String,
}

impl Syntax {
    /// The message of an invalid JSON answer.
    pub(super) fn message(&self, input: &str) -> String {
        format!(
            "the data of input '{input}' is not valid JSON at its byte {}: {}",
            self.at, self.problem
        )
    }
}

impl From<Malformed> for Syntax {
    fn from(Malformed(at): Malformed) -> Self {
        Syntax {
            at,
            problem: "expected a JSON number".into(),
        }
    }
}

/// Reads `text` as elements of `datatype`; only checks it and counts where the
/// datatype is not known (`None`: the request is refused for that later).
pub(super) fn read(text: &[u8], datatype: Option<DataType>) -> Result<ReadData, Syntax> {
    macro_rules! int {
        ($t:ty) => {
            fixed(
                text,
                |n| {
                    n.integer()
                        .ok()
                        .flatten()
                        .and_then(|x| <$t>::try_from(x).ok())
                        .map(<$t>::to_le_bytes)
                },
                |v| {
                    integer(v)
                        .and_then(|x| <$t>::try_from(x).ok())
                        .map(<$t>::to_le_bytes)
                },
            )
        };
    }
    let float = |n: &Number| n.float();
    let (elements, bytes, wrong) = match datatype {
        None => (checked(text)?, Vec::new(), None),
        Some(DataType::Fp32) => fixed(
            text,
            |n| float(n).map(|x| (x as f32).to_le_bytes()),
            |v| v.as_f64().map(|x| (x as f32).to_le_bytes()),
        )?,
        Some(DataType::Fp64) => fixed(
            text,
            |n| float(n).map(f64::to_le_bytes),
            |v| v.as_f64().map(f64::to_le_bytes),
        )?,
        Some(DataType::Fp16) => fixed(
            text,
            |n| float(n).map(|x| half::f16::from_f64(x).to_le_bytes()),
            |v| v.as_f64().map(|x| half::f16::from_f64(x).to_le_bytes()),
        )?,
        Some(DataType::Bool) => fixed(text, |_| None, |v| v.as_bool().map(|b| [u8::from(b)]))?,
        Some(DataType::Uint8) => int!(u8)?,
        Some(DataType::Uint16) => int!(u16)?,
        Some(DataType::Uint32) => int!(u32)?,
        Some(DataType::Uint64) => int!(u64)?,
        Some(DataType::Int8) => int!(i8)?,
        Some(DataType::Int16) => int!(i16)?,
        Some(DataType::Int32) => int!(i32)?,
        Some(DataType::Int64) => int!(i64)?,
        Some(DataType::Bytes) => strings(text)?,
    };
    Ok(ReadData {
        datatype,
        elements,
        bytes,
        wrong,
    })
}

/// Elements, their bytes and the first wrong value, as `read` gathers them.
type Gathered = (usize, Vec<u8>, Option<String>);

/// Reads elements of `N` bytes: a number by `fast` where it can (`None`: it cannot, or
/// the number is wrong), anything else by `serde_json` and `slow` (the rule of the old
/// path, value by value: `None` is a wrong value). After a wrong value the rest is only
/// checked and counted.
#[inline(always)]
fn fixed<const N: usize>(
    text: &[u8],
    fast: impl Fn(&Number) -> Option<[u8; N]>,
    slow: impl Fn(&Value) -> Option<[u8; N]>,
) -> Result<Gathered, Syntax> {
    // Every element takes at least two bytes of text (itself and a separator), so this
    // holds them all and never more than the body's size allows, whatever shape was
    // declared. Zeroed memory comes from the allocator untouched.
    let mut out = vec![0u8; (text.len() / 2 + 1) * N];
    let (mut len, mut elements, mut wrong) = (0usize, 0usize, None);
    walk(text, |pos| {
        elements += 1;
        if wrong.is_some() {
            return skip(text, pos);
        }
        let (bytes, end) = match text.get(pos) {
            Some(b'-' | b'0'..=b'9') => {
                let n = number(text, pos)?;
                match fast(&n) {
                    Some(bytes) => (Some(bytes), n.end),
                    None => judge(text, pos, &slow, &mut wrong)?,
                }
            }
            _ => judge(text, pos, &slow, &mut wrong)?,
        };
        if let Some(bytes) = bytes {
            let slot = out.get_mut(len..len + N).ok_or_else(|| Syntax {
                at: pos,
                problem: "more elements than its text can hold".into(),
            })?;
            slot.copy_from_slice(&bytes);
            len += N;
        }
        Ok(end)
    })?;
    out.truncate(len);
    Ok((elements, out, wrong))
}

/// The value at `pos` read by `serde_json` and converted by `slow`; where that gives
/// nothing, the value's text goes to `wrong`.
#[cold]
fn judge<const N: usize>(
    text: &[u8],
    pos: usize,
    slow: &impl Fn(&Value) -> Option<[u8; N]>,
    wrong: &mut Option<String>,
) -> Result<(Option<[u8; N]>, usize), Syntax> {
    let (value, end) = value_at(text, pos)?;
    let bytes = slow(&value);
    if bytes.is_none() {
        *wrong = Some(value.to_string());
    }
    Ok((bytes, end))
}

/// `BYTES` elements: each a JSON string, length-prefixed.
fn strings(text: &[u8]) -> Result<Gathered, Syntax> {
    let (mut out, mut elements, mut wrong) = (Vec::new(), 0, None);
    walk(text, |pos| {
        elements += 1;
        if wrong.is_some() {
            return skip(text, pos);
        }
        let (value, end) = value_at(text, pos)?;
        match value.as_str().map(|s| (s, u32::try_from(s.len()))) {
            Some((s, Ok(len))) => {
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            _ => wrong = Some(value.to_string()),
        }
        Ok(end)
    })?;
    Ok((elements, out, wrong))
}

/// Checks `text` and counts its elements.
fn checked(text: &[u8]) -> Result<usize, Syntax> {
    let mut elements = 0;
    walk(text, |pos| {
        elements += 1;
        skip(text, pos)
    })?;
    Ok(elements)
}

fn whitespace(text: &[u8], mut pos: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = text.get(pos) {
        pos += 1;
    }
    pos
}

/// Walks the arrays of `text`, calling `element` at each scalar (or object) in order,
/// which returns where it ends. Iterative: any depth of nesting is one counter.
#[inline(always)]
fn walk(
    text: &[u8],
    mut element: impl FnMut(usize) -> Result<usize, Syntax>,
) -> Result<(), Syntax> {
    let expected = |at: usize, what: &str| Syntax {
        at,
        problem: format!("expected {what}"),
    };
    let mut depth = 0usize;
    let mut pos = whitespace(text, 0);
    'value: loop {
        match text.get(pos) {
            Some(b'[') => {
                pos = whitespace(text, pos + 1);
                if text.get(pos) != Some(&b']') {
                    depth += 1;
                    continue 'value;
                }
                pos += 1;
            }
            Some(b' ' | b'\n' | b'\r' | b'\t') => {
                pos = whitespace(text, pos);
                continue 'value;
            }
            Some(_) => pos = element(pos)?,
            None => return Err(expected(pos, "a value")),
        }
        loop {
            // The common separator in one look (each look waits for the one before).
            if depth > 0 && text.get(pos..pos + 2) == Some(b", ") {
                pos += 2;
                continue 'value;
            }
            pos = whitespace(text, pos);
            if depth == 0 {
                return match pos == text.len() {
                    true => Ok(()),
                    false => Err(expected(pos, "the end of the data")),
                };
            }
            match text.get(pos) {
                Some(b',') => {
                    pos += 1;
                    continue 'value;
                }
                Some(b']') => {
                    depth -= 1;
                    pos += 1;
                }
                _ => return Err(expected(pos, "',' or ']'")),
            }
        }
    }
}

/// One JSON value read by `serde_json` at `pos`, and where it ends.
fn one<T: DeserializeOwned>(text: &[u8], pos: usize) -> Result<(T, usize), Syntax> {
    let rest = text.get(pos..).unwrap_or_default();
    let mut values = serde_json::Deserializer::from_slice(rest).into_iter::<T>();
    match values.next() {
        Some(Ok(value)) => Ok((value, pos + values.byte_offset())),
        Some(Err(e)) => Err(Syntax {
            at: pos,
            problem: e.to_string(),
        }),
        None => Err(Syntax {
            at: pos,
            problem: "expected a value".into(),
        }),
    }
}

fn value_at(text: &[u8], pos: usize) -> Result<(Value, usize), Syntax> {
    one(text, pos)
}

/// An integer as `serde_json::Value` holds one, widened.
fn integer(value: &Value) -> Option<i128> {
    value
        .as_i64()
        .map(i128::from)
        .or_else(|| value.as_u64().map(i128::from))
}

/// Checks the scalar (or object) at `pos`; returns where it ends.
fn skip(text: &[u8], pos: usize) -> Result<usize, Syntax> {
    match text.get(pos) {
        Some(b'-' | b'0'..=b'9') => {
            let n: Number = number(text, pos)?;
            if n.float().is_none() {
                // serde_json refuses numbers out of its range: check with it.
                value_at(text, pos)?;
            }
            Ok(n.end)
        }
        Some(b't') if text.get(pos..pos + 4) == Some(b"true") => Ok(pos + 4),
        Some(b'f') if text.get(pos..pos + 5) == Some(b"false") => Ok(pos + 5),
        Some(b'n') if text.get(pos..pos + 4) == Some(b"null") => Ok(pos + 4),
        _ => value_at(text, pos).map(|(_, end)| end),
    }
}
