//! The per-model configuration file, `models/<name>/config.toml`, documented field by
//! field. Every field is optional: what is missing is read off the ONNX graph.
//!
//! ```toml
//! max_batch_size = 16          # 0: the model has no batch dimension (Triton's convention)
//! batch_sizes = [1, 2, 4, 8]   # plans built and profiled; default: powers of two
//! slo = "50ms"                 # objective of requests that name none
//! backends = ["cpu", "sim"]    # device backends that may serve it; default: real ones
//! version = 2                  # version to serve; default: the highest present
//! inputs = [{ name = "input", datatype = "FP32", shape = [256] }]   # checked
//! ```

use std::time::Duration;

use serde::Deserialize;

use crate::config::BackendKind;
use crate::model::TensorSpec;

/// The largest batch a model may be configured with: plans are built and profiled per
/// batch size at registration, and the policy's own `max_batch` (16 by default) caps what
/// it runs anyway.
pub const MAX_BATCH_SIZE: u32 = 4096;

/// `config.toml` of one model of the repository.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFileConfig {
    /// Largest batch the model is executed with. `0` means the graph has no batch
    /// dimension: every tensor is one item and only batch size 1 exists. Default: 16 if
    /// the graph's first input dimension is symbolic, else 1 (a fixed batch dimension of
    /// 1) or 0 (no batch dimension).
    pub max_batch_size: Option<u32>,
    /// Batch sizes to build plans for and profile (each at most `max_batch_size`).
    /// Default: 1, 2, 4, ... up to `max_batch_size`.
    pub batch_sizes: Option<Vec<u32>>,
    /// Latency objective of requests that name none. Default: `runtime.default_slo`.
    #[serde(default, with = "humantime_serde")]
    pub slo: Option<Duration>,
    /// Device backends allowed to serve the model. Default: the real ones (`cpu`, and
    /// backends added in code); list `sim` to let emulated devices answer it with
    /// made-up outputs (flagged `emulated`).
    pub backends: Option<Vec<BackendKind>>,
    /// Version directory to serve. Default: the highest-numbered one.
    pub version: Option<u64>,
    /// Inputs of one item (without the batch dimension). Default: the graph's. When given
    /// they must agree with the graph, so a wrong configuration is refused at once.
    pub inputs: Option<Vec<TensorSpec>>,
    /// Outputs of one item, as for `inputs`.
    pub outputs: Option<Vec<TensorSpec>>,
}

impl ModelFileConfig {
    /// Parses configuration text; the error names the offending key.
    pub fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// The batch sizes to serve, given the largest batch the graph allows (`None` when the
    /// batch dimension is symbolic), checked against each other.
    pub fn batch_sizes(&self, graph_max: Option<u32>) -> Result<Vec<u32>, String> {
        let max = match (self.max_batch_size, graph_max) {
            (Some(m), Some(g)) if m.max(1) > g => {
                return Err(format!(
                    "max_batch_size = {m}, but the graph's batch dimension is fixed to {g}"
                ))
            }
            (Some(m), _) => m.max(1),
            (None, Some(g)) => g,
            (None, None) => 16,
        };
        if max > MAX_BATCH_SIZE {
            return Err(format!(
                "max_batch_size = {max} is above {MAX_BATCH_SIZE}: a plan is built and profiled \
                 for each batch size, so one that large would not fit in memory"
            ));
        }
        let sizes = match &self.batch_sizes {
            Some(sizes) => {
                if let Some(bad) = sizes.iter().find(|&&b| b == 0 || b > max) {
                    return Err(format!(
                        "batch size {bad} is outside 1..={max} (max_batch_size)"
                    ));
                }
                let mut sizes = sizes.clone();
                sizes.sort_unstable();
                sizes.dedup();
                sizes
            }
            None => std::iter::successors(Some(1u32), |b| b.checked_mul(2))
                .take_while(|&b| b <= max)
                .collect(),
        };
        if sizes.is_empty() {
            return Err("batch_sizes is empty".into());
        }
        Ok(sizes)
    }

    /// Whether `backend` may serve the model.
    pub fn allows(&self, backend: BackendKind) -> bool {
        self.backends
            .as_ref()
            .is_none_or(|allowed| allowed.contains(&backend))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_graph() {
        let config = ModelFileConfig::default();
        assert_eq!(config.batch_sizes(None).unwrap(), vec![1, 2, 4, 8, 16]);
        assert_eq!(config.batch_sizes(Some(1)).unwrap(), vec![1]);
        assert!(config.allows(BackendKind::Cpu));
    }

    #[test]
    fn sizes_are_checked_against_the_maximum_and_the_graph() {
        let config = ModelFileConfig::parse("max_batch_size = 8\nbatch_sizes = [4, 1, 4]").unwrap();
        assert_eq!(config.batch_sizes(None).unwrap(), vec![1, 4]);
        let config = ModelFileConfig::parse("max_batch_size = 4\nbatch_sizes = [8]").unwrap();
        assert!(config
            .batch_sizes(None)
            .unwrap_err()
            .contains("batch size 8"));
        let config = ModelFileConfig::parse("max_batch_size = 4").unwrap();
        let err = config.batch_sizes(Some(1)).unwrap_err();
        assert!(err.contains("fixed to 1"), "{err}");
        let config = ModelFileConfig::parse("max_batch_size = 0").unwrap();
        assert_eq!(config.batch_sizes(Some(1)).unwrap(), vec![1]);
    }

    /// A batch dimension configured (or fixed in the graph) beyond what could be planned
    /// is refused with the reason, not built: 2^31 was found by fuzzing the config.
    #[test]
    fn a_batch_too_large_to_plan_is_refused() {
        let config = ModelFileConfig::parse("max_batch_size = 2147483648").unwrap();
        let err = config.batch_sizes(None).unwrap_err();
        assert!(err.contains("above 4096"), "{err}");
        let err = ModelFileConfig::default()
            .batch_sizes(Some(1 << 20))
            .unwrap_err();
        assert!(err.contains("max_batch_size = 1048576"), "{err}");
        let config = ModelFileConfig::parse("max_batch_size = 4096").unwrap();
        assert_eq!(config.batch_sizes(None).unwrap().last(), Some(&4096));
    }

    #[test]
    fn unknown_keys_and_backends_are_named() {
        let err = ModelFileConfig::parse("max_batch = 4").unwrap_err();
        assert!(err.contains("max_batch"), "{err}");
        let err = ModelFileConfig::parse("backends = [\"tpu\"]").unwrap_err();
        assert!(err.contains("tpu"), "{err}");
        let config = ModelFileConfig::parse("backends = [\"sim\"]").unwrap();
        assert!(!config.allows(BackendKind::Cpu));
        let config =
            ModelFileConfig::parse("inputs = [{ name = \"x\", datatype = \"FP32\", shape = [4] }]")
                .unwrap();
        assert_eq!(config.inputs.unwrap()[0].shape, vec![4]);
    }
}
