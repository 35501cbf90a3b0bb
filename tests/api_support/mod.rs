//! Shared by the `api_*` tests: the real actor system and HTTP server on 127.0.0.1:0, in
//! real time, with an HTTP client.

#![allow(dead_code)] // each test file uses its own part

use actix_web::dev::ServerHandle;
use actix_web::HttpServer;
use clockwork::actors::{Placement, Runtime, RuntimeBuilder};
use clockwork::api::{self, status_for, Access, ApiSettings, ApiState};
use clockwork::config::Config;
use clockwork::gpu::profiles;
use clockwork::model::{BatchLatency, DataType, ModelSpec, TensorSpec};
use clockwork::outcome::Outcome;
use clockwork::time::{Clock, Nanos, MS};
use serde_json::Value;

/// One emulated V100 with `mlp` (mlp-small), `resnet` (resnet50) and `typed` (inputs of
/// several datatypes).
const CONFIG: &str = r#"
[[devices]]
backend = "sim"
profile = "v100"

[[models]]
name = "mlp"
profile = "mlp-small"
slo = "100ms"

[[models]]
name = "resnet"
profile = "resnet50"
"#;

/// A running server.
pub struct TestServer {
    pub base: String,
    pub client: awc::Client,
    pub runtime: Runtime,
    /// The API's state, for serving the gRPC API beside the HTTP one.
    pub state: ApiState,
    handle: ServerHandle,
}

fn tensor(name: &str, datatype: DataType, shape: &[i64]) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        datatype,
        shape: shape.to_vec(),
    }
}

/// A model taking one input of each of several datatypes, with mlp-small's timing.
pub fn typed_model() -> ModelSpec {
    let mut spec = profiles::model("mlp-small", "typed", 100 * MS).expect("built-in profile");
    spec.inputs = vec![
        tensor("ints", DataType::Int64, &[2]),
        tensor("flags", DataType::Bool, &[3]),
        tensor("halves", DataType::Fp16, &[2]),
        tensor("text", DataType::Bytes, &[-1]),
        tensor("small", DataType::Uint8, &[2, 2]),
    ];
    spec.outputs = vec![
        tensor("scores", DataType::Fp32, &[2]),
        tensor("ids", DataType::Int32, &[3]),
    ];
    spec
}

/// mlp-small's tensors under `name`, objective `slo`, one request at a time taking
/// `latency` (no batching): a model whose capacity a test can reason about.
pub fn unbatched_mlp(name: &str, slo: Nanos, latency: Nanos) -> ModelSpec {
    let mut spec = profiles::model("mlp-small", name, slo).expect("built-in profile");
    spec.profile.batches = vec![BatchLatency { batch: 1, latency }];
    spec
}

/// Starts `model` alone on one emulated V100, and the API with default settings.
pub async fn start_alone(model: ModelSpec) -> TestServer {
    let config = "[[devices]]\nbackend = \"sim\"\nprofile = \"v100\"\n";
    start_with(config, vec![model], ApiSettings::default()).await
}

/// Starts the runtime and the API with `settings`.
pub async fn start(settings: ApiSettings) -> TestServer {
    start_with(CONFIG, vec![typed_model()], settings).await
}

/// Starts the runtime of configuration text `config` plus `models`, and the API.
pub async fn start_with(config: &str, models: Vec<ModelSpec>, settings: ApiSettings) -> TestServer {
    start_guarded(config, models, settings, Access::open()).await
}

/// As [`start_with`], its guarded routes needing `access`'s tokens.
pub async fn start_guarded(
    config: &str,
    models: Vec<ModelSpec>,
    settings: ApiSettings,
    access: Access,
) -> TestServer {
    let config = Config::parse(config).expect("test config");
    let mut builder = RuntimeBuilder::from_config(Clock::start(), &config).expect("runtime");
    for model in models {
        builder = builder.model(model);
    }
    let runtime = builder
        .placement(Placement::Threads)
        .start()
        .expect("start");
    let state = ApiState::new(&runtime, settings)
        .expect("api state")
        .with_access(access);
    let served = state.clone();
    let server = HttpServer::new(move || api::app(served.clone()))
        .workers(2)
        .disable_signals()
        .bind("127.0.0.1:0")
        .expect("bind");
    let address = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    let client = awc::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .finish();
    TestServer {
        base: format!("http://{address}"),
        client,
        runtime,
        state,
        handle,
    }
}

/// The configuration of [`start`], for [`start_guarded`].
pub const DEFAULT_CONFIG: &str = CONFIG;

/// Starts with the default settings.
pub async fn start_default() -> TestServer {
    start(ApiSettings::default()).await
}

impl TestServer {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// GET: status and body.
    pub async fn get(&self, path: &str) -> (u16, Vec<u8>) {
        let mut response = self.client.get(self.url(path)).send().await.expect("GET");
        let body = response.body().limit(64 << 20).await.expect("body");
        (response.status().as_u16(), body.to_vec())
    }

    /// GET, parsing a JSON body.
    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        let (status, body) = self.get(path).await;
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    /// POST raw bytes with extra headers: status, headers and body.
    pub async fn post_raw(
        &self,
        path: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> (u16, awc::http::header::HeaderMap, Vec<u8>) {
        let mut request = self.client.post(self.url(path));
        for (name, value) in headers {
            request = request.insert_header((*name, value.as_str()));
        }
        let mut response = request.send_body(body).await.expect("POST");
        let body = response.body().limit(64 << 20).await.expect("body");
        (
            response.status().as_u16(),
            response.headers().clone(),
            body.to_vec(),
        )
    }

    /// POST a JSON value, parsing a JSON answer.
    pub async fn post_json(&self, path: &str, value: &Value) -> (u16, Value) {
        let body = serde_json::to_vec(value).expect("json");
        let (status, _, body) = self.post_raw(path, &[], body).await;
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    /// Stops the HTTP server and the actors.
    pub async fn stop(self) {
        self.handle.stop(true).await;
        self.runtime.shutdown().await;
    }
}

/// An inference request for `mlp` with 64 values, with a batch dimension of 1.
pub fn mlp_request(value: f32) -> Value {
    serde_json::json!({
        "inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": vec![value; 64]}]
    })
}

/// Asserts an error answer: its status and `error_type`, and that the message names
/// `mentions`. `error_type` must be an outcome whose status (`status_for`) is `status`.
pub fn assert_error(answer: &(u16, Value), status: u16, error_type: &str, mentions: &str) {
    let (got, body) = answer;
    let kind: Outcome = error_type.parse().expect("a documented error kind");
    assert_eq!(status_for(kind).as_u16(), status, "the status of {kind}");
    assert_eq!(*got, status, "{body}");
    assert_eq!(body["error_type"], error_type, "{body}");
    let message = body["error"].as_str().unwrap_or_default();
    assert!(
        message.contains(mentions),
        "'{message}' should name '{mentions}'"
    );
}

/// The model names of a repository index answer, in order.
pub fn index_names(index: &Value) -> Vec<&str> {
    index
        .as_array()
        .expect("an index is an array")
        .iter()
        .map(|e| e["name"].as_str().unwrap_or_default())
        .collect()
}
