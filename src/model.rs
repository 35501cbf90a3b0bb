//! What a model is to the runtime: identifiers, the tensors it takes and gives, and the
//! profile of how long it takes on a device.
//!
//! Names are for people and the API; everything inside the runtime refers to models,
//! devices, requests and actions by small integer ids so the policy can index vectors.

use serde::{Deserialize, Serialize};

use crate::time::Nanos;

/// Index of a registered model (dense, in registration order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ModelId(pub u32);

/// Index of a device (dense, in configuration order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DeviceId(pub u32);

/// Identity of one inference request, unique for the life of a controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RequestId(pub u64);

/// Identity of one action sent to an executor, unique for the life of a controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ActionId(pub u64);

/// Element types of tensors, named as the Open Inference Protocol names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum DataType {
    Bool,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Int8,
    Int16,
    Int32,
    Int64,
    Fp16,
    Fp32,
    Fp64,
    Bytes,
}

impl DataType {
    /// Bytes per element; `None` for variable-length `BYTES`.
    pub fn size(self) -> Option<usize> {
        use DataType::*;
        match self {
            Bool | Uint8 | Int8 => Some(1),
            Uint16 | Int16 | Fp16 => Some(2),
            Uint32 | Int32 | Fp32 => Some(4),
            Uint64 | Int64 | Fp64 => Some(8),
            Bytes => None,
        }
    }
}

/// One named input or output of a model, without the batch dimension.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorSpec {
    /// Name as the API and the model graph know it.
    pub name: String,
    /// Element type.
    pub datatype: DataType,
    /// Dimensions of one item of a batch; `-1` marks a dimension that varies.
    pub shape: Vec<i64>,
}

impl TensorSpec {
    /// Elements in one item, or `None` if a dimension varies.
    pub fn elements(&self) -> Option<usize> {
        self.shape
            .iter()
            .try_fold(1usize, |n, &d| usize::try_from(d).ok().map(|d| n * d))
    }
}

/// Measured latency of one batch size on one kind of device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchLatency {
    /// Number of requests executed together.
    pub batch: u32,
    /// Execution time of the whole batch.
    pub latency: Nanos,
}

/// How a model behaves on a device: the seed of the controller's estimates and the script
/// an emulated device follows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelProfile {
    /// Size of the weights that a LOAD copies to the device.
    pub weight_bytes: u64,
    /// Time to copy the weights to the device.
    pub load_latency: Nanos,
    /// Execution time per batch size, sorted by batch size; the batch sizes the model may
    /// be executed with.
    pub batches: Vec<BatchLatency>,
}

impl ModelProfile {
    /// Profiled execution time of `batch`, if that batch size is allowed.
    pub fn latency(&self, batch: u32) -> Option<Nanos> {
        self.batches
            .iter()
            .find(|b| b.batch == batch)
            .map(|b| b.latency)
    }

    /// The smallest allowed batch size that holds `items` items: what a batch of that
    /// many runs as (padded), as the cpu backend does.
    pub fn fitting_batch(&self, items: u32) -> Option<u32> {
        let sizes = self.batches.iter().map(|b| b.batch);
        sizes.filter(|&b| b >= items).min()
    }

    /// Largest allowed batch size.
    pub fn max_batch(&self) -> u32 {
        self.batches.iter().map(|b| b.batch).max().unwrap_or(1)
    }

    /// Device pages the weights occupy with pages of `page_bytes`.
    pub fn pages(&self, page_bytes: u64) -> u32 {
        let pages = self.weight_bytes.div_ceil(page_bytes.max(1));
        u32::try_from(pages).unwrap_or(u32::MAX)
    }
}

/// A model's profile as measured on one kind of device: estimates on devices of that
/// kind start from it (timing differs between kinds, e.g. cpu devices of different
/// thread counts).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindProfile {
    /// The device kind (`BackendInfo::kind`) it was measured on.
    pub kind: String,
    pub profile: ModelProfile,
}

/// Everything the runtime knows about a registered model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelSpec {
    /// Name in the API.
    pub name: String,
    /// Inputs of one item.
    pub inputs: Vec<TensorSpec>,
    /// Outputs of one item.
    pub outputs: Vec<TensorSpec>,
    /// Latency objective used when a request names none.
    pub slo: Nanos,
    /// Profile that seeds the estimates.
    pub profile: ModelProfile,
    /// Whether its tensors have a batch dimension that batches are stacked along (else
    /// every tensor is one whole item and batches are of one).
    #[serde(default = "batched")]
    pub batched: bool,
    /// The version served (the repository's version directory; 1 for built-in profiles).
    #[serde(default = "first_version")]
    pub version: u64,
}

fn batched() -> bool {
    true
}

fn first_version() -> u64 {
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_round_up() {
        let profile = ModelProfile {
            weight_bytes: 102_000_000,
            load_latency: 0,
            batches: vec![],
        };
        assert_eq!(profile.pages(16 << 20), 7);
        assert_eq!(profile.pages(102_000_000), 1);
    }

    #[test]
    fn elements_of_variable_shape_are_unknown() {
        let spec = |shape: Vec<i64>| TensorSpec {
            name: "x".into(),
            datatype: DataType::Fp32,
            shape,
        };
        assert_eq!(spec(vec![3, 224, 224]).elements(), Some(150_528));
        assert_eq!(spec(vec![-1, 4]).elements(), None);
        assert_eq!(spec(vec![]).elements(), Some(1));
    }
}
