//! The front end's share of a request's time: where it starts and what it costs.
//!
//! A request's time starts when its head is parsed ([`stamp`], before routing and before
//! the body is read), not when the controller admits it. The front end's own work
//! (reading the body, waiting for a decoder, decoding, encoding the answer) is measured per
//! model or pipeline ([`FrontKey`]) and phase ([`FrontTimes`]) and learned like any other estimate, so that the edge
//! can refuse before reading and the policy can finish early enough for the encoding.
//! Decoding runs on the `DecodePool` (`decode.rs`).
//!
//! A request refused before its body is read is answered at once; [`discard`] first
//! takes a small body already on its way, so that the connection can carry the client's
//! next request (an unread body makes actix close it after the answer, and a client then
//! pays a new connection for every refusal: at ten times capacity, that reconnecting was
//! most of the front end's and the client's work).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use actix_web::dev::{Service, ServiceRequest, ServiceResponse};
use actix_web::http::header::CONTENT_LENGTH;
use actix_web::{web, HttpMessage, HttpRequest};

use super::shed::Throttle;
use crate::model::ModelId;
use crate::scheduler::Estimator;
use crate::time::{Clock, Nanos};

/// When a request's head was parsed, in the runtime clock; its deadline counts from here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival(pub Nanos);

/// Middleware body: stamps every request's [`Arrival`] before anything else runs.
pub fn stamp<S, B>(
    clock: Clock,
    request: ServiceRequest,
    service: &S,
) -> impl Future<Output = Result<ServiceResponse<B>, actix_web::Error>>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error>,
{
    request.extensions_mut().insert(Arrival(clock.now()));
    service.call(request)
}

/// The request's arrival; a request that bypassed the middleware arrives now.
pub fn arrival(request: &HttpRequest, clock: &Clock) -> Nanos {
    let stamped = request.extensions().get::<Arrival>().copied();
    stamped.map_or_else(|| clock.now(), |a| a.0)
}

/// A refused request's body is taken and dropped (keeping its connection open) only if
/// it declares at most this many bytes and comes within [`DISCARD_WAIT`]: about what a
/// 10 Gb/s link carries in that time (a client that sends head and body together has sent
/// it by then; squeezenet's 602 KB binary and 1.4 MB JSON bodies came within it on the
/// loopback); a larger body could not. A larger or slower one is never read: the answer
/// goes at once (or after the wait) and the connection closes after it. Closing was the
/// cheaper answer only for the server: the client's next request then opened a
/// connection, which under overload cost an open-loop client on a core of its own 1-16 ms
/// before its head went out, and more than half of the answers late at that client
/// (docs/EXPERIMENTS.md, "A refusal keeps its connection"); and the closed connection's
/// body was read anyway, by actix's lingering close, for as long as the client sent it.
pub const DISCARD_BYTES: u64 = 2 << 20;

/// How long a refusal waits for such a body before it is answered anyway (and its
/// connection closed): a client that sent the head alone, or sends slowly, does not delay
/// its refusal longer.
pub const DISCARD_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

/// After a refusal before reading: takes and drops the body if it declares at most
/// [`DISCARD_BYTES`] and comes within [`DISCARD_WAIT`], so the connection stays open;
/// else leaves it unread (the connection closes after the answer). Nothing is decoded,
/// nor gathered: each chunk is dropped as it comes (collecting the body into one buffer
/// first cost an allocation and a copy of up to 64 KiB per refusal, for nothing).
pub async fn discard(request: &HttpRequest, body: web::Payload) {
    let Some(length) = declared(request).filter(|&n| n > 0 && n <= DISCARD_BYTES) else {
        return;
    };
    // Whatever happens (too slow, too long, broken), the refusal is answered next. The
    // body is usually fed right after this handler is first polled: no timer for it.
    let until = tokio::time::Instant::now() + DISCARD_WAIT;
    let _ = super::soon::by(until, drain(body, length)).await;
}

/// The body's length as its `Content-Length` declares it, if it does.
pub fn declared(request: &HttpRequest) -> Option<u64> {
    request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
}

/// The most a body's buffer takes at once on its declared length: a client may declare
/// up to `max_body_bytes` and send nothing, and the buffer of a body that is larger
/// still grows as it comes.
pub const RESERVE_AT_MOST: u64 = 4 << 20;

/// Why a body was not taken whole.
#[derive(Debug)]
pub enum Collect {
    /// More than the limit came.
    TooLarge,
    /// The connection broke, or its framing did.
    Broken(String),
}

/// Takes the whole body into one buffer, sized at once from its declared length (at most
/// `limit` and [`RESERVE_AT_MOST`]): a buffer grown chunk by chunk copied a large body
/// again at every doubling, a sixth of the HTTP worker's time under JSON load (perf of
/// the edge bench at twice capacity).
pub async fn collect(
    mut body: web::Payload,
    declared: Option<u64>,
    limit: usize,
) -> Result<bytes::Bytes, Collect> {
    use futures_util::StreamExt as _;
    let reserve = declared.map_or(0, |n| n.min(limit as u64).min(RESERVE_AT_MOST));
    let mut buffer = bytes::BytesMut::with_capacity(reserve as usize);
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| Collect::Broken(e.to_string()))?;
        if buffer.len() + chunk.len() > limit {
            return Err(Collect::TooLarge);
        }
        buffer.extend_from_slice(&chunk);
    }
    Ok(buffer.freeze())
}

/// Reads and drops `body` until it ends or more than `limit` bytes came.
async fn drain(mut body: web::Payload, limit: u64) {
    use futures_util::StreamExt as _;
    let mut taken = 0u64;
    while let Some(Ok(chunk)) = body.next().await {
        taken += chunk.len() as u64;
        if taken > limit {
            return;
        }
    }
}

/// The front end's phases, each measured and learned per model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Receiving the body.
    Read,
    /// Waiting for a decoder of the pool.
    Wait,
    /// Splitting, parsing, validating the body into tensors.
    Decode,
    /// From the end of its batch's execution to its answer serialised: the controller
    /// taking the report, the answer's way back to the HTTP worker (waiting for a core
    /// when the front end is busy), and the encoding. All of it comes after the device, so
    /// all of it is kept off the time the policy plans with.
    Respond,
}

impl Phase {
    pub const ALL: [Phase; 4] = [Phase::Read, Phase::Wait, Phase::Decode, Phase::Respond];

    /// Its name as a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Read => "read",
            Phase::Wait => "wait",
            Phase::Decode => "decode",
            Phase::Respond => "respond",
        }
    }
}

/// Where the front end refused a request on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Before reading the body: the model's backlog cannot finish it in time.
    BeforeReading,
    /// Its body came too slowly to leave time for the rest.
    Reading,
    /// Every decoder was busy past its slack, or too many requests were waiting.
    Decoding,
    /// Before reading: more of the model's requests were being let through than the
    /// server went on to accept (`shed::Throttle`).
    Throttled,
    /// Before reading: the worker serving the request is so far behind its own work (its
    /// lag, `lag.rs`) that the front end alone leaves no time, whatever the devices'
    /// backlog. Told apart from `BeforeReading` because the remedy differs: the front
    /// end needs cores (or its clients fewer on its cores), not the model more devices;
    /// under the zoo's burst, with the load generator on the front end's core, nineteen
    /// in twenty refusals at the edge were this (docs/RELIABILITY.md).
    FrontEndBehind,
}

impl Stage {
    /// Every stage, so a model's refusal series can start at zero.
    pub const ALL: [Stage; 5] = [
        Stage::BeforeReading,
        Stage::Reading,
        Stage::Decoding,
        Stage::Throttled,
        Stage::FrontEndBehind,
    ];

    /// Its name as a metric label and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::BeforeReading => "before_reading",
            Stage::Reading => "reading",
            Stage::Decoding => "decoding",
            Stage::Throttled => "throttled",
            Stage::FrontEndBehind => "front_end_behind",
        }
    }
}

/// Whose front-end times a request counts in: a model's, or a pipeline's (its body,
/// decoding and answer are the pipeline's, not its first stage's).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FrontKey {
    Model(ModelId),
    Pipeline(Arc<str>),
}

/// Measurements kept per model and phase: enough to follow a change of body size or load.
const WINDOW: usize = 100;
/// The estimate is this percentile of the window, as the policy's are.
const PERCENTILE: f64 = 99.0;

/// A model not measured for this long is judged as if new (optimistic zeros): what its
/// front end took under a past burst must not refuse its requests forever, since refused
/// requests are never measured again (the overload bench found exactly that: after a
/// 10x burst, the models with large bodies stayed refused at half load).
const FORGET_AFTER: Nanos = 1_000_000_000;

/// Learned front-end durations, per model or pipeline and phase.
#[derive(Default)]
pub struct FrontTimes {
    /// By model or pipeline; grows as they are seen.
    models: Mutex<HashMap<FrontKey, Learned>>,
    /// What the edge lets through before reading, against what is accepted after.
    throttles: Mutex<HashMap<FrontKey, Throttle>>,
    /// Requests let through before reading that the controller has not got yet, per
    /// model or pipeline (`ModelView::behind`); each request holds its count's handle.
    pending: Mutex<HashMap<FrontKey, Arc<AtomicU32>>>,
}

/// One model's (or pipeline's) phases, and when one was last measured.
struct Learned {
    /// By `Phase as usize`.
    phases: [Estimator; 4],
    /// The last measurement of any phase.
    at: Nanos,
}

/// What the front end expects a request of a model to cost, per phase.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expected {
    pub read: Nanos,
    pub wait: Nanos,
    pub decode: Nanos,
    pub respond: Nanos,
}

/// What the front end expects of a request, read once when its head arrives: the
/// estimates (its deadline's reserve for the way back, the slack of each step), the
/// best recent times (the check before reading) and the typical ones (the decoding work
/// it adds to the pool's queue). One read of the table, not one per use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outlook {
    /// Each phase's estimate ([`FrontTimes::expected`]).
    pub expected: Expected,
    /// Each phase's best case in the window ([`FrontTimes::least`]).
    pub least: Expected,
    /// Each phase's slowest time in the window but one (`Estimator::runner_up`): as
    /// high as the estimate (the window's p99) when the front end is slow for a while,
    /// but not set by one stall.
    pub but_one: Expected,
    /// Each phase's median in the window (`Estimator::median`): what a request typically
    /// takes, as the decoders' queue drains at (`DecodePool::expected_wait`).
    pub typical: Expected,
}

impl Outlook {
    /// The latest a request due at `deadline` may still start its decoding: after a
    /// decoding as slow as the slowest recent ones but one, the model's fastest run
    /// (`single`, its batch-1 estimate) must fit. Waiting for a decoder past it is
    /// hopeless.
    ///
    /// Not the estimate (the window's p99, its largest): one slow decoding (a stall of
    /// the front-end core) set it for the next hundred, and every request that then
    /// found the decoder busy at all was refused (`decoding`, in bursts, at a quarter of
    /// capacity; the same cascade as reading's, `Front::hopeless_after`). Nothing lower
    /// either: with a typical decoding (the mean, the 90th percentile) or the best one,
    /// requests past capacity waited longer, were decoded and then answered late or
    /// refused (docs/EXPERIMENTS.md, "One stall, one slow decoding").
    pub fn decode_start_by(&self, deadline: Nanos, single: Nanos) -> Nanos {
        deadline.saturating_sub(self.but_one.decode.saturating_add(single))
    }

    /// What a request's decoding adds to the decoders' backlog while it waits
    /// (`DecodePool::expected_wait`): its model's typical decoding, the pace the queue
    /// drains at. Not the best one (past capacity the backlog was then counted at less
    /// than half the time the decoders took to drain it), nor the mean or a high
    /// percentile, which one stall moves for the window.
    pub fn decode_work(&self) -> Nanos {
        self.typical.decode
    }
}

impl Learned {
    /// No measurement for [`FORGET_AFTER`] before `now`: back to the optimistic zeros.
    fn forget_if_stale(&mut self, now: Nanos) {
        if now.saturating_sub(self.at) > FORGET_AFTER {
            for phase in &mut self.phases {
                phase.reseed(0);
            }
        }
    }

    /// `read` of each phase's estimator.
    fn each_phase(&self, read: impl Fn(&Estimator) -> Nanos) -> Expected {
        let p = &self.phases;
        Expected {
            read: read(&p[Phase::Read as usize]),
            wait: read(&p[Phase::Wait as usize]),
            decode: read(&p[Phase::Decode as usize]),
            respond: read(&p[Phase::Respond as usize]),
        }
    }
}

impl FrontTimes {
    /// Adds a measurement of `phase` for `key`, made at `now`.
    pub fn observe(&self, key: &FrontKey, phase: Phase, took: Nanos, now: Nanos) {
        self.observe_each(key, &[(phase, took)], now);
    }

    /// Adds measurements of several phases for `key`, made at `now`, under one lock (a
    /// request's wait and decoding end together).
    pub fn observe_each(&self, key: &FrontKey, measured: &[(Phase, Nanos)], now: Nanos) {
        let mut models = self.models.lock().unwrap_or_else(|e| e.into_inner());
        let learned = models.entry(key.clone()).or_insert_with(|| Learned {
            // Unknown until measured: an optimistic zero, replaced by the first measurement.
            phases: std::array::from_fn(|_| Estimator::new(0, WINDOW, PERCENTILE)),
            at: now,
        });
        for &(phase, took) in measured {
            learned.phases[phase as usize].observe(took);
        }
        learned.at = learned.at.max(now);
    }

    /// Judges a request of `key` that the admission view let through, at `now`: `true`
    /// to refuse it before reading (see `shed.rs`).
    pub fn shed(&self, key: &FrontKey, now: Nanos) -> bool {
        let mut throttles = self.throttles.lock().unwrap_or_else(|e| e.into_inner());
        throttles.entry(key.clone()).or_default().shed(now)
    }

    /// The count of `key`'s requests let through before reading and not yet handed to
    /// the controller (or refused after all).
    pub fn pending(&self, key: &FrontKey) -> Arc<AtomicU32> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.entry(key.clone()).or_default().clone()
    }

    /// A request of `key` let through before reading was refused after all, at `now`.
    pub fn refused_after_reading(&self, key: &FrontKey, now: Nanos) {
        let mut throttles = self.throttles.lock().unwrap_or_else(|e| e.into_inner());
        throttles.entry(key.clone()).or_default().refused(now);
    }

    /// The best case of each phase in the window: what the pre-read check and the cut-off
    /// of reading assume, so that they refuse only requests that are hopeless even if the
    /// front end is as quick as it has recently been (one slow read or decoding must not
    /// refuse the next hundred requests).
    pub fn least(&self, key: &FrontKey, now: Nanos) -> Expected {
        self.outlook(key, now).least
    }

    /// The current estimates for `key` (zeros before any measurement, or when none was
    /// made for [`FORGET_AFTER`]).
    pub fn expected(&self, key: &FrontKey, now: Nanos) -> Expected {
        self.outlook(key, now).expected
    }

    /// Both [`FrontTimes::expected`] and [`FrontTimes::least`] for `key` at `now`, under
    /// one lock.
    pub fn outlook(&self, key: &FrontKey, now: Nanos) -> Outlook {
        let mut models = self.models.lock().unwrap_or_else(|e| e.into_inner());
        let Some(m) = models.get_mut(key) else {
            return Outlook::default();
        };
        m.forget_if_stale(now);
        Outlook {
            expected: m.each_phase(Estimator::get),
            least: m.each_phase(Estimator::least),
            but_one: m.each_phase(Estimator::runner_up),
            typical: m.each_phase(Estimator::median),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M0: FrontKey = FrontKey::Model(ModelId(0));
    const M1: FrontKey = FrontKey::Model(ModelId(1));

    #[test]
    fn the_pre_read_check_sees_the_best_recent_times() {
        let times = FrontTimes::default();
        times.observe(&M0, Phase::Read, 7, 0);
        times.observe(&M0, Phase::Read, 50, 0);
        assert_eq!(times.expected(&M0, 0).read, 50, "the p99 sets the slack");
        assert_eq!(
            times.least(&M0, 0).read,
            7,
            "one slow read is not the best case"
        );
    }

    #[test]
    fn times_are_learned_per_model_or_pipeline_and_phase() {
        let times = FrontTimes::default();
        assert_eq!(
            times.expected(&FrontKey::Model(ModelId(3)), 0),
            Expected::default()
        );
        times.observe(&M1, Phase::Decode, 7, 0);
        times.observe(&M1, Phase::Respond, 2, 0);
        let e = times.expected(&M1, 0);
        assert_eq!((e.read, e.decode, e.respond), (0, 7, 2));
        assert_eq!(times.expected(&M0, 0), Expected::default());
        let pipeline = FrontKey::Pipeline("cascade".into());
        times.observe(&pipeline, Phase::Decode, 9, 0);
        assert_eq!(times.expected(&pipeline, 0).decode, 9);
        assert_eq!(
            times.expected(&M1, 0).decode,
            7,
            "a pipeline's times are its own"
        );
    }

    /// Mutation that breaks it: measurements given together learned as one (only the
    /// first, or only the last).
    #[test]
    fn phases_measured_together_are_each_learned() {
        let times = FrontTimes::default();
        let measured = [(Phase::Wait, 3), (Phase::Decode, 8)];
        times.observe_each(&M0, &measured, 0);
        let outlook = times.outlook(&M0, 0);
        assert_eq!((outlook.expected.wait, outlook.expected.decode), (3, 8));
        assert_eq!(outlook.least, outlook.expected, "one measurement each");
        assert_eq!(outlook.expected.read, 0);
    }

    /// Mutation that breaks it: the cut-off from the estimate (the p99, which the one
    /// slow decoding is), or without the model's run.
    #[test]
    fn one_slow_decoding_hardly_moves_the_wait_cut_off() {
        const MS: Nanos = 1_000_000;
        let times = FrontTimes::default();
        for _ in 0..WINDOW - 1 {
            times.observe(&M0, Phase::Decode, 4 * MS, 0);
        }
        times.observe(&M0, Phase::Decode, 200 * MS, 0);
        let outlook = times.outlook(&M0, 0);
        assert_eq!(outlook.expected.decode, 200 * MS, "the p99 is the outlier");
        let by = outlook.decode_start_by(100 * MS, 7 * MS);
        assert_eq!(by, 100 * MS - 4 * MS - 7 * MS);
        assert_eq!(outlook.decode_start_by(5 * MS, 7 * MS), 0, "none left");
        times.observe(&M0, Phase::Decode, 60 * MS, 0);
        let outlook = times.outlook(&M0, 0);
        let by = outlook.decode_start_by(100 * MS, 7 * MS);
        assert_eq!(
            by,
            100 * MS - 60 * MS - 7 * MS,
            "two slow ones: the front end is"
        );
    }

    /// Mutation that breaks it: `decode_work` the best decoding (as it was), or the mean
    /// (which the stall moves).
    #[test]
    fn a_decoding_weighs_in_the_backlog_at_its_typical_time() {
        const MS: Nanos = 1_000_000;
        let times = FrontTimes::default();
        for _ in 0..40 {
            times.observe(&M0, Phase::Decode, 2 * MS, 0);
        }
        for _ in 0..59 {
            times.observe(&M0, Phase::Decode, 5 * MS, 0);
        }
        times.observe(&M0, Phase::Decode, 300 * MS, 0);
        let outlook = times.outlook(&M0, 0);
        assert_eq!(outlook.least.decode, 2 * MS);
        assert_eq!(outlook.decode_work(), 5 * MS, "most decodings take 5 ms");
    }

    /// Mutation that breaks it: the reseed in `forget_if_stale` removed (the burst's times
    /// stay, and refuse the model's requests for good).
    #[test]
    fn times_not_measured_for_a_second_are_forgotten() {
        const S: Nanos = 1_000_000_000;
        let times = FrontTimes::default();
        times.observe(&M0, Phase::Respond, 3 * S, 0);
        times.observe(&M0, Phase::Read, 2 * S, S / 2);
        assert_eq!(times.expected(&M0, S).respond, 3 * S, "measured 0.5 s ago");
        assert_eq!(times.least(&M0, S).read, 2 * S);
        let later = S / 2 + FORGET_AFTER + 1;
        assert_eq!(times.expected(&M0, later), Expected::default());
        // Learned again from the next measurement.
        times.observe(&M0, Phase::Respond, 4, later);
        assert_eq!(times.expected(&M0, later).respond, 4);
    }
}
