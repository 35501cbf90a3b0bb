//! Debug log lines of the controller's events, for finding where a request's time went:
//! each batch's planned window and estimate, what the device measured of it, and each
//! request answered other than in time, with its arrival, answer and objective.
//!
//! Off unless the log filter enables this module at debug level
//! (`RUST_LOG=info,clockwork::api::trace=debug`): then one task subscribes to the
//! runtime's events, like the metrics do, and never sits on the request path. All times
//! are the runtime clock's, in microseconds, so lines can be joined by action and
//! compared with each other. Two other places log under the same target, so one filter
//! turns all of it on: the front end's refusals and late answers with their phase times
//! (`front.rs` through [`front`]) and each device job's wall time and the time its thread
//! waited for a core (`gpu/thread.rs`). `bench/edge/trace.py` reads them.

use tokio::sync::broadcast::{self, error::RecvError};

use super::edge::Outlook;
use crate::events::{ActionDone, ActionPlanned, Event, RequestAnswered};
use crate::outcome::Outcome;
use crate::protocol::ActionTag;
use crate::time::Nanos;

/// Whether the log filter wants these lines (one check, for callers elsewhere that
/// would read the clock only for them).
pub fn enabled() -> bool {
    tracing::enabled!(tracing::Level::DEBUG)
}

/// Starts the logging task if the filter enables it; otherwise subscribes to nothing.
pub fn start(events: &crate::events::EventBus) {
    if !enabled() {
        return;
    }
    let mut events: broadcast::Receiver<Event> = events.subscribe();
    actix_web::rt::spawn(async move {
        loop {
            match events.recv().await {
                Ok(event) => log(&event),
                Err(RecvError::Lagged(lost)) => tracing::debug!(lost, "trace lost events"),
                Err(RecvError::Closed) => break,
            }
        }
    });
}

/// A request the front end refused (`stage`: where) or answered late: its arrival, when
/// it was submitted to the controller (if it was), its deadline, `now`, and the front
/// end's estimates it was judged with.
pub fn front(
    what: &str,
    stage: &str,
    (arrival, submitted, deadline): (Nanos, Option<Nanos>, Nanos),
    now: Nanos,
    outlook: &Outlook,
) {
    let (e, least) = (outlook.expected, outlook.least);
    tracing::debug!(
        stage,
        arrival_us = us(arrival),
        now_us = us(now),
        deadline_us = us(deadline),
        submitted_us = submitted.map(us),
        read_us = us(e.read),
        decode_us = us(e.decode),
        respond_us = us(e.respond),
        least_read_us = us(least.read),
        least_decode_us = us(least.decode),
        "{what}"
    );
}

fn us(nanos: Nanos) -> u64 {
    nanos / 1_000
}

fn log(event: &Event) {
    match event {
        Event::ActionPlanned(e) if e.kind == ActionTag::Infer => planned(e),
        Event::ActionDone(e) if e.kind == ActionTag::Infer => done(e),
        Event::RequestAnswered(e) if e.outcome != Outcome::Ok => answered(e),
        _ => {}
    }
}

fn planned(e: &ActionPlanned) {
    tracing::debug!(
        action = e.action.0,
        model = e.model.0,
        batch = e.batch,
        earliest_us = us(e.earliest),
        latest_us = us(e.latest),
        expected_us = us(e.expected),
        "planned"
    );
}

fn done(e: &ActionDone) {
    let (begin, end, duration) = e
        .measured
        .as_ref()
        .map_or((0, 0, 0), |m| (m.begin, m.end, m.duration));
    tracing::debug!(
        action = e.action.0,
        model = e.model.0,
        batch = e.batch,
        expected_us = us(e.expected),
        begin_us = us(begin),
        end_us = us(end),
        measured_us = us(duration),
        error = e.error.as_ref().map(tracing::field::display),
        "done"
    );
}

fn answered(e: &RequestAnswered) {
    tracing::debug!(
        request = e.request.0,
        model = e.model.0,
        outcome = e.outcome.as_str(),
        arrival_us = us(e.arrival),
        answered_us = us(e.answered),
        slo_us = us(e.slo),
        batch = e.batch,
        "answered"
    );
}
