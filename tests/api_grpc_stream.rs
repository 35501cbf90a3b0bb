//! Triton's `ModelStreamInfer` over a real connection: many requests on one call, each
//! answered once (by its `id`, its outputs those of `ModelInfer`, or its error by name
//! without ending the stream), the infer token needed, an open stream ended when the
//! server shuts down, and the calls one connection carries at once bounded.

mod api_support;
mod grpc_support;

use std::collections::BTreeMap;
use std::time::Duration;

use api_support::{start, start_default, start_guarded, DEFAULT_CONFIG};
use clockwork::api::grpc::proto::infer_parameter::ParameterChoice;
use clockwork::api::grpc::proto::*;
use clockwork::api::{Access, ApiSettings};
use clockwork::config::{AuthConfig, Token};
use grpc_support::{grpc, grpc_until, mlp, Client};
use tokio::time::timeout;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

/// Every answer of a stream of `requests` (the client's side ends after the last),
/// until the server ends it.
async fn stream_all(
    client: &mut Client,
    requests: Vec<ModelInferRequest>,
) -> Vec<ModelStreamInferResponse> {
    let call = client.model_stream_infer(tokio_stream::iter(requests));
    let mut answers = call.await.expect("the stream opens").into_inner();
    let mut all = Vec::new();
    let wait = Duration::from_secs(30);
    while let Some(answer) = timeout(wait, answers.message())
        .await
        .expect("the stream ends")
        .expect("no stream error")
    {
        all.push(answer);
    }
    all
}

/// The outcome an error answer names.
fn error_type(answer: &ModelStreamInferResponse) -> Option<String> {
    let named = answer
        .infer_response
        .as_ref()?
        .parameters
        .get("error_type")?;
    match &named.parameter_choice {
        Some(ParameterChoice::StringParam(kind)) => Some(kind.clone()),
        _ => None,
    }
}

#[actix_web::test]
async fn a_stream_answers_every_request_once_by_its_id() {
    let server = start_default().await;
    let mut client = grpc(&server.state).await;
    let item = |i: usize| -> Vec<f32> { (0..64).map(|j| ((i * 64 + j) % 7) as f32).collect() };
    let mut requests: Vec<_> = (0..12)
        .map(|i| ModelInferRequest {
            id: format!("s-{i}"),
            ..mlp(&item(i), i % 2 == 0)
        })
        .collect();
    let mut unknown = mlp(&item(0), true);
    (unknown.model_name, unknown.id) = ("nope".into(), "lost".into());
    let mut short = mlp(&item(0), true);
    short.raw_input_contents[0].truncate(8);
    short.id = "short".into();
    requests.insert(3, unknown);
    requests.insert(7, short);
    let answers = stream_all(&mut client, requests).await;
    let by_id: BTreeMap<_, _> = answers
        .iter()
        .map(|a| (a.infer_response.as_ref().map(|r| r.id.clone()), a))
        .collect();
    assert_eq!(answers.len(), 14, "one answer per request: {answers:?}");
    assert_eq!(by_id.len(), 14, "each under its own id: {:?}", by_id.keys());
    let failed = |id: &str| by_id[&Some(id.to_owned())];
    assert_eq!(error_type(failed("lost")).as_deref(), Some("unknown_model"));
    assert!(failed("lost").error_message.contains("nope"));
    assert_eq!(error_type(failed("short")).as_deref(), Some("bad_input"));
    for i in 0..12 {
        let answer = by_id[&Some(format!("s-{i}"))];
        assert_eq!(answer.error_message, "", "{answer:?}");
        let streamed = answer.infer_response.as_ref().expect("outputs");
        let alone = client.model_infer(mlp(&item(i), true)).await;
        let alone = alone.expect("the same request alone").into_inner();
        assert_eq!(streamed.outputs[0].shape, vec![1, 10]);
        assert_eq!(streamed.raw_output_contents, alone.raw_output_contents);
    }
    // Its errors are counted as a call's are.
    let (_, metrics) = server.get("/metrics").await;
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(metrics.contains("outcome=\"unknown_model\""), "{metrics}");
    server.stop().await;
}

#[actix_web::test]
async fn an_open_stream_ends_when_the_server_shuts_down() {
    let server = start_default().await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async {
        stopped.await.ok();
    };
    let (mut client, serving) = grpc_until(&server.state, shutdown).await;
    // The client's side stays open: the sender is held to the end.
    let (send, requests) = tokio::sync::mpsc::channel(4);
    let call = client.model_stream_infer(ReceiverStream::new(requests));
    send.send(mlp(&[0.25; 64], true)).await.expect("send");
    let mut answers = call.await.expect("the stream opens").into_inner();
    let wait = Duration::from_secs(10);
    let first = timeout(wait, answers.message()).await.expect("an answer");
    let first = first.expect("no error").expect("one answer");
    assert_eq!(first.error_message, "", "{first:?}");
    stop.send(()).expect("the server listens for its stop");
    let end = timeout(wait, answers.message()).await;
    let end = end.expect("the stream ends once the server shuts down");
    assert!(matches!(end, Ok(None)), "a clean end: {end:?}");
    let served = timeout(wait, serving).await.expect("the server stops");
    served.expect("its task").expect("no transport error");
    drop(send);
    server.stop().await;
}

#[actix_web::test]
async fn a_stream_needs_the_infer_token() {
    let auth = AuthConfig {
        admin_tokens: None,
        infer_tokens: Some(vec![Token::new("user-2")]),
    };
    let access = Access::from_config(&auth);
    let server = start_guarded(DEFAULT_CONFIG, Vec::new(), ApiSettings::default(), access).await;
    let mut client = grpc(&server.state).await;
    let call = |token: Option<&str>| {
        let mut request = tonic::Request::new(tokio_stream::iter(vec![mlp(&[0.5; 64], true)]));
        if let Some(token) = token {
            let value = format!("Bearer {token}").parse().expect("metadata");
            request.metadata_mut().insert("authorization", value);
        }
        request
    };
    let refused = client.model_stream_infer(call(None)).await;
    assert_eq!(refused.expect_err("no token").code(), Code::Unauthenticated);
    let refused = client.model_stream_infer(call(Some("wrong"))).await;
    assert_eq!(refused.expect_err("wrong").code(), Code::PermissionDenied);
    let opened = client.model_stream_infer(call(Some("user-2"))).await;
    let mut answers = opened.expect("the token opens a stream").into_inner();
    let answer = answers.message().await.expect("no error").expect("one");
    assert_eq!(answer.error_message, "", "{answer:?}");
    server.stop().await;
}

/// A connection carries at most `grpc_max_streams` calls at once: with two streams held
/// open on a limit of two, a third call on the same connection waits until one of them
/// ends. Mutation that breaks it: no `max_concurrent_streams` in `grpc::serve` (the call
/// is answered at once).
#[actix_web::test]
async fn a_connection_carries_at_most_its_streams_at_once() {
    let settings = ApiSettings {
        grpc_max_streams: 2,
        ..ApiSettings::default()
    };
    let server = start(settings).await;
    let client = grpc(&server.state).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let (send, requests) = tokio::sync::mpsc::channel::<ModelInferRequest>(1);
        let mut stream_client = client.clone();
        let call = stream_client.model_stream_infer(ReceiverStream::new(requests));
        let answers = call.await.expect("the stream opens").into_inner();
        held.push((send, answers));
    }
    let live = |client: &Client| {
        let mut client = client.clone();
        async move { client.server_live(ServerLiveRequest {}).await }
    };
    let third = timeout(Duration::from_millis(700), live(&client)).await;
    assert!(
        third.is_err(),
        "a third call while two streams are open: {third:?}"
    );
    // One stream ends (its client's side, then the server's answer to that): room again.
    let (send, mut answers) = held.pop().expect("a held stream");
    drop(send);
    let end = timeout(Duration::from_secs(10), answers.message()).await;
    assert!(matches!(end, Ok(Ok(None))), "the stream ended: {end:?}");
    let third = timeout(Duration::from_secs(10), live(&client)).await;
    third.expect("answered once a stream ended").expect("live");
    drop(held);
    server.stop().await;
}
