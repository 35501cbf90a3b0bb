//! The front end's one path for a decoded request, shared by HTTP (`infer.rs`) and gRPC
//! (`grpc/infer.rs`): [`Front`] stamps nothing itself (the arrival comes from the edge's
//! middleware) but takes the request from there through each step that may refuse it
//! before the controller does (before reading, reading within the slack, decoding on the
//! pool), makes the one call (a `Submit` to the controller, `submit.rs`, or a pipeline's
//! root) and waits for the answer no later than the deadline, learning each phase's time on
//! the way; it counts the answer it gives (`tally.rs`).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use actix_web::web;

use super::body::{Answer, Decoded};
use super::decode::PoolError;
use super::edge::{self, FrontKey, Outlook, Phase, Stage};
use super::error::ApiError;
use super::target::Target;
use super::{pipelines, submit, ApiState};
use crate::actors::messages::Edge;
use crate::model::ModelSpec;
use crate::outcome::Outcome;
use crate::scheduler::view::{judge, Admission, Due, ModelView};
use crate::tally::Tally;
use crate::time::{Clock, Nanos};

/// How much before a request's deadline (besides its encoding) the front end stops
/// waiting for its answer: the HTTP worker's own delay in running a timer that is due and
/// writing the answer when its core is busy (answers encoded 0.4 to 1.2 ms past the
/// deadline on the 2-core edge bench before this lead).
const GUARD_LEAD: Nanos = 1_000_000;

/// The answer of `call` if it came by `due` (on `clock`), `None` past it. Tokio's timers
/// fire on the millisecond tick after their deadline, so an answer may come in after `due`
/// and before the timer: past it all the same (encoded up to a millisecond later, such
/// answers reached the edge bench's client after their objective). A refusal keeps its
/// own reason whenever it comes.
async fn by_due<T>(
    clock: Clock,
    due: Nanos,
    call: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Option<Result<T, ApiError>> {
    match tokio::time::timeout_at(clock.instant(due), call).await {
        Ok(Ok(_)) if clock.now() > due => None,
        Ok(answer) => Some(answer),
        Err(_) => None,
    }
}

/// The most a body may declare to be taken in the same read as its head: actix reads a
/// connection until 32 KiB are buffered before it hands the head on (`MAX_BUFFER_SIZE` in
/// actix-http's h1 payload), less room for the head itself.
pub(super) const WITH_HEAD_BYTES: u64 = 16 << 10;

/// Where a request's body is when the edge first judges it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Body {
    /// Received whole before the call (a gRPC message).
    InHand,
    /// Still on the connection, its `Content-Length` as declared (HTTP).
    Declared(Option<u64>),
}

impl Body {
    /// Whether the worker takes the body without coming back to the request: it is in
    /// hand, or small enough to come in the read that brought its head. A client that
    /// sends the head and the body apart has sent both by the time a worker that is
    /// behind gets to the head, which is when its lag matters.
    fn with_head(self) -> bool {
        match self {
            Body::InHand => true,
            Body::Declared(length) => length.is_some_and(|n| n <= WITH_HEAD_BYTES),
        }
    }
}

/// A request's answer as the front end delivered it: encoded by its protocol, with the
/// time the server held it (arrival to encoded) and its batch's run time.
pub(super) struct Delivered<R> {
    pub(super) response: R,
    pub(super) took: Nanos,
    pub(super) exec: Option<Nanos>,
}

/// One request as the front end sees it: its arrival, the learned front-end costs of its
/// model or pipeline, and each step that may refuse it before the controller does. Both
/// protocols go through it: HTTP (`run`) and gRPC (`grpc/infer.rs`).
pub(super) struct Front<'a> {
    state: &'a ApiState,
    target: &'a Target,
    key: FrontKey,
    arrival: Nanos,
    /// The learned front-end times, read once at arrival (one lock of the table).
    outlook: Outlook,
    /// The deadline the front end works to before the body says otherwise: the model's
    /// or pipeline's objective (a request's own `slo_ms` is inside the body), less the
    /// way back (`Phase::Respond`, and the worker's lag: the answer waits for it too).
    deadline: Nanos,
    /// This HTTP worker's lag when the request arrived (`lag.rs`).
    lag: Nanos,
    /// The count of the target's requests let through before reading that the
    /// controller has not got yet (`FrontTimes::pending`): judged as queued ahead.
    ahead: Arc<AtomicU32>,
    /// Whether this request is one of them (from its admission before reading until it
    /// is handed to the controller, or dropped: refused, or its client gone).
    holding: AtomicBool,
    /// Who counts its answer in the metrics once the controller has it: this front end,
    /// by the answer it gives, unless its client leaves first (`tally.rs`).
    tally: Tally,
}

impl<'a> Front<'a> {
    /// A request to `target` whose head was read at `arrival`.
    pub(super) fn new(state: &'a ApiState, target: &'a Target, arrival: Nanos) -> Self {
        let key = target.key();
        let outlook = state.front.outlook(&key, arrival);
        let lag = super::lag::current();
        let deadline = arrival
            .saturating_add(target.spec().slo)
            .saturating_sub(outlook.expected.respond + lag);
        let ahead = state.front.pending(&key);
        Self {
            state,
            target,
            key,
            arrival,
            outlook,
            deadline,
            lag,
            ahead,
            holding: AtomicBool::new(false),
            tally: Tally::new(),
        }
    }

    /// Counts this request among those let through and not yet with the controller.
    fn hold(&self) {
        if !self.holding.swap(true, Ordering::Relaxed) {
            self.ahead.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// No longer one of them: handed to the controller, or never will be.
    fn release(&self) {
        if self.holding.swap(false, Ordering::Relaxed) {
            self.ahead.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn refuse(&self, stage: Stage, retry_after: Nanos) -> ApiError {
        self.state.metrics.refused_at_edge(&self.key, stage);
        self.trace("refused at the edge", stage.as_str(), None);
        // A body that did not come in time is the client's pace, not the server's
        // capacity: counted, a hundred stalled uploads would shed everyone else's
        // requests to the model (`tests/serve_access.rs`, under a busy machine).
        if stage == Stage::Decoding {
            let now = self.state.clock.now();
            self.state.front.refused_after_reading(&self.key, now);
        }
        ApiError::Early {
            model: self.target.spec().name.clone(),
            stage,
            retry_after_s: retry_after.div_ceil(1_000_000_000).max(1),
        }
    }

    /// The answer was not there by the deadline: its batch ran (or its answer came back)
    /// later than planned.
    fn overran(&self) -> ApiError {
        ApiError::Overran {
            model: self.target.spec().name.clone(),
        }
    }

    /// A debug line (`api::trace`) with the request's times, where it ended.
    fn trace(&self, what: &str, stage: &str, submitted: Option<Nanos>) {
        if super::trace::enabled() {
            let times = (self.arrival, submitted, self.deadline);
            super::trace::front(what, stage, times, self.state.clock.now(), &self.outlook);
        }
    }

    /// Records the time a phase took since `started`; answers when it ended (now).
    pub(super) fn took(&self, phase: Phase, started: Nanos) -> Nanos {
        let now = self.state.clock.now();
        self.record(phase, now.saturating_sub(started), now);
        now
    }

    /// Learns and shows the time a phase took, measured at `now` (the caller's own clock
    /// reading: on some virtual machines each read is a system call, and a request's
    /// path read the clock fourteen times).
    fn record(&self, phase: Phase, took: Nanos, now: Nanos) {
        self.record_each(&[(phase, took)], now);
    }

    /// [`Front::record`] of phases that ended together, learned under one lock.
    fn record_each(&self, measured: &[(Phase, Nanos)], now: Nanos) {
        self.state.front.observe_each(&self.key, measured, now);
        self.state.metrics.front(&self.key, measured);
    }

    /// The controller's last view of the model (a pipeline's first stage), as it is now.
    fn view(&self) -> Option<ModelView> {
        self.target.view().and_then(|m| self.state.admission.get(m))
    }

    /// Refuses, from the controller's last view of the model (a pipeline's first stage),
    /// a request it cannot serve by the model's (the pipeline's) deadline; answers the
    /// clock reading it judged at, where reading the body starts.
    pub(super) fn admit_before_reading(&self, body: Body) -> Result<Nanos, ApiError> {
        let now = self.state.clock.now();
        // The best recent times as read at arrival, microseconds ago.
        let e = self.outlook.least;
        let view = self.view();
        // The decoders' backlog now, not only the best recent wait: a request behind a
        // queue of bodies it cannot pass in time is refused before its body is read.
        let wait = e.wait.max(self.state.decoders.expected_wait());
        // A body that does not come with its head makes the worker get to the request
        // again to read it: its lag counts here too (and for the way back, in `deadline`).
        let reading_lag = if body.with_head() { 0 } else { self.lag };
        let ahead = e.read + wait + e.decode + reading_lag;
        if self.lag > 0 && now.saturating_add(ahead) > self.deadline {
            // The front end alone cannot make it, whatever the devices' backlog.
            return Err(self.refuse(Stage::FrontEndBehind, self.lag));
        }
        // Behind the requests already let through that the policy cannot see yet.
        let view = view.map(|v| v.behind(self.ahead.load(Ordering::Relaxed), now));
        let due = Due {
            arrival: self.arrival,
            deadline: self.deadline,
        };
        match judge(view.as_ref(), now, ahead, due) {
            Admission::Admit if self.state.front.shed(&self.key, now) => {
                Err(self.refuse(Stage::Throttled, 0))
            }
            Admission::Admit => {
                self.hold();
                Ok(now)
            }
            Admission::Refuse { retry_after } => {
                Err(self.refuse(Stage::BeforeReading, retry_after))
            }
        }
    }

    /// When reading has become hopeless: the deadline less the best recent decoding, as
    /// the check before reading judges (`least`). Not the estimate: one slow decoding (a
    /// stall of the front-end core) sets a high percentile of the window, and the
    /// requests it then refused on the spot were never decoded, so never brought it
    /// down; a second of refusals until it was forgotten (`tests/api_edge.rs::
    /// one_slow_decoding_does_not_refuse_the_requests_after_it`). A request whose
    /// decoding does take longer reaches the policy with less time, which judges it then.
    /// Waiting for a decoder has a cut-off of its own (`Outlook::decode_start_by`).
    fn hopeless_after(&self) -> Nanos {
        self.deadline.saturating_sub(self.outlook.least.decode)
    }

    /// Reads the body (of `declared` length, if its head says) from `started` (the
    /// caller's last clock reading, taken just before), giving up when the rest could no
    /// longer be done in time; answers it with the clock reading at its end.
    pub(super) async fn read(
        &self,
        body: web::Payload,
        declared: Option<u64>,
        started: Nanos,
    ) -> Result<(web::Bytes, Nanos), ApiError> {
        let limit = self.state.settings.max_body_bytes;
        let until = self.hopeless_after();
        // A timer at the instant itself: no clock read for the slack (see `record`).
        let until = self.state.clock.instant(until);
        let read = super::soon::by(until, edge::collect(body, declared, limit)).await;
        let Some(read) = read else {
            return Err(self.refuse(Stage::Reading, 0));
        };
        let bytes = read.map_err(|e| match e {
            edge::Collect::TooLarge => ApiError::PayloadTooLarge { limit },
            edge::Collect::Broken(e) => ApiError::InvalidBody(e),
        })?;
        let read = self.took(Phase::Read, started);
        Ok((bytes, read))
    }

    /// Decodes the request on the bounded pool (inline if `small`), unless no decoder is
    /// free within its slack; `job` turns the protocol's request into tensors against
    /// the target's spec. `started` is the caller's last clock reading (the end of the
    /// read), taken just before: each phase starts where the last one ended.
    pub(super) async fn decode(
        &self,
        small: bool,
        started: Nanos,
        job: impl FnOnce(&ModelSpec) -> Result<Decoded, ApiError> + Send + 'static,
    ) -> Result<Decoded, ApiError> {
        let single = self.view().map_or(0, |v| v.single);
        let until = self.outlook.decode_start_by(self.deadline, single);
        // From the clock reading just taken, not a new one.
        let clock = self.state.clock;
        let slack = clock
            .instant(until)
            .saturating_duration_since(clock.instant(started));
        let target = self.target.clone();
        let state = self.state;
        let job = move || {
            let begun = clock.now();
            (begun, job(target.spec()))
        };
        let work = self.outlook.decode_work();
        let (begun, decoded) = match state.decoders.run(slack, small, work, job).await {
            Ok(done) => done,
            Err(PoolError::Crashed) => {
                return Err(ApiError::InvalidBody("the decoder failed".into()))
            }
            Err(PoolError::Full(_) | PoolError::NoSlack) => {
                return Err(self.refuse(Stage::Decoding, 0))
            }
        };
        let done = state.clock.now();
        let waited = begun.saturating_sub(started);
        let measured = [
            (Phase::Wait, waited),
            (Phase::Decode, done.saturating_sub(begun)),
        ];
        self.record_each(&measured, done);
        decoded
    }

    /// The one call every protocol makes of a decoded request: a [`Submit`] to the
    /// controller or a pipeline's root request, with the arrival and the way back; then
    /// the answer encoded by `encode`, the way back learned, lateness and latency counted.
    /// An encoding that fails (an output that does not fit the region it was placed in)
    /// is the request's error.
    pub(super) async fn answer<R>(
        &self,
        mut decoded: Decoded,
        encode: impl FnOnce(&ModelSpec, &Decoded, Answer) -> Result<R, ApiError>,
    ) -> Result<Delivered<R>, ApiError> {
        let slo = decoded.slo.unwrap_or(self.target.spec().slo);
        let edge = Edge {
            arrival: self.arrival,
            reserve: self.outlook.expected.respond + self.lag,
        };
        let submitted = super::trace::enabled().then(|| self.state.clock.now());
        // From here the controller has it (its view counts it after its next step).
        self.release();
        let inputs = std::mem::take(&mut decoded.inputs);
        let (items, slo_asked) = (decoded.batched.items, decoded.slo);
        let tally = self.tally.clone();
        let call = async {
            match self.target {
                Target::Model(entry) => {
                    submit::call(self.state, entry, inputs, items, slo_asked, edge, tally).await
                }
                Target::Pipeline { served, .. } => {
                    pipelines::call(self.state, served, inputs, items, slo_asked, edge, tally).await
                }
            }
        };
        // The answer is due by the deadline, whatever the run took: past it (less the
        // encoding, at most the best recent way back, which includes it, and the
        // worker's own delay), the request is refused then, and outputs that come later
        // are dropped (see `ApiError::Overran`).
        let due = self
            .arrival
            .saturating_add(slo)
            .saturating_sub(self.outlook.least.respond + GUARD_LEAD);
        let clock = self.state.clock;
        // A request whose objective is over before it is even submitted (a few
        // microseconds) is the controller's to refuse, at once and by its real reason;
        // and a server configured to answer late waits.
        let answer = if self.state.settings.answer_late || due <= clock.now() {
            call.await
        } else {
            by_due(clock, due, call)
                .await
                .unwrap_or_else(|| Err(self.overran()))
        };
        // This is the answer the client gets (an encoding that fails is its error): the
        // front end counts it (here for a success, `Metrics::api_error` for an error),
        // not the controller's outcome, which may differ (`overran`).
        self.tally.by_front();
        let answer = answer.inspect_err(|error| {
            if error.kind().is_refusal() {
                self.trace("refused after decoding", error.kind().as_str(), submitted);
                let now = self.state.clock.now();
                self.state.front.refused_after_reading(&self.key, now);
            }
        })?;
        let (ended, exec) = (answer.ended, answer.exec);
        let response = encode(self.target.spec(), &decoded, answer)?;
        let done = self.took(Phase::Respond, ended);
        let late = done > self.arrival.saturating_add(slo);
        if late {
            self.state.metrics.late_at_edge(&self.key);
            self.trace("late at the edge", "respond", submitted);
        }
        let took = done.saturating_sub(self.arrival);
        let outcome = if late { Outcome::Late } else { Outcome::Ok };
        self.state
            .metrics
            .delivered(&self.key, took, outcome, items);
        Ok(Delivered {
            response,
            took,
            exec,
        })
    }
}

impl Drop for Front<'_> {
    /// A request that never reached the controller (refused at reading or decoding, or
    /// its client gone) is no longer ahead of anyone; one the controller has and whose
    /// client left before its answer is counted by the controller's outcome.
    fn drop(&mut self) {
        self.release();
        self.tally.left();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::MS;

    /// Runs `by_due` with a due time of 10.5 ms on a paused clock, for a call that ends at
    /// `ready` (ms) with `outcome`.
    async fn wait(ready: f64, outcome: Result<(), ApiError>) -> Option<Result<(), ApiError>> {
        let clock = Clock::start();
        let ready = clock.instant((ready * MS as f64) as Nanos);
        let call = async move {
            tokio::time::sleep_until(ready).await;
            outcome
        };
        by_due(clock, 10 * MS + MS / 2, call).await
    }

    fn refusal() -> ApiError {
        ApiError::UnknownModel("m".into())
    }

    /// Mutation that breaks it: the check of the clock after the wait left out (the answer
    /// that came in at 10.8 ms, before the timer's tick at 11 ms, is served).
    #[tokio::test(start_paused = true)]
    async fn an_answer_after_its_due_time_is_past_it_even_before_the_timer_fires() {
        assert!(matches!(wait(0.0, Ok(())).await, Some(Ok(()))));
        assert!(wait(10.8, Ok(())).await.is_none(), "came in after 10.5 ms");
        assert!(wait(30.0, Ok(())).await.is_none());
        // Any error keeps its own kind (the controller's refusal, by its reason).
        let kept = wait(10.8, Err(refusal())).await;
        assert!(
            matches!(kept, Some(Err(ApiError::UnknownModel(_)))),
            "{kept:?}"
        );
    }
}
