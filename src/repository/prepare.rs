//! From a stored model to a registration: the spec the runtime serves (tensors from the
//! graph, checked against the configuration; batch sizes; objective), the cpu plans built
//! once for every device (and, with `ort` devices, the model checked by ONNX Runtime), and
//! a profile per device kind, measured on this CPU or reused from `profile.json`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::store::{self, ProfileKey, StoredProfile};
use super::{RepositoryError, StoredModel};
use crate::config::BackendKind;
use crate::gpu::cpu::graph::{BatchDim, GraphInput, Signature};
use crate::gpu::cpu::profile::{self, MeasuredProfile, ProfileSettings};
use crate::gpu::cpu::{CpuError, CpuSettings, ModelPlans};
use crate::gpu::ort::{self, OrtError, OrtModel, OrtSettings};
use crate::gpu::Prepared;
use crate::model::{BatchLatency, DataType, KindProfile, ModelProfile, ModelSpec, TensorSpec};
use crate::time::{nanos, Nanos};

/// What preparing a model needs to know.
#[derive(Clone, Debug)]
pub struct PrepareSettings {
    /// Objective of models whose configuration names none.
    pub default_slo: Duration,
    /// Threads of each cpu device group that may serve the models. Each distinct count
    /// is a device kind of its own (`CpuSettings::kind`: timing differs) and gets its own
    /// profile, the first one also serving as the fallback for other kinds; empty: one
    /// single-threaded kind, or none when `ort_threads` has some (the first ort kind is
    /// then the fallback).
    pub threads: Vec<usize>,
    /// Threads of each `ort` device group: each distinct count is a kind of its own
    /// (`ort`, `ort-<n>t`), profiled after the cpu kinds. Empty: nothing is prepared for
    /// ONNX Runtime (it need not be installed).
    pub ort_threads: Vec<usize>,
    /// Warm-up, runs and loads of each profile; its `threads` is set per kind.
    pub profiling: ProfileSettings,
}

impl PrepareSettings {
    /// One single-threaded cpu kind and no `ort` kind, profiled as `profiling` says.
    pub fn single_cpu(default_slo: Duration, profiling: ProfileSettings) -> Self {
        Self {
            default_slo,
            threads: vec![1],
            ort_threads: Vec::new(),
            profiling: ProfileSettings {
                threads: 1,
                ..profiling
            },
        }
    }

    /// The distinct cpu kinds to profile for, in the order first named: each kind's name
    /// and its profiling settings.
    pub fn kinds(&self) -> Vec<(String, ProfileSettings)> {
        let mut threads = distinct(&self.threads);
        if threads.is_empty() && self.ort_threads.is_empty() {
            threads.push(1);
        }
        self.named(threads, |threads| CpuSettings { pages: 0, threads }.kind())
    }

    /// The single-threaded cpu kind, profiled when no other kind could be.
    fn cpu_fallback(&self) -> (String, ProfileSettings) {
        let mut kinds = self.named(vec![1], |threads| CpuSettings { pages: 0, threads }.kind());
        kinds.remove(0)
    }

    /// The distinct `ort` kinds to profile for, as [`Self::kinds`] (none without ort groups).
    pub fn ort_kinds(&self) -> Vec<(String, ProfileSettings)> {
        let threads = distinct(&self.ort_threads);
        self.named(threads, |threads| OrtSettings { pages: 0, threads }.kind())
    }

    fn named(
        &self,
        threads: Vec<usize>,
        kind: impl Fn(usize) -> String,
    ) -> Vec<(String, ProfileSettings)> {
        threads
            .into_iter()
            .map(|threads| {
                let settings = ProfileSettings {
                    threads,
                    ..self.profiling
                };
                (kind(threads), settings)
            })
            .collect()
    }
}

/// Thread counts (at least 1 each) without repeats, in the order first named.
fn distinct(counts: &[usize]) -> Vec<usize> {
    let mut threads: Vec<usize> = Vec::new();
    for &t in counts {
        if !threads.contains(&t.max(1)) {
            threads.push(t.max(1));
        }
    }
    threads
}

/// A model's profile on one device kind, as measured (or reused).
#[derive(Clone, Debug)]
pub struct MeasuredKind {
    /// The device kind (`cpu`, `cpu-4t`).
    pub kind: String,
    pub profile: MeasuredProfile,
    /// It came from `profile.json` rather than a new measurement.
    pub reused: bool,
}

/// A model ready to register.
#[derive(Clone, Debug)]
pub struct Registration {
    /// Its spec; the profile in it is the first kind's (the fallback for other kinds).
    pub spec: ModelSpec,
    pub bytes: Arc<[u8]>,
    /// Backends allowed to serve it (`None`: any).
    pub backends: Option<Vec<BackendKind>>,
    /// The cpu plans, built once here and shared by every cpu device that loads it (and
    /// the `ort` model, with `ort` devices).
    pub prepared: Prepared,
    /// Why ONNX Runtime refused the model, if it did: it is then kept off `ort` devices
    /// (`backends` says so) and served by the others.
    pub ort_refused: Option<String>,
    /// How long building the plans took, in nanoseconds (what every LOAD cost when each
    /// device built its own).
    pub build: Nanos,
    /// One profile per device kind of the settings, in their order (never empty).
    pub profiles: Vec<MeasuredKind>,
}

impl Registration {
    /// The first kind's profile, the one in the spec.
    pub fn profile(&self) -> &MeasuredProfile {
        &self.profiles[0].profile
    }

    /// Whether every kind's profile came from `profile.json`.
    pub fn reused_profile(&self) -> bool {
        self.profiles.iter().all(|p| p.reused)
    }

    /// The seed of each kind's estimates.
    pub fn kind_profiles(&self) -> Vec<KindProfile> {
        self.profiles
            .iter()
            .map(|p| KindProfile {
                kind: p.kind.clone(),
                profile: p.profile.seed(),
            })
            .collect()
    }
}

/// Reads the graph, resolves the configuration against it, builds its cpu plans and
/// profiles it per device kind (or reuses the stored profiles). Every refusal names the
/// model and the problem.
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
    let begin = Instant::now();
    let plans = Arc::new(ModelPlans::compile(&stored.bytes, &spec).map_err(graph)?);
    let build = nanos(begin.elapsed());
    if let Some(declared) = &config.outputs {
        agree("outputs", declared, plans.outputs()).map_err(config_error)?;
    }
    spec.outputs = plans.outputs().to_vec();
    let mut backends = config.backends.clone();
    let (profiles, ort, ort_refused) = profiles(stored, &spec, &plans, settings)?;
    if ort_refused.is_some() {
        backends = Some(without_ort(backends));
    }
    spec.profile = profiles[0].profile.seed();
    Ok(Registration {
        spec,
        bytes: Arc::clone(&stored.bytes),
        backends,
        ort_refused,
        prepared: Prepared {
            cpu: Some(plans),
            ort,
        },
        build,
        profiles,
    })
}

/// The profile of every kind (cpu kinds first, never empty), with what was prepared for
/// ONNX Runtime or why it refused the model.
#[allow(clippy::type_complexity)]
fn profiles(
    stored: &StoredModel,
    spec: &ModelSpec,
    plans: &Arc<ModelPlans>,
    settings: &PrepareSettings,
) -> Result<(Vec<MeasuredKind>, Option<Arc<OrtModel>>, Option<String>), RepositoryError> {
    let graph = |source: CpuError| RepositoryError::Graph {
        model: stored.name.clone(),
        source,
    };
    let tract = |kind| {
        let found = profile_of(stored, spec, kind, |p| profile::measure(plans, spec, p))?;
        Ok::<_, CpuError>(with_facts(found, plans.weight_bytes(), spec))
    };
    let mut profiles = settings
        .kinds()
        .into_iter()
        .map(tract)
        .collect::<Result<Vec<_>, _>>()
        .map_err(graph)?;
    let (ort, refused) = match prepare_ort(stored, spec, settings) {
        Ok((ort, ort_profiles)) => {
            profiles.extend(ort_profiles);
            (ort, None)
        }
        Err(error) => {
            // ONNX Runtime refuses graphs tract serves (operators of old opsets): the
            // model is served by the other real backend rather than refused.
            let model = stored.name.as_str();
            tracing::warn!(model, %error, "ONNX Runtime refuses the model: not on ort devices");
            (None, Some(error.to_string()))
        }
    };
    if profiles.is_empty() {
        // Only ort groups, and ONNX Runtime refused the model: tract's is the fallback.
        profiles.push(tract(settings.cpu_fallback()).map_err(graph)?);
    }
    Ok((profiles, ort, refused))
}

/// The backends a model ONNX Runtime refused may use: those it allowed but `ort` (`auto`
/// then means tract); with none named, the other real one (an unnamed list keeps real
/// graphs off emulated devices).
fn without_ort(backends: Option<Vec<BackendKind>>) -> Vec<BackendKind> {
    match backends {
        Some(list) => list
            .into_iter()
            .map(|b| b.resolved(false))
            .filter(|&b| b != BackendKind::Ort)
            .collect(),
        None => vec![BackendKind::Cpu],
    }
}

/// The model prepared for ONNX Runtime and profiled per `ort` kind, when `ort` devices are
/// configured (else nothing: ONNX Runtime need not be installed).
fn prepare_ort(
    stored: &StoredModel,
    spec: &ModelSpec,
    settings: &PrepareSettings,
) -> Result<(Option<Arc<OrtModel>>, Vec<MeasuredKind>), RepositoryError> {
    let kinds = settings.ort_kinds();
    if kinds.is_empty() {
        return Ok((None, Vec::new()));
    }
    let failed = |source: OrtError| RepositoryError::Ort {
        model: stored.name.clone(),
        source,
    };
    let model = Arc::new(OrtModel::prepare(Arc::clone(&stored.bytes), spec).map_err(failed)?);
    let profiles = kinds
        .into_iter()
        .map(|kind| profile_of(stored, spec, kind, |p| ort::measure(&model, spec, p)))
        .map(|found| found.map(|f| with_facts(f, model.weight_bytes(), spec)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(failed)?;
    Ok((Some(model), profiles))
}

/// `found` with what the prepared model tells for certain (its weight bytes, and its
/// outputs: the spec's, which the compiled graph gave): facts, not measurements, so a
/// stored profile is not trusted with them (a damaged `weight_bytes` would keep the model
/// off every device).
fn with_facts(mut found: MeasuredKind, weight_bytes: u64, spec: &ModelSpec) -> MeasuredKind {
    found.profile.weight_bytes = weight_bytes;
    found.profile.outputs = spec.outputs.clone();
    found
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

/// The profile of `kind` stored for this graph if it still applies, else a new
/// measurement by `measure` (then stored beside the other kinds').
fn profile_of<E>(
    stored: &StoredModel,
    spec: &ModelSpec,
    (kind, profiling): (String, ProfileSettings),
    measure: impl FnOnce(ProfileSettings) -> Result<MeasuredProfile, E>,
) -> Result<MeasuredKind, E> {
    let batch_sizes: Vec<u32> = spec.profile.batches.iter().map(|b| b.batch).collect();
    let key = ProfileKey {
        graph_hash: store::graph_hash(&stored.bytes),
        kind: &kind,
        settings: profiling,
        batch_sizes: &batch_sizes,
    };
    if let Some(found) = store::load(&stored.dir, &key) {
        return Ok(MeasuredKind {
            kind,
            profile: found.profile,
            reused: true,
        });
    }
    let measured = measure(profiling)?;
    let record = StoredProfile {
        graph_hash: key.graph_hash,
        kind: kind.clone(),
        settings: profiling,
        batch_sizes,
        profile: measured.clone(),
    };
    store::save(&stored.dir, record);
    Ok(MeasuredKind {
        kind,
        profile: measured,
        reused: false,
    })
}
