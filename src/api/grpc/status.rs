//! The gRPC status of each error: the one table from an [`Outcome`] to a [`Code`], as
//! `error::status_for` is for HTTP. The message is the error's own (a refusal names its
//! reason), and the outcome's name rides along in the `error-type` metadata, as
//! `error_type` does in an HTTP error body.

use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

use super::super::error::ApiError;
use crate::outcome::Outcome;

/// The metadata key that names the outcome of a failed call.
pub const ERROR_TYPE: &str = "error-type";

/// The gRPC code of each outcome.
pub fn code_for(outcome: Outcome) -> Code {
    use Outcome::*;
    match outcome {
        Ok | Late => Code::Ok,
        BadInput | InvalidJson | InvalidBinary | InvalidBody | LoadFailed => Code::InvalidArgument,
        UnknownModel | UnknownVersion | NotFound => Code::NotFound,
        PayloadTooLarge => Code::ResourceExhausted,
        Unauthorized => Code::Unauthenticated,
        Forbidden => Code::PermissionDenied,
        ExecutionFailed => Code::Internal,
        // Refusals: the server could not answer in time now; trying later may work.
        DeadlineUnreachable | TimedOut | Overran | Withdrawn | ShuttingDown | ModelUnavailable => {
            Code::Unavailable
        }
    }
}

/// An API error as a gRPC status.
pub fn status(error: &ApiError) -> Status {
    let kind = error.kind();
    let mut status = Status::new(code_for(kind), error.to_string());
    status
        .metadata_mut()
        .insert(ERROR_TYPE, MetadataValue::from_static(kind.as_str()));
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actors::messages::InferError;
    use crate::scheduler::Refusal;

    #[test]
    fn only_successes_are_ok_and_every_refusal_is_unavailable() {
        for &outcome in Outcome::ALL {
            let code = code_for(outcome);
            assert_eq!(code == Code::Ok, outcome.is_success(), "{outcome}");
            if outcome.is_refusal() {
                assert_eq!(code, Code::Unavailable, "{outcome}");
            }
        }
    }

    #[test]
    fn a_status_names_its_outcome_and_reason() {
        let refused = ApiError::from(InferError::Refused(Refusal::DeadlineUnreachable));
        let status = status(&refused);
        assert_eq!(status.code(), Code::Unavailable);
        assert!(status.message().contains("latency objective"), "{status:?}");
        let kind = status
            .metadata()
            .get(ERROR_TYPE)
            .and_then(|v| v.to_str().ok());
        assert_eq!(kind, Some("deadline_unreachable"));
        let unknown = status_of_kind(ApiError::UnknownModel("m".into()));
        assert_eq!(unknown, Code::NotFound);
        assert_eq!(
            status_of_kind(ApiError::bad_input("x")),
            Code::InvalidArgument
        );
    }

    fn status_of_kind(error: ApiError) -> Code {
        status(&error).code()
    }
}
