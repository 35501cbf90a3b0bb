//! Inference pipelines: cascades of registered models where the outputs of one stage
//! become requests to the next, under one end-to-end objective.
//!
//! Pure code (no actix, no clock, no I/O), a ground module beside `model`, `tensor`,
//! `outcome` and `time`, which are all it uses:
//! - [`decl`]: the `[pipeline]` table of `models/<name>/config.toml` as written;
//! - [`mod@validate`]: a declaration checked against the registered models, as a [`Pipeline`];
//! - [`budget`]: how the end-to-end objective is split into stage deadlines (the seam
//!   the planning of the next issue replaces);
//! - [`run`]: one root request's state machine (fan-out, join, withdraw, one answer);
//! - [`draw`]: the seeded fan-out counts of emulated answers;
//! - [`inflow`]: the requests the roots in flight will still make to each stage;
//! - `rows`: cutting, scoring and stacking tensor rows for [`run`].
//!
//! The pipeline-stage actors (`crate::actors::pipeline`) drive [`run`] and talk to the
//! controller; the property tests drive it on the scheduler's testbed.

pub mod budget;
pub mod decl;
pub mod draw;
pub mod inflow;
mod rows;
pub mod run;
pub mod validate;

pub use decl::{BudgetKind, EmulatedFanOut, FanOut, PipelineDecl, PipelineFile};
pub use validate::{validate, PipelineError, StageModel};

use crate::model::TensorSpec;
use crate::time::Nanos;

/// A validated pipeline: every name resolved, every tensor typed.
#[derive(Clone, Debug, PartialEq)]
pub struct Pipeline {
    /// Its name in the API (the repository directory).
    pub name: String,
    /// End-to-end objective of root requests that name none.
    pub slo: Nanos,
    /// Whether failed rows below a fan-out are left out instead of failing the root.
    pub partial_results: bool,
    /// How its objective becomes stage deadlines.
    pub budget: BudgetKind,
    /// The root request's tensors.
    pub inputs: Vec<TensorSpec>,
    /// What the answer holds, in the declared order.
    pub outputs: Vec<PipelineOutput>,
    /// The stages, every parent before its children (index order is a topological order).
    pub stages: Vec<Stage>,
}

/// One pipeline output: which stage makes it and whether it is joined.
#[derive(Clone, Debug, PartialEq)]
pub struct PipelineOutput {
    /// Pipeline tensor name (the answer's tensor name).
    pub name: String,
    /// Index of the stage that produces it.
    pub stage: usize,
    /// Its shape in the answer: the model output's, with a leading dimension added when it
    /// is joined (produced below a fan-out).
    pub spec: TensorSpec,
    /// Produced below a fan-out: the rows of one root are concatenated along a new
    /// leading dimension (zero rows allowed).
    pub joined: bool,
}

/// One validated stage.
#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    /// Its name in the declaration and the metrics.
    pub name: String,
    /// The model it runs and the version it was checked against.
    pub model: String,
    pub version: u64,
    /// The stage it runs after; `None`: on the root inputs.
    pub parent: Option<usize>,
    /// Stages that run after it.
    pub children: Vec<usize>,
    /// How one parent result becomes requests to it.
    pub fan_out: FanOut,
    /// Emulated answers upstream: the fan-out count is drawn from this.
    pub emulated_fan_out: Option<EmulatedFanOut>,
    /// (model input, pipeline tensor), in the model's input order.
    pub inputs: Vec<(String, String)>,
    /// (model output, pipeline tensor).
    pub outputs: Vec<(String, String)>,
    /// The shape of one row of the fanned-out tensor, for zero-filled emulated rows.
    pub row: Option<TensorSpec>,
    /// Whether it runs below a fan-out (on this stage or above): many results per root.
    pub fanned: bool,
    /// The model's batch-1 estimate when validated: its weight in the budget split.
    pub single: Nanos,
}

impl Pipeline {
    /// The stage of that name.
    pub fn stage(&self, name: &str) -> Option<usize> {
        self.stages.iter().position(|s| s.name == name)
    }

    /// Stages that run on the root inputs.
    pub fn roots(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.stages.len()).filter(|&i| self.stages[i].parent.is_none())
    }
}

/// A stage with no tensors, for tests of the rules that read only the tree and the
/// batch-1 estimates (budget splits, tuning).
#[cfg(test)]
pub(crate) fn test_stage(
    name: &str,
    parent: Option<usize>,
    children: Vec<usize>,
    single: Nanos,
) -> Stage {
    Stage {
        name: name.into(),
        model: "m".into(),
        version: 1,
        parent,
        children,
        fan_out: FanOut::One,
        emulated_fan_out: None,
        inputs: vec![],
        outputs: vec![],
        row: None,
        fanned: false,
        single,
    }
}
