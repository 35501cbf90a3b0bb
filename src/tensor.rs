//! Tensors as they travel between the API, the controller and the devices: a typed,
//! shaped, little-endian byte buffer for one item of a batch.

use std::sync::Arc;

use crate::model::{DataType, ModelSpec, TensorSpec};

/// One named tensor of one request.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub datatype: DataType,
    /// Concrete dimensions of this item (no batch dimension).
    pub shape: Vec<usize>,
    /// Elements in row-major order, little-endian.
    pub data: Arc<[u8]>,
}

impl Tensor {
    /// Number of elements the shape describes.
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// The data as `f32` values, if that is the element type.
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        (self.datatype == DataType::Fp32).then(|| {
            self.data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    }

    /// A `FP32` tensor from values.
    pub fn from_f32(name: &str, shape: Vec<usize>, values: &[f32]) -> Self {
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self {
            name: name.to_owned(),
            datatype: DataType::Fp32,
            shape,
            data: data.into(),
        }
    }
}

/// Checks that `inputs` are what `spec` takes: each declared input once, of its datatype,
/// with a shape that matches the declared one (where it is fixed) and a data length that
/// matches the shape. Returns a message naming the first problem.
pub fn check_inputs(spec: &ModelSpec, inputs: &[Tensor]) -> Result<(), String> {
    check_tensors(&spec.inputs, inputs)
}

/// [`check_inputs`] against a list of declared inputs (a model's or a pipeline's).
pub fn check_tensors(specs: &[TensorSpec], inputs: &[Tensor]) -> Result<(), String> {
    for declared in specs {
        let mut found = inputs.iter().filter(|t| t.name == declared.name);
        let Some(tensor) = found.next() else {
            return Err(format!("missing input '{}'", declared.name));
        };
        if found.next().is_some() {
            return Err(format!("input '{}' given twice", declared.name));
        }
        if tensor.datatype != declared.datatype {
            return Err(format!(
                "input '{}' has datatype {:?}, the model takes {:?}",
                tensor.name, tensor.datatype, declared.datatype
            ));
        }
        let fits = tensor.shape.len() == declared.shape.len()
            && tensor
                .shape
                .iter()
                .zip(&declared.shape)
                .all(|(&got, &want)| want < 0 || got as i64 == want);
        if !fits {
            return Err(format!(
                "input '{}' has shape {:?}, the model takes {:?}",
                tensor.name, tensor.shape, declared.shape
            ));
        }
        if let Some(size) = tensor.datatype.size() {
            if tensor.data.len() != tensor.elements() * size {
                return Err(format!(
                    "input '{}' has {} bytes of data, its shape needs {}",
                    tensor.name,
                    tensor.data.len(),
                    tensor.elements() * size
                ));
            }
        }
    }
    if let Some(extra) = inputs
        .iter()
        .find(|t| !specs.iter().any(|d| d.name == t.name))
    {
        return Err(format!("unexpected input '{}'", extra.name));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_round_trip() {
        let t = Tensor::from_f32("x", vec![2, 2], &[1.0, -2.5, 3.25, 0.0]);
        assert_eq!(t.elements(), 4);
        assert_eq!(t.to_f32().unwrap(), vec![1.0, -2.5, 3.25, 0.0]);
    }

    #[test]
    fn inputs_are_checked_against_the_spec() {
        let spec = crate::gpu::profiles::model("mlp-small", "m", 1).unwrap();
        let good = Tensor::from_f32("input", vec![64], &[0.0; 64]);
        assert_eq!(check_inputs(&spec, std::slice::from_ref(&good)), Ok(()));
        let short = Tensor::from_f32("input", vec![64], &[0.0; 63]);
        assert!(check_inputs(&spec, &[short]).unwrap_err().contains("bytes"));
        let shape = Tensor::from_f32("input", vec![8, 8], &[0.0; 64]);
        assert!(check_inputs(&spec, &[shape]).unwrap_err().contains("shape"));
        assert!(check_inputs(&spec, &[]).unwrap_err().contains("missing"));
        let extra = Tensor::from_f32("other", vec![1], &[0.0]);
        assert!(check_inputs(&spec, &[good, extra])
            .unwrap_err()
            .contains("unexpected"));
    }
}
