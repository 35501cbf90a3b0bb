//! The gRPC API over a real connection, beside the real HTTP server on port 0, with a
//! tonic client generated from the same .proto: metadata, readiness and config, inference
//! with raw and typed contents (equal to each other and to HTTP's answer), errors as
//! codes with the outcome named, repository load/unload, the same metrics, the HTTP
//! routes' bearer tokens; a request of `n` items (a leading batch dimension, raw or typed)
//! answered `[n, ...]` with the rows of `n` one-item requests, and its items checked by
//! the HTTP path's rules.

mod api_support;
mod cpu_support;
mod grpc_support;

use api_support::DEFAULT_CONFIG;
use api_support::{mlp_request, start_default, start_guarded, start_with};
use clockwork::api::grpc::proto::model_config::SchedulingChoice;
use clockwork::api::grpc::proto::model_infer_request::{
    InferInputTensor, InferRequestedOutputTensor,
};
use clockwork::api::grpc::proto::*;
use clockwork::api::grpc::status::ERROR_TYPE;
use clockwork::api::{Access, ApiSettings};
use clockwork::config::{AuthConfig, Token};
use clockwork::repository::zoo;
use cpu_support::{config, values, TempDir};
use grpc_support::{floats, grpc, input, mlp};
use serde_json::Value;
use tonic::Code;

/// The code of a failed call and the outcome it names; panics on success.
fn failure<T: std::fmt::Debug>(result: Result<T, tonic::Status>) -> (Code, String, String) {
    let status = result.expect_err("the call should fail");
    let kind = status
        .metadata()
        .get(ERROR_TYPE)
        .and_then(|v| v.to_str().ok());
    let kind = kind.unwrap_or_default().to_owned();
    (status.code(), kind, status.message().to_owned())
}

#[actix_web::test]
async fn metadata_readiness_and_config() {
    let server = start_default().await;
    let mut client = grpc(&server.state).await;
    let live = client
        .server_live(ServerLiveRequest {})
        .await
        .expect("live");
    assert!(live.into_inner().live);
    let ready = client
        .server_ready(ServerReadyRequest {})
        .await
        .expect("ready");
    assert!(ready.into_inner().ready);
    let server_metadata = client.server_metadata(ServerMetadataRequest {}).await;
    let server_metadata = server_metadata.expect("server metadata").into_inner();
    assert_eq!(server_metadata.name, "clockwork");
    assert!(server_metadata
        .extensions
        .contains(&"model_repository".to_owned()));
    let ask = |version: &str| ModelMetadataRequest {
        name: "mlp".into(),
        version: version.into(),
    };
    let metadata = client.model_metadata(ask("")).await.expect("metadata");
    let metadata = metadata.into_inner();
    assert_eq!(
        (metadata.versions, metadata.inputs[0].shape.clone()),
        (vec!["1".to_owned()], vec![-1, 64])
    );
    let (code, kind, _) = failure(client.model_metadata(ask("7")).await);
    assert_eq!((code, kind.as_str()), (Code::NotFound, "unknown_version"));
    let ready = |name: &str| ModelReadyRequest {
        name: name.into(),
        version: String::new(),
    };
    let mlp_ready = client.model_ready(ready("mlp")).await.expect("ready");
    assert!(mlp_ready.into_inner().ready);
    let (code, _, _) = failure(client.model_ready(ready("nope")).await);
    assert_eq!(code, Code::NotFound);
    let config = client
        .model_config(ModelConfigRequest {
            name: "mlp".into(),
            version: String::new(),
        })
        .await
        .expect("config")
        .into_inner()
        .config
        .expect("a config");
    assert_eq!(
        (config.max_batch_size, config.input[0].dims.clone()),
        (8, vec![64]),
        "mlp-small's largest batch, the most items one request may carry"
    );
    assert_eq!(config.input[0].data_type, DataType::TypeFp32 as i32);
    assert!(matches!(
        config.scheduling_choice,
        Some(SchedulingChoice::DynamicBatching(_))
    ));
    assert_eq!(config.parameters["slo_ms"].string_value, "100");
    server.stop().await;
}

#[actix_web::test]
async fn raw_and_typed_contents_answer_as_http_does() {
    let server = start_default().await;
    let mut client = grpc(&server.state).await;
    let values: Vec<f32> = (0..64).map(|i| i as f32 / 64.0).collect();
    let raw = client.model_infer(mlp(&values, true)).await.expect("raw");
    let timing = raw
        .metadata()
        .get("server-timing")
        .and_then(|v| v.to_str().ok());
    assert!(
        timing.is_some_and(|t| t.starts_with("edge;dur=")),
        "{timing:?}"
    );
    let raw = raw.into_inner();
    let typed = client
        .model_infer(mlp(&values, false))
        .await
        .expect("typed");
    let typed = typed.into_inner();
    assert_eq!(raw.id, "g-1");
    assert_eq!(raw.outputs[0].shape, vec![1, 10]);
    assert_eq!(raw.outputs[0].datatype, "FP32");
    let emulated = raw.parameters["emulated"].parameter_choice.clone();
    assert_eq!(
        emulated,
        Some(infer_parameter::ParameterChoice::BoolParam(true))
    );
    assert_eq!(raw.raw_output_contents, typed.raw_output_contents);
    // The same item over HTTP (JSON) gets the same outputs.
    let mut request = mlp_request(0.0);
    request["inputs"][0]["data"] = values.iter().map(|&v| Value::from(v)).collect();
    let (status, answer) = server.post_json("/v2/models/mlp/infer", &request).await;
    assert_eq!(status, 200, "{answer}");
    let http: Vec<f32> = answer["outputs"][0]["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|v| v.as_f64().unwrap_or(f64::NAN) as f32)
        .collect();
    assert_eq!(floats(&raw.raw_output_contents[0]), http);
    server.stop().await;
}

#[actix_web::test]
async fn errors_are_codes_that_name_their_outcome() {
    let server = start_default().await;
    let mut client = grpc(&server.state).await;
    let values = vec![0.5; 64];
    let mut unknown = mlp(&values, true);
    unknown.model_name = "nope".into();
    let (code, kind, message) = failure(client.model_infer(unknown).await);
    assert_eq!(
        (code, kind.as_str()),
        (Code::NotFound, "unknown_model"),
        "{message}"
    );
    let mut short = mlp(&values, true);
    short.raw_input_contents[0].truncate(8);
    let (code, kind, _) = failure(client.model_infer(short).await);
    assert_eq!((code, kind.as_str()), (Code::InvalidArgument, "bad_input"));
    // Triton's shared-memory extensions: places without their sizes.
    let region = |name: &str| {
        let name = infer_parameter::ParameterChoice::StringParam(name.into());
        let parameter = InferParameter {
            parameter_choice: Some(name),
        };
        [("shared_memory_region".to_owned(), parameter)].into()
    };
    let mut placed = mlp(&values, true);
    placed.raw_input_contents.clear();
    placed.inputs[0].parameters = region("in");
    let (code, _, message) = failure(client.model_infer(placed).await);
    assert_eq!(code, Code::InvalidArgument);
    assert!(
        message.contains("input 'input' is placed in region 'in' without"),
        "{message}"
    );
    let mut answered_there = mlp(&values, true);
    answered_there.outputs.push(InferRequestedOutputTensor {
        name: "output".into(),
        parameters: region("out"),
    });
    let (code, _, message) = failure(client.model_infer(answered_there).await);
    assert_eq!(code, Code::InvalidArgument);
    assert!(
        message.contains("output 'output' is placed in region 'out' without"),
        "{message}"
    );
    // A typed value out of its datatype's range; and FP16, which has no typed field.
    let mut small = input("small", "UINT8", &[2, 2]);
    small.contents = Some(InferTensorContents {
        uint_contents: vec![1, 2, 3, 256],
        ..Default::default()
    });
    let typed = |tensor: InferInputTensor| ModelInferRequest {
        model_name: "typed".into(),
        inputs: vec![tensor],
        ..Default::default()
    };
    let (code, _, message) = failure(client.model_infer(typed(small)).await);
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("256"), "{message}");
    let mut halves = input("halves", "FP16", &[2]);
    halves.contents = Some(InferTensorContents::default());
    let (code, _, message) = failure(client.model_infer(typed(halves)).await);
    assert!(
        code == Code::InvalidArgument && message.contains("raw_input_contents"),
        "{message}"
    );
    // The same errors are counted as HTTP's are.
    let (_, metrics) = server.get("/metrics").await;
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(metrics.contains("outcome=\"unknown_model\""), "{metrics}");
    server.stop().await;
}

#[actix_web::test]
async fn repository_unload_and_load() {
    let server = start_default().await;
    let mut client = grpc(&server.state).await;
    let name = |model: &str| RepositoryModelUnloadRequest {
        model_name: model.into(),
        ..Default::default()
    };
    client
        .repository_model_unload(name("mlp"))
        .await
        .expect("unload");
    let ready = ModelReadyRequest {
        name: "mlp".into(),
        version: String::new(),
    };
    let answer = client.model_ready(ready.clone()).await.expect("ready");
    assert!(!answer.into_inner().ready);
    let (code, kind, _) = failure(client.model_infer(mlp(&[0.0; 64], true)).await);
    assert_eq!(
        (code, kind.as_str()),
        (Code::Unavailable, "model_unavailable")
    );
    let index = client
        .repository_index(RepositoryIndexRequest::default())
        .await
        .expect("index")
        .into_inner();
    let mlp_state = index
        .models
        .iter()
        .find(|m| m.name == "mlp")
        .map(|m| m.state.as_str());
    assert_eq!(mlp_state, Some("UNAVAILABLE"));
    let load = RepositoryModelLoadRequest {
        model_name: "mlp".into(),
        ..Default::default()
    };
    client.repository_model_load(load).await.expect("load");
    assert!(
        client
            .model_ready(ready)
            .await
            .expect("ready")
            .into_inner()
            .ready
    );
    let (code, _, _) = failure(client.repository_model_unload(name("nope")).await);
    assert_eq!(code, Code::NotFound);
    client
        .model_infer(mlp(&[0.0; 64], true))
        .await
        .expect("served again");
    server.stop().await;
}

/// The cpu zoo's `mlp` (256 values an item, largest batch 16) with `items` of `values`,
/// raw or typed.
fn cpu_mlp(items: usize, values: &[f32], raw: bool) -> ModelInferRequest {
    let mut request = mlp(values, raw);
    request.inputs[0].shape = vec![items as i64, CPU_WIDTH as i64];
    request
}

/// The cpu zoo's `mlp`'s item width.
const CPU_WIDTH: usize = 256;

/// Rows computed in different batch sizes may differ in the last bits.
fn assert_rows_near(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-5 + 1e-4 * w.abs(), "{g} vs {w}");
    }
}

#[actix_web::test]
async fn a_batch_of_items_answers_what_single_items_do_row_by_row() {
    let root = TempDir::new("api-grpc-batch");
    zoo::write_missing(root.path()).expect("zoo");
    let text = config(root.path(), 1, 64, 16 << 20)
        .replace("[repository]", "[repository]\nload_all = true");
    let server = start_with(&text, Vec::new(), ApiSettings::default()).await;
    let mut client = grpc(&server.state).await;
    let input = values(4 * CPU_WIDTH, 5);
    let mut want = Vec::new();
    for item in input.chunks(CPU_WIDTH) {
        let one = client.model_infer(cpu_mlp(1, item, true)).await;
        let one = one.expect("one item").into_inner();
        want.extend(floats(&one.raw_output_contents[0]));
    }
    let row = want.len() / 4;
    // 4 items raw, 3 typed: each answered [n, row], row i as item i alone.
    for (n, raw) in [(4, true), (3, false)] {
        let batch = client
            .model_infer(cpu_mlp(n, &input[..n * CPU_WIDTH], raw))
            .await;
        let batch = batch.expect("a batch").into_inner();
        assert_eq!(batch.outputs[0].shape, vec![n as i64, row as i64]);
        assert_rows_near(&floats(&batch.raw_output_contents[0]), &want[..n * row]);
    }
    // Data for fewer items than the batch dimension names; more items than the largest batch.
    let short = cpu_mlp(4, &input[..3 * CPU_WIDTH], false);
    let (code, _, message) = failure(client.model_infer(short).await);
    assert_eq!(code, Code::InvalidArgument, "{message}");
    let many = values(17 * CPU_WIDTH, 3);
    let (code, kind, message) = failure(client.model_infer(cpu_mlp(17, &many, true)).await);
    assert_eq!((code, kind.as_str()), (Code::InvalidArgument, "bad_input"));
    assert!(message.contains("17 items"), "{message}");
    server.stop().await;
}

#[actix_web::test]
async fn inputs_must_agree_on_their_number_of_items() {
    let server = start_default().await;
    let mut client = grpc(&server.state).await;
    let tensor = |name: &str, datatype: &str, shape: &[i64], c: InferTensorContents| {
        let mut t = input(name, datatype, shape);
        t.contents = Some(c);
        t
    };
    let ints = |n: usize| InferTensorContents {
        int64_contents: vec![1; 2 * n],
        ..Default::default()
    };
    let flags = |n: usize| InferTensorContents {
        bool_contents: vec![true; 3 * n],
        ..Default::default()
    };
    let request = |inputs| ModelInferRequest {
        model_name: "typed".into(),
        inputs,
        ..Default::default()
    };
    let mixed = vec![
        tensor("ints", "INT64", &[2, 2], ints(2)),
        tensor("flags", "BOOL", &[3, 3], flags(3)),
    ];
    let (code, kind, message) = failure(client.model_infer(request(mixed)).await);
    assert_eq!((code, kind.as_str()), (Code::InvalidArgument, "bad_input"));
    assert!(message.contains("same number of items"), "{message}");
    server.stop().await;
}

/// `request` with `authorization: Bearer <token>` metadata.
fn with<T>(mut request: tonic::Request<T>, token: &str) -> tonic::Request<T> {
    let value = format!("Bearer {token}").parse().expect("metadata");
    request.metadata_mut().insert("authorization", value);
    request
}

#[actix_web::test]
async fn calls_need_the_tokens_their_http_routes_need() {
    let auth = AuthConfig {
        admin_tokens: Some(vec![Token::new("admin-1")]),
        infer_tokens: Some(vec![Token::new("user-2")]),
    };
    let access = Access::from_config(&auth);
    let server = start_guarded(DEFAULT_CONFIG, Vec::new(), ApiSettings::default(), access).await;
    let mut client = grpc(&server.state).await;
    let infer = || tonic::Request::new(mlp(&[0.5; 64], true));
    let (code, kind, _) = failure(client.model_infer(infer()).await);
    assert_eq!(
        (code, kind.as_str()),
        (Code::Unauthenticated, "unauthorized")
    );
    let (code, kind, _) = failure(client.model_infer(with(infer(), "wrong")).await);
    assert_eq!((code, kind.as_str()), (Code::PermissionDenied, "forbidden"));
    client
        .model_infer(with(infer(), "user-2"))
        .await
        .expect("the inference token infers");
    let unload = || {
        tonic::Request::new(RepositoryModelUnloadRequest {
            model_name: "mlp".into(),
            ..Default::default()
        })
    };
    let (code, _, _) = failure(
        client
            .repository_model_unload(with(unload(), "user-2"))
            .await,
    );
    assert_eq!(code, Code::PermissionDenied);
    client
        .repository_model_unload(with(unload(), "admin-1"))
        .await
        .expect("the admin token unloads");
    // Shared-memory regions are the admin's: a region lets its client have the server
    // read and write a file.
    for token in [None, Some("user-2")] {
        let mut register = tonic::Request::new(SystemSharedMemoryRegisterRequest::default());
        let mut unregister = tonic::Request::new(SystemSharedMemoryUnregisterRequest::default());
        if let Some(token) = token {
            (register, unregister) = (with(register, token), with(unregister, token));
        }
        let want = [Code::Unauthenticated, Code::PermissionDenied][usize::from(token.is_some())];
        let (code, _, _) = failure(client.system_shared_memory_register(register).await);
        assert_eq!(code, want, "register with {token:?}");
        let (code, _, _) = failure(client.system_shared_memory_unregister(unregister).await);
        assert_eq!(code, want, "unregister with {token:?}");
    }
    let unregister = tonic::Request::new(SystemSharedMemoryUnregisterRequest::default());
    client
        .system_shared_memory_unregister(with(unregister, "admin-1"))
        .await
        .expect("the admin token unregisters");
    // Reading calls stay open.
    let ready = ModelReadyRequest {
        name: "mlp".into(),
        version: String::new(),
    };
    assert!(
        !client
            .model_ready(ready)
            .await
            .expect("open")
            .into_inner()
            .ready
    );
    server.stop().await;
}
