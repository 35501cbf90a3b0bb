//! Shared by the `api_grpc*` tests: the gRPC API of a test server (`api_support`) on a
//! free port with a tonic client generated from the same .proto, and `mlp` requests.

#![allow(dead_code)] // each test file uses its own part

use std::future::Future;

use clockwork::api::grpc::proto::grpc_inference_service_client::GrpcInferenceServiceClient;
use clockwork::api::grpc::proto::model_infer_request::InferInputTensor;
use clockwork::api::grpc::proto::*;
use clockwork::api::ApiState;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

pub type Client = GrpcInferenceServiceClient<Channel>;

/// What `grpc::serve` ends with.
pub type Served = Result<(), tonic::transport::Error>;

/// Serves the gRPC API over `state` on a free port until `shutdown` completes; a client
/// connected to it, and the server's task.
pub async fn grpc_until(
    state: &ApiState,
    shutdown: impl Future<Output = ()> + 'static,
) -> (Client, JoinHandle<Served>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let serving = clockwork::api::grpc::serve(state.clone(), listener, shutdown);
    let task = actix_web::rt::spawn(serving);
    let url = format!("http://{address}");
    (Client::connect(url).await.expect("connect"), task)
}

/// Serves the gRPC API over `state` on a free port; a client connected to it.
pub async fn grpc(state: &ApiState) -> Client {
    grpc_until(state, std::future::pending()).await.0
}

pub fn input(name: &str, datatype: &str, shape: &[i64]) -> InferInputTensor {
    InferInputTensor {
        name: name.into(),
        datatype: datatype.into(),
        shape: shape.to_vec(),
        ..Default::default()
    }
}

/// `mlp` with one item of `values`, as raw bytes or typed contents.
pub fn mlp(values: &[f32], raw: bool) -> ModelInferRequest {
    let mut tensor = input("input", "FP32", &[1, 64]);
    let mut request = ModelInferRequest {
        model_name: "mlp".into(),
        id: "g-1".into(),
        ..Default::default()
    };
    if raw {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        request.raw_input_contents.push(bytes);
    } else {
        tensor.contents = Some(InferTensorContents {
            fp32_contents: values.to_vec(),
            ..Default::default()
        });
    }
    request.inputs.push(tensor);
    request
}

/// Little-endian `f32`s from raw bytes.
pub fn floats(raw: &[u8]) -> Vec<f32> {
    let chunks = raw.chunks_exact(4);
    chunks
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
