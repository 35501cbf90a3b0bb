//! Tensors as they travel between the API, the controller and the devices: a typed,
//! shaped, little-endian byte buffer for one item of a batch, or for the items of one
//! request that carries several (a client's batch), item after item; [`split_items`] and
//! [`join_items`] go between the two.

use std::sync::Arc;

use crate::model::{DataType, ModelSpec, TensorSpec};

/// One named tensor of one request.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub datatype: DataType,
    /// Concrete dimensions of one item (no batch dimension).
    pub shape: Vec<usize>,
    /// Elements in row-major order, little-endian: of one item, or in a request of
    /// several items, of every item back to back.
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

    /// One item of zeros of a declared tensor (dimensions that vary taken as 1): what a
    /// run needs when nobody's values matter (a probe, a simulated client).
    pub fn zeros(spec: &TensorSpec) -> Self {
        let shape: Vec<usize> = spec
            .shape
            .iter()
            .map(|&d| usize::try_from(d).unwrap_or(1))
            .collect();
        let bytes = shape.iter().product::<usize>() * spec.datatype.size().unwrap_or(1);
        Self {
            name: spec.name.clone(),
            datatype: spec.datatype,
            shape,
            data: vec![0u8; bytes].into(),
        }
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

/// Splits a request's tensors, each holding `items` items of its shape back to back, into
/// the tensors of each item (what devices run). A message names a tensor whose data is not
/// `items` whole items.
pub fn split_items(tensors: &[Tensor], items: usize) -> Result<Vec<Vec<Tensor>>, String> {
    let mut out = vec![Vec::with_capacity(tensors.len()); items];
    for t in tensors {
        for (item, range) in out.iter_mut().zip(item_ranges(t, items)?) {
            item.push(Tensor {
                name: t.name.clone(),
                datatype: t.datatype,
                shape: t.shape.clone(),
                data: t.data[range].into(),
            });
        }
    }
    Ok(out)
}

/// Where each of `items` items lies in a tensor's data.
fn item_ranges(t: &Tensor, items: usize) -> Result<Vec<std::ops::Range<usize>>, String> {
    let name = &t.name;
    let Some(size) = t.datatype.size() else {
        return bytes_item_ranges(t, items);
    };
    let item = t.elements().checked_mul(size);
    match item.and_then(|i| i.checked_mul(items)) {
        Some(all) if all == t.data.len() => {
            let item = all / items.max(1);
            Ok((0..items).map(|i| i * item..(i + 1) * item).collect())
        }
        _ => Err(format!(
            "input '{name}' has {} bytes of data, not {items} items of shape {:?}",
            t.data.len(),
            t.shape
        )),
    }
}

/// [`item_ranges`] of a `BYTES` tensor: each element a 4-byte little-endian length and
/// its bytes, `elements()` of them per item.
fn bytes_item_ranges(t: &Tensor, items: usize) -> Result<Vec<std::ops::Range<usize>>, String> {
    let broken = || {
        format!(
            "input '{}' has BYTES data that is not {items} items",
            t.name
        )
    };
    let mut ranges = Vec::with_capacity(items);
    let mut at = 0usize;
    for _ in 0..items {
        let start = at;
        for _ in 0..t.elements() {
            let prefix = t.data.get(at..at + 4).ok_or_else(broken)?;
            let len = u32::from_le_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
            at = (at + 4).checked_add(len as usize).ok_or_else(broken)?;
        }
        ranges.push(start..at);
    }
    if at != t.data.len() {
        return Err(broken());
    }
    Ok(ranges)
}

/// The tensors of a request of several items from each item's (what devices answer):
/// each output's items back to back, in item order. A message names an output that an
/// item lacks or gave in another shape or datatype.
pub fn join_items(mut items: Vec<Vec<Tensor>>) -> Result<Vec<Tensor>, String> {
    if items.len() <= 1 {
        return Ok(items.pop().unwrap_or_default());
    }
    let first = &items[0];
    let mut joined = Vec::with_capacity(first.len());
    for t in first {
        let mut data = Vec::with_capacity(t.data.len() * items.len());
        for item in &items {
            let same = item.iter().find(|o| o.name == t.name);
            match same {
                Some(o) if o.shape == t.shape && o.datatype == t.datatype => {
                    data.extend_from_slice(&o.data)
                }
                _ => return Err(format!("output '{}' differs between items", t.name)),
            }
        }
        joined.push(Tensor {
            data: data.into(),
            ..t.clone()
        });
    }
    Ok(joined)
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

    #[test]
    fn items_split_and_join_back() {
        let x = Tensor::from_f32("x", vec![2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let items = split_items(std::slice::from_ref(&x), 3).unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(items[1][0].to_f32().unwrap(), vec![3.0, 4.0]);
        assert_eq!(join_items(items).unwrap(), vec![x.clone()]);
        assert!(split_items(&[x], 4).unwrap_err().contains("not 4 items"));
        // BYTES: one element per item, of different lengths.
        let data: Vec<u8> = [&[1u8, 0, 0, 0, b'a'][..], &[2, 0, 0, 0, b'b', b'c']].concat();
        let text = Tensor {
            name: "t".into(),
            datatype: crate::model::DataType::Bytes,
            shape: vec![1],
            data: data.into(),
        };
        let items = split_items(std::slice::from_ref(&text), 2).unwrap();
        assert_eq!(&items[1][0].data[..], &[2, 0, 0, 0, b'b', b'c']);
        assert!(split_items(&[text], 3).is_err());
    }
}
