//! How tensors cross the wire: name, datatype, shape and the data as one run of raw bytes
//! (serde's bytes type, which bincode writes as a length and the bytes, not one number per
//! element). The in-process [`Tensor`] keeps its data in an `Arc<[u8]>`, which serde does
//! not know, so the impls go through two private shapes of the same four fields.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::model::DataType;
use crate::tensor::Tensor;

/// A tensor as it is written.
#[derive(Serialize)]
struct TensorOut<'a> {
    name: &'a str,
    datatype: DataType,
    shape: &'a [usize],
    #[serde(with = "serde_bytes")]
    data: &'a [u8],
}

/// A tensor as it is read.
#[derive(Deserialize)]
struct TensorIn {
    name: String,
    datatype: DataType,
    shape: Vec<usize>,
    #[serde(with = "serde_bytes")]
    data: Vec<u8>,
}

impl Serialize for Tensor {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        TensorOut {
            name: &self.name,
            datatype: self.datatype,
            shape: &self.shape,
            data: &self.data,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Tensor {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let t = TensorIn::deserialize(deserializer)?;
        Ok(Tensor {
            name: t.name,
            datatype: t.datatype,
            shape: t.shape,
            data: t.data.into(),
        })
    }
}

/// The inputs of an INFER: shared per request in process, a plain list of lists on the
/// wire (serde's `Arc` support would need its `rc` feature, and a reader gets fresh
/// copies anyway).
pub(super) mod shared_items {
    use super::*;

    pub fn serialize<S: Serializer>(
        items: &[Arc<Vec<Tensor>>],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(items.iter().map(|item| item.as_slice()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<Arc<Vec<Tensor>>>, D::Error> {
        let items = Vec::<Vec<Tensor>>::deserialize(deserializer)?;
        Ok(items.into_iter().map(Arc::new).collect())
    }
}
