//! The gRPC API: the Open Inference Protocol's `inference.GRPCInferenceService` with
//! Triton's model configuration, repository and system shared-memory calls, served with
//! tonic on its own port (`[server] grpc_listen`) over the same state and functions as
//! the HTTP API; each connection carries at most `grpc_max_streams` calls at once.
//!
//! | file | what |
//! | --- | --- |
//! | `proto.rs` | the code generated from `proto/grpc_service.proto` (messages, server, client) |
//! | `service.rs` | each call, translated to the HTTP route's function and back |
//! | `infer.rs` | `ModelInfer` through the HTTP route's edge path (`api::front::Front`) |
//! | `stream.rs` | `ModelStreamInfer`: many requests on one call, each as `ModelInfer`'s |
//! | `incoming.rs` | the port's connections: how many, the preface's deadline, accept errors |
//! | `tensors.rs` | protobuf tensors and parameters to the runtime's and back |
//! | `config.rs` | Triton's model configuration as a message |
//! | `status.rs` | the one table from an error's outcome to a gRPC code |

// tonic's handlers and interceptors answer `Result<_, tonic::Status>`, a large error by
// tonic's design, not ours.
#![allow(clippy::result_large_err)]

mod config;
pub mod incoming;
mod infer;
pub mod proto;
mod service;
pub mod status;
pub mod stream;
mod tensors;

use std::future::Future;

use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;

use super::edge::Arrival;
use super::ApiState;
use proto::grpc_inference_service_server::GrpcInferenceServiceServer;
use service::GrpcApi;

/// Serves the gRPC API on `listener` until `shutdown` completes (calls in flight are
/// answered first, and open streams stop reading and end once theirs are). Any tokio
/// runtime will do: the calls reach the actors by address.
pub async fn serve(
    state: ApiState,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let (clock, settings) = (state.clock, state.settings);
    // The calls run on this thread (a runtime of its own): its lag counts in their time.
    super::lag::start_runtime_probe();
    let limit = settings.max_body_bytes;
    let closing = CancellationToken::new();
    let streams = closing.clone();
    let shutdown = async move {
        shutdown.await;
        // A stream a client keeps open would otherwise hold the graceful shutdown.
        closing.cancel();
    };
    let service = GrpcInferenceServiceServer::new(GrpcApi { state, streams })
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit);
    // Runs on the call's head, before its message is read: where its time starts, as the
    // HTTP middleware (`edge::stamp`) does.
    let service = InterceptedService::new(service, move |mut request: tonic::Request<()>| {
        request.extensions_mut().insert(Arrival(clock.now()));
        Ok(request)
    });
    let limits = incoming::Limits {
        max_connections: settings.grpc_max_connections,
        preface_within: settings.grpc_preface_within,
    };
    let incoming = incoming::incoming(listener, limits);
    tonic::transport::Server::builder()
        .max_concurrent_streams(settings.grpc_max_streams)
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
