//! The pipelines being served, by name: each validated pipeline with its actor. Pipelines
//! are validated against the registered models after them; a declaration that does not
//! fit is refused alone, with its reason, like a broken model.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use actix::{Actor, Addr, ArbiterHandle};

use super::admission::AdmissionTable;
use super::pipeline::{Backlog, PipelineActor};
use super::registry::ModelTable;
use super::Controller;
use crate::events::EventBus;
use crate::pipeline::{validate, BudgetKind, Pipeline, PipelineDecl, PipelineError, StageModel};
use crate::time::Clock;

/// A pipeline being served.
#[derive(Debug)]
pub struct Served {
    pub pipeline: Arc<Pipeline>,
    /// Where its root requests go.
    pub actor: Addr<PipelineActor>,
}

/// The pipelines being served, shared by the runtime and the API.
#[derive(Clone, Debug, Default)]
pub struct PipelineTable(Arc<RwLock<Table>>);

#[derive(Debug, Default)]
struct Table {
    served: BTreeMap<String, Arc<Served>>,
    /// Pipelines the repository unloaded: their requests are answered as unavailable, as
    /// an unloaded model's are, not as unknown.
    unloaded: BTreeSet<String>,
}

impl PipelineTable {
    /// The pipeline of that name, if served.
    pub fn get(&self, name: &str) -> Option<Arc<Served>> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .served
            .get(name)
            .cloned()
    }

    /// Whether `name` was served and the repository unloaded it (and it was not loaded
    /// again since).
    pub fn is_unloaded(&self, name: &str) -> bool {
        let table = self.0.read().unwrap_or_else(|e| e.into_inner());
        table.unloaded.contains(name)
    }

    /// Every pipeline served, by name.
    pub fn all(&self) -> Vec<Arc<Served>> {
        let table = self.0.read().unwrap_or_else(|e| e.into_inner());
        table.served.values().cloned().collect()
    }

    fn insert(&self, served: Served) {
        let mut table = self.0.write().unwrap_or_else(|e| e.into_inner());
        table.unloaded.remove(&served.pipeline.name);
        let name = served.pipeline.name.clone();
        table.served.insert(name, Arc::new(served));
    }

    /// Stops serving `name` (a repository unload); whether it was served.
    pub fn remove(&self, name: &str) -> bool {
        let mut table = self.0.write().unwrap_or_else(|e| e.into_inner());
        let served = table.served.remove(name).is_some();
        if served {
            table.unloaded.insert(name.to_owned());
        }
        served
    }
}

/// What starting a pipeline needs.
#[derive(Clone)]
pub struct PipelineHost {
    pub models: ModelTable,
    pub controller: Addr<Controller>,
    pub clock: Clock,
    pub events: EventBus,
    /// Where its actors run.
    pub arbiter: ArbiterHandle,
    pub table: PipelineTable,
    /// The policy's per-model views: pipelines read their stages' queues from it.
    pub admission: Arc<AdmissionTable>,
}

impl PipelineHost {
    /// Validates `decl` against the registered models and serves it as `name`.
    pub fn serve(&self, name: &str, decl: &PipelineDecl) -> Result<Arc<Pipeline>, PipelineError> {
        if self.models.models().iter().any(|m| m.spec.name == name) {
            return Err(PipelineError::NameTaken(name.to_owned()));
        }
        let models = self.models.models();
        let pipeline = Arc::new(validate(name, decl, |model, version| {
            let m = models.iter().find(|m| m.spec.name == model)?;
            if version.is_some_and(|v| v != m.spec.version) {
                return None;
            }
            Some(StageModel {
                version: m.spec.version,
                inputs: m.spec.inputs.clone(),
                outputs: m.spec.outputs.clone(),
                single: m.spec.profile.latency(1).unwrap_or(0),
            })
        })?);
        let (p, controller, clock, events) = (
            Arc::clone(&pipeline),
            self.controller.clone(),
            self.clock,
            self.events.clone(),
        );
        let profiles = (pipeline.budget == BudgetKind::Tuned).then(|| {
            let profile = |model: &str| {
                let m = models.iter().find(|m| m.spec.name == model);
                m.map(|m| m.spec.profile.batches.clone())
                    .unwrap_or_default()
            };
            pipeline.stages.iter().map(|s| profile(&s.model)).collect()
        });
        // The registry's ids are what the admission table is indexed by.
        let backlog = Backlog::new(&pipeline, Arc::clone(&self.admission), |model| {
            models.iter().find(|m| m.spec.name == model).map(|m| m.id)
        });
        let actor = PipelineActor::start_in_arbiter(&self.arbiter, move |ctx| {
            let actor =
                PipelineActor::build(p, controller, clock, events, ctx).with_backlog(backlog);
            match profiles {
                Some(profiles) => actor.tuned(profiles),
                None => actor,
            }
        });
        self.table.insert(Served {
            pipeline: Arc::clone(&pipeline),
            actor,
        });
        tracing::info!(pipeline = %name, stages = pipeline.stages.len(), "pipeline served");
        Ok(pipeline)
    }
}
