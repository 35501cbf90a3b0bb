//! The batch rules every real backend shares (tract's and ONNX Runtime's): how the items
//! of a batch become one input tensor of an allowed batch size, and how the batch's
//! outputs are split back into one answer per item.
//!
//! A batch of `n` items runs at the smallest allowed size `batch >= n`; the missing items
//! are zeros and their outputs are dropped. Tensors cross as raw little-endian bytes,
//! the layout of both runtimes on the little-endian machines this runs on.

use crate::model::{DataType, TensorSpec};
use crate::tensor::Tensor;

use crate::gpu::BatchOutputs;

/// Why a batch cannot be assembled or split.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// A request's input is missing or of the wrong type or size: the caller's fault.
    #[error("{0}")]
    Input(String),
    /// The model's tensors do not fit the batch (a variable dimension, a wrong output).
    #[error("{0}")]
    Shape(String),
}

/// The shape a runtime runs: the item's, after a batch dimension if the graph has one.
pub fn full_shape(spec: &TensorSpec, batched: bool, batch: u32) -> Result<Vec<usize>, BatchError> {
    let mut shape = Vec::with_capacity(spec.shape.len() + 1);
    if batched {
        shape.push(batch as usize);
    }
    for &d in &spec.shape {
        let d = usize::try_from(d).map_err(|_| {
            BatchError::Shape(format!(
                "input '{}' has a variable dimension besides the batch",
                spec.name
            ))
        })?;
        shape.push(d);
    }
    Ok(shape)
}

/// Writes input `spec` of every item into `buffer`, the zeroed data of the whole batch
/// (`buffer.len() / batch` bytes per item): the items back to back, padding left zero.
pub fn fill_input(
    spec: &TensorSpec,
    items: &[&[Tensor]],
    buffer: &mut [u8],
    batch: u32,
) -> Result<(), BatchError> {
    let width = buffer.len() / batch.max(1) as usize;
    if items.len() > batch as usize {
        return Err(BatchError::Shape(format!(
            "{} items do not fit a batch of {batch}",
            items.len()
        )));
    }
    for (i, item) in items.iter().enumerate() {
        let given = item
            .iter()
            .find(|t| t.name == spec.name)
            .ok_or_else(|| BatchError::Input(format!("missing input '{}'", spec.name)))?;
        if given.data.len() != width || given.datatype != spec.datatype {
            return Err(BatchError::Input(format!(
                "input '{}' has {} bytes of {:?}, the plan takes {width} of {:?}",
                spec.name,
                given.data.len(),
                given.datatype,
                spec.datatype
            )));
        }
        if spec.datatype == DataType::Bool && given.data.iter().any(|&b| b > 1) {
            return Err(BatchError::Input(format!(
                "input '{}' has a BOOL that is neither 0 nor 1",
                spec.name
            )));
        }
        buffer[i * width..(i + 1) * width].copy_from_slice(&given.data);
    }
    Ok(())
}

/// Splits the outputs of a batch of `batch` (the data of each output of `specs`, in their
/// order) into the answers of its first `n` items.
pub fn split_outputs<'a>(
    specs: &[TensorSpec],
    results: impl IntoIterator<Item = &'a [u8]>,
    batch: u32,
    n: usize,
) -> Result<BatchOutputs, BatchError> {
    let mut outputs: BatchOutputs = (0..n).map(|_| Vec::with_capacity(specs.len())).collect();
    let mut seen = 0;
    for (spec, bytes) in specs.iter().zip(results) {
        seen += 1;
        let chunk = bytes.len() / batch.max(1) as usize;
        let expected = spec.datatype.size().unwrap_or(1)
            * spec
                .shape
                .iter()
                .map(|&d| d.max(0) as usize)
                .product::<usize>();
        if chunk != expected || chunk * batch as usize != bytes.len() {
            return Err(BatchError::Shape(format!(
                "output '{}' has {} bytes for a batch of {batch}, expected {expected} per item",
                spec.name,
                bytes.len()
            )));
        }
        for (i, item) in outputs.iter_mut().enumerate() {
            item.push(Tensor {
                name: spec.name.clone(),
                datatype: spec.datatype,
                shape: spec.shape.iter().map(|&d| d as usize).collect(),
                data: bytes[i * chunk..(i + 1) * chunk].into(),
            });
        }
    }
    if seen != specs.len() {
        return Err(BatchError::Shape(format!(
            "{seen} outputs for {} declared",
            specs.len()
        )));
    }
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, n: i64) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            datatype: DataType::Fp32,
            shape: vec![n],
        }
    }

    #[test]
    fn items_go_back_to_back_padding_stays_zero_and_answers_split_per_item() {
        let items: Vec<Vec<Tensor>> = (1..=2)
            .map(|i| vec![Tensor::from_f32("x", vec![2], &[i as f32; 2])])
            .collect();
        let refs: Vec<&[Tensor]> = items.iter().map(Vec::as_slice).collect();
        let mut buffer = vec![0u8; 4 * 2 * 4];
        fill_input(&spec("x", 2), &refs, &mut buffer, 4).unwrap();
        let floats: Vec<f32> = buffer
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(floats, [1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0]);
        // The batch's output of 4 items of one float: two answers, the padding dropped.
        let out = split_outputs(&[spec("y", 1)], [&buffer[..16]], 4, 2).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[1][0].to_f32().unwrap(), [1.0]);
        assert!(split_outputs(&[spec("y", 2)], [&buffer[..16]], 4, 2).is_err());
        assert!(split_outputs(&[spec("y", 1), spec("z", 1)], [&buffer[..16]], 4, 2).is_err());
    }

    #[test]
    fn wrong_inputs_are_the_callers_fault() {
        let mut buffer = vec![0u8; 8];
        let short = [Tensor::from_f32("x", vec![1], &[0.0])];
        let err = fill_input(&spec("x", 2), &[&short], &mut buffer, 1).unwrap_err();
        assert!(matches!(err, BatchError::Input(_)), "{err}");
        let other = [Tensor::from_f32("w", vec![2], &[0.0; 2])];
        let err = fill_input(&spec("x", 2), &[&other], &mut buffer, 1).unwrap_err();
        assert!(matches!(err, BatchError::Input(_)), "{err}");
        let too_many: [&[Tensor]; 2] = [&short, &short];
        assert!(fill_input(&spec("x", 1), &too_many, &mut buffer, 1).is_err());
    }
}
