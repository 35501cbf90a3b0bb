//! A declaration checked against the registered models: every stage's model, every
//! tensor, shape and datatype, the tree of stages and the fan-outs. Each mistake is one
//! [`PipelineError`] that tells the user how to fix it; the repository refuses that
//! pipeline alone and the rest serves.

use std::collections::BTreeMap;

use super::decl::{FanOut, PipelineDecl, StageDecl};
use super::{Pipeline, PipelineOutput, Stage};
use crate::model::{DataType, TensorSpec};
use crate::time::{nanos, Nanos};

/// What validation needs to know of a registered model.
#[derive(Clone, Debug, PartialEq)]
pub struct StageModel {
    /// The version it serves.
    pub version: u64,
    /// Its inputs and outputs (one item, no batch dimension).
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    /// Its batch-1 estimate (its profile's), the stage's weight in the budget split.
    pub single: Nanos,
}

/// Why a declaration cannot be served.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PipelineError {
    #[error("the name '{0}' is a registered model's: give the pipeline another")]
    NameTaken(String),
    #[error("the pipeline has no stages: add at least one [[pipeline.stages]]")]
    NoStages,
    #[error("slo must be more than zero")]
    ZeroSlo,
    #[error("two stages are named '{0}': give each stage its own name")]
    DuplicateStage(String),
    #[error("stage '{stage}': no model '{model}'{} is registered; register it or fix `model`/`version`", version.map(|v| format!(" of version {v}")).unwrap_or_default())]
    UnknownModel {
        stage: String,
        model: String,
        version: Option<u64>,
    },
    #[error("stage '{stage}' runs after '{after}', which is no stage of this pipeline")]
    UnknownAfter { stage: String, after: String },
    #[error("stage '{0}' is on a cycle of `after`: stages must form a tree")]
    Cycle(String),
    #[error("stage '{stage}': no pipeline tensor '{tensor}' is available here (the inputs and what the stages above it produce are)")]
    UnknownTensor { stage: String, tensor: String },
    #[error("stage '{stage}': model '{model}' has no {side} named '{name}'")]
    UnknownModelTensor {
        stage: String,
        model: String,
        side: &'static str,
        name: String,
    },
    #[error("stage '{stage}': model input '{input}' is not mapped: add it to input_map")]
    MissingInput { stage: String, input: String },
    #[error("stage '{stage}': pipeline tensor '{tensor}' is {found}, model input '{input}' takes {expected}")]
    Mismatch {
        stage: String,
        input: String,
        tensor: String,
        expected: String,
        found: String,
    },
    #[error("stage '{stage}': cannot fan out on '{tensor}', which has no rows (rank 0)")]
    NoRows { stage: String, tensor: String },
    #[error("stage '{stage}': score tensor '{score}' ({found}) must be numeric with one value per row of '{rows}' (shape [n] or [n, 1])")]
    ScoreRows {
        stage: String,
        score: String,
        rows: String,
        found: String,
    },
    #[error(
        "pipeline tensor '{0}' is produced twice (an input or another stage's output): rename one"
    )]
    DuplicateTensor(String),
    #[error("output '{0}' is never produced: map a stage's model output to it")]
    NeverProduced(String),
    #[error("stage '{0}': emulated_fan_out needs a fan_out, a mean >= 0 and a variance > 0")]
    BadEmulatedFanOut(String),
}

/// A pipeline tensor in scope: its spec per item of the results it travels with.
type Scope = BTreeMap<String, TensorSpec>;

/// Checks `decl` (named `name`) against the models `lookup(model, version)` finds.
pub fn validate(
    name: &str,
    decl: &PipelineDecl,
    lookup: impl Fn(&str, Option<u64>) -> Option<StageModel>,
) -> Result<Pipeline, PipelineError> {
    if decl.stages.is_empty() {
        return Err(PipelineError::NoStages);
    }
    let slo = nanos(decl.slo);
    if slo == 0 {
        return Err(PipelineError::ZeroSlo);
    }
    let order = tree_order(&decl.stages)?;
    let mut root_scope = Scope::new();
    for input in &decl.inputs {
        if root_scope
            .insert(input.name.clone(), input.clone())
            .is_some()
        {
            return Err(PipelineError::DuplicateTensor(input.name.clone()));
        }
    }
    let mut produced: BTreeMap<String, usize> = BTreeMap::new();
    let mut scopes: Vec<Scope> = Vec::new();
    let mut stages: Vec<Stage> = Vec::new();
    for &d in &order {
        let sd = &decl.stages[d];
        let parent = sd
            .after
            .as_ref()
            .and_then(|a| stages.iter().position(|s| &s.name == a));
        let model = lookup(&sd.model, sd.version).ok_or_else(|| PipelineError::UnknownModel {
            stage: sd.name.clone(),
            model: sd.model.clone(),
            version: sd.version,
        })?;
        let above = parent.map_or(&root_scope, |p| &scopes[p]);
        let (scope, row, inputs, outputs) =
            check_stage(sd, &model, above, &root_scope, &mut produced, stages.len())?;
        let fanned = sd.fan_out != FanOut::One || parent.is_some_and(|p| stages[p].fanned);
        let index = stages.len();
        if let Some(p) = parent {
            stages[p].children.push(index);
        }
        stages.push(Stage {
            name: sd.name.clone(),
            model: sd.model.clone(),
            version: model.version,
            parent,
            children: Vec::new(),
            fan_out: sd.fan_out.clone(),
            emulated_fan_out: sd.emulated_fan_out,
            inputs,
            outputs,
            row,
            fanned,
            single: model.single,
        });
        scopes.push(scope);
    }
    let outputs = pipeline_outputs(decl, &produced, &scopes, &stages)?;
    Ok(Pipeline {
        name: name.to_owned(),
        slo,
        partial_results: decl.partial_results,
        budget: decl.budget,
        inputs: decl.inputs.clone(),
        outputs,
        stages,
    })
}

/// The declared outputs: which stage makes each, and whether it is joined.
fn pipeline_outputs(
    decl: &PipelineDecl,
    produced: &BTreeMap<String, usize>,
    scopes: &[Scope],
    stages: &[Stage],
) -> Result<Vec<PipelineOutput>, PipelineError> {
    decl.outputs
        .iter()
        .map(|o| {
            let &stage = produced
                .get(o)
                .ok_or_else(|| PipelineError::NeverProduced(o.clone()))?;
            let mut spec = scopes[stage][o].clone();
            let joined = stages[stage].fanned;
            if joined {
                spec.shape.insert(0, -1);
            }
            Ok(PipelineOutput {
                name: o.clone(),
                stage,
                spec,
                joined,
            })
        })
        .collect::<Result<_, PipelineError>>()
}

/// One stage's scope (with its outputs), fanned-out row, inputs and outputs, checked
/// against its model; `index` is its place in the validated order.
#[allow(clippy::type_complexity)]
fn check_stage(
    sd: &StageDecl,
    model: &StageModel,
    above: &Scope,
    root_scope: &Scope,
    produced: &mut BTreeMap<String, usize>,
    index: usize,
) -> Result<
    (
        Scope,
        Option<TensorSpec>,
        Vec<(String, String)>,
        Vec<(String, String)>,
    ),
    PipelineError,
> {
    let (mut scope, row) = fanned_scope(sd, above)?;
    let inputs = map_inputs(sd, model, &scope)?;
    let mut outputs = Vec::new();
    for (out, tensor) in &sd.output_map {
        let spec = find(&model.outputs, &sd.name, &sd.model, "output", out)?;
        if root_scope.contains_key(tensor) || produced.contains_key(tensor) {
            return Err(PipelineError::DuplicateTensor(tensor.clone()));
        }
        produced.insert(tensor.clone(), index);
        let spec = TensorSpec {
            name: tensor.clone(),
            ..spec
        };
        scope.insert(tensor.clone(), spec);
        outputs.push((out.clone(), tensor.clone()));
    }
    if let Some(e) = sd.emulated_fan_out {
        let sane = e.mean >= 0.0 && e.variance > 0.0 && e.mean.is_finite();
        if sd.fan_out == FanOut::One || !sane || !e.variance.is_finite() {
            return Err(PipelineError::BadEmulatedFanOut(sd.name.clone()));
        }
    }
    Ok((scope, row, inputs, outputs))
}

/// The stages' declaration indices with every parent before its children; refuses
/// duplicate names, unknown `after`s and cycles.
fn tree_order(stages: &[StageDecl]) -> Result<Vec<usize>, PipelineError> {
    let index = |name: &str| stages.iter().position(|s| s.name == name);
    let mut parents = Vec::with_capacity(stages.len());
    for (i, s) in stages.iter().enumerate() {
        if index(&s.name) != Some(i) {
            return Err(PipelineError::DuplicateStage(s.name.clone()));
        }
        let parent = match &s.after {
            None => None,
            Some(after) => Some(index(after).ok_or_else(|| PipelineError::UnknownAfter {
                stage: s.name.clone(),
                after: after.clone(),
            })?),
        };
        parents.push(parent);
    }
    let mut depth = Vec::with_capacity(stages.len());
    for (i, s) in stages.iter().enumerate() {
        let (mut d, mut at) = (0, parents[i]);
        while let Some(p) = at {
            d += 1;
            if d > stages.len() {
                return Err(PipelineError::Cycle(s.name.clone()));
            }
            at = parents[p];
        }
        depth.push(d);
    }
    let mut order: Vec<usize> = (0..stages.len()).collect();
    order.sort_by_key(|&i| (depth[i], i));
    Ok(order)
}

/// The scope a stage's inputs see: its parent's, with the fanned-out tensor cut to one
/// row; and that row's spec.
fn fanned_scope(
    sd: &StageDecl,
    above: &Scope,
) -> Result<(Scope, Option<TensorSpec>), PipelineError> {
    let mut scope = above.clone();
    let Some(rows) = sd.fan_out.rows() else {
        return Ok((scope, None));
    };
    let lookup = |tensor: &str| {
        above
            .get(tensor)
            .ok_or_else(|| PipelineError::UnknownTensor {
                stage: sd.name.clone(),
                tensor: tensor.to_owned(),
            })
    };
    let spec = lookup(rows)?.clone();
    if spec.shape.is_empty() {
        return Err(PipelineError::NoRows {
            stage: sd.name.clone(),
            tensor: rows.to_owned(),
        });
    }
    if let FanOut::Threshold { score, .. } = &sd.fan_out {
        let s = lookup(score)?;
        let numeric = !matches!(s.datatype, DataType::Bytes | DataType::Bool);
        let shaped = matches!(s.shape[..], [_] | [_, 1]);
        let same_rows = s.shape.first().is_some_and(|&n| dim_fits(n, spec.shape[0]));
        if !(numeric && shaped && same_rows) {
            return Err(PipelineError::ScoreRows {
                stage: sd.name.clone(),
                score: score.clone(),
                rows: rows.to_owned(),
                found: describe(s),
            });
        }
    }
    let row = TensorSpec {
        shape: spec.shape[1..].to_vec(),
        ..spec
    };
    scope.insert(rows.to_owned(), row.clone());
    Ok((scope, Some(row)))
}

/// The stage's (model input, pipeline tensor) pairs in the model's input order, each
/// checked against the tensor in scope.
fn map_inputs(
    sd: &StageDecl,
    model: &StageModel,
    scope: &Scope,
) -> Result<Vec<(String, String)>, PipelineError> {
    for input in sd.input_map.keys() {
        find(&model.inputs, &sd.name, &sd.model, "input", input)?;
    }
    let mut pairs = Vec::new();
    for want in &model.inputs {
        let tensor = sd
            .input_map
            .get(&want.name)
            .ok_or_else(|| PipelineError::MissingInput {
                stage: sd.name.clone(),
                input: want.name.clone(),
            })?;
        let have = scope
            .get(tensor)
            .ok_or_else(|| PipelineError::UnknownTensor {
                stage: sd.name.clone(),
                tensor: tensor.clone(),
            })?;
        let fits = have.datatype == want.datatype
            && have.shape.len() == want.shape.len()
            && have
                .shape
                .iter()
                .zip(&want.shape)
                .all(|(&a, &b)| dim_fits(a, b));
        if !fits {
            return Err(PipelineError::Mismatch {
                stage: sd.name.clone(),
                input: want.name.clone(),
                tensor: tensor.clone(),
                expected: describe(want),
                found: describe(have),
            });
        }
        pairs.push((want.name.clone(), tensor.clone()));
    }
    Ok(pairs)
}

/// Two dimensions agree when equal or either varies.
fn dim_fits(a: i64, b: i64) -> bool {
    a == b || a < 0 || b < 0
}

fn describe(spec: &TensorSpec) -> String {
    format!("{:?} {:?}", spec.datatype, spec.shape)
}

fn find(
    specs: &[TensorSpec],
    stage: &str,
    model: &str,
    side: &'static str,
    name: &str,
) -> Result<TensorSpec, PipelineError> {
    specs
        .iter()
        .find(|s| s.name == name)
        .cloned()
        .ok_or_else(|| PipelineError::UnknownModelTensor {
            stage: stage.to_owned(),
            model: model.to_owned(),
            side,
            name: name.to_owned(),
        })
}

#[cfg(test)]
#[path = "validate_tests.rs"]
pub(crate) mod tests;
