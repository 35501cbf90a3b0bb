//! The pipeline-stage actor: one per stage of each registered pipeline. It makes its
//! stage's sub-requests to the controller with the same typed message as any caller
//! (`Submit`, carrying the root's deadline and group), hands each answer back to its
//! pipeline actor, and times it. Withdrawals of a root go to the controller through the
//! stage actors that submitted its requests, after those requests (one sender, in order),
//! so a withdrawal never overtakes a request it should take back.

use std::sync::Arc;

use actix::prelude::*;
use tokio::sync::oneshot;

use super::messages::{InferResult, Root, Submit, Withdraw};
use super::Controller;
use crate::events::{self, Event, EventBus};
use crate::pipeline::run::SubId;
use crate::tensor::Tensor;
use crate::time::{Clock, Nanos};

/// A sub-request for the stage's model.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StageWork {
    /// The root it serves (its deadline and group).
    pub root: Root,
    pub sub: SubId,
    /// The model's inputs.
    pub inputs: Vec<Tensor>,
    /// The stage deadline.
    pub deadline: Nanos,
}

/// The answer to a [`StageWork`], for the pipeline actor.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StageDone {
    pub root: Root,
    pub sub: SubId,
    pub result: InferResult,
}

/// Withdraws a root's requests this stage made (after them).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct WithdrawRoot(pub Root);

/// What a stage actor is given.
pub struct StageParts {
    pub pipeline: Arc<str>,
    pub stage: Arc<str>,
    /// The registered model it runs.
    pub model: String,
    pub controller: Addr<Controller>,
    /// Where its answers go (its pipeline actor).
    pub done: Recipient<StageDone>,
    pub clock: Clock,
    pub events: EventBus,
}

/// One pipeline stage.
pub struct StageActor {
    parts: StageParts,
}

impl StageActor {
    pub fn new(parts: StageParts) -> Self {
        Self { parts }
    }
}

impl Actor for StageActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(super::MAILBOX);
    }
}

impl Handler<StageWork> for StageActor {
    type Result = ();

    fn handle(&mut self, work: StageWork, ctx: &mut Context<Self>) {
        let p = &self.parts;
        let now = p.clock.now();
        let (reply, answer) = oneshot::channel();
        p.controller.do_send(Submit {
            model: p.model.clone(),
            inputs: Arc::new(work.inputs),
            items: 1,
            // Already past its stage deadline: a zero objective is refused at once.
            slo: Some(work.deadline.saturating_sub(now)),
            edge: None,
            root: Some(work.root),
            tally: None,
            reply,
        });
        let (done, clock, events) = (p.done.clone(), p.clock, p.events.clone());
        let (pipeline, stage) = (Arc::clone(&p.pipeline), Arc::clone(&p.stage));
        let (root, sub) = (work.root, work.sub);
        ctx.spawn(
            async move {
                let result = answer
                    .await
                    .unwrap_or(Err(super::messages::InferError::ShuttingDown));
                let outcome = match &result {
                    Ok(inferred) if inferred.late => crate::outcome::Outcome::Late,
                    Ok(_) => crate::outcome::Outcome::Ok,
                    Err(e) => e.kind(),
                };
                let latency = clock.now().saturating_sub(now);
                events.publish(|| {
                    Event::StageAnswered(events::StageAnswered {
                        pipeline,
                        stage,
                        latency,
                        outcome,
                    })
                });
                done.do_send(StageDone { root, sub, result });
            }
            .into_actor(self),
        );
    }
}

impl Handler<WithdrawRoot> for StageActor {
    type Result = ();

    fn handle(&mut self, WithdrawRoot(root): WithdrawRoot, _: &mut Context<Self>) {
        self.parts
            .controller
            .do_send(Withdraw { group: root.group });
    }
}
