//! `ModelStreamInfer`: Triton's stream of inference requests on one call, as its clients
//! use it (`tritonclient.grpc`'s `start_stream`/`async_stream_infer`, `perf_analyzer
//! --streaming`).
//!
//! Each request read off the stream is one request of `ModelInfer`'s edge path
//! (`infer::serve`), its arrival stamped when its message is read, and is answered once,
//! as soon as it finishes, in whatever order (a client matches answers by `id`): its
//! outputs, or `error_message` with the request named in `infer_response` (model,
//! version, id, and the outcome as its `error_type` parameter). A refusal ends only its
//! own request, never the stream.
//!
//! Bounds: at most [`IN_FLIGHT`] requests of one stream are served at once; past that
//! the stream is not read until one is answered (HTTP/2's flow control then holds the
//! client), and answers wait for the client to take them in a channel of that size
//! (one it does not read stops its stream's reading too). When the server shuts down, or
//! the client ends its side, the requests in flight are answered and the stream ends; a
//! client that goes away withdraws what it had in flight (each request's `Front`
//! dropped).

use std::collections::HashMap;
use std::pin::Pin;

use futures_util::stream::{FuturesUnordered, StreamExt as _};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;
use tonic::{Status, Streaming};

use super::super::error::ApiError;
use super::super::front::Delivered;
use super::super::ApiState;
use super::infer;
use super::proto::infer_parameter::ParameterChoice;
use super::proto::{
    InferParameter, ModelInferRequest, ModelInferResponse, ModelStreamInferResponse,
};

/// A stream's answers, as tonic sends them.
pub type Answers = Pin<Box<dyn Stream<Item = Result<ModelStreamInferResponse, Status>> + Send>>;

/// The most requests of one stream served at once, and answers held for its client.
pub const IN_FLIGHT: usize = 256;

/// Serves the requests of `requests` until the client ends its side, goes away, or
/// `closing` is cancelled (the server shutting down); answers as they finish.
pub fn serve(
    state: ApiState,
    requests: Streaming<ModelInferRequest>,
    closing: CancellationToken,
) -> Answers {
    let (answers, taken) = mpsc::channel(IN_FLIGHT);
    tokio::spawn(drive(state, requests, answers, closing));
    Box::pin(ReceiverStream::new(taken))
}

/// The stream's one task: reads requests while it may, and sends each answer as its
/// request finishes.
async fn drive(
    state: ApiState,
    mut requests: Streaming<ModelInferRequest>,
    answers: mpsc::Sender<Result<ModelStreamInferResponse, Status>>,
    closing: CancellationToken,
) {
    let mut flights = FuturesUnordered::new();
    let mut reading = true;
    while reading || !flights.is_empty() {
        let room = flights.len() < IN_FLIGHT;
        tokio::select! {
            next = requests.next(), if reading && room => match next {
                Some(Ok(request)) => {
                    let arrival = state.clock.now();
                    let state = state.clone();
                    flights.push(async move {
                        let named = Named::of(&request);
                        answer(named, infer::serve(&state, arrival, request).await)
                    });
                }
                // The client ended its side, or the stream broke: what is in flight is
                // still answered (a broken stream's answers then find no one).
                Some(Err(_)) | None => reading = false,
            },
            Some(answer) = flights.next(), if !flights.is_empty() => {
                if answers.send(Ok(answer)).await.is_err() {
                    // The client is gone: dropping the flights withdraws them.
                    return;
                }
            }
            () = closing.cancelled(), if reading => reading = false,
        }
    }
}

/// What names a request in its answer, kept before the request is handed on.
struct Named {
    model_name: String,
    model_version: String,
    id: String,
}

impl Named {
    fn of(request: &ModelInferRequest) -> Self {
        Self {
            model_name: request.model_name.clone(),
            model_version: request.model_version.clone(),
            id: request.id.clone(),
        }
    }
}

/// A request's answer on the stream: its outputs, or its error by name.
fn answer(
    named: Named,
    served: Result<Delivered<ModelInferResponse>, ApiError>,
) -> ModelStreamInferResponse {
    match served {
        Ok(delivered) => ModelStreamInferResponse {
            error_message: String::new(),
            infer_response: Some(delivered.response),
        },
        Err(error) => {
            let kind = InferParameter {
                parameter_choice: Some(ParameterChoice::StringParam(error.kind().as_str().into())),
            };
            ModelStreamInferResponse {
                error_message: error.to_string(),
                infer_response: Some(ModelInferResponse {
                    model_name: named.model_name,
                    model_version: named.model_version,
                    id: named.id,
                    parameters: HashMap::from([("error_type".to_owned(), kind)]),
                    ..Default::default()
                }),
            }
        }
    }
}
