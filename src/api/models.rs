//! The models the API serves and their description: V2 metadata, readiness, and Triton's
//! model configuration (which `perf_analyzer` insists on reading).
//!
//! The table follows the runtime's registry (`actors::registry`): it hears of every model
//! registered, at start or through the repository routes, before a request can find it. Each model serves one version (`1` for built-in profiles, the
//! repository's version directory otherwise). A model can be unloaded and loaded again
//! through the repository routes (see `repository.rs`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use actix_web::{get, web, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody};
use super::v2::datatype_name;
use super::{pipelines, ApiState};
use crate::actors::messages::SnapshotController;
use crate::actors::pipeline_table::Served;
use crate::actors::ModelTable;
use crate::model::{DataType, ModelId, ModelSpec, TensorSpec};

/// Platform reported for every model: the runtime executes the model itself.
const PLATFORM: &str = "clockwork";

/// One served model.
pub struct Entry {
    pub id: ModelId,
    pub spec: ModelSpec,
    available: AtomicBool,
}

impl Entry {
    /// Whether the API admits requests for it (not unloaded).
    pub fn available(&self) -> bool {
        self.available.load(Ordering::Relaxed)
    }

    pub fn set_available(&self, available: bool) {
        self.available.store(available, Ordering::Relaxed);
    }

    /// The version it serves, as the API names it.
    pub fn version(&self) -> String {
        self.spec.version.to_string()
    }
}

/// The table proper: entries by id (dense) and by name.
#[derive(Default)]
struct Table {
    entries: Vec<Arc<Entry>>,
    by_name: HashMap<String, usize>,
}

/// Every served model, by name and by id; grows when the repository registers a model.
pub struct Models {
    table: RwLock<Table>,
}

impl Models {
    /// The table of every model `registry` holds, now and later.
    pub fn watching(registry: &ModelTable) -> Arc<Self> {
        let models = Arc::new(Self {
            table: RwLock::new(Table::default()),
        });
        let table = Arc::clone(&models);
        registry.watch(move |m| table.add(m.id, m.spec.clone()));
        models
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Table> {
        self.table.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a model the registry registered as `id` (the registry announces them in id
    /// order).
    fn add(&self, id: ModelId, spec: ModelSpec) {
        let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
        debug_assert_eq!(id.0 as usize, table.entries.len());
        let index = table.entries.len();
        table.by_name.insert(spec.name.clone(), index);
        table.entries.push(Arc::new(Entry {
            id,
            spec,
            available: AtomicBool::new(true),
        }));
    }

    /// Every entry, in id order.
    pub fn entries(&self) -> Vec<Arc<Entry>> {
        self.read().entries.clone()
    }

    /// Whether a model of that name is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.read().by_name.contains_key(name)
    }

    /// The model named `name` at `version` (any version if `None`), loaded or not.
    pub fn find(&self, name: &str, version: Option<&str>) -> Result<Arc<Entry>, ApiError> {
        let entry = {
            let table = self.read();
            table
                .by_name
                .get(name)
                .map(|&i| Arc::clone(&table.entries[i]))
                .ok_or_else(|| ApiError::UnknownModel(name.to_owned()))?
        };
        match version {
            Some(v) if v != entry.version() => Err(ApiError::UnknownVersion {
                model: name.to_owned(),
                version: v.to_owned(),
                served: entry.version(),
            }),
            _ => Ok(entry),
        }
    }

    /// Like [`Models::find`], and the model must be loaded.
    pub fn ready(&self, name: &str, version: Option<&str>) -> Result<Arc<Entry>, ApiError> {
        let entry = self.find(name, version)?;
        if entry.available() {
            Ok(entry)
        } else {
            Err(ApiError::ModelUnavailable(name.to_owned()))
        }
    }
}

/// A tensor in model metadata.
#[derive(Debug, Serialize, ToSchema)]
pub struct TensorMetadata {
    pub name: String,
    /// V2 datatype: `FP32`, `INT64`, `BYTES`, ...
    pub datatype: String,
    /// Shape with the batch dimension first; `-1` marks a dimension that varies.
    pub shape: Vec<i64>,
}

/// `GET /v2/models/{model}`: what the model takes and gives.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelMetadata {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: String,
    pub inputs: Vec<TensorMetadata>,
    pub outputs: Vec<TensorMetadata>,
}

/// A tensor in a Triton model configuration.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConfigTensor {
    pub name: String,
    /// Triton's type name: `TYPE_FP32`, ..., `TYPE_STRING` for `BYTES`.
    pub data_type: String,
    /// Dimensions without the batch dimension.
    pub dims: Vec<i64>,
}

/// Triton's dynamic batching section: the server batches requests by itself.
#[derive(Debug, Serialize, ToSchema)]
pub struct DynamicBatching {
    /// Batch sizes the model is executed with.
    pub preferred_batch_size: Vec<u32>,
}

/// A string parameter of a Triton model configuration.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConfigParameter {
    pub string_value: String,
}

/// `GET /v2/models/{model}/config`: the Triton model configuration.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelConfig {
    pub name: String,
    pub platform: String,
    pub backend: String,
    /// The most items one request may carry (its tensors' leading dimension): the
    /// model's largest batch; the server also forms batches from many requests. 0: the
    /// model has no batch dimension (Triton's convention), every request is one whole
    /// input.
    pub max_batch_size: u32,
    pub input: Vec<ConfigTensor>,
    pub output: Vec<ConfigTensor>,
    pub dynamic_batching: DynamicBatching,
    /// `slo_ms`: the latency objective of requests that name none.
    pub parameters: BTreeMap<String, ConfigParameter>,
}

fn metadata_tensor(spec: &TensorSpec, batched: bool) -> TensorMetadata {
    let batch = batched.then_some(-1);
    let shape = batch.into_iter().chain(spec.shape.iter().copied());
    TensorMetadata {
        name: spec.name.clone(),
        datatype: datatype_name(spec.datatype).to_owned(),
        shape: shape.collect(),
    }
}

fn config_tensor(spec: &TensorSpec) -> ConfigTensor {
    let data_type = match spec.datatype {
        DataType::Bytes => "TYPE_STRING".to_owned(),
        other => format!("TYPE_{}", datatype_name(other)),
    };
    ConfigTensor {
        name: spec.name.clone(),
        data_type,
        dims: spec.shape.clone(),
    }
}

fn metadata_of(spec: &ModelSpec) -> ModelMetadata {
    ModelMetadata {
        name: spec.name.clone(),
        versions: vec![spec.version.to_string()],
        platform: PLATFORM.to_owned(),
        inputs: spec
            .inputs
            .iter()
            .map(|t| metadata_tensor(t, spec.batched))
            .collect(),
        outputs: spec
            .outputs
            .iter()
            .map(|t| metadata_tensor(t, spec.batched))
            .collect(),
    }
}

fn config_of(spec: &ModelSpec) -> ModelConfig {
    let slo_ms = spec.slo as f64 / 1e6;
    let parameters = BTreeMap::from([(
        "slo_ms".to_owned(),
        ConfigParameter {
            string_value: slo_ms.to_string(),
        },
    )]);
    ModelConfig {
        name: spec.name.clone(),
        platform: PLATFORM.to_owned(),
        backend: PLATFORM.to_owned(),
        max_batch_size: if spec.batched {
            spec.profile.max_batch()
        } else {
            0
        },
        input: spec.inputs.iter().map(config_tensor).collect(),
        output: spec.outputs.iter().map(config_tensor).collect(),
        dynamic_batching: DynamicBatching {
            preferred_batch_size: spec.profile.batches.iter().map(|b| b.batch).collect(),
        },
        parameters,
    }
}

/// A pipeline's metadata: described as a model of platform `ensemble`.
fn pipeline_metadata(served: &Served, version: Option<&str>) -> Result<ModelMetadata, ApiError> {
    pipelines::check_version(served, version)?;
    let mut described = metadata_of(&pipelines::pipeline_spec(&served.pipeline));
    described.platform = pipelines::ENSEMBLE.to_owned();
    Ok(described)
}

/// A pipeline is ready when every stage's model is.
async fn pipeline_ready(
    state: &ApiState,
    served: &Served,
    version: Option<&str>,
) -> Result<(), ApiError> {
    pipelines::check_version(served, version)?;
    for stage in &served.pipeline.stages {
        let entry = state.models.ready(&stage.model, None)?;
        servable(state, &entry).await?;
    }
    Ok(())
}

/// The metadata of a model or pipeline, for every protocol.
pub(super) fn describe(
    state: &ApiState,
    name: &str,
    version: Option<&str>,
) -> Result<ModelMetadata, ApiError> {
    if let Some(served) = state.pipelines.get(name) {
        return pipeline_metadata(&served, version);
    }
    // A pipeline the repository unloaded is known: unavailable, not unknown.
    pipelines::refuse_unloaded(state, name)?;
    let entry = state.models.find(name, version)?;
    Ok(metadata_of(&entry.spec))
}

/// Whether a model or pipeline is servable, for every protocol: `Ok` if ready on some
/// device (every stage's model, for a pipeline).
pub(super) async fn check_ready(
    state: &ApiState,
    name: &str,
    version: Option<&str>,
) -> Result<(), ApiError> {
    if let Some(served) = state.pipelines.get(name) {
        return pipeline_ready(state, &served, version).await;
    }
    pipelines::refuse_unloaded(state, name)?;
    let entry = state.models.ready(name, version)?;
    servable(state, &entry).await
}

/// Triton's configuration of a model or pipeline, for every protocol (as its JSON form).
pub(super) fn configuration(
    state: &ApiState,
    name: &str,
    version: Option<&str>,
) -> Result<serde_json::Value, ApiError> {
    if let Some(served) = state.pipelines.get(name) {
        return pipelines::config(&served, version, config_tensor);
    }
    // A pipeline the repository unloaded is known: unavailable, not unknown.
    pipelines::refuse_unloaded(state, name)?;
    let entry = state.models.find(name, version)?;
    // Serialising plain data cannot fail; an empty object if it did.
    Ok(serde_json::to_value(config_of(&entry.spec)).unwrap_or_default())
}

/// Metadata of a model.
#[utoipa::path(tag = "models", responses(
    (status = 200, body = ModelMetadata),
    (status = 404, description = "unknown model", body = ErrorBody),
    (status = 503, description = "a pipeline the repository unloaded", body = ErrorBody),
))]
#[get("/v2/models/{model}")]
pub(super) async fn metadata(
    state: web::Data<ApiState>,
    path: web::Path<String>,
) -> Result<web::Json<ModelMetadata>, ApiError> {
    Ok(web::Json(describe(&state, &path, None)?))
}

/// Metadata of a model version.
#[utoipa::path(tag = "models", responses(
    (status = 200, body = ModelMetadata),
    (status = 404, description = "unknown model or version", body = ErrorBody),
    (status = 503, description = "a pipeline the repository unloaded", body = ErrorBody),
))]
#[get("/v2/models/{model}/versions/{version}")]
pub(super) async fn version_metadata(
    state: web::Data<ApiState>,
    path: web::Path<(String, String)>,
) -> Result<web::Json<ModelMetadata>, ApiError> {
    let (model, version) = path.into_inner();
    Ok(web::Json(describe(&state, &model, Some(&version))?))
}

/// Whether the model is servable: admitted by the API (not unloaded) and ready on some
/// device, so that a request sent now is not refused for being cold. Asks the controller.
async fn servable(state: &ApiState, entry: &Entry) -> Result<(), ApiError> {
    let snapshot = state.controller.send(SnapshotController).await;
    let replicas = snapshot.map_or(0, |s| {
        let on_devices = s.policy.ready_replicas.get(entry.id.0 as usize).copied();
        if s.draining {
            0
        } else {
            on_devices.unwrap_or(0)
        }
    });
    if replicas > 0 {
        Ok(())
    } else {
        Err(ApiError::ModelUnavailable(entry.spec.name.clone()))
    }
}

/// Whether a model is servable: 200 if it is ready on some device, 503 if it is not yet
/// (or unloaded, or the server is draining), 404 if unknown.
#[utoipa::path(tag = "models", responses(
    (status = 200, description = "ready on some device"),
    (status = 404, description = "unknown model", body = ErrorBody),
    (status = 503, description = "unloaded, on no device yet, or draining", body = ErrorBody),
))]
#[get("/v2/models/{model}/ready")]
pub(super) async fn ready(
    state: web::Data<ApiState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    check_ready(&state, &path, None).await?;
    Ok(HttpResponse::Ok().finish())
}

/// Whether a model version is servable: 200 if it is ready on some device, 503 if not
/// yet (or unloaded, or draining), 404 if unknown.
#[utoipa::path(tag = "models", responses(
    (status = 200, description = "ready on some device"),
    (status = 404, description = "unknown model or version", body = ErrorBody),
    (status = 503, description = "unloaded, on no device yet, or draining", body = ErrorBody),
))]
#[get("/v2/models/{model}/versions/{version}/ready")]
pub(super) async fn version_ready(
    state: web::Data<ApiState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (model, version) = path.into_inner();
    check_ready(&state, &model, Some(&version)).await?;
    Ok(HttpResponse::Ok().finish())
}

/// Triton model configuration of a model.
#[utoipa::path(tag = "models", responses(
    (status = 200, body = ModelConfig),
    (status = 404, description = "unknown model", body = ErrorBody),
    (status = 503, description = "a pipeline the repository unloaded", body = ErrorBody),
))]
#[get("/v2/models/{model}/config")]
pub(super) async fn config(
    state: web::Data<ApiState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(configuration(&state, &path, None)?))
}

/// Triton model configuration of a model version.
#[utoipa::path(tag = "models", responses(
    (status = 200, body = ModelConfig),
    (status = 404, description = "unknown model or version", body = ErrorBody),
    (status = 503, description = "a pipeline the repository unloaded", body = ErrorBody),
))]
#[get("/v2/models/{model}/versions/{version}/config")]
pub(super) async fn version_config(
    state: web::Data<ApiState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (model, version) = path.into_inner();
    Ok(HttpResponse::Ok().json(configuration(&state, &model, Some(&version))?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_adds_the_batch_dimension_and_config_does_not() {
        let spec = crate::gpu::profiles::model("resnet50", "r", 100_000_000).unwrap();
        let described = metadata_of(&spec);
        assert_eq!(described.inputs[0].shape, vec![-1, 3, 224, 224]);
        assert_eq!(described.inputs[0].datatype, "FP32");
        let triton = config_of(&spec);
        assert_eq!(triton.input[0].dims, vec![3, 224, 224]);
        assert_eq!(triton.input[0].data_type, "TYPE_FP32");
        assert_eq!(triton.parameters["slo_ms"].string_value, "100");
    }

    #[test]
    fn unknown_versions_and_unloaded_models_are_told_apart() {
        let spec = crate::gpu::profiles::model("zero", "z", 1).unwrap();
        let models = Models::watching(&crate::actors::ModelTable::default());
        models.add(ModelId(0), spec);
        assert!(models.find("z", Some("1")).is_ok());
        assert_eq!(
            models.find("z", Some("2")).err().map(|e| e.kind().as_str()),
            Some("unknown_version")
        );
        assert_eq!(
            models.find("y", None).err().map(|e| e.kind().as_str()),
            Some("unknown_model")
        );
        models.find("z", None).unwrap().set_available(false);
        assert_eq!(
            models.ready("z", None).err().map(|e| e.kind().as_str()),
            Some("model_unavailable")
        );
    }
}
