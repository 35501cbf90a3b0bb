//! What one inference request came to at the load generator: an answer read (a success,
//! in time or late as the client timed it, or a refusal by its `error_type`), or no answer
//! and why. Both of the load generator's clients (`h1.rs`, and awc in `client.rs`) read
//! their answers here.

use std::time::Duration;

use awc::error::{ConnectError, SendRequestError};

use crate::outcome::Outcome;
use crate::report::Answered;

/// Label of an answer the client could not read at all (connection, timeout, body).
pub const NO_ANSWER: &str = "http_error";

/// Why the client got no answer it could read: counted apart from the server's
/// refusals, since none of them is one (a client that cannot keep up with its own
/// arrivals must not make the server look slow or look like it refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoAnswer {
    /// The request's client-side timeout passed before its answer came.
    Timeout,
    /// No connection could be made (refused, reset while connecting, out of ports).
    Connect,
    /// The arrival found `max_in_flight` requests outstanding: never sent, so that the
    /// client's own queue does not stand in for the server's latency.
    Overflow,
    /// Anything else: the request could not be written or its answer read.
    Other,
}

impl NoAnswer {
    /// Its name in reports' `errors`.
    pub fn as_str(self) -> &'static str {
        match self {
            NoAnswer::Timeout => "client_timeout",
            NoAnswer::Connect => "connect_failed",
            NoAnswer::Overflow => "client_overflow",
            NoAnswer::Other => NO_ANSWER,
        }
    }

    pub(super) fn of(error: &SendRequestError) -> Self {
        match error {
            SendRequestError::Timeout => NoAnswer::Timeout,
            SendRequestError::Connect(ConnectError::Timeout) => NoAnswer::Timeout,
            SendRequestError::Connect(_) => NoAnswer::Connect,
            _ => NoAnswer::Other,
        }
    }
}

/// How one request ended, as the client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sent {
    /// The server answered: a success (in time or late) or a documented `error_type`.
    Answered(Outcome),
    /// An error answer whose `error_type` this build does not know, named as received.
    UnknownKind(String),
    /// No answer the client could read, and why.
    NoAnswer(NoAnswer),
}

impl From<Sent> for Answered {
    fn from(sent: Sent) -> Self {
        match sent {
            Sent::Answered(outcome) => Answered::Known(outcome),
            Sent::UnknownKind(kind) => {
                Answered::Unrecognised(format!("unknown error_type '{kind}'"))
            }
            Sent::NoAnswer(why) => Answered::Unrecognised(why.as_str().to_owned()),
        }
    }
}

/// The outcome an error answer names in its `error_type`.
fn error_kind(json: &[u8]) -> Sent {
    let kind = head(json).error_type.unwrap_or_default();
    match kind.parse::<Outcome>() {
        // A success named as an error would be a server bug: keep it visible.
        Ok(outcome) if !outcome.is_success() => Sent::Answered(outcome),
        _ => Sent::UnknownKind(kind.into_owned()),
    }
}

/// What one request came to at the client: how it ended and, where the answer said
/// (`Server-Timing: edge;dur=`), how long the server held it, in microseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub sent: Sent,
    /// The server's own time for it (`None`: no answer, or no readable header).
    pub server_us: Option<u64>,
}

impl Reply {
    /// No answer, and why.
    pub(super) fn none(why: NoAnswer) -> Self {
        Reply {
            sent: Sent::NoAnswer(why),
            server_us: None,
        }
    }

    /// An answer read whole: its status, its JSON part, its `Server-Timing`, and how long
    /// it took from sending to read.
    pub(super) fn read(success: bool, json: &[u8], timing: Option<&str>, took: Duration) -> Self {
        let sent = if success {
            self::success(json, took)
        } else {
            error_kind(json)
        };
        let server_us = timing.and_then(super::timing::edge_micros);
        Reply { sent, server_us }
    }
}

/// The header the server names its own time in.
pub(super) const SERVER_TIMING: &str = "server-timing";

/// The parts of an answer's JSON the client reads (a typed read: building a whole
/// `serde_json::Value` of every answer cost the load generator more than it needed).
#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct AnswerHead<'a> {
    #[serde(borrow)]
    error_type: Option<std::borrow::Cow<'a, str>>,
    parameters: AnswerParameters,
}

#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct AnswerParameters {
    late: Option<bool>,
    slo_ms: Option<f64>,
}

fn head(json: &[u8]) -> AnswerHead<'_> {
    serde_json::from_slice(json).unwrap_or_default()
}

/// A success's outcome as the client saw it: late if the server says so, or if it came
/// after its objective (`slo_ms`, which the answer names) as timed here, from sending to
/// the whole answer read: a request that waited in the network or in this client was
/// still late for whoever sent it.
fn success(json: &[u8], took: Duration) -> Sent {
    let parameters = head(json).parameters;
    let objective = parameters.slo_ms.map(|ms| ms / 1e3);
    let late_here = objective.is_some_and(|slo| took.as_secs_f64() > slo);
    Sent::Answered(match parameters.late {
        Some(true) => Outcome::Late,
        _ if late_here => Outcome::Late,
        _ => Outcome::Ok,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Mutation that breaks it: `late_here` left out (a success the client waited 10 s
    /// for counted in time, as the overload bench's did).
    #[test]
    fn a_success_is_late_if_it_came_after_its_objective_at_the_client() {
        let answer = |late: bool| {
            let outputs = json!([{"name": "y", "shape": [1, 10], "datatype": "FP32"}]);
            json!({"model_name": "m", "outputs": outputs,
                   "parameters": {"late": late, "slo_ms": 100.0, "batch_size": 2}})
            .to_string()
        };
        let ms = Duration::from_millis;
        let success = |json: &str, took| success(json.as_bytes(), took);
        assert_eq!(success(&answer(false), ms(99)), Sent::Answered(Outcome::Ok));
        assert_eq!(
            success(&answer(false), ms(101)),
            Sent::Answered(Outcome::Late)
        );
        assert_eq!(
            success(&answer(true), ms(1)),
            Sent::Answered(Outcome::Late),
            "the server's word"
        );
        assert_eq!(
            success("{}", ms(5_000)),
            Sent::Answered(Outcome::Ok),
            "no objective named"
        );
    }

    #[test]
    fn error_types_are_read_as_outcomes_and_unknown_ones_kept_by_name() {
        let json = |kind: &str| json!({"error": "x", "error_type": kind}).to_string();
        let answer = |kind: &str| json(kind).into_bytes();
        assert_eq!(error_kind(b"not json"), Sent::UnknownKind(String::new()));
        assert_eq!(
            error_kind(&answer("load_failed")),
            Sent::Answered(Outcome::LoadFailed)
        );
        assert_eq!(
            error_kind(&answer("timed_out")),
            Sent::Answered(Outcome::TimedOut)
        );
        assert_eq!(
            error_kind(&answer("brand_new")),
            Sent::UnknownKind("brand_new".into())
        );
        assert_eq!(error_kind(&answer("ok")), Sent::UnknownKind("ok".into()));
        assert_eq!(
            Answered::from(Sent::UnknownKind("brand_new".into())),
            Answered::Unrecognised("unknown error_type 'brand_new'".into())
        );
    }
}
