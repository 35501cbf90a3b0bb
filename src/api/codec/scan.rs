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
    let size = datatype.and_then(DataType::size).unwrap_or(1);
    // Every element takes at least two bytes of text (itself and a separator), so this
    // never reserves more than the body's size allows, whatever shape was declared.
    let mut reader = Reader {
        datatype,
        elements: 0,
        bytes: Vec::with_capacity((text.len() / 2 + 1) * size),
        wrong: None,
    };
    walk(text, |pos| reader.element(text, pos))?;
    Ok(ReadData {
        datatype,
        elements: reader.elements,
        bytes: reader.bytes,
        wrong: reader.wrong,
    })
}

fn whitespace(text: &[u8], mut pos: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = text.get(pos) {
        pos += 1;
    }
    pos
}

/// Walks the arrays of `text`, calling `element` at each scalar (or object) in order,
/// which returns where it ends. Iterative: any depth of nesting is one counter.
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
            Some(_) => pos = element(pos)?,
            None => return Err(expected(pos, "a value")),
        }
        loop {
            pos = whitespace(text, pos);
            if depth == 0 {
                return match pos == text.len() {
                    true => Ok(()),
                    false => Err(expected(pos, "the end of the data")),
                };
            }
            match text.get(pos) {
                Some(b',') => {
                    pos = whitespace(text, pos + 1);
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

/// Gathers the elements of one input as they are read.
struct Reader {
    datatype: Option<DataType>,
    elements: usize,
    bytes: Vec<u8>,
    /// The first value the datatype cannot take, as JSON text.
    wrong: Option<String>,
}

impl Reader {
    /// Reads the element at `pos`; returns where it ends.
    #[inline(always)]
    fn element(&mut self, text: &[u8], pos: usize) -> Result<usize, Syntax> {
        self.elements += 1;
        let datatype = match self.datatype {
            Some(datatype) if self.wrong.is_none() => datatype,
            // Only its syntax and its end matter now.
            _ => return skip(text, pos),
        };
        let first = text.get(pos).copied().unwrap_or_default();
        let numeric = first == b'-' || first.is_ascii_digit();
        match datatype {
            DataType::Fp16 | DataType::Fp32 | DataType::Fp64 if numeric => {
                let n = number(text, pos)?;
                let x = match n.float() {
                    Some(x) => x,
                    None => self.slow(text, pos, |v| v.as_f64())?.unwrap_or_default(),
                };
                match datatype {
                    DataType::Fp32 => self.bytes.extend_from_slice(&(x as f32).to_le_bytes()),
                    DataType::Fp16 => {
                        self.bytes
                            .extend_from_slice(&half::f16::from_f64(x).to_le_bytes());
                    }
                    _ => self.bytes.extend_from_slice(&x.to_le_bytes()),
                }
                Ok(n.end)
            }
            DataType::Bool if text.get(pos..pos + 4) == Some(b"true") => {
                self.bytes.push(1);
                Ok(pos + 4)
            }
            DataType::Bool if text.get(pos..pos + 5) == Some(b"false") => {
                self.bytes.push(0);
                Ok(pos + 5)
            }
            DataType::Bytes if first == b'"' => {
                let (value, end) = value_at(text, pos)?;
                match value.as_str().map(|s| (s, u32::try_from(s.len()))) {
                    Some((s, Ok(len))) => {
                        self.bytes.extend_from_slice(&len.to_le_bytes());
                        self.bytes.extend_from_slice(s.as_bytes());
                    }
                    _ => self.wrong = Some(value.to_string()),
                }
                Ok(end)
            }
            DataType::Fp16 | DataType::Fp32 | DataType::Fp64 | DataType::Bool | DataType::Bytes => {
                let (value, end) = value_at(text, pos)?;
                self.wrong = Some(value.to_string());
                Ok(end)
            }
            integer => self.integer(integer, text, pos, numeric),
        }
    }

    fn integer(
        &mut self,
        datatype: DataType,
        text: &[u8],
        pos: usize,
        numeric: bool,
    ) -> Result<usize, Syntax> {
        let (n, x) = match numeric {
            true => {
                let n = number(text, pos)?;
                match n.integer() {
                    Ok(x) => (n, x),
                    Err(()) => (n, self.slow(text, pos, integer)?),
                }
            }
            false => {
                let (value, end) = value_at(text, pos)?;
                self.wrong = Some(value.to_string());
                return Ok(end);
            }
        };
        macro_rules! put {
            ($t:ty) => {
                match x.and_then(|x| <$t>::try_from(x).ok()) {
                    Some(x) => self.bytes.extend_from_slice(&x.to_le_bytes()),
                    None => self.wrong = Some(value_at(text, pos)?.0.to_string()),
                }
            };
        }
        match datatype {
            DataType::Uint8 => put!(u8),
            DataType::Uint16 => put!(u16),
            DataType::Uint32 => put!(u32),
            DataType::Uint64 => put!(u64),
            DataType::Int8 => put!(i8),
            DataType::Int16 => put!(i16),
            DataType::Int32 => put!(i32),
            _ => put!(i64),
        }
        Ok(n.end)
    }

    /// The number at `pos` read by `serde_json` (long digits, large exponents) and taken
    /// by `take`; marks it wrong where `take` gives nothing.
    #[cold]
    fn slow<T>(
        &mut self,
        text: &[u8],
        pos: usize,
        take: impl Fn(&Value) -> Option<T>,
    ) -> Result<Option<T>, Syntax> {
        let (value, _) = value_at(text, pos)?;
        let taken = take(&value);
        if taken.is_none() {
            self.wrong = Some(value.to_string());
        }
        Ok(taken)
    }
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
