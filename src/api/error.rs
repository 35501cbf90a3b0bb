//! The one error type of the HTTP API and how each error becomes a status code.
//!
//! Every error answers `{"error": "<message>", "error_type": "<kind>"}`. `kind()` is the
//! error's [`Outcome`], whose name is both `error_type` and the metric label, so a
//! dashboard and a client see the same names; the controller's own errors
//! ([`InferError`]) keep the outcomes the controller gives them. [`status_for`] is the one
//! table of status codes. The README lists every kind with its status.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use utoipa::ToSchema;

use super::edge::Stage;
use crate::actors::messages::InferError;
use crate::config::Role;
use crate::outcome::Outcome;

/// Why a request got no success.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The controller's answer (refusals, bad input, failures).
    #[error(transparent)]
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
    /// A guarded route without a bearer token.
    #[error("this {} route needs a bearer token (Authorization: Bearer <token>)", role.as_str())]
    Unauthorized { role: Role },
    /// A guarded route with a token it does not accept (the token is not repeated).
    #[error("the bearer token is not accepted for this {} route", role.as_str())]
    Forbidden { role: Role },
    /// Its answer was not ready by its deadline (the run that carried it, or the answer's
    /// way back, took longer than planned): refused then, so that the client hears within
    /// its objective, and the outputs that come later are dropped.
    #[error("model '{model}' did not have the answer by the latency objective: its run (or the answer's way back) took longer than planned; retry after 1 s")]
    Overran { model: String },
    /// The front end refused it before the controller saw it: its deadline, counted from
    /// its arrival, cannot be met.
    #[error("refused {}: model '{model}' cannot answer within the latency objective; retry after {retry_after_s} s", stage.as_str())]
    Early {
        model: String,
        stage: Stage,
        retry_after_s: u64,
    },
}

impl ApiError {
    /// A request whose tensors do not fit the model; same kind as the controller's check.
    pub fn bad_input(message: impl Into<String>) -> Self {
        ApiError::Infer(InferError::BadInput(message.into()))
    }

    /// Its outcome: `error_type` in the body and the metric label.
    pub fn kind(&self) -> Outcome {
        match self {
            ApiError::Infer(e) => e.kind(),
            ApiError::InvalidJson(_) => Outcome::InvalidJson,
            ApiError::InvalidBinary(_) => Outcome::InvalidBinary,
            ApiError::InvalidBody(_) => Outcome::InvalidBody,
            ApiError::PayloadTooLarge { .. } => Outcome::PayloadTooLarge,
            ApiError::UnknownModel(_) => Outcome::UnknownModel,
            ApiError::UnknownVersion { .. } => Outcome::UnknownVersion,
            ApiError::ModelUnavailable(_) => Outcome::ModelUnavailable,
            ApiError::LoadFailed { .. } => Outcome::LoadFailed,
            ApiError::NotFound { .. } => Outcome::NotFound,
            ApiError::Early { .. } => Outcome::DeadlineUnreachable,
            ApiError::Overran { .. } => Outcome::Overran,
            ApiError::Unauthorized { .. } => Outcome::Unauthorized,
            ApiError::Forbidden { .. } => Outcome::Forbidden,
        }
    }
}

/// The HTTP status of each outcome: the one place that decides it.
pub fn status_for(outcome: Outcome) -> StatusCode {
    use Outcome::*;
    match outcome {
        Ok | Late => StatusCode::OK,
        BadInput | InvalidJson | InvalidBinary | InvalidBody | LoadFailed => {
            StatusCode::BAD_REQUEST
        }
        UnknownModel | UnknownVersion | NotFound => StatusCode::NOT_FOUND,
        PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Unauthorized => StatusCode::UNAUTHORIZED,
        Forbidden => StatusCode::FORBIDDEN,
        ExecutionFailed => StatusCode::INTERNAL_SERVER_ERROR,
        DeadlineUnreachable | TimedOut | Overran | Withdrawn | ShuttingDown | ModelUnavailable => {
            StatusCode::SERVICE_UNAVAILABLE
        }
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
        status_for(self.kind())
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        // A refusal says when trying again is worth it: the edge's own estimate of the
        // backlog, else a second (the header counts whole seconds).
        let retry = match self {
            ApiError::Early { retry_after_s, .. } => Some(*retry_after_s),
            _ if self.kind().is_refusal() => Some(1),
            _ => None,
        };
        if let Some(seconds) = retry {
            response.insert_header((actix_web::http::header::RETRY_AFTER, seconds.to_string()));
        }
        // RFC 6750: a 401 names the scheme that would be accepted.
        if self.kind() == Outcome::Unauthorized {
            response.insert_header((actix_web::http::header::WWW_AUTHENTICATE, "Bearer"));
        }
        response.json(ErrorBody {
            error: self.to_string(),
            error_type: self.kind().as_str().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::Refusal;

    #[test]
    fn refusals_are_unavailable_and_bad_input_is_a_client_error() {
        let refused = ApiError::from(InferError::Refused(Refusal::DeadlineUnreachable));
        assert_eq!(refused.status_code(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.kind(), Outcome::DeadlineUnreachable);
        assert!(
            refused.to_string().contains("latency objective"),
            "{refused}"
        );
        let bad = ApiError::bad_input("input 'x' missing");
        assert_eq!(bad.status_code(), StatusCode::BAD_REQUEST);
        assert_eq!(bad.kind(), Outcome::BadInput);
        assert_eq!(
            ApiError::PayloadTooLarge { limit: 1 }.status_code(),
            StatusCode::PAYLOAD_TOO_LARGE
        );
        let unknown = ApiError::from(InferError::UnknownModel("m".into()));
        assert_eq!(unknown.status_code(), StatusCode::NOT_FOUND);
        assert_eq!(unknown.kind(), Outcome::UnknownModel);
    }

    #[test]
    fn only_successes_are_answered_2xx() {
        for &outcome in Outcome::ALL {
            assert_eq!(
                status_for(outcome).is_success(),
                outcome.is_success(),
                "{outcome}"
            );
        }
    }
}
