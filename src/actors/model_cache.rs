//! The model-cache actor: the host side of the model store.
//!
//! It holds every registered model's description, profile and host-side bytes as an
//! [`ModelArtifact`]; executors fetch artifacts from it when they LOAD. Ids come from the
//! registry (`registry.rs`), which tells the cache before any LOAD of the model.

use std::sync::Arc;

use actix::{Actor, Context, Handler, MessageResult};

use super::messages::{FetchArtifact, ListModels, RegisterArtifact};
use crate::gpu::ModelArtifact;
use crate::model::ModelId;
use crate::scheduler::ids::IdMap;

/// Registered models and their artifacts, by the registry's ids.
#[derive(Default)]
pub struct ModelCache {
    artifacts: IdMap<ModelId, Arc<ModelArtifact>>,
}

impl ModelCache {
    /// Keeps a registered model's artifact under its id.
    pub fn register(&mut self, message: RegisterArtifact) {
        let artifact = ModelArtifact {
            id: message.id,
            spec: message.spec,
            bytes: message.bytes,
            prepared: message.prepared,
        };
        self.artifacts.insert(message.id, Arc::new(artifact));
    }

    /// Every artifact, in id order.
    pub fn artifacts(&self) -> Vec<Arc<ModelArtifact>> {
        let mut all: Vec<Arc<ModelArtifact>> = self.artifacts.values().cloned().collect();
        all.sort_unstable_by_key(|a| a.id);
        all
    }
}

impl Actor for ModelCache {
    type Context = Context<Self>;
}

impl Handler<FetchArtifact> for ModelCache {
    type Result = Option<Arc<ModelArtifact>>;

    fn handle(&mut self, message: FetchArtifact, _: &mut Context<Self>) -> Self::Result {
        self.artifacts.get(&message.0).cloned()
    }
}

impl Handler<ListModels> for ModelCache {
    type Result = MessageResult<ListModels>;

    fn handle(&mut self, _: ListModels, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.artifacts())
    }
}

impl Handler<RegisterArtifact> for ModelCache {
    type Result = ();

    fn handle(&mut self, message: RegisterArtifact, _: &mut Context<Self>) {
        self.register(message);
    }
}
