//! Pipelines at the models' paths (`/v2/models/{pipeline}/...`): the model routes find a
//! pipeline's name in the `PipelineTable` first and come here. Its requests go to its
//! pipeline actor (`crate::actors::pipeline`) through the same front end as a model's
//! (`front.rs`: the edge's refusals, reading, the decode pool, the learned phases); metadata describe it as a model of platform `ensemble`; `config` is
//! Triton's ensemble form, so Triton's clients read it; `ready` is the models' (every
//! stage model ready, `models.rs`).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::body::Answer;
use super::error::ApiError;
use super::v2::AnswerParameters;
use super::ApiState;
use crate::actors::messages::{Edge, InferError};
use crate::actors::pipeline::RunPipeline;
use crate::actors::pipeline_table::Served;
use crate::model::{ModelProfile, ModelSpec};
use crate::outcome::Outcome;
use crate::pipeline::run::Failure;
use crate::pipeline::{FanOut, Pipeline};
use crate::scheduler::{ActionError, Refusal};
use crate::tally::Tally;
use crate::tensor::Tensor;
use crate::time::Nanos;

/// What Triton's ensembles call the platform.
pub const ENSEMBLE: &str = "ensemble";

/// A pipeline described as a model is to the codec: its inputs, its outputs (joined
/// ones with their leading dimension), its objective; version 1.
pub fn pipeline_spec(p: &Pipeline) -> ModelSpec {
    ModelSpec {
        name: p.name.clone(),
        inputs: p.inputs.clone(),
        outputs: p.outputs.iter().map(|o| o.spec.clone()).collect(),
        slo: p.slo,
        profile: ModelProfile {
            weight_bytes: 0,
            load_latency: 0,
            batches: Vec::new(),
        },
        batched: true,
        version: 1,
    }
}

pub(super) fn check_version(served: &Served, version: Option<&str>) -> Result<(), ApiError> {
    match version {
        None | Some("1") => Ok(()),
        Some(other) => Err(ApiError::UnknownVersion {
            model: served.pipeline.name.clone(),
            version: other.to_owned(),
            served: "1".to_owned(),
        }),
    }
}

/// A pipeline the repository unloaded is unavailable (503), as an unloaded model is, not
/// unknown; any other name passes.
pub(super) fn refuse_unloaded(state: &ApiState, name: &str) -> Result<(), ApiError> {
    if state.pipelines.is_unloaded(name) {
        return Err(ApiError::ModelUnavailable(name.to_owned()));
    }
    Ok(())
}

/// A decoded request to a pipeline (`POST /v2/models/{pipeline}/infer` or gRPC, through
/// the same front end as a model's, `front.rs`): one root request to its actor.
pub(super) async fn call(
    state: &ApiState,
    served: &Served,
    inputs: Vec<Tensor>,
    items: u32,
    slo: Option<Nanos>,
    edge: Edge,
    tally: Tally,
) -> Result<Answer, ApiError> {
    if items > 1 {
        // Fan-out and joins are per root item; a batch of roots is not supported yet.
        return Err(ApiError::bad_input(format!(
            "the request carries {items} items; pipeline '{}' takes one item per request",
            served.pipeline.name
        )));
    }
    let (reply, answer) = tokio::sync::oneshot::channel();
    served.actor.do_send(RunPipeline {
        inputs,
        slo,
        edge: Some(edge),
        tally: Some(tally),
        reply,
    });
    // Through the worker's relay, as a model's answer (`relay.rs`).
    let answer = super::relay::relayed(answer)
        .await
        .and_then(Result::ok)
        .ok_or(InferError::ShuttingDown)?;
    let answer = answer.map_err(failure_error)?;
    let started = state.clock.now();
    let slo = slo.unwrap_or(served.pipeline.slo);
    let parameters = AnswerParameters {
        batch_size: None,
        emulated: answer.emulated,
        late: answer.late,
        missing: Some(answer.missing),
        slo_ms: slo as f64 / 1e6,
    };
    Ok(Answer {
        outputs: answer.outputs,
        parameters,
        ended: answer.answered.min(started),
        exec: None,
    })
}

/// A failed root as the API's one error type, by its outcome.
fn failure_error(failure: Failure) -> ApiError {
    let error = match failure.outcome {
        Outcome::DeadlineUnreachable => InferError::Refused(Refusal::DeadlineUnreachable),
        Outcome::TimedOut => InferError::Refused(Refusal::TimedOut),
        Outcome::Withdrawn => InferError::Refused(Refusal::Withdrawn),
        Outcome::ShuttingDown => InferError::ShuttingDown,
        Outcome::BadInput => InferError::BadInput(failure.message),
        _ => InferError::Failed(ActionError::Device(failure.message)),
    };
    ApiError::Infer(error)
}

/// `GET /v2/models/{pipeline}/config`: Triton's ensemble configuration; the fan-outs and
/// the objective are in `parameters`.
pub(super) fn config<T: serde::Serialize>(
    served: &Served,
    version: Option<&str>,
    tensor: impl Fn(&crate::model::TensorSpec) -> T,
) -> Result<Value, ApiError> {
    check_version(served, version)?;
    let p = &served.pipeline;
    let spec = pipeline_spec(p);
    let mut parameters = BTreeMap::from([
        ("slo_ms".to_owned(), (p.slo as f64 / 1e6).to_string()),
        ("partial_results".to_owned(), p.partial_results.to_string()),
    ]);
    let steps: Vec<Value> = p
        .stages
        .iter()
        .map(|s| {
            let fan_out = match &s.fan_out {
                FanOut::One => None,
                FanOut::Rows { tensor } => Some(format!("rows={tensor}")),
                FanOut::Threshold { rows, score, min } => {
                    Some(format!("rows={rows} score={score} min={min}"))
                }
            };
            if let Some(f) = fan_out {
                parameters.insert(format!("fan_out.{}", s.name), f);
            }
            if let Some(parent) = s.parent {
                parameters.insert(format!("after.{}", s.name), p.stages[parent].name.clone());
            }
            let inputs: BTreeMap<&str, &str> = s
                .inputs
                .iter()
                .map(|(m, t)| (m.as_str(), t.as_str()))
                .collect();
            let outputs: BTreeMap<&str, &str> = s
                .outputs
                .iter()
                .map(|(m, t)| (m.as_str(), t.as_str()))
                .collect();
            json!({
                "model_name": s.model,
                "model_version": s.version,
                "input_map": inputs,
                "output_map": outputs,
            })
        })
        .collect();
    let parameters: BTreeMap<String, Value> = parameters
        .into_iter()
        .map(|(k, v)| (k, json!({ "string_value": v })))
        .collect();
    Ok(json!({
        "name": p.name,
        "platform": ENSEMBLE,
        "max_batch_size": 1,
        "input": spec.inputs.iter().map(&tensor).collect::<Vec<_>>(),
        "output": spec.outputs.iter().map(&tensor).collect::<Vec<_>>(),
        "ensemble_scheduling": { "step": steps },
        "parameters": parameters,
    }))
}
