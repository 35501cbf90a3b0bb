//! An infer request's JSON read with its tensors' `data` cut out: `serde_json` reads the
//! small rest (the "skeleton": the body with every `inputs[i].data` value replaced by
//! `null`) and `scan.rs` reads each cut-out text as its input's datatype.
//!
//! Finding the cut is a walk over the body's structure that looks at nothing but
//! brackets, quotes and the keys on the path to `inputs[i].data`; a large number array is
//! crossed eight bytes at a time. It checks nothing else: `serde_json` checks the skeleton
//! and `scan.rs` each cut-out text, so the request is valid exactly when the body is. A
//! body the walk cannot follow goes to `serde_json` whole, which names what is wrong.

use std::borrow::Cow;
use std::ops::Range;

use actix_web::web::Bytes;

use super::scan;
use crate::api::v2::{parse_datatype, Data, InferRequest};

/// Reads an infer request's JSON body; its inputs' `data` read as their datatypes. The
/// error is what the body's JSON got wrong (an invalid JSON answer).
pub fn parse_request(json: &Bytes) -> Result<InferRequest, String> {
    let whole = || serde_json::from_slice::<InferRequest>(json).map_err(|e| e.to_string());
    let mut request = match cut(json) {
        Some((skeleton, cuts)) => match serde_json::from_slice::<InferRequest>(&skeleton) {
            Ok(mut request) if request.inputs.len() == cuts.len() => {
                for (input, cut) in request.inputs.iter_mut().zip(cuts) {
                    input.data = cut.map(|range| Data {
                        text: json.slice(range),
                        read: None,
                    });
                }
                request
            }
            // The error as the whole body has it (its positions are the client's).
            _ => whole()?,
        },
        None => whole()?,
    };
    for input in &mut request.inputs {
        if let Some(data) = &mut input.data {
            let read = scan::read(&data.text, parse_datatype(&input.datatype));
            let read = read.map_err(|e| e.message(&input.name))?;
            data.read = Some(read);
        }
    }
    Ok(request)
}

/// Where each element of `inputs` had its `data` value (`None` for none, or `null`).
type Cuts = Vec<Option<Range<usize>>>;

/// The skeleton and the cuts; `None` where the walk cannot follow the body.
fn cut(json: &[u8]) -> Option<(Vec<u8>, Cuts)> {
    let mut walk = Walk {
        text: json,
        pos: 0,
        // About the body's size: grown piecemeal it was reallocated several times.
        skeleton: Vec::with_capacity(json.len()),
        copied: 0,
        cuts: Vec::new(),
    };
    walk.whitespace();
    if walk.peek()? != b'{' {
        return None;
    }
    walk.object(Level::Request)?;
    walk.whitespace();
    if walk.pos != json.len() {
        return None;
    }
    walk.skeleton.extend_from_slice(json.get(walk.copied..)?);
    Some((walk.skeleton, walk.cuts))
}

/// Which object the walk is in.
#[derive(Clone, Copy)]
enum Level {
    /// The request: its `inputs` matter.
    Request,
    /// An element of `inputs`: its `data` matters.
    Input,
}

struct Walk<'a> {
    text: &'a [u8],
    pos: usize,
    /// The body up to `copied`, cuts replaced.
    skeleton: Vec<u8>,
    copied: usize,
    cuts: Cuts,
}

impl<'a> Walk<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.pos += 1;
        }
    }

    /// Steps over `byte`, after whitespace.
    fn expect(&mut self, byte: u8) -> Option<()> {
        self.whitespace();
        (self.peek()? == byte).then(|| self.pos += 1)
    }

    /// The object at `pos` (at its `{`), following the members that matter at `level`.
    fn object(&mut self, level: Level) -> Option<()> {
        self.expect(b'{')?;
        self.whitespace();
        if self.peek()? == b'}' {
            self.pos += 1;
            return Some(());
        }
        loop {
            self.whitespace();
            let key = self.key()?;
            self.expect(b':')?;
            self.whitespace();
            match (level, key.as_ref()) {
                (Level::Request, b"inputs") => self.inputs()?,
                (Level::Input, b"data") => self.data()?,
                _ => self.skip()?,
            }
            self.whitespace();
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A key, unescaped as `serde_json` would (the walk must see the keys it sees);
    /// borrowed from the text unless it had escapes (every key of every request was
    /// copied once, an allocation each).
    fn key(&mut self) -> Option<Cow<'a, [u8]>> {
        let start = self.pos;
        let escaped = self.string()?;
        let text: &'a [u8] = self.text;
        let raw = text.get(start..self.pos)?;
        match escaped {
            false => Some(Cow::Borrowed(raw.get(1..raw.len() - 1)?)),
            true => serde_json::from_slice::<String>(raw)
                .ok()
                .map(|k| Cow::Owned(k.into_bytes())),
        }
    }

    /// Steps over the string at `pos` (at its quote); whether it had escapes.
    fn string(&mut self) -> Option<bool> {
        if self.peek()? != b'"' {
            return None;
        }
        let mut escaped = false;
        self.pos += 1;
        loop {
            match self.peek()? {
                b'"' => {
                    self.pos += 1;
                    return Some(escaped);
                }
                b'\\' => {
                    escaped = true;
                    self.pos += 2;
                }
                _ => self.pos += 1,
            }
        }
    }

    /// The array of inputs: each element's `data` cut, if it has one.
    fn inputs(&mut self) -> Option<()> {
        if self.peek()? != b'[' {
            return self.skip();
        }
        self.pos += 1;
        self.whitespace();
        if self.peek()? == b']' {
            self.pos += 1;
            return Some(());
        }
        loop {
            self.whitespace();
            self.cuts.push(None);
            match self.peek()? {
                b'{' => self.object(Level::Input)?,
                _ => self.skip()?,
            }
            self.whitespace();
            match self.peek()? {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Cuts the value at `pos` out of the skeleton (`null` in its place).
    fn data(&mut self) -> Option<()> {
        let start = self.pos;
        self.skip()?;
        let text = self.text.get(start..self.pos)?;
        self.skeleton
            .extend_from_slice(self.text.get(self.copied..start)?);
        self.skeleton.extend_from_slice(b"null");
        self.copied = self.pos;
        let cut = self.cuts.last_mut()?;
        *cut = (text != b"null").then_some(start..self.pos);
        Some(())
    }

    /// Steps over the value at `pos`: to the bracket that closes it, or to the end of a
    /// string or scalar. Nothing inside is checked.
    fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'[' | b'{' => self.brackets(),
            _ => {
                while !matches!(
                    self.peek(),
                    None | Some(b',' | b']' | b'}' | b' ' | b'\n' | b'\r' | b'\t')
                ) {
                    self.pos += 1;
                }
                Some(())
            }
        }
    }

    /// Steps to the bracket that closes the one at `pos`, strings skipped.
    fn brackets(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            self.pos = next_special(self.text, self.pos);
            match self.peek()? {
                b'"' => {
                    self.string()?;
                }
                b'[' | b'{' => {
                    depth += 1;
                    self.pos += 1;
                }
                b']' | b'}' => {
                    depth = depth.checked_sub(1)?;
                    self.pos += 1;
                    if depth == 0 {
                        return Some(());
                    }
                }
                _ => self.pos += 1,
            }
        }
    }
}

/// The first byte at or after `pos` that may be a bracket or a quote (it may also be
/// `y`, `Y`, `_` or DEL: the caller looks), or the end; eight bytes at a time.
fn next_special(text: &[u8], mut pos: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    while let Some(chunk) = text.get(pos..).and_then(|t| t.first_chunk::<8>()) {
        let word = u64::from_le_bytes(*chunk);
        // `[` `]` `{` `}` are 0x5B 0x5D 0x7B 0x7D: with bit 5 set and bits 1-2 cleared,
        // 0x79.
        let bracket =
            zero_byte(((word | 0x2020_2020_2020_2020) & 0xF9F9_F9F9_F9F9_F9F9) ^ (0x79 * ONES));
        let quote = zero_byte(word ^ (u64::from(b'"') * ONES));
        let found = bracket | quote;
        if found != 0 {
            return pos + (found.trailing_zeros() / 8) as usize;
        }
        pos += 8;
    }
    let tail = text.get(pos..).unwrap_or_default();
    let special = |&b: &u8| matches!(b, b'[' | b']' | b'{' | b'}' | b'"');
    pos + tail.iter().position(special).unwrap_or(tail.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut_text(body: &str) -> Option<(String, Vec<Option<String>>)> {
        let (skeleton, cuts) = cut(body.as_bytes())?;
        let cuts = cuts.into_iter().map(|c| c.map(|r| body[r].to_owned()));
        Some((String::from_utf8(skeleton).unwrap(), cuts.collect()))
    }

    #[test]
    fn every_input_data_is_cut_and_nothing_else() {
        let body = r#" {"id": "[x", "parameters": {"data": [9]},
            "inputs": [{"name": "a", "data": [[1, 2], [3, 4]], "shape": [2, 2]},
                       {"d\u0061ta": "s]{\"", "name": "b"}, {"name": "c"}, {"data": null}],
            "outputs": [{"name": "y"}]} "#;
        let (skeleton, cuts) = cut_text(body).unwrap();
        let want = [Some("[[1, 2], [3, 4]]"), Some(r#""s]{\"""#), None, None];
        assert_eq!(cuts, want.map(|c| c.map(str::to_owned)));
        assert!(skeleton.contains(r#""data": [9]"#), "{skeleton}");
        assert!(skeleton.contains(r#""d\u0061ta": null"#), "{skeleton}");
        assert_eq!(skeleton.matches("null").count(), 3, "{skeleton}");
    }

    #[test]
    fn special_bytes_are_found_wherever_they_are() {
        let text = b"0123456789abcdef-1.5, 2.25, 3e4, 0.125, 7, 8, 9, 10]";
        for (i, &b) in text.iter().enumerate() {
            let found = next_special(text, i);
            let want = text[i..]
                .iter()
                .position(|&c| c == b']')
                .map_or(text.len(), |p| i + p);
            assert_eq!(found, want, "from {i} ({})", b as char);
        }
        for special in [b'[', b']', b'{', b'}', b'"'] {
            let mut text = vec![b'1'; 20];
            text[13] = special;
            assert_eq!(next_special(&text, 0), 13);
        }
    }

    #[test]
    fn bodies_the_walk_cannot_follow_go_to_serde_json() {
        for body in [
            "",
            "[1]",
            r#"{"inputs": [}"#,
            r#"{"a": 1} x"#,
            r#"{"inputs": [{"data": [1, 2"#,
        ] {
            assert!(cut_text(body).is_none(), "{body}");
        }
    }
}
