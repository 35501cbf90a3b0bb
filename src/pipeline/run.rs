//! One root request's state machine: from its inputs to its one answer.
//!
//! [`Run::start`] makes the requests of the stages that run on the root inputs; each
//! [`Run::on_answer`] turns a finished sub-request into its children's requests (the
//! fan-out) and, when nothing is left outstanding, joins the results into the root's
//! answer. A failed sub-request answers the root with its failure at once and lists the
//! sub-requests still outstanding to withdraw; with `partial_results` a failure below a
//! fan-out only leaves its rows out. The answer is given at most once; answers that come
//! after it are ignored.

use std::sync::Arc;

use super::budget::{downstream, queued_below, Budget};
use super::rows::{concat, cut_row, values, zero_row};
use super::{draw, FanOut, Pipeline};
use crate::outcome::Outcome;
use crate::tensor::Tensor;
use crate::time::Nanos;

/// A sub-request of one root, dense from 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SubId(pub u32);

/// A request to make to a stage's model.
#[derive(Clone, Debug, PartialEq)]
pub struct SubRequest {
    pub sub: SubId,
    /// Index of the stage (`Pipeline::stages`).
    pub stage: usize,
    /// The model's inputs, named as the model names them.
    pub inputs: Vec<Tensor>,
    /// The stage deadline (never past the root's).
    pub deadline: Nanos,
    /// R_v: the least time still needed after this stage on its longest downstream path
    /// (0 at a leaf). The request is worth running only if it finishes by the root
    /// deadline less this: the policy drops it, and so its root, as soon as it cannot.
    pub downstream: Nanos,
}

/// A sub-request's outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Answered {
    /// The model's outputs, named as the model names them.
    pub outputs: Vec<Tensor>,
    /// The device only emulated the model: the fan-out is drawn, not read.
    pub emulated: bool,
}

/// Why a sub-request (and so, by default, its root) has no result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The one outcome vocabulary's name for it.
    pub outcome: Outcome,
    /// What the caller is told.
    pub message: String,
}

/// A row left out of a partial answer: the stage whose request failed and where it sits
/// in the tree (its row index at each fan-out above it).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Missing {
    pub stage: String,
    pub row: Vec<u32>,
}

/// The root's outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Joined {
    /// The pipeline's outputs, in declared order, named as the pipeline names them.
    pub outputs: Vec<Tensor>,
    /// Rows left out (only with `partial_results`).
    pub missing: Vec<Missing>,
}

/// The root's one answer.
pub type RootResult = Result<Joined, Failure>;

/// What to do after a step of a run.
#[derive(Debug, Default)]
pub struct Step {
    /// Sub-requests to make.
    pub submit: Vec<SubRequest>,
    /// Outstanding sub-requests no longer wanted (the root was answered with a failure).
    pub withdraw: Vec<SubId>,
    /// The root's answer, given once.
    pub answer: Option<RootResult>,
    /// (stage, requests one result became) for each fan-out made: the metrics' counts.
    pub fan_outs: Vec<(usize, usize)>,
}

enum State {
    Waiting,
    /// Its scope with its outputs added.
    Done(Vec<Tensor>),
    Failed,
}

struct Instance {
    stage: usize,
    path: Vec<u32>,
    /// The tensors its inputs were taken from (kept for its children's).
    scope: Vec<Tensor>,
    state: State,
}

/// One root request in flight.
pub struct Run {
    pipeline: Arc<Pipeline>,
    budget: Arc<dyn Budget>,
    /// The root request's id: the seed of emulated fan-outs.
    root: u64,
    deadline: Nanos,
    instances: Vec<Instance>,
    waiting: usize,
    answered: bool,
    /// Per stage, how long a request made at the root's start is projected to take
    /// (its queue and run); empty: batch-1 estimates. Only the requests made at `start`
    /// use it (see [`Run::with_costs`]).
    costs: Vec<Nanos>,
}

impl Run {
    /// A root request `root`, due at `deadline`.
    pub fn new(
        pipeline: Arc<Pipeline>,
        budget: Arc<dyn Budget>,
        root: u64,
        deadline: Nanos,
    ) -> Self {
        Self {
            pipeline,
            budget,
            root,
            deadline,
            instances: Vec::new(),
            waiting: 0,
            answered: false,
            costs: Vec::new(),
        }
    }

    /// Earliest-stage drop: the root stage's R_v is taken over `costs` (per stage, how
    /// long a request made now would take, its model's queue included, never less than
    /// its batch-1 estimate) instead of batch-1 estimates, so that a root whose downstream
    /// stages are projected to miss its deadline is refused before its first stage runs,
    /// not after (under overload the first stage's work on such roots is what starves
    /// the stages below). Stages made later use batch-1 estimates: their upstream work is
    /// already spent, and a pessimistic projection would only waste it.
    pub fn with_costs(mut self, costs: Vec<Nanos>) -> Self {
        self.costs = costs;
        self
    }

    /// The root deadline.
    pub fn deadline(&self) -> Nanos {
        self.deadline
    }

    /// The stage a sub-request runs.
    pub fn stage_of(&self, sub: SubId) -> Option<usize> {
        self.instances.get(sub.0 as usize).map(|i| i.stage)
    }

    /// Whether the root has its answer.
    pub fn is_answered(&self) -> bool {
        self.answered
    }

    /// Makes the requests of the stages on the root inputs (checked by the caller).
    pub fn start(&mut self, inputs: Vec<Tensor>, now: Nanos) -> Step {
        let mut step = Step::default();
        let roots: Vec<usize> = self.pipeline.roots().collect();
        for stage in roots {
            self.spawn(stage, &inputs, &[], false, now, &mut step);
        }
        self.costs = Vec::new();
        self.finish_if_done(&mut step);
        step
    }

    /// Takes the answer of `sub`.
    pub fn on_answer(&mut self, sub: SubId, result: Result<Answered, Failure>, now: Nanos) -> Step {
        let mut step = Step::default();
        let Some(instance) = self.instances.get_mut(sub.0 as usize) else {
            return step;
        };
        if !matches!(instance.state, State::Waiting) || self.answered {
            return step;
        }
        self.waiting -= 1;
        let stage = &self.pipeline.stages[instance.stage];
        let scope = match result.and_then(|a| with_outputs(&instance.scope, stage, a)) {
            Ok((scope, emulated)) => (scope, emulated),
            Err(failure) => {
                instance.state = State::Failed;
                if !(self.pipeline.partial_results && stage.fanned) {
                    self.answered = true;
                    step.withdraw = self.waiting_subs();
                    step.answer = Some(Err(failure));
                    return step;
                }
                self.finish_if_done(&mut step);
                return step;
            }
        };
        let (scope, emulated) = scope;
        let (parent, path) = (instance.stage, instance.path.clone());
        instance.state = State::Done(scope.clone());
        for child in self.pipeline.stages[parent].children.clone() {
            self.spawn(child, &scope, &path, emulated, now, &mut step);
        }
        self.finish_if_done(&mut step);
        step
    }

    fn waiting_subs(&self) -> Vec<SubId> {
        (0..self.instances.len())
            .filter(|&i| matches!(self.instances[i].state, State::Waiting))
            .map(|i| SubId(i as u32))
            .collect()
    }

    /// Makes `stage`'s requests on one result above it (its `scope`).
    fn spawn(
        &mut self,
        stage: usize,
        scope: &[Tensor],
        path: &[u32],
        emulated: bool,
        now: Nanos,
        step: &mut Step,
    ) {
        let s = &self.pipeline.stages[stage];
        let deadline = self
            .budget
            .stage_deadline(&self.pipeline, stage, now, self.deadline);
        let p = &self.pipeline;
        let single = |c: usize| p.stages[c].single;
        let downstream = downstream(p, stage, &single).max(queued_below(p, stage, &|c| {
            self.costs.get(c).map_or(0, |&cost| cost.max(single(c)))
        }));
        let rows: Vec<(Option<u32>, Vec<Tensor>)> =
            match fan_rows(s, scope, emulated, self.root, stage, path) {
                None => vec![(None, scope.to_vec())],
                Some(rows) => {
                    step.fan_outs.push((stage, rows.len()));
                    rows.into_iter()
                        .map(|(i, scope)| (Some(i), scope))
                        .collect()
                }
            };
        for (row, scope) in rows {
            let mut path = path.to_vec();
            path.extend(row);
            let inputs = s
                .inputs
                .iter()
                .filter_map(|(input, tensor)| {
                    find(&scope, tensor).map(|t| Tensor {
                        name: input.clone(),
                        ..t.clone()
                    })
                })
                .collect();
            let sub = SubId(self.instances.len() as u32);
            self.instances.push(Instance {
                stage,
                path,
                scope,
                state: State::Waiting,
            });
            self.waiting += 1;
            step.submit.push(SubRequest {
                sub,
                stage,
                inputs,
                deadline,
                downstream,
            });
        }
    }

    /// Answers the root with the joined outputs once nothing is outstanding.
    fn finish_if_done(&mut self, step: &mut Step) {
        if self.waiting > 0 || self.answered {
            return;
        }
        self.answered = true;
        step.answer = Some(self.join());
    }

    fn join(&self) -> RootResult {
        let mut outputs = Vec::new();
        for out in &self.pipeline.outputs {
            let mut done: Vec<(&[u32], &Tensor)> = Vec::new();
            for i in self.instances.iter().filter(|i| i.stage == out.stage) {
                if let State::Done(scope) = &i.state {
                    if let Some(t) = find(scope, &out.name) {
                        done.push((&i.path, t));
                    }
                }
            }
            done.sort_by(|a, b| a.0.cmp(b.0));
            let tensors: Vec<&Tensor> = done.into_iter().map(|(_, t)| t).collect();
            outputs.push(if out.joined {
                concat(&out.name, out.spec.datatype, &out.spec.shape[1..], &tensors)
                    .map_err(failed)?
            } else {
                let t = tensors.first().ok_or_else(|| {
                    failed(format!(
                        "stage '{}' gave no '{}'",
                        self.pipeline.stages[out.stage].name, out.name
                    ))
                })?;
                Tensor {
                    name: out.name.clone(),
                    ..(*t).clone()
                }
            });
        }
        let missing = self
            .instances
            .iter()
            .filter(|i| matches!(i.state, State::Failed))
            .map(|i| Missing {
                stage: self.pipeline.stages[i.stage].name.clone(),
                row: i.path.clone(),
            })
            .collect();
        Ok(Joined { outputs, missing })
    }
}

/// The stage's scope after it answered: the outputs renamed to pipeline tensors.
fn with_outputs(
    scope: &[Tensor],
    stage: &super::Stage,
    answered: Answered,
) -> Result<(Vec<Tensor>, bool), Failure> {
    let mut scope = scope.to_vec();
    for (output, tensor) in &stage.outputs {
        let t = find(&answered.outputs, output).ok_or_else(|| {
            failed(format!(
                "stage '{}': model gave no output '{output}'",
                stage.name
            ))
        })?;
        scope.push(Tensor {
            name: tensor.clone(),
            ..t.clone()
        });
    }
    Ok((scope, answered.emulated))
}

/// The rows one result becomes for a fanned-out stage, each with its scope (the fanned
/// tensor cut to that row); `None` for a stage without fan-out.
fn fan_rows(
    s: &super::Stage,
    scope: &[Tensor],
    emulated: bool,
    root: u64,
    stage: usize,
    path: &[u32],
) -> Option<Vec<(u32, Vec<Tensor>)>> {
    let rows_name = s.fan_out.rows()?;
    let tensor = find(scope, rows_name)?;
    let n = tensor.shape.first().copied().unwrap_or(0);
    let mut picked: Vec<usize> = match &s.fan_out {
        FanOut::Threshold { score, min, .. } => {
            let scores = find(scope, score).and_then(values).unwrap_or_default();
            (0..n)
                .filter(|&i| scores.get(i).is_some_and(|v| v >= min))
                .collect()
        }
        _ => (0..n).collect(),
    };
    if let (true, Some(dist)) = (emulated, s.emulated_fan_out) {
        let k = draw::count(dist, draw::seed(root, stage, path));
        picked = (0..k)
            .map(|i| if n == 0 { usize::MAX } else { i % n })
            .collect();
    }
    let rows = picked
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let row = if r == usize::MAX {
                zero_row(rows_name, s.row.as_ref())
            } else {
                cut_row(tensor, r)
            };
            let mut scope = scope.to_vec();
            scope.retain(|t| t.name != rows_name);
            scope.push(row);
            (i as u32, scope)
        })
        .collect();
    Some(rows)
}

fn find<'a>(tensors: &'a [Tensor], name: &str) -> Option<&'a Tensor> {
    tensors.iter().rev().find(|t| t.name == name)
}

fn failed(message: String) -> Failure {
    Failure {
        outcome: Outcome::ExecutionFailed,
        message,
    }
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
