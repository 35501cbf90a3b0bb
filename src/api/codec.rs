//! Tensor data between the protocol and the runtime: JSON elements to little-endian bytes
//! and back, the shape of one item, and Triton's length-prefixed layout of `BYTES`.
//!
//! Inside the runtime a `BYTES` tensor holds its elements as Triton's binary extension
//! lays them out (each element a 4-byte little-endian length, then its bytes), so binary
//! requests pass through unchanged.
//!
//! A JSON request is read by `parse_request` (`request.rs`): `serde_json` reads the body
//! with the inputs' `data` cut out, and `scan.rs` (numbers by `number.rs`) reads each
//! `data` text straight into its datatype's bytes; no `serde_json::Value` is built for
//! the elements. `from_json` then checks them against the input's shape.

mod number;
#[cfg(test)]
mod props;
mod request;
mod scan;

pub use request::parse_request;

use super::v2::{datatype_name, Data, Elements};
use crate::model::{DataType, TensorSpec};

/// The shape of one item from the shape a client sent, and the leading batch dimension
/// the client added, if any (V2 clients of batching models send `[n, ...]`, `n` items).
///
/// A shape that fits the declared one as it is wins over stripping a leading dimension,
/// so a model whose own first dimension is 1 is not misread.
pub fn item_shape(
    declared: &TensorSpec,
    sent: &[i64],
) -> Result<(Vec<usize>, Option<usize>), String> {
    let name = &declared.name;
    let dims: Vec<usize> = sent
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<_, _>>()
        .map_err(|_| format!("input '{name}' has a negative dimension in shape {sent:?}"))?;
    let fits = |dims: &[usize]| {
        dims.len() == declared.shape.len()
            && dims
                .iter()
                .zip(&declared.shape)
                .all(|(&got, &want)| want < 0 || got as i64 == want)
    };
    if fits(&dims) {
        return Ok((dims, None));
    }
    match dims.split_first() {
        Some((&batch, rest)) if batch >= 1 && fits(rest) => Ok((rest.to_vec(), Some(batch))),
        _ => Err(format!(
            "input '{name}' has shape {sent:?}, the model takes {:?} (optionally preceded by \
             a batch dimension)",
            declared.shape
        )),
    }
}

/// Number of elements of a shape, refusing sizes that overflow.
pub fn elements(name: &str, shape: &[usize]) -> Result<usize, String> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| format!("input '{name}' has a shape too large to hold: {shape:?}"))
}

/// The bytes of a tensor given as JSON `data`, checked against its datatype and count:
/// first the count, then the first value the datatype cannot take.
pub fn from_json(
    name: &str,
    datatype: DataType,
    count: usize,
    data: &Data,
) -> Result<Vec<u8>, String> {
    let fresh;
    let read = match &data.read {
        Some(read) if read.datatype == Some(datatype) => read,
        // Not read by `parse_request`, or as another datatype.
        _ => {
            fresh = scan::read(&data.text, Some(datatype)).map_err(|e| e.message(name))?;
            &fresh
        }
    };
    if read.elements != count {
        return Err(format!(
            "input '{name}' has {} elements of data, its shape needs {count}",
            read.elements
        ));
    }
    if let Some(value) = &read.wrong {
        let expected = datatype_name(datatype);
        return Err(format!(
            "input '{name}' has the value {value}, which is not a {expected}"
        ));
    }
    Ok(read.bytes.clone())
}

/// Splits length-prefixed `BYTES` data into its elements; `None` if the layout is broken.
pub fn bytes_elements(data: &[u8]) -> Option<Vec<&[u8]>> {
    let mut elements = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
        if tail.len() < len {
            return None;
        }
        let (element, tail) = tail.split_at(len);
        elements.push(element);
        rest = tail;
    }
    Some(elements)
}

/// Checks that raw (binary) data holds exactly `count` elements of `datatype`.
pub fn check_raw(name: &str, datatype: DataType, count: usize, data: &[u8]) -> Result<(), String> {
    match datatype.size() {
        Some(_) => check_raw_len(name, datatype, count, data.len()),
        None => match bytes_elements(data) {
            Some(found) if found.len() == count => Ok(()),
            Some(found) => Err(format!(
                "input '{name}' has {} BYTES elements, its shape needs {count}",
                found.len()
            )),
            None => Err(format!(
                "input '{name}' has BYTES data whose length prefixes overrun it"
            )),
        },
    }
}

/// Checks that `len` bytes can hold exactly `count` elements of `datatype`, before they
/// are read; BYTES, whose elements vary in length, passes (only its data can tell).
pub fn check_raw_len(
    name: &str,
    datatype: DataType,
    count: usize,
    len: usize,
) -> Result<(), String> {
    match datatype.size() {
        // A declared count whose byte size overflows cannot match any body.
        Some(size) if count.checked_mul(size) != Some(len) => Err(format!(
            "input '{name}' has {len} bytes of binary data, its shape needs {count} elements of {size} bytes",
        )),
        _ => Ok(()),
    }
}

/// The elements of a tensor's bytes, flat.
pub fn to_json(datatype: DataType, data: &[u8]) -> Elements {
    macro_rules! each {
        ($t:ty, $n:expr, $map:expr) => {
            data.chunks_exact($n)
                .map(|c| {
                    let mut raw = [0u8; $n];
                    raw.copy_from_slice(c);
                    $map(<$t>::from_le_bytes(raw))
                })
                .collect()
        };
    }
    match datatype {
        DataType::Bool => Elements::Bool(data.iter().map(|&b| b != 0).collect()),
        DataType::Uint8 => Elements::Unsigned(data.iter().map(|&b| u64::from(b)).collect()),
        DataType::Int8 => Elements::Signed(data.iter().map(|&b| i64::from(b as i8)).collect()),
        DataType::Uint16 => Elements::Unsigned(each!(u16, 2, u64::from)),
        DataType::Int16 => Elements::Signed(each!(i16, 2, i64::from)),
        DataType::Uint32 => Elements::Unsigned(each!(u32, 4, u64::from)),
        DataType::Int32 => Elements::Signed(each!(i32, 4, i64::from)),
        DataType::Uint64 => Elements::Unsigned(each!(u64, 8, |x| x)),
        DataType::Int64 => Elements::Signed(each!(i64, 8, |x| x)),
        DataType::Fp16 => Elements::Float(each!(half::f16, 2, |x: half::f16| x.to_f32())),
        DataType::Fp32 => Elements::Float(each!(f32, 4, |x| x)),
        DataType::Fp64 => Elements::Double(each!(f64, 8, |x| x)),
        DataType::Bytes => Elements::Text(
            bytes_elements(data)
                .unwrap_or_default()
                .into_iter()
                .map(|e| String::from_utf8_lossy(e).into_owned())
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// `data` as `serde_json` alone reads it (not yet read as a datatype).
    fn data(value: Value) -> Data {
        serde_json::from_value(value).unwrap()
    }

    fn spec(shape: &[i64]) -> TensorSpec {
        TensorSpec {
            name: "x".into(),
            datatype: DataType::Fp32,
            shape: shape.to_vec(),
        }
    }

    #[test]
    fn a_leading_batch_dimension_is_stripped() {
        assert_eq!(item_shape(&spec(&[4]), &[4]), Ok((vec![4], None)));
        assert_eq!(item_shape(&spec(&[4]), &[1, 4]), Ok((vec![4], Some(1))));
        assert_eq!(item_shape(&spec(&[4]), &[3, 4]), Ok((vec![4], Some(3))));
        assert_eq!(item_shape(&spec(&[1, 4]), &[1, 4]), Ok((vec![1, 4], None)));
        assert_eq!(item_shape(&spec(&[-1]), &[7]), Ok((vec![7], None)));
        assert!(item_shape(&spec(&[4]), &[0, 4])
            .unwrap_err()
            .contains("shape"));
        assert!(item_shape(&spec(&[4]), &[5]).unwrap_err().contains("shape"));
        assert!(item_shape(&spec(&[4]), &[-4])
            .unwrap_err()
            .contains("negative"));
    }

    #[test]
    fn nested_and_flat_data_give_the_same_bytes() {
        let flat = from_json("x", DataType::Int16, 4, &data(json!([1, -2, 3, 4]))).unwrap();
        let nested = from_json("x", DataType::Int16, 4, &data(json!([[1, -2], [3, 4]]))).unwrap();
        assert_eq!(flat, nested);
        assert_eq!(
            to_json(DataType::Int16, &flat),
            Elements::Signed(vec![1, -2, 3, 4])
        );
        let fp32 = from_json("x", DataType::Fp32, 1, &data(json!([0.1]))).unwrap();
        let text = serde_json::to_string(&to_json(DataType::Fp32, &fp32)).unwrap();
        assert_eq!(text, "[0.1]", "shortest f32 text");
    }

    #[test]
    fn values_must_fit_the_datatype_and_the_count() {
        let err = from_json("x", DataType::Uint8, 1, &data(json!([300]))).unwrap_err();
        assert!(err.contains("300"), "{err}");
        let err = from_json("x", DataType::Fp32, 1, &data(json!(["a"]))).unwrap_err();
        assert!(err.contains("FP32"), "{err}");
        let err = from_json("x", DataType::Fp32, 3, &data(json!([1.0, 2.0]))).unwrap_err();
        assert!(err.contains("2 elements"), "{err}");
        assert!(from_json("x", DataType::Bool, 1, &data(json!([1]))).is_err());
    }

    #[test]
    fn every_datatype_round_trips_through_json() {
        let cases = [
            (DataType::Bool, json!([true, false])),
            (DataType::Uint64, json!([0, u64::MAX])),
            (DataType::Int64, json!([i64::MIN, 5])),
            (DataType::Fp16, json!([1.5, -2.0])),
            (DataType::Fp64, json!([0.1, 1e300])),
            (DataType::Bytes, json!(["ab", ""])),
        ];
        for (datatype, value) in cases {
            let bytes = from_json("x", datatype, 2, &data(value.clone())).unwrap();
            check_raw("x", datatype, 2, &bytes).unwrap();
            let back = serde_json::to_value(to_json(datatype, &bytes)).unwrap();
            assert_eq!(back, value, "{datatype:?}");
        }
    }

    #[test]
    fn broken_bytes_layouts_are_refused() {
        assert!(check_raw("x", DataType::Bytes, 1, &[5, 0, 0, 0, b'a']).is_err());
        assert!(check_raw("x", DataType::Bytes, 1, &[1, 0]).is_err());
        assert!(check_raw("x", DataType::Bytes, 1, &[1, 0, 0, 0, b'a']).is_ok());
        assert!(check_raw("x", DataType::Fp32, 2, &[0; 7]).is_err());
    }
}
