//! The model-cache actor: the host side of the model store.
//!
//! It holds every registered model's description, profile and host-side bytes as an
//! [`ModelArtifact`]; executors fetch artifacts from it when they LOAD. Ids are dense and
//! assigned in registration order, the same order the controller's policy uses.

use std::collections::HashMap;
use std::sync::Arc;

use actix::{Actor, Context, Handler, MessageResult};

use super::messages::{FetchArtifact, ListModels, RegisterArtifact};
use crate::gpu::ModelArtifact;
use crate::model::ModelId;

/// Registered models and their artifacts.
#[derive(Default)]
pub struct ModelCache {
    artifacts: Vec<Arc<ModelArtifact>>,
    by_name: HashMap<String, ModelId>,
}

impl ModelCache {
    /// Registers a model; a name registered twice keeps its first id and artifact.
    pub fn register(&mut self, message: RegisterArtifact) -> ModelId {
        if let Some(&id) = self.by_name.get(&message.spec.name) {
            return id;
        }
        let id = ModelId(self.artifacts.len() as u32);
        self.by_name.insert(message.spec.name.clone(), id);
        self.artifacts.push(Arc::new(ModelArtifact {
            id,
            spec: message.spec,
            bytes: message.bytes,
        }));
        id
    }

    pub fn artifacts(&self) -> &[Arc<ModelArtifact>] {
        &self.artifacts
    }
}

impl Actor for ModelCache {
    type Context = Context<Self>;
}

impl Handler<FetchArtifact> for ModelCache {
    type Result = Option<Arc<ModelArtifact>>;

    fn handle(&mut self, message: FetchArtifact, _: &mut Context<Self>) -> Self::Result {
        self.artifacts.get(message.0 .0 as usize).cloned()
    }
}

impl Handler<ListModels> for ModelCache {
    type Result = MessageResult<ListModels>;

    fn handle(&mut self, _: ListModels, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.artifacts.clone())
    }
}

impl Handler<RegisterArtifact> for ModelCache {
    type Result = MessageResult<RegisterArtifact>;

    fn handle(&mut self, message: RegisterArtifact, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.register(message))
    }
}
