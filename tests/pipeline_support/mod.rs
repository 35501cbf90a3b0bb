//! The pipeline harness of `tests/pipeline_props.rs`: random trees of stages, fan-outs
//! and arrival streams (`scenario`), and a driver that runs one `pipeline::run::Run` per
//! root request through the scheduler's testbed, recording every root's answer and any
//! broken promise (`Harness::violations`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use clockwork::config::{PolicyConfig, PolicyName};
use clockwork::model::{BatchLatency, DataType, ModelId, ModelProfile, RequestId, TensorSpec};
use clockwork::pipeline::budget::{Budget, Proportional};
use clockwork::pipeline::decl::StageDecl;
use clockwork::pipeline::run::{Answered, Failure, Run, Step, SubId};
use clockwork::pipeline::{validate, FanOut, Pipeline, PipelineDecl, StageModel};
use clockwork::scheduler::testbed::{Driver, Reaction, Testbed};
use clockwork::scheduler::view::projected_wait;
use clockwork::scheduler::{
    ClockworkPolicy, DeviceInfo, ModelInfo, Policy, ReactivePolicy, Request, Verdict,
};
use clockwork::slopt::planner::TunedBudget;
use clockwork::slopt::systems::{DropRule, System};
use clockwork::slopt::tune::StageLoad;
use clockwork::tensor::Tensor;
use clockwork::time::{Nanos, MS, US};
use proptest::prelude::*;

/// One random case: a tree of stages, their run times, fan-out rows and root arrivals.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Per stage after the first: (parent, fan-out kind 0 one / 1 rows / 2 threshold).
    pub tree: Vec<(usize, u8)>,
    /// Per stage: batch-1 latency in µs.
    pub latency: Vec<u64>,
    /// Most rows one answer has (the count is drawn per answer, 0 allowed).
    pub max_rows: u64,
    /// Roots: (gap in µs, slo in ms).
    pub roots: Vec<(u64, u64)>,
    pub devices: usize,
}

pub fn scenario() -> impl Strategy<Value = Scenario> {
    (1usize..=4).prop_flat_map(|n| {
        let tree = (1..n).map(|i| (0..i, 0u8..3)).collect::<Vec<_>>();
        (
            tree,
            prop::collection::vec(300u64..3_000, n),
            0u64..6,
            prop::collection::vec((0u64..4_000, 5u64..120), 1..60),
            1usize..3,
        )
            .prop_map(|(tree, latency, max_rows, roots, devices)| Scenario {
                tree,
                latency,
                max_rows,
                roots,
                devices,
            })
    })
}

pub fn spec(name: &str, shape: &[i64]) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        datatype: DataType::Fp32,
        shape: shape.to_vec(),
    }
}

pub fn profile(us: u64) -> ModelProfile {
    ModelProfile {
        weight_bytes: 1 << 24,
        load_latency: 2 * MS,
        batches: [1u32, 2, 4, 8]
            .iter()
            .map(|&b| BatchLatency {
                batch: b,
                latency: us * US * (2 + u64::from(b)) / 3,
            })
            .collect(),
    }
}

/// Stage i runs model `m{i}`: x [1] -> rows [-1, 1], score [-1].
pub fn pipeline(s: &Scenario) -> Pipeline {
    let mut stages = Vec::new();
    for i in 0..s.latency.len() {
        let (after, kind) = match i {
            0 => (None, 0),
            _ => (Some(s.tree[i - 1].0), s.tree[i - 1].1),
        };
        let parent = after.unwrap_or(0);
        let (fan_out, input) = match kind {
            0 => (FanOut::One, "image".to_string()),
            1 => (
                FanOut::Rows {
                    tensor: format!("t{parent}"),
                },
                format!("t{parent}"),
            ),
            _ => (
                FanOut::Threshold {
                    rows: format!("t{parent}"),
                    score: format!("s{parent}"),
                    min: 0.5,
                },
                format!("t{parent}"),
            ),
        };
        stages.push(StageDecl {
            name: format!("stage{i}"),
            model: format!("m{i}"),
            version: None,
            after: after.map(|p| format!("stage{p}")),
            fan_out,
            emulated_fan_out: None,
            input_map: BTreeMap::from([("x".to_string(), input)]),
            output_map: BTreeMap::from([
                ("rows".to_string(), format!("t{i}")),
                ("score".to_string(), format!("s{i}")),
            ]),
        });
    }
    let decl = PipelineDecl {
        slo: Duration::from_millis(100),
        partial_results: false,
        budget: Default::default(),
        inputs: vec![spec("image", &[1])],
        outputs: (0..s.latency.len()).map(|i| format!("t{i}")).collect(),
        stages,
    };
    validate("p", &decl, |model, _| {
        let i: usize = model[1..].parse().ok()?;
        Some(StageModel {
            version: 1,
            inputs: vec![spec("x", &[1])],
            outputs: vec![spec("rows", &[-1, 1]), spec("score", &[-1])],
            single: profile(s.latency[i]).latency(1).unwrap_or(0),
        })
    })
    .expect("the generated declaration is valid")
}

/// Drives one run per root request through the testbed.
pub struct Harness {
    pub pipeline: Arc<Pipeline>,
    pub max_rows: u64,
    /// Roots not yet arrived: (arrival, slo), in arrival order, from the back.
    pub pending: Vec<(Nanos, Nanos)>,
    pub runs: HashMap<u64, Run>,
    pub subs: HashMap<RequestId, (u64, SubId)>,
    pub requests: HashMap<(u64, SubId), RequestId>,
    pub next_request: u64,
    pub next_root: u64,
    /// Roots answered: (when, refused, deadline).
    pub answers: HashMap<u64, (Nanos, bool, Nanos)>,
    pub violations: Vec<String>,
    /// Judge each root's first stage by the policy's views of the stages below
    /// (earliest-stage drop, `Run::with_costs`).
    pub backlog: bool,
    /// How stage deadlines are set.
    pub budget: Arc<dyn Budget>,
    /// What the policy is told of each sub-request's latest useful finish.
    pub drop: DropRule,
    /// Roots some of whose sub-requests were planned into a batch.
    pub worked: HashSet<u64>,
    /// Sub-requests completed after their stage deadline.
    pub late_subs: usize,
    /// Each sub-request's stage deadline.
    pub stage_due: HashMap<RequestId, Nanos>,
}

impl Harness {
    /// A made-up answer: a row count and scores from a hash of the request.
    fn outputs(&self, request: RequestId) -> Answered {
        let h = |x: u64| x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20;
        let rows = (h(request.0) % (self.max_rows + 1)) as usize;
        let scores: Vec<f32> = (0..rows)
            .map(|r| (h(request.0 * 31 + r as u64) % 100) as f32 / 100.0)
            .collect();
        Answered {
            outputs: vec![
                Tensor::from_f32("rows", vec![rows, 1], &scores),
                Tensor::from_f32("score", vec![rows], &scores),
            ],
            emulated: false,
        }
    }

    fn apply(&mut self, root: u64, step: Step, now: Nanos, reaction: &mut Reaction) {
        for sub in step.submit {
            self.next_request += 1;
            let id = RequestId(self.next_request);
            self.subs.insert(id, (root, sub.sub));
            self.stage_due.insert(id, sub.deadline);
            self.requests.insert((root, sub.sub), id);
            reaction.submit.push(Request {
                id,
                model: ModelId(sub.stage as u32),
                arrival: now,
                slo: sub.deadline.saturating_sub(now),
                latest_finish: Some({
                    let due = self.runs[&root].deadline();
                    due.saturating_sub(self.drop.downstream(due, sub.deadline, sub.downstream))
                }),
                items: 1,
            });
        }
        for sub in step.withdraw {
            let stage = self.runs[&root].stage_of(sub).unwrap_or(0);
            reaction
                .withdraw
                .push((self.requests[&(root, sub)], ModelId(stage as u32)));
        }
        if let Some(answer) = step.answer {
            let deadline = self.runs[&root].deadline();
            let refused = answer.as_ref().is_err_and(|f| f.outcome.is_refusal());
            if self
                .answers
                .insert(root, (now, refused, deadline))
                .is_some()
            {
                self.violations.push(format!("root {root} answered twice"));
            }
        }
    }
}

impl Driver for Harness {
    fn next_arrival(&mut self) -> Option<Nanos> {
        self.pending.last().map(|r| r.0)
    }

    fn arrivals(&mut self, now: Nanos, policy: &dyn Policy) -> Vec<Request> {
        let mut reaction = Reaction::default();
        while self.pending.last().is_some_and(|r| r.0 <= now) {
            let Some((arrival, slo)) = self.pending.pop() else {
                break;
            };
            self.next_root += 1;
            let root = self.next_root;
            let mut run = Run::new(
                Arc::clone(&self.pipeline),
                Arc::clone(&self.budget),
                root,
                arrival + slo,
            );
            if self.backlog {
                let costs = (0..self.pipeline.stages.len())
                    .map(|i| {
                        let view = policy.view(ModelId(i as u32), now);
                        projected_wait(view.as_ref(), now).unwrap_or(0)
                    })
                    .collect();
                run = run.with_costs(costs);
            }
            let step = run.start(vec![Tensor::from_f32("image", vec![1], &[1.0])], now);
            self.runs.insert(root, run);
            self.apply(root, step, now, &mut reaction);
        }
        reaction.submit
    }

    fn answered(&mut self, request: RequestId, verdict: &Verdict, now: Nanos) -> Reaction {
        let mut reaction = Reaction::default();
        let Some(&(root, sub)) = self.subs.get(&request) else {
            return reaction;
        };
        let result = match verdict {
            Verdict::Completed { .. } => {
                self.late_subs += usize::from(now > self.stage_due[&request]);
                Ok(self.outputs(request))
            }
            Verdict::Refused(r) => Err(Failure {
                outcome: r.outcome(),
                message: r.to_string(),
            }),
            Verdict::Failed(e) => Err(Failure {
                outcome: clockwork::outcome::Outcome::ExecutionFailed,
                message: e.to_string(),
            }),
        };
        let Some(run) = self.runs.get_mut(&root) else {
            return reaction;
        };
        let step = run.on_answer(sub, result, now);
        self.apply(root, step, now, &mut reaction);
        reaction
    }

    fn planned(&mut self, requests: &[RequestId], now: Nanos) {
        for r in requests {
            let root = self.subs[r].0;
            self.worked.insert(root);
            if let Some(&(at, true, _)) = self.answers.get(&root) {
                self.violations.push(format!(
                    "request {r:?} of root {root} planned at {now}, its root was refused at {at}"
                ));
            }
        }
    }
}

pub fn check(s: &Scenario, factor: f64) -> Result<Harness, TestCaseError> {
    check_with(s, factor, false)
}

pub fn check_with(s: &Scenario, factor: f64, backlog: bool) -> Result<Harness, TestCaseError> {
    let policy = ClockworkPolicy::new(&PolicyConfig::default());
    let drop = DropRule::Adaptive { earliest: backlog };
    run_system(s, factor, policy, Arc::new(Proportional), drop)
}

/// Runs `system` (its policy, its split for the scenario's mean root rate, its drop rule).
pub fn check_system(s: &Scenario, factor: f64, system: System) -> Result<Harness, TestCaseError> {
    let parts = system.parts();
    let pipeline = pipeline(s);
    let budget: Arc<dyn Budget> = match parts.tuning {
        None => Arc::new(Proportional),
        Some(tuned) => {
            let span = s.roots.iter().map(|r| r.0).sum::<u64>().max(1) * US;
            let rate = s.roots.len() as f64 * 1e9 / span as f64;
            let loads: Vec<StageLoad> = (0..s.latency.len())
                .map(|i| StageLoad {
                    parent: pipeline.stages[i].parent,
                    profile: profile(s.latency[i]).batches,
                    rate,
                })
                .collect();
            let budget = TunedBudget::new(&pipeline);
            // No plan fits: the tuned budget keeps its batch-1 weights, as a pipeline does.
            if let Ok(plan) = tuned.planner.split.solve(&loads, 98 * MS, 200) {
                budget.set(&plan);
            }
            Arc::new(budget)
        }
    };
    let config = PolicyConfig::default();
    match parts.policy {
        PolicyName::Triton => run_system(
            s,
            factor,
            ReactivePolicy::new(&config).triton(),
            budget,
            parts.drop,
        ),
        _ => run_system(s, factor, ClockworkPolicy::new(&config), budget, parts.drop),
    }
}

pub fn run_system<P: Policy>(
    s: &Scenario,
    factor: f64,
    mut policy: P,
    budget: Arc<dyn Budget>,
    drop: DropRule,
) -> Result<Harness, TestCaseError> {
    let config = PolicyConfig::default();
    let devices = vec![40u32; s.devices];
    for &pages in &devices {
        policy.add_device(DeviceInfo {
            kind: "test".into(),
            pages,
        });
    }
    let models: Vec<(u32, ModelProfile)> = s.latency.iter().map(|&us| (1, profile(us))).collect();
    for (pages, profile) in &models {
        policy.add_model(ModelInfo {
            pages: *pages,
            profile: profile.clone(),
            by_kind: vec![],
            devices: None,
        });
    }
    let mut at = 0;
    let mut pending: Vec<(Nanos, Nanos)> = s
        .roots
        .iter()
        .map(|&(gap, slo)| {
            at += gap * US;
            (at, slo * MS)
        })
        .collect();
    pending.reverse();
    let roots = pending.len();
    let mut harness = Harness {
        pipeline: Arc::new(pipeline(s)),
        max_rows: s.max_rows,
        pending,
        runs: HashMap::new(),
        subs: HashMap::new(),
        requests: HashMap::new(),
        next_request: 0,
        next_root: 0,
        answers: HashMap::new(),
        violations: Vec::new(),
        backlog: drop.earliest(),
        budget,
        drop,
        worked: HashSet::new(),
        late_subs: 0,
        stage_due: HashMap::new(),
    };
    let mut testbed =
        Testbed::new(policy, &devices, models, config.max_batch as usize).with_factor(factor);
    let report = testbed.run_driven(&mut harness);
    prop_assert!(report.violations.is_empty(), "{:?}", report.violations);
    prop_assert!(harness.violations.is_empty(), "{:?}", harness.violations);
    prop_assert_eq!(harness.answers.len(), roots, "every root answered");
    Ok(harness)
}
