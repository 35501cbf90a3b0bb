//! A decoded request's one call to its model's controller (`Front::answer` makes it): the
//! [`Submit`] with its reply channel and its `Tally`, the answer awaited through the
//! worker's relay, the request counted pending at the API while it waits.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::body::Answer;
use super::error::ApiError;
use super::metrics::Metrics;
use super::models::Entry;
use super::v2::AnswerParameters;
use super::ApiState;
use crate::actors::messages::{Edge, InferError, Inferred, Submit};
use crate::model::{ModelId, ModelSpec};
use crate::tally::Tally;
use crate::tensor::Tensor;
use crate::time::Nanos;

/// A decoded request to a model: one [`Submit`] to the controller, its answer.
pub(super) async fn call(
    state: &ApiState,
    entry: &Arc<Entry>,
    inputs: Vec<Tensor>,
    items: u32,
    slo: Option<Nanos>,
    edge: Edge,
    tally: Tally,
) -> Result<Answer, ApiError> {
    // The request carries its own reply channel: the controller answers this future
    // directly, without a task of its own that waits for the answer and forwards it (what
    // `Infer` through `send` costs: a second channel and a wake-up on the controller's
    // thread). The controller's mailbox is unbounded in practice (`actors::MAILBOX`):
    // requests are admitted or refused by the policy, never held back by the mailbox.
    let (reply, answer) = oneshot::channel();
    let message = Submit {
        model: entry.spec.name.clone(),
        inputs: Arc::new(inputs),
        items,
        slo,
        edge: Some(edge),
        root: None,
        tally: Some(tally),
        reply,
    };
    let waiting = Waiting::new(&state.metrics, entry.id);
    state.controller.do_send(message);
    // Through the worker's relay: woken from the controller's thread, this request would
    // wait in the worker's slow queue (`relay.rs`).
    let answer = super::relay::relayed(answer).await;
    drop(waiting);
    // A controller that is gone (the reply dropped unanswered) can only be one that is
    // shutting down; so is a relay that is gone.
    let inferred = answer
        .and_then(Result::ok)
        .unwrap_or(Err(InferError::ShuttingDown))?;
    Ok(Answer {
        parameters: parameters(&entry.spec, &inferred, slo),
        // From the end of the batch (same clock): the way back costs time too. No clock
        // read here: `Front::took` measures from it without going below zero.
        ended: inferred.timing.exec.end,
        exec: Some(inferred.timing.exec.duration),
        outputs: inferred.outputs,
    })
}

/// Counts a request as pending while it waits for the controller; a guard, because a
/// client that hangs up drops the handler mid-wait.
struct Waiting<'a> {
    metrics: &'a Metrics,
    model: ModelId,
}

impl<'a> Waiting<'a> {
    fn new(metrics: &'a Metrics, model: ModelId) -> Self {
        metrics.pending(model, 1);
        Self { metrics, model }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.metrics.pending(self.model, -1);
    }
}

/// A model's answer parameters: `emulated`, `late`, `batch_size`, `slo_ms`.
fn parameters(spec: &ModelSpec, inferred: &Inferred, slo: Option<Nanos>) -> AnswerParameters {
    AnswerParameters {
        batch_size: Some(inferred.timing.batch),
        emulated: inferred.emulated,
        late: inferred.late,
        missing: None,
        slo_ms: slo.unwrap_or(spec.slo) as f64 / 1e6,
    }
}
