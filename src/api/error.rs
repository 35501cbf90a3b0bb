//! The one error type of the HTTP API and how each error becomes a status code.
//!
//! Every error answers `{"error": "<message>", "error_type": "<kind>"}`. `kind()` is the
//! stable snake_case label used both as `error_type` and as a metric label, so a
//! dashboard and a client see the same names; the controller's own errors
//! ([`InferError`]) keep the kinds the controller gives them. The README lists every kind
//! with its status.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use utoipa::ToSchema;

use crate::actors::messages::InferError;
use crate::scheduler::Refusal;

/// Why a request got no success.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The controller's answer (refusals, bad input, failures).
    #[error("{}", describe(.0))]
    Infer(InferError),
    #[error("invalid JSON: {0}")]
    InvalidJson(String),
    #[error("invalid binary tensor data: {0}")]
    InvalidBinary(String),
    #[error("cannot read the request body: {0}")]
    InvalidBody(String),
    #[error("request body is larger than the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("unknown model '{0}'")]
    UnknownModel(String),
    #[error("model '{model}' has no version '{version}' (it serves version {served})")]
    UnknownVersion {
        model: String,
        version: String,
        served: String,
    },
    #[error("cannot load model '{model}': {reason}")]
    LoadFailed { model: String, reason: String },
    #[error("model '{0}' is unloaded; load it with POST /v2/repository/models/{0}/load")]
    ModelUnavailable(String),
    #[error("no route for {method} {path}")]
    NotFound { method: String, path: String },
}

/// Human message of a controller error, saying what the kind means.
fn describe(error: &InferError) -> String {
    match error {
        InferError::Refused(Refusal::DeadlineUnreachable) => {
            "refused: the request could not be finished within its latency objective".into()
        }
        InferError::Refused(Refusal::TimedOut) => {
            "refused: the request waited until no device could finish it within its latency objective".into()
        }
        InferError::Refused(Refusal::UnknownModel) => "refused: unknown model".into(),
        InferError::Refused(Refusal::ShuttingDown) => {
            "refused: the server is shutting down and admits no new requests".into()
        }
        other => other.to_string(),
    }
}

impl ApiError {
    /// A request whose tensors do not fit the model; same kind as the controller's check.
    pub fn bad_input(message: impl Into<String>) -> Self {
        ApiError::Infer(InferError::BadInput(message.into()))
    }

    /// Stable label: `error_type` in the body and the metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            ApiError::Infer(e) => e.kind(),
            ApiError::InvalidJson(_) => "invalid_json",
            ApiError::InvalidBinary(_) => "invalid_binary",
            ApiError::InvalidBody(_) => "invalid_body",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::UnknownModel(_) => "unknown_model",
            ApiError::UnknownVersion { .. } => "unknown_version",
            ApiError::ModelUnavailable(_) => "model_unavailable",
            ApiError::LoadFailed { .. } => "load_failed",
            ApiError::NotFound { .. } => "not_found",
        }
    }

    /// Whether the controller admitted the request before this error: such errors are
    /// already counted from its events.
    pub fn after_admission(&self) -> bool {
        matches!(
            self,
            ApiError::Infer(InferError::Failed(_))
                | ApiError::Infer(InferError::Refused(
                    Refusal::DeadlineUnreachable | Refusal::TimedOut
                ))
        )
    }
}

impl From<InferError> for ApiError {
    fn from(error: InferError) -> Self {
        ApiError::Infer(error)
    }
}

/// The body of every error answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong, naming the model, input or limit concerned.
    pub error: String,
    /// Stable label of the kind of error (see the README's table).
    pub error_type: String,
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::Infer(e) => match e {
                InferError::Refused(Refusal::UnknownModel) => StatusCode::NOT_FOUND,
                InferError::Refused(_) => StatusCode::SERVICE_UNAVAILABLE,
                InferError::BadInput(_) => StatusCode::BAD_REQUEST,
                InferError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
            },
            ApiError::InvalidJson(_)
            | ApiError::InvalidBinary(_)
            | ApiError::InvalidBody(_)
            | ApiError::LoadFailed { .. } => StatusCode::BAD_REQUEST,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnknownModel(_)
            | ApiError::UnknownVersion { .. }
            | ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::ModelUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn error_response(&self) -> HttpResponse {
        HttpResponse::build(self.status_code()).json(ErrorBody {
            error: self.to_string(),
            error_type: self.kind().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_unavailable_and_bad_input_is_a_client_error() {
        let refused = ApiError::from(InferError::Refused(Refusal::DeadlineUnreachable));
        assert_eq!(refused.status_code(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.kind(), "deadline_unreachable");
        assert!(refused.after_admission());
        let bad = ApiError::bad_input("input 'x' missing");
        assert_eq!(bad.status_code(), StatusCode::BAD_REQUEST);
        assert_eq!(bad.kind(), "bad_input");
        assert!(!bad.after_admission());
        assert_eq!(
            ApiError::PayloadTooLarge { limit: 1 }.status_code(),
            StatusCode::PAYLOAD_TOO_LARGE
        );
    }
}
