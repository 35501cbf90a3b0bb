//! From a stored model to a registration: the spec the runtime serves (tensors from the
//! graph, checked against the configuration; batch sizes; objective) and its profile,
//! measured on this CPU or reused from `profile.json`.

use std::sync::Arc;
use std::time::Duration;

use super::store::{self, ProfileKey, StoredProfile};
use super::{RepositoryError, StoredModel};
use crate::config::BackendKind;
use crate::gpu::cpu::graph::{BatchDim, GraphInput, Signature};
use crate::gpu::cpu::profile::{self, MeasuredProfile, ProfileSettings};
use crate::gpu::cpu::CpuError;
use crate::model::{BatchLatency, DataType, ModelProfile, ModelSpec, TensorSpec};
use crate::time::nanos;

/// What preparing a model needs to know.
#[derive(Clone, Debug)]
pub struct PrepareSettings {
    /// Objective of models whose configuration names none.
    pub default_slo: Duration,
    /// Kind of the cpu devices the profile is measured for.
    pub kind: String,
    pub profiling: ProfileSettings,
}

/// A model ready to register.
#[derive(Clone, Debug)]
pub struct Registration {
    pub spec: ModelSpec,
    pub bytes: Arc<[u8]>,
    /// Backends allowed to serve it (`None`: any).
    pub backends: Option<Vec<BackendKind>>,
    pub profile: MeasuredProfile,
    /// The profile came from `profile.json` rather than a new measurement.
    pub reused_profile: bool,
}

/// Reads the graph, resolves the configuration against it, and profiles it (or reuses
/// the stored profile). Every refusal names the model and the problem.
pub fn prepare(
    stored: &StoredModel,
    settings: &PrepareSettings,
) -> Result<Registration, RepositoryError> {
    let model = stored.name.as_str();
    let graph = |source: CpuError| RepositoryError::Graph {
        model: model.to_owned(),
        source,
    };
    let config_error = |message: String| RepositoryError::Config {
        model: model.to_owned(),
        message,
    };
    let signature = Signature::read(&stored.bytes).map_err(graph)?;
    let config = &stored.config;
    let (batched, graph_max) = batching(&signature, config.max_batch_size).map_err(config_error)?;
    let batch_sizes = if batched {
        config.batch_sizes(graph_max).map_err(config_error)?
    } else {
        vec![1]
    };
    let inputs: Vec<TensorSpec> = signature
        .inputs
        .iter()
        .map(|i| item_input(i, batched))
        .collect();
    if let Some(declared) = &config.inputs {
        agree("inputs", declared, &inputs).map_err(config_error)?;
    }
    let mut spec = ModelSpec {
        name: model.to_owned(),
        inputs,
        // Names only: the compiled graph tells the outputs' types and shapes.
        outputs: signature.outputs.iter().map(|n| placeholder(n)).collect(),
        slo: nanos(config.slo.unwrap_or(settings.default_slo)),
        // Placeholders but for the batch sizes: profiling measures the rest.
        profile: ModelProfile {
            weight_bytes: 0,
            load_latency: 0,
            batches: batch_sizes
                .iter()
                .map(|&batch| BatchLatency { batch, latency: 0 })
                .collect(),
        },
        batched,
        version: stored.version,
    };
    let (profile, reused_profile) =
        profile_of(stored, &spec, settings, &batch_sizes).map_err(graph)?;
    if let Some(declared) = &config.outputs {
        agree("outputs", declared, &profile.outputs).map_err(config_error)?;
    }
    spec.outputs = profile.outputs.clone();
    spec.profile = profile.seed();
    Ok(Registration {
        spec,
        bytes: Arc::clone(&stored.bytes),
        backends: config.backends.clone(),
        profile,
        reused_profile,
    })
}

/// Whether the model is batched and, if its batch dimension is fixed, the largest batch.
fn batching(
    signature: &Signature,
    max_batch_size: Option<u32>,
) -> Result<(bool, Option<u32>), String> {
    match (signature.batch_dim(), max_batch_size) {
        (BatchDim::Symbolic, Some(0)) => Err(
            "max_batch_size = 0 (no batch dimension), but the graph's first input dimension varies"
                .into(),
        ),
        (BatchDim::Symbolic, _) => Ok((true, None)),
        (BatchDim::FixedOne, Some(0)) => Ok((false, Some(1))),
        (BatchDim::FixedOne, _) => Ok((true, Some(1))),
        (BatchDim::None, Some(m)) if m > 1 => Err(format!(
            "max_batch_size = {m}, but the graph's inputs have no batch dimension"
        )),
        (BatchDim::None, _) => Ok((false, Some(1))),
    }
}

/// An input of one item: the graph's dimensions without the batch; `-1` where they vary.
fn item_input(input: &GraphInput, batched: bool) -> TensorSpec {
    let dims = if batched {
        &input.dims[1..]
    } else {
        &input.dims[..]
    };
    TensorSpec {
        name: input.name.clone(),
        datatype: input.datatype,
        shape: dims.iter().map(|d| d.map_or(-1, |v| v as i64)).collect(),
    }
}

fn placeholder(name: &str) -> TensorSpec {
    TensorSpec {
        name: name.to_owned(),
        datatype: DataType::Fp32,
        shape: Vec::new(),
    }
}

/// Checks tensors declared in `config.toml` against what the graph has.
fn agree(what: &str, declared: &[TensorSpec], graph: &[TensorSpec]) -> Result<(), String> {
    if declared == graph {
        return Ok(());
    }
    Err(format!(
        "{what} declared as {} but the graph has {}",
        describe(declared),
        describe(graph)
    ))
}

fn describe(tensors: &[TensorSpec]) -> String {
    let parts: Vec<String> = tensors
        .iter()
        .map(|t| format!("{} {:?} {:?}", t.name, t.datatype, t.shape))
        .collect();
    format!("[{}]", parts.join(", "))
}

/// The stored profile if it still applies, else a new measurement (then stored).
fn profile_of(
    stored: &StoredModel,
    spec: &ModelSpec,
    settings: &PrepareSettings,
    batch_sizes: &[u32],
) -> Result<(MeasuredProfile, bool), CpuError> {
    let key = ProfileKey {
        graph_hash: store::graph_hash(&stored.bytes),
        kind: &settings.kind,
        settings: settings.profiling,
        batch_sizes,
    };
    if let Some(found) = store::load(&stored.dir, &key) {
        return Ok((found.profile, true));
    }
    let measured = profile::measure(&stored.bytes, spec, settings.profiling)?;
    let record = StoredProfile {
        graph_hash: key.graph_hash,
        kind: settings.kind.clone(),
        settings: settings.profiling,
        batch_sizes: batch_sizes.to_vec(),
        profile: measured.clone(),
    };
    store::save(&stored.dir, &record);
    Ok((measured, false))
}
