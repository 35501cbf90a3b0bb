//! Triton's statistics extension: `GET /v2/models[/{model}[/versions/{v}]]/stats`, each
//! model's cumulative counts and durations (`metrics::Totals`, the numbers behind its
//! `nv_inference_*` series), so that perf_analyzer reports the server's side of each
//! measurement (queue and compute beside its own latency) and Triton's clients' statistics
//! calls work. A pipeline's entry counts its root requests (its stages are models with
//! entries of their own).
//!
//! What clockwork does not have is reported as zero: the input and output copies
//! (`compute_input`, `compute_output`: a batch's run is one measured action), the response
//! cache (none), memory and decoupled responses (empty).

use std::collections::BTreeMap;

use actix_web::{get, web};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody};
use super::metrics::Totals;
use super::ApiState;

/// The answer of every statistics route.
#[derive(Debug, Serialize, ToSchema)]
pub struct StatsResponse {
    pub model_stats: Vec<ModelStat>,
}

/// One model's (or pipeline's) statistics since it was registered.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelStat {
    pub name: String,
    pub version: String,
    /// Milliseconds since the epoch of its last success (0: none yet).
    pub last_inference: u64,
    /// Items of its successful requests.
    pub inference_count: u64,
    /// Batches it ran.
    pub execution_count: u64,
    pub inference_stats: InferenceStats,
    /// Its batches run, by size.
    pub batch_stats: Vec<BatchStat>,
    /// Not kept (empty).
    #[schema(value_type = Vec<Object>)]
    pub memory_usage: Vec<serde_json::Value>,
    /// A decoupled model's responses: none here (empty).
    #[schema(value_type = Object)]
    pub response_stats: BTreeMap<String, serde_json::Value>,
}

/// Cumulative counts and durations, Triton's fields.
#[derive(Debug, Default, Serialize, ToSchema, Clone, Copy, PartialEq, Eq)]
pub struct InferenceStats {
    /// Successful requests, from their arrival at the edge to their answer.
    pub success: Duration,
    /// Requests refused or failed (their durations are not kept).
    pub fail: Duration,
    /// Successful requests (a pipeline's sub-requests too), from their arrival to their
    /// batch's start.
    pub queue: Duration,
    pub compute_input: Duration,
    /// Successful requests' batches' runs (each request counts its batch's run).
    pub compute_infer: Duration,
    pub compute_output: Duration,
    pub cache_hit: Duration,
    pub cache_miss: Duration,
}

/// The batches of one size that ran: how many (each stat's count) and their runs' time.
#[derive(Debug, Serialize, ToSchema, Clone, Copy, PartialEq, Eq)]
pub struct BatchStat {
    pub batch_size: u64,
    pub compute_input: Duration,
    pub compute_infer: Duration,
    pub compute_output: Duration,
}

impl BatchStat {
    /// `count` batches of `size` items that ran for `ns` in all.
    fn of((size, count, ns): (u32, u64, u64)) -> Self {
        let at = |ns| Duration { count, ns };
        Self {
            batch_size: u64::from(size),
            compute_input: at(0),
            compute_infer: at(ns),
            compute_output: at(0),
        }
    }
}

/// A count and its cumulative nanoseconds.
#[derive(Debug, Default, Serialize, ToSchema, Clone, Copy, PartialEq, Eq)]
pub struct Duration {
    pub count: u64,
    pub ns: u64,
}

impl InferenceStats {
    /// Triton's statistics of `totals`.
    pub fn of(totals: &Totals) -> Self {
        let each_success = |ns| Duration {
            count: totals.success,
            ns,
        };
        Self {
            success: each_success(totals.success_ns),
            fail: Duration {
                count: totals.fail,
                ns: 0,
            },
            queue: each_success(totals.queue_ns),
            compute_input: each_success(0),
            compute_infer: each_success(totals.compute_ns),
            compute_output: each_success(0),
            ..Self::default()
        }
    }
}

/// The entries of the models (and pipelines) `name` and `version` select, every one's if
/// `name` is `None`, for every protocol. An unknown name or version is the same error as
/// for the model's other routes.
pub(super) fn select(
    state: &ApiState,
    name: Option<&str>,
    version: Option<&str>,
) -> Result<Vec<ModelStat>, ApiError> {
    let stat = |name: String, version: String, totals: Totals, batches: Vec<_>| ModelStat {
        name,
        version,
        last_inference: totals.last_ms,
        inference_count: totals.inferences,
        // From the sizes' counts, read once with them: the two never disagree.
        execution_count: batches.iter().map(|&(_, n, _)| n).sum(),
        inference_stats: InferenceStats::of(&totals),
        batch_stats: batches.into_iter().map(BatchStat::of).collect(),
        memory_usage: Vec::new(),
        response_stats: BTreeMap::new(),
    };
    let model = |entry: &super::models::Entry| {
        let totals = state.metrics.model_totals(entry.id).unwrap_or_default();
        let batches = state.metrics.model_batches(entry.id);
        stat(entry.spec.name.clone(), entry.version(), totals, batches)
    };
    let pipeline = |name: &str| {
        let totals = state.metrics.pipeline_totals(name);
        stat(name.to_owned(), "1".into(), totals, Vec::new())
    };
    let Some(name) = name else {
        let models = state.models.entries();
        let mut all: Vec<ModelStat> = models.iter().map(|e| model(e)).collect();
        all.extend(
            state
                .pipelines
                .all()
                .iter()
                .map(|p| pipeline(&p.pipeline.name)),
        );
        return Ok(all);
    };
    if state.pipelines.get(name).is_some() && !state.models.contains(name) {
        return match version {
            None | Some("1") => Ok(vec![pipeline(name)]),
            Some(other) => Err(ApiError::UnknownVersion {
                model: name.to_owned(),
                version: other.to_owned(),
                served: "1".into(),
            }),
        };
    }
    let entry = state.models.find(name, version)?;
    Ok(vec![model(&entry)])
}

/// Statistics of every model and pipeline.
#[utoipa::path(tag = "models", responses((status = 200, body = StatsResponse)))]
#[get("/v2/models/stats")]
pub(super) async fn every_model(
    state: web::Data<ApiState>,
) -> Result<web::Json<StatsResponse>, ApiError> {
    let model_stats = select(&state, None, None)?;
    Ok(web::Json(StatsResponse { model_stats }))
}

/// Statistics of one model (or pipeline).
#[utoipa::path(tag = "models", responses(
    (status = 200, body = StatsResponse),
    (status = 404, description = "unknown_model", body = ErrorBody),
))]
#[get("/v2/models/{model}/stats")]
pub(super) async fn one_model(
    state: web::Data<ApiState>,
    name: web::Path<String>,
) -> Result<web::Json<StatsResponse>, ApiError> {
    let model_stats = select(&state, Some(&name), None)?;
    Ok(web::Json(StatsResponse { model_stats }))
}

/// Statistics of one model version.
#[utoipa::path(tag = "models", responses(
    (status = 200, body = StatsResponse),
    (status = 404, description = "unknown_model, unknown_version", body = ErrorBody),
))]
#[get("/v2/models/{model}/versions/{version}/stats")]
pub(super) async fn one_version(
    state: web::Data<ApiState>,
    path: web::Path<(String, String)>,
) -> Result<web::Json<StatsResponse>, ApiError> {
    let (name, version) = path.into_inner();
    let model_stats = select(&state, Some(&name), Some(&version))?;
    Ok(web::Json(StatsResponse { model_stats }))
}
