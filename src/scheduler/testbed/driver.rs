//! What the testbed reports of a run, and the callers it runs: a fixed stream of
//! arrivals, or a [`Driver`] whose requests depend on the answers.

use std::collections::BTreeMap;

use crate::model::{ModelId, RequestId};
use crate::scheduler::{Policy, Request, Verdict};
use crate::time::Nanos;

/// What a run saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub admitted: usize,
    pub completed: usize,
    pub late: usize,
    pub refused: BTreeMap<&'static str, usize>,
    /// Of the refusals, those answered at the request's arrival (the rest waited first):
    /// under overload a policy that refuses early has most of them here.
    pub refused_on_arrival: usize,
    pub failed: usize,
    pub actions: usize,
    pub batches: usize,
    pub batched_requests: usize,
    /// Items of the batched requests (a request may carry several).
    pub batched_items: usize,
    pub loads: usize,
    pub unloads: usize,
    /// LOADs a device refused for want of free pages: the policy asked for more memory
    /// than the device had (a policy that mirrors the pages right never does).
    pub loads_without_pages: usize,
    /// LOADs a device refused because the weights were already resident or loading.
    pub duplicate_loads: usize,
    /// Broken promises; empty if the policy kept them all.
    pub violations: Vec<String>,
}

/// A caller whose requests depend on the answers (a pipeline's stages): the testbed asks
/// it for arrivals and tells it every answer and every planned batch.
pub trait Driver {
    /// When it next has a request to make on its own, if ever.
    fn next_arrival(&mut self) -> Option<Nanos>;
    /// Its requests due by `now`, in arrival order; `policy` may be asked for its views
    /// (a pipeline judges its downstream queues by them).
    fn arrivals(&mut self, now: Nanos, policy: &dyn Policy) -> Vec<Request>;
    /// `request` got its one answer at `now`: what it makes or withdraws in response.
    fn answered(&mut self, request: RequestId, verdict: &Verdict, now: Nanos) -> Reaction;
    /// The policy planned an INFER of these requests at `now`.
    fn planned(&mut self, _requests: &[RequestId], _now: Nanos) {}
}

/// A driver's response to an answer.
#[derive(Debug, Default)]
pub struct Reaction {
    /// New requests, arriving now.
    pub submit: Vec<Request>,
    /// Requests it no longer wants: (request, its model).
    pub withdraw: Vec<(RequestId, ModelId)>,
}

/// A fixed stream of arrivals, as [`super::Testbed::run`] takes it.
pub(super) struct Stream<I: Iterator<Item = Request>>(pub(super) std::iter::Peekable<I>);

impl<I: Iterator<Item = Request>> Driver for Stream<I> {
    fn next_arrival(&mut self) -> Option<Nanos> {
        self.0.peek().map(|r| r.arrival)
    }

    fn arrivals(&mut self, now: Nanos, _: &dyn Policy) -> Vec<Request> {
        let mut due = Vec::new();
        while let Some(r) = self.0.next_if(|r| r.arrival <= now) {
            due.push(r);
        }
        due
    }

    fn answered(&mut self, _: RequestId, _: &Verdict, _: Nanos) -> Reaction {
        Reaction::default()
    }
}
