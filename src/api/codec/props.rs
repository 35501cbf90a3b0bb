//! Properties of reading JSON tensors: random tensors of every datatype, flat or nested,
//! in several number styles, read by `parse_request` + `from_json` give the bytes the
//! binary path carries and the bytes the old path (`serde_json::Value`, then flattening)
//! gave; and any body, however broken, gets the old path's answer (the same bytes, or an
//! error of the same kind, with the same message for bad input), never a panic.

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use serde_json::Value;

use super::{from_json, parse_request};
use crate::api::v2::{datatype_name, parse_datatype, InferRequest};
use crate::model::DataType;

/// The old path's conversion (every scalar of a flat or nested `Value`, checked and
/// converted one by one): the oracle.
fn old_from_json(
    name: &str,
    datatype: DataType,
    count: usize,
    data: &Value,
) -> Result<Vec<u8>, String> {
    fn flatten<'a>(value: &'a Value, out: &mut Vec<&'a Value>) {
        match value {
            Value::Array(items) => items.iter().for_each(|item| flatten(item, out)),
            scalar => out.push(scalar),
        }
    }
    let mut values = Vec::new();
    flatten(data, &mut values);
    if values.len() != count {
        return Err(format!(
            "input '{name}' has {} elements of data, its shape needs {count}",
            values.len()
        ));
    }
    let wrong = |value: &Value| {
        format!(
            "input '{name}' has the value {value}, which is not a {}",
            datatype_name(datatype)
        )
    };
    let integer = |v: &Value| {
        v.as_i64()
            .map(i128::from)
            .or_else(|| v.as_u64().map(i128::from))
    };
    let mut out = Vec::new();
    for value in values {
        macro_rules! int {
            ($t:ty) => {{
                let x = integer(value)
                    .and_then(|x| <$t>::try_from(x).ok())
                    .ok_or_else(|| wrong(value))?;
                out.extend_from_slice(&x.to_le_bytes())
            }};
        }
        let float = || value.as_f64().ok_or_else(|| wrong(value));
        match datatype {
            DataType::Bool => out.push(u8::from(value.as_bool().ok_or_else(|| wrong(value))?)),
            DataType::Uint8 => int!(u8),
            DataType::Uint16 => int!(u16),
            DataType::Uint32 => int!(u32),
            DataType::Uint64 => int!(u64),
            DataType::Int8 => int!(i8),
            DataType::Int16 => int!(i16),
            DataType::Int32 => int!(i32),
            DataType::Int64 => int!(i64),
            DataType::Fp16 => out.extend_from_slice(&half::f16::from_f64(float()?).to_le_bytes()),
            DataType::Fp32 => out.extend_from_slice(&(float()? as f32).to_le_bytes()),
            DataType::Fp64 => out.extend_from_slice(&float()?.to_le_bytes()),
            DataType::Bytes => {
                let s = value.as_str().ok_or_else(|| wrong(value))?;
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
        }
    }
    Ok(out)
}

/// The inputs as the old path read them (`data` a `Value`; like it, every field it does
/// not use ignored, whose strings `serde_json` then does not check as a `Value` would).
#[derive(Deserialize)]
struct OldRequest {
    inputs: Vec<OldInput>,
}

#[derive(Deserialize)]
struct OldInput {
    name: String,
    datatype: String,
    #[serde(default)]
    data: Option<Value>,
}

fn old_inputs(body: &[u8]) -> Vec<OldInput> {
    let old: OldRequest = serde_json::from_slice(body).expect("a valid request");
    old.inputs
}

/// What a body's inputs come to: invalid JSON, or per input its bytes or bad input.
#[derive(Debug, PartialEq)]
enum Outcome {
    InvalidJson,
    Inputs(Vec<Result<Vec<u8>, String>>),
}

/// The count each input is checked against: its elements, or one more for `odd` inputs.
fn count_of(value: Option<&Value>, odd: bool) -> usize {
    fn elements(value: &Value) -> usize {
        match value {
            Value::Array(items) => items.iter().map(elements).sum(),
            _ => 1,
        }
    }
    value.map_or(0, elements) + usize::from(odd)
}

fn new_path(body: &[u8], odd: bool) -> Outcome {
    let Ok(request) = parse_request(&body.to_vec().into()) else {
        return Outcome::InvalidJson;
    };
    let old = old_inputs(body);
    let inputs = request.inputs.iter().zip(&old).filter_map(|(input, old)| {
        let datatype = parse_datatype(&input.datatype)?;
        let count = count_of(old.data.as_ref(), odd);
        let data = input.data.as_ref()?;
        Some(from_json(&input.name, datatype, count, data))
    });
    Outcome::Inputs(inputs.collect())
}

fn old_path(body: &[u8], odd: bool) -> Outcome {
    if serde_json::from_slice::<InferRequest>(body).is_err() {
        return Outcome::InvalidJson;
    }
    let inputs = old_inputs(body).into_iter().filter_map(|input| {
        let datatype = parse_datatype(&input.datatype)?;
        let data = input.data.filter(|d| !d.is_null())?;
        let count = count_of(Some(&data), odd);
        Some(old_from_json(&input.name, datatype, count, &data))
    });
    Outcome::Inputs(inputs.collect())
}

const DATATYPES: [DataType; 13] = [
    DataType::Bool,
    DataType::Uint8,
    DataType::Uint16,
    DataType::Uint32,
    DataType::Uint64,
    DataType::Int8,
    DataType::Int16,
    DataType::Int32,
    DataType::Int64,
    DataType::Fp16,
    DataType::Fp32,
    DataType::Fp64,
    DataType::Bytes,
];

/// One random element: its JSON text, and its bytes where that text holds them exactly.
fn element(datatype: DataType, style: u8, rng: &mut StdRng) -> (String, Option<Vec<u8>>) {
    macro_rules! int {
        ($t:ty) => {{
            let x: $t = rng.random();
            (x.to_string(), Some(x.to_le_bytes().to_vec()))
        }};
    }
    match datatype {
        DataType::Bool => {
            let b: bool = rng.random();
            (b.to_string(), Some(vec![u8::from(b)]))
        }
        DataType::Uint8 => int!(u8),
        DataType::Uint16 => int!(u16),
        DataType::Uint32 => int!(u32),
        DataType::Uint64 => int!(u64),
        DataType::Int8 => int!(i8),
        DataType::Int16 => int!(i16),
        DataType::Int32 => int!(i32),
        DataType::Int64 => int!(i64),
        DataType::Fp32 | DataType::Fp16 => {
            let x = match rng.random_range(0..3) {
                0 => f32::from_bits(rng.random()),
                1 => rng.random_range(-3.0f32..3.0),
                _ => rng.random_range(-1000i32..1000) as f32,
            };
            let x = if x.is_finite() { x } else { 1.5 };
            let (x, exact) = match datatype {
                DataType::Fp16 => {
                    let h = half::f16::from_f32(x);
                    let h = if h.is_finite() { h } else { half::f16::ONE };
                    (h.to_f32(), h.to_le_bytes().to_vec())
                }
                _ => (x, x.to_le_bytes().to_vec()),
            };
            match style {
                0 => (serde_json::to_string(&x).unwrap_or_default(), Some(exact)),
                1 => (format!("{x:e}"), Some(exact)),
                // As Python clients send: rounded to five decimals.
                _ => (format!("{}", (f64::from(x) * 1e5).round() / 1e5), None),
            }
        }
        DataType::Fp64 => {
            let x = match rng.random_range(0..2) {
                0 => f64::from_bits(rng.random()),
                _ => rng.random_range(-3.0f64..3.0),
            };
            let x = if x.is_finite() { x } else { 0.25 };
            match style {
                0 => (serde_json::to_string(&x).unwrap_or_default(), None),
                _ => (format!("{x:E}"), None),
            }
        }
        DataType::Bytes => {
            let alphabet = ['a', 'é', '"', '\\', '\n', '\u{1}', '😀', ' ', ']'];
            let n = rng.random_range(0..6);
            let s: String = (0..n)
                .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                .collect();
            let mut bytes = (s.len() as u32).to_le_bytes().to_vec();
            bytes.extend_from_slice(s.as_bytes());
            (serde_json::to_string(&s).unwrap_or_default(), Some(bytes))
        }
    }
}

/// A random input's body and the bytes its data holds (`None` where inexact).
fn body(
    datatype: DataType,
    dims: &[usize],
    nested: bool,
    style: u8,
    seed: u64,
) -> (String, Option<Vec<u8>>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let count: usize = dims.iter().product();
    let mut texts = Vec::with_capacity(count);
    let mut bytes = Some(Vec::new());
    for _ in 0..count {
        let (text, exact) = element(datatype, style, &mut rng);
        texts.push(text);
        bytes = bytes.zip(exact).map(|(mut all, one)| {
            all.extend(one);
            all
        });
    }
    let separator = [", ", ",", " ,\n\t"][rng.random_range(0..3)];
    let data = match (nested, dims) {
        (_, []) if rng.random() => texts.join(""),
        (true, [_, inner @ ..]) if !inner.is_empty() => nest(&texts, inner, separator),
        _ => format!("[{}]", texts.join(separator)),
    };
    let name = datatype_name(datatype);
    let shape = serde_json::to_string(dims).unwrap_or_default();
    let body = match rng.random() {
        true => format!(
            r#"{{"inputs": [{{"name": "x", "shape": {shape}, "datatype": "{name}", "data": {data}}}]}}"#
        ),
        false => format!(
            r#"{{"id": "a", "inputs":[{{"data":{data},"name":"x","datatype":"{name}","shape":{shape}}}], "outputs": []}}"#
        ),
    };
    (body, bytes)
}

/// `texts` as arrays nested by `inner` (the dimensions after the first).
fn nest(texts: &[String], inner: &[usize], separator: &str) -> String {
    let size: usize = inner.iter().product::<usize>().max(1);
    let rows = texts.chunks(size).map(|row| match inner {
        [_, rest @ ..] if !rest.is_empty() => nest(row, rest, separator),
        _ => format!("[{}]", row.join(separator)),
    });
    format!("[{}]", rows.collect::<Vec<_>>().join(separator))
}

fn tensor() -> impl Strategy<Value = (usize, Vec<usize>, bool, u8, u64)> {
    (
        0..DATATYPES.len(),
        prop::collection::vec(1usize..4, 0..4),
        any::<bool>(),
        0u8..3,
        any::<u64>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn json_tensors_read_as_the_binary_and_the_old_path_read_them(
        (d, dims, nested, style, seed) in tensor()
    ) {
        let datatype = DATATYPES[d];
        let (body, exact) = body(datatype, &dims, nested, style, seed);
        let new = new_path(body.as_bytes(), false);
        prop_assert_eq!(&new, &old_path(body.as_bytes(), false), "{}", body);
        let Outcome::Inputs(inputs) = new else {
            return Err(TestCaseError::fail(format!("refused: {body}")));
        };
        prop_assert_eq!(inputs.len(), 1);
        if let Some(exact) = exact {
            prop_assert_eq!(inputs[0].as_ref().ok(), Some(&exact), "{}", body);
        }
    }

    #[test]
    fn broken_bodies_get_the_old_answer_and_never_a_panic(
        (d, dims, nested, style, seed) in tensor(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, any::<u8>()), 1..4),
        odd in any::<bool>(),
    ) {
        let (body, _) = body(DATATYPES[d], &dims, nested, style, seed);
        let mut body = body.into_bytes();
        let specials = b"[]{},:\"\\ -.e0+1nt";
        for (at, kind, byte) in edits {
            let i = at.index(body.len() + 1);
            let byte = match byte % 4 {
                0 => byte,
                _ => specials[usize::from(byte) % specials.len()],
            };
            match kind {
                0 if i < body.len() => body[i] = byte,
                1 if i < body.len() => drop(body.remove(i)),
                _ => body.insert(i, byte),
            }
        }
        let text = String::from_utf8_lossy(&body).into_owned();
        prop_assert_eq!(new_path(&body, odd), old_path(&body, odd), "{}", text);
    }
}
