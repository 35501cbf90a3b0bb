//! What a request at a model's path is for: a ready model, or a pipeline described as a
//! model; found once per request, before its body is read, by both protocols.

use std::sync::Arc;

use super::edge::FrontKey;
use super::error::ApiError;
use super::models::Entry;
use super::pipelines::pipeline_spec;
use super::ApiState;
use crate::actors::pipeline_table::Served;
use crate::model::{ModelId, ModelSpec};

/// What a request at a model's path is for.
#[derive(Clone)]
pub(super) enum Target {
    Model(Arc<Entry>),
    Pipeline {
        served: Arc<Served>,
        /// The pipeline described as a model: what its body decodes against.
        spec: Arc<ModelSpec>,
        /// Its name, the key of its front-end times and metrics.
        name: Arc<str>,
        /// The model of its first stage, whose admission view judges the request before
        /// its body is read (`None`: left to the pipeline's stages).
        first: Option<ModelId>,
    },
}

impl Target {
    /// The pipeline or the ready model of that name; an unloaded pipeline is unavailable,
    /// as an unloaded model is.
    pub(super) fn find(
        state: &ApiState,
        name: &str,
        version: Option<&str>,
    ) -> Result<Self, ApiError> {
        let Some(served) = state.pipelines.get(name) else {
            super::pipelines::refuse_unloaded(state, name)?;
            return Ok(Target::Model(state.models.ready(name, version)?));
        };
        super::pipelines::check_version(&served, version)?;
        let p = &served.pipeline;
        let first = p.roots().next().map(|s| p.stages[s].model.as_str());
        let first = first.and_then(|m| state.models.find(m, None).ok());
        Ok(Target::Pipeline {
            spec: Arc::new(pipeline_spec(p)),
            name: p.name.as_str().into(),
            first: first.map(|e| e.id),
            served,
        })
    }

    /// What its body decodes against.
    pub(super) fn spec(&self) -> &ModelSpec {
        match self {
            Target::Model(entry) => &entry.spec,
            Target::Pipeline { spec, .. } => spec,
        }
    }

    pub(super) fn key(&self) -> FrontKey {
        match self {
            Target::Model(entry) => FrontKey::Model(entry.id),
            Target::Pipeline { name, .. } => FrontKey::Pipeline(Arc::clone(name)),
        }
    }

    /// Whose series count an answer to `name` (at `version`): a pipeline's, or a known
    /// model's; `None` for a name the server does not serve. For errors only: a lookup
    /// the requests that found their target do not pay.
    pub(super) fn key_of(state: &ApiState, name: &str, version: Option<&str>) -> Option<FrontKey> {
        if let Some(served) = state.pipelines.get(name) {
            return Some(FrontKey::Pipeline(served.pipeline.name.as_str().into()));
        }
        let entry = state.models.find(name, version).ok()?;
        Some(FrontKey::Model(entry.id))
    }

    /// Whose admission view judges it before reading.
    pub(super) fn view(&self) -> Option<ModelId> {
        match self {
            Target::Model(entry) => Some(entry.id),
            Target::Pipeline { first, .. } => *first,
        }
    }
}
