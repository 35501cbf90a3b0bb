//! The one vocabulary of request outcomes: every answer a request can get, from a success
//! to each kind of error, with its stable snake_case name.
//!
//! The name is the HTTP answer's `error_type`, the label of the metrics, the key of the
//! reports and what the load generator reads back, so all of them come from here. What an
//! outcome means for a consumer (a success, a refusal, decided after admission) is answered
//! here too, so no consumer re-derives it from names. This is a ground module: it uses
//! nothing else of the crate.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Declares [`Outcome`], its names and [`Outcome::ALL`] from one table, so that a variant
/// cannot lack a name or be missing from the list.
macro_rules! outcomes {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// How a request was answered. Serialised as its name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Outcome {
            $($(#[$doc])* $variant,)*
        }

        impl Outcome {
            /// Every outcome, in declaration order.
            pub const ALL: &'static [Outcome] = &[$(Outcome::$variant,)*];

            /// The stable name: `error_type`, metric label and report key.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Outcome::$variant => $name,)*
                }
            }
        }
    };
}

outcomes! {
    /// Outputs, answered by the deadline.
    Ok = "ok",
    /// Outputs, answered after the deadline (the estimates were wrong).
    Late = "late",
    /// Refused by the policy: when it could start, it could no longer finish in time.
    DeadlineUnreachable = "deadline_unreachable",
    /// Refused by the policy: it waited until no device could finish it in time.
    TimedOut = "timed_out",
    /// Refused at its deadline by the front end: the batch that carried it (or its answer's
    /// way back) took longer than planned, so its outputs were not ready in time and are
    /// dropped when they come.
    Overran = "overran",
    /// Withdrawn while queued: it was a pipeline's sub-request and its root was already
    /// answered with a refusal, so it uses no device time.
    Withdrawn = "withdrawn",
    /// Refused before admission: the server is draining.
    ShuttingDown = "shutting_down",
    /// No model of that name.
    UnknownModel = "unknown_model",
    /// The model exists but serves another version.
    UnknownVersion = "unknown_version",
    /// The model was unloaded through the repository API.
    ModelUnavailable = "model_unavailable",
    /// A repository load of a model that cannot be served.
    LoadFailed = "load_failed",
    /// No such route.
    NotFound = "not_found",
    /// Its tensors do not fit the model (or a request parameter is wrong).
    BadInput = "bad_input",
    /// The body (or its JSON header) is not a valid request.
    InvalidJson = "invalid_json",
    /// Triton's binary tensor sections do not add up.
    InvalidBinary = "invalid_binary",
    /// The body could not be read.
    InvalidBody = "invalid_body",
    /// The body exceeds the configured limit.
    PayloadTooLarge = "payload_too_large",
    /// The route needs a bearer token and the request has none.
    Unauthorized = "unauthorized",
    /// The request's bearer token is not one the route accepts.
    Forbidden = "forbidden",
    /// The device failed the batch it ran in.
    ExecutionFailed = "execution_failed",
}

/// The broad kind of an outcome, for consumers that count by kind. Matching on it is
/// exhaustive, so a new class is a compile error wherever it is not handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Outputs, by the deadline.
    InTime,
    /// Outputs, after the deadline.
    Late,
    /// A valid request the server declined to run: its objective could not be met, the
    /// server is draining, or its model is unloaded.
    Refused,
    /// The request itself was wrong: what it names does not exist or its body is invalid.
    Rejected,
    /// The server tried and failed.
    Failed,
}

impl Outcome {
    /// Its broad kind.
    pub fn class(self) -> Class {
        use Outcome::*;
        match self {
            Ok => Class::InTime,
            Late => Class::Late,
            DeadlineUnreachable | TimedOut | Overran | Withdrawn | ShuttingDown
            | ModelUnavailable => Class::Refused,
            UnknownModel | UnknownVersion | LoadFailed | NotFound | BadInput | InvalidJson
            | InvalidBinary | InvalidBody | PayloadTooLarge | Unauthorized | Forbidden => {
                Class::Rejected
            }
            ExecutionFailed => Class::Failed,
        }
    }

    /// Whether the request got outputs (in time or late).
    pub fn is_success(self) -> bool {
        matches!(self.class(), Class::InTime | Class::Late)
    }

    /// Whether the server declined a valid request.
    pub fn is_refusal(self) -> bool {
        self.class() == Class::Refused
    }

    /// Whether only the policy decides it, after the controller admitted the request: the
    /// controller publishes these (and only these) as events.
    pub fn after_admission(self) -> bool {
        use Outcome::*;
        match self {
            Ok | Late | DeadlineUnreachable | TimedOut | Withdrawn | ExecutionFailed => true,
            Overran | ShuttingDown | UnknownModel | UnknownVersion | ModelUnavailable
            | LoadFailed | NotFound | BadInput | InvalidJson | InvalidBinary | InvalidBody
            | PayloadTooLarge | Unauthorized | Forbidden => false,
        }
    }
}

/// A name that is no [`Outcome`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown outcome '{0}'")]
pub struct UnknownOutcome(pub String);

impl FromStr for Outcome {
    type Err = UnknownOutcome;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Outcome::ALL
            .iter()
            .copied()
            .find(|o| o.as_str() == name)
            .ok_or_else(|| UnknownOutcome(name.to_owned()))
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Outcome {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Outcome {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_distinct_and_parses_back() {
        let mut names: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Outcome::ALL.len());
        for &outcome in Outcome::ALL {
            assert_eq!(outcome.as_str().parse::<Outcome>(), Ok(outcome));
            assert_eq!(outcome.to_string(), outcome.as_str());
            let json = serde_json::to_string(&outcome).unwrap();
            assert_eq!(json, format!("\"{}\"", outcome.as_str()));
            assert_eq!(serde_json::from_str::<Outcome>(&json).unwrap(), outcome);
        }
    }

    #[test]
    fn an_unknown_name_is_named_in_the_error() {
        let error = "http_error".parse::<Outcome>().unwrap_err();
        assert_eq!(error, UnknownOutcome("http_error".into()));
        assert!(error.to_string().contains("'http_error'"));
        assert!(serde_json::from_str::<Outcome>("\"Ok\"").is_err());
    }

    #[test]
    fn classes_agree_with_the_helpers() {
        let successes: Vec<Outcome> = Outcome::ALL
            .iter()
            .copied()
            .filter(|o| o.is_success())
            .collect();
        assert_eq!(successes, [Outcome::Ok, Outcome::Late]);
        let refusals: Vec<Outcome> = Outcome::ALL
            .iter()
            .copied()
            .filter(|o| o.is_refusal())
            .collect();
        assert_eq!(
            refusals,
            [
                Outcome::DeadlineUnreachable,
                Outcome::TimedOut,
                Outcome::Overran,
                Outcome::Withdrawn,
                Outcome::ShuttingDown,
                Outcome::ModelUnavailable
            ]
        );
        // Decided after admission: the successes, the policy's refusals and failures.
        for &outcome in Outcome::ALL {
            let policy_refusal = matches!(
                outcome,
                Outcome::DeadlineUnreachable | Outcome::TimedOut | Outcome::Withdrawn
            );
            assert_eq!(
                outcome.after_admission(),
                outcome.is_success() || policy_refusal || outcome.class() == Class::Failed,
                "{outcome}"
            );
        }
    }
}
