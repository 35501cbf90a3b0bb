//! Where a pipeline actor reads its stages' queues for the earliest-stage drop: the
//! policy's views of the stages' models, and the work still to come to each stage.

use std::sync::Arc;

use crate::actors::admission::AdmissionTable;
use crate::model::ModelId;
use crate::pipeline::inflow::Inflow;
use crate::pipeline::Pipeline;
use crate::scheduler::view::projected_wait;
use crate::time::Nanos;

/// Where the pipeline actor reads its stages' queues, for the earliest-stage drop (see
/// `Run::with_costs`): the controller's admission table and each stage's model id.
pub struct Backlog {
    /// The policy's per-model views, as the controller publishes them after each step.
    pub admission: Arc<AdmissionTable>,
    /// Per stage, its model's id (`None`: unknown, judged by its batch-1 estimate).
    pub models: Vec<Option<ModelId>>,
}

impl Backlog {
    /// Reads the stages of `pipeline` (their models' ids, by name, from `id`).
    pub fn new(
        pipeline: &Pipeline,
        admission: Arc<AdmissionTable>,
        id: impl Fn(&str) -> Option<ModelId>,
    ) -> Self {
        Self {
            admission,
            models: pipeline.stages.iter().map(|s| id(&s.model)).collect(),
        }
    }
}

impl Backlog {
    /// Per stage, how long a request made at `now` is projected to take
    /// (`view::projected_wait`; 0, i.e. the batch-1 estimate, where nothing is known),
    /// and the device time that the requests still to come from the roots in flight
    /// (`inflow`) will take on the stage's replicas: admitted first, their requests will
    /// be queued ahead of a new root's.
    pub(super) fn costs(&self, now: Nanos, inflow: &Inflow) -> (Vec<Nanos>, Vec<Nanos>) {
        self.models
            .iter()
            .enumerate()
            .map(|(stage, m)| {
                let view = m.and_then(|m| self.admission.get(m));
                let wait = projected_wait(view.as_ref(), now).unwrap_or(0);
                let to_come =
                    view.map_or(0, |v| inflow.work_to_come(stage, v.per_item, v.replicas));
                (wait, to_come)
            })
            .unzip()
    }
}
