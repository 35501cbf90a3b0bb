//! Tensor rows for the fan-out and the join: a row cut from a tensor with rows, a zero
//! row, score values, rows stacked along a new leading dimension.

use crate::model::{DataType, TensorSpec};
use crate::tensor::Tensor;

/// Row `r` of a tensor with rows.
pub(super) fn cut_row(t: &Tensor, r: usize) -> Tensor {
    let n = t.shape.first().copied().unwrap_or(1).max(1);
    let size = t.data.len() / n;
    Tensor {
        name: t.name.clone(),
        datatype: t.datatype,
        shape: t.shape[1..].to_vec(),
        data: t.data[r * size..(r + 1) * size].into(),
    }
}

/// A zero row of the declared row shape (varying dimensions taken as 1).
pub(super) fn zero_row(name: &str, spec: Option<&TensorSpec>) -> Tensor {
    let undeclared = TensorSpec {
        name: name.to_owned(),
        datatype: DataType::Fp32,
        shape: Vec::new(),
    };
    Tensor {
        name: name.to_owned(),
        ..Tensor::zeros(spec.unwrap_or(&undeclared))
    }
}

/// The values of a numeric tensor, for scores.
pub(super) fn values(t: &Tensor) -> Option<Vec<f64>> {
    let d = &t.data;
    Some(match t.datatype {
        DataType::Fp32 => d
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        DataType::Fp64 => d
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
        DataType::Fp16 => d
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        DataType::Int32 => d
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        DataType::Int64 => d
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64)
            .collect(),
        DataType::Uint8 => d.iter().map(|&b| f64::from(b)).collect(),
        DataType::Int8 => d.iter().map(|&b| f64::from(b as i8)).collect(),
        _ => return None,
    })
}

/// Rows stacked along a new leading dimension; zero rows give a `[0, ...]` tensor.
pub(super) fn concat(
    name: &str,
    datatype: DataType,
    inner: &[i64],
    rows: &[&Tensor],
) -> Result<Tensor, String> {
    let shape = match rows.first() {
        Some(first) => {
            if rows.iter().any(|t| t.shape != first.shape) {
                return Err(format!(
                    "rows of '{name}' differ in shape and cannot be joined"
                ));
            }
            first.shape.clone()
        }
        None => inner
            .iter()
            .map(|&d| usize::try_from(d).unwrap_or(0))
            .collect(),
    };
    let data: Vec<u8> = rows.iter().flat_map(|t| t.data.iter().copied()).collect();
    let mut joined = vec![rows.len()];
    joined.extend(shape);
    Ok(Tensor {
        name: name.to_owned(),
        datatype,
        shape: joined,
        data: data.into(),
    })
}
