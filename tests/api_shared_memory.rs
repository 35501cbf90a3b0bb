//! Triton's system shared-memory extension against a real server on port 0 with cpu
//! devices (the zoo's `cnn`): regions of a real `/dev/shm` object registered, listed and
//! unregistered over HTTP and gRPC; an input read from a region and an output written
//! into one, equal to the answer of the same input sent in the request; every misuse
//! (a region not registered, sizes that do not fit, a key outside `/dev/shm`, a name
//! taken) answered 400 naming the problem, and the server serving after; over gRPC,
//! `raw_input_contents` holding only the inputs outside shared memory (the emulated
//! `typed` model, five inputs).

mod api_support;
mod cpu_support;
mod grpc_support;

use std::path::PathBuf;

use api_support::{assert_error, start_with, TestServer};
use clockwork::api::grpc::proto::infer_parameter::ParameterChoice;
use clockwork::api::grpc::proto::model_infer_request::InferRequestedOutputTensor;
use clockwork::api::grpc::proto::*;
use clockwork::api::ApiSettings;
use clockwork::repository::zoo;
use cpu_support::{config, values, TempDir, SLACK_SLO_MS};
use grpc_support::{floats, grpc, input};
use serde_json::{json, Value};
use tonic::Code;

/// The cnn's input: one item of 3x32x32 FP32.
const INPUT_BYTES: usize = 3 * 32 * 32 * 4;
/// Its output: ten FP32 scores.
const OUTPUT_BYTES: usize = 10 * 4;
/// Where the output region starts in the object (past the input, not at a page boundary).
const OUTPUT_AT: usize = INPUT_BYTES + 100;

/// A `/dev/shm` object for one test, removed at the end.
struct Object {
    key: String,
    path: PathBuf,
}

impl Object {
    /// `len` bytes of zeros, named for this process and `tag`.
    fn new(tag: &str, len: usize) -> Self {
        let name = format!("clockwork-test-{}-{tag}", std::process::id());
        let path = PathBuf::from("/dev/shm").join(&name);
        std::fs::write(&path, vec![0u8; len]).expect("write /dev/shm object");
        Self {
            key: format!("/{name}"),
            path,
        }
    }

    fn write(&self, at: usize, bytes: &[u8]) {
        let mut all = std::fs::read(&self.path).unwrap();
        all[at..at + bytes.len()].copy_from_slice(bytes);
        std::fs::write(&self.path, all).unwrap();
    }

    fn read(&self, at: usize, len: usize) -> Vec<u8> {
        std::fs::read(&self.path).unwrap()[at..at + len].to_vec()
    }
}

impl Drop for Object {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

async fn serve(root: &std::path::Path) -> TestServer {
    let text =
        config(root, 1, 64, 16 << 20).replace("[repository]", "[repository]\nload_all = true");
    start_with(&text, Vec::new(), ApiSettings::default()).await
}

fn le_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A cnn request whose input and output are placed by `input` and `output` parameters.
fn placed(input: Value, output: Value) -> Value {
    json!({
        "parameters": {"slo_ms": SLACK_SLO_MS},
        "inputs": [{"name": "input", "shape": [1, 3, 32, 32], "datatype": "FP32", "parameters": input}],
        "outputs": [{"name": "output", "parameters": output}]
    })
}

fn region(name: &str, byte_size: usize) -> Value {
    json!({"shared_memory_region": name, "shared_memory_byte_size": byte_size})
}

const INFER: &str = "/v2/models/cnn/infer";

#[actix_web::test]
async fn http_reads_inputs_from_regions_and_writes_outputs_into_them() {
    let root = TempDir::new("api-shm-http");
    zoo::write_missing(root.path()).unwrap();
    let server = serve(root.path()).await;
    let object = Object::new("http", OUTPUT_AT + OUTPUT_BYTES);
    let input = values(3 * 32 * 32, 11);
    object.write(0, &le_bytes(&input));

    // The answer with the tensor in the request, to compare with.
    let request = json!({
        "parameters": {"slo_ms": SLACK_SLO_MS},
        "inputs": [{"name": "input", "shape": [1, 3, 32, 32], "datatype": "FP32", "data": input}]
    });
    let (status, plain) = server.post_json(INFER, &request).await;
    assert_eq!(status, 200, "{plain}");

    let register = |offset: usize, byte_size: usize| json!({"key": object.key, "offset": offset, "byte_size": byte_size});
    let path = |name: &str, what: &str| format!("/v2/systemsharedmemory/region/{name}/{what}");
    let (status, answer) = server
        .post_json(&path("in", "register"), &register(0, INPUT_BYTES))
        .await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = server
        .post_json(&path("out", "register"), &register(OUTPUT_AT, OUTPUT_BYTES))
        .await;
    assert_eq!(status, 200, "{answer}");
    let (status, all) = server.get_json("/v2/systemsharedmemory/status").await;
    assert_eq!(status, 200);
    let want = json!([
        {"name": "in", "key": object.key, "offset": 0, "byte_size": INPUT_BYTES},
        {"name": "out", "key": object.key, "offset": OUTPUT_AT, "byte_size": OUTPUT_BYTES},
    ]);
    assert_eq!(all, want);

    let (status, answer) = server
        .post_json(
            INFER,
            &placed(region("in", INPUT_BYTES), region("out", OUTPUT_BYTES)),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    // Named with neither data nor parameters (Triton's C++ client reads parameters on an
    // output as binary data's).
    let output = &answer["outputs"][0];
    assert!(output.get("data").is_none(), "{output}");
    assert!(output.get("parameters").is_none(), "{output}");
    assert_eq!(output["shape"], plain["outputs"][0]["shape"]);
    let written = floats(&object.read(OUTPUT_AT, OUTPUT_BYTES));
    let sent: Vec<f32> = plain["outputs"][0]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    assert_eq!(written, sent);

    // An input from a region with the output in the answer: the same scores.
    let (status, answer) = server
        .post_json(INFER, &placed(region("in", INPUT_BYTES), json!({})))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outputs"][0]["data"], plain["outputs"][0]["data"]);

    misuse_is_answered_400(&server, &object).await;

    let (status, _) = server
        .post_json(&path("in", "unregister"), &json!({}))
        .await;
    assert_eq!(status, 200);
    let (status, one) = server.get_json(&path("out", "status")).await;
    assert_eq!((status, one[0]["name"].clone()), (200, json!("out")));
    let answer = server
        .post_json(INFER, &placed(region("in", INPUT_BYTES), json!({})))
        .await;
    assert_error(
        &answer,
        400,
        "bad_input",
        "no system shared-memory region 'in'",
    );
    let (status, _) = server
        .post_json("/v2/systemsharedmemory/unregister", &json!({}))
        .await;
    assert_eq!(status, 200);
    let (_, all) = server.get_json("/v2/systemsharedmemory/status").await;
    assert_eq!(all, json!([]));
    server.stop().await;
}

/// Each misuse is a 400 naming it; the regions still serve after.
async fn misuse_is_answered_400(server: &TestServer, object: &Object) {
    let infer_cases = [
        (
            placed(region("nowhere", INPUT_BYTES), json!({})),
            "no system shared-memory region 'nowhere'",
        ),
        (
            placed(region("in", INPUT_BYTES - 4), json!({})),
            "input 'input'",
        ),
        (
            placed(region("in", INPUT_BYTES + 4), json!({})),
            "region 'in', which holds",
        ),
        (
            placed(region("in", INPUT_BYTES), region("out", OUTPUT_BYTES - 4)),
            "output 'output' has 40 bytes",
        ),
        (
            placed(json!({"shared_memory_region": "in"}), json!({})),
            "without 'shared_memory_byte_size'",
        ),
    ];
    for (request, mentions) in infer_cases {
        let answer = server.post_json(INFER, &request).await;
        assert_error(&answer, 400, "bad_input", mentions);
    }
    let mut both = placed(region("in", INPUT_BYTES), json!({}));
    both["inputs"][0]["data"] = json!(vec![0.0; 3 * 32 * 32]);
    let answer = server.post_json(INFER, &both).await;
    assert_error(&answer, 400, "bad_input", "has data in the request too");

    let register = |key: &str, byte_size: usize| json!({"key": key, "byte_size": byte_size});
    let path = "/v2/systemsharedmemory/region/other/register";
    let register_cases = [
        (
            register("/../etc/passwd", 8),
            "is not the name of a shared-memory object",
        ),
        (register("/clockwork-no-such-object", 8), "cannot open"),
        (
            register(&object.key, OUTPUT_AT + OUTPUT_BYTES + 1),
            "do not fit",
        ),
    ];
    for (body, mentions) in register_cases {
        let answer = server.post_json(path, &body).await;
        assert_error(&answer, 400, "bad_input", mentions);
    }
    let taken = "/v2/systemsharedmemory/region/in/register";
    let answer = server.post_json(taken, &register(&object.key, 8)).await;
    assert_error(&answer, 400, "bad_input", "registered already");
    let answer = server
        .post_json(path, &json!({"key": object.key, "byte_size": "8"}))
        .await;
    assert_error(&answer, 400, "invalid_json", "expected u64");
    let answer = server
        .get_json("/v2/systemsharedmemory/region/other/status")
        .await;
    assert_error(&answer, 400, "bad_input", "'other'");
    let (status, answer) = server
        .post_json(INFER, &placed(region("in", INPUT_BYTES), json!({})))
        .await;
    assert_eq!(status, 200, "{answer}");
}

fn string(s: &str) -> InferParameter {
    InferParameter {
        parameter_choice: Some(ParameterChoice::StringParam(s.into())),
    }
}

fn int(i: usize) -> InferParameter {
    InferParameter {
        parameter_choice: Some(ParameterChoice::Int64Param(i as i64)),
    }
}

/// Parameters that place a tensor of `byte_size` bytes at `offset` of region `name`, as
/// tritonclient writes them.
fn grpc_region(
    name: &str,
    byte_size: usize,
    offset: usize,
) -> std::collections::HashMap<String, InferParameter> {
    [
        ("shared_memory_region".to_owned(), string(name)),
        ("shared_memory_byte_size".to_owned(), int(byte_size)),
        ("shared_memory_offset".to_owned(), int(offset)),
    ]
    .into()
}

#[actix_web::test]
async fn grpc_reads_inputs_from_regions_and_writes_outputs_into_them() {
    let root = TempDir::new("api-shm-grpc");
    zoo::write_missing(root.path()).unwrap();
    let server = serve(root.path()).await;
    let mut client = grpc(&server.state).await;
    let object = Object::new("grpc", OUTPUT_AT + OUTPUT_BYTES);
    let input_values = values(3 * 32 * 32, 12);
    // The input 100 bytes into a region that starts at 0: the tensor's own offset.
    let all_input = le_bytes(&input_values);
    object.write(100, &all_input);

    let cnn = |raw: Option<Vec<u8>>| {
        let mut request = ModelInferRequest {
            model_name: "cnn".into(),
            id: "s-1".into(),
            inputs: vec![input("input", "FP32", &[1, 3, 32, 32])],
            ..Default::default()
        };
        request.parameters = [("slo_ms".to_owned(), int(SLACK_SLO_MS as usize))].into();
        request.raw_input_contents.extend(raw.map(Into::into));
        request
    };
    let plain = client
        .model_infer(cnn(Some(all_input.clone())))
        .await
        .expect("plain");
    let plain = plain.into_inner();

    let register =
        |name: &str, offset: usize, byte_size: usize| SystemSharedMemoryRegisterRequest {
            name: name.into(),
            key: object.key.clone(),
            offset: offset as u64,
            byte_size: byte_size as u64,
        };
    client
        .system_shared_memory_register(register("in", 0, 100 + INPUT_BYTES))
        .await
        .expect("register in");
    client
        .system_shared_memory_register(register("out", OUTPUT_AT, OUTPUT_BYTES))
        .await
        .expect("register out");
    let status = client
        .system_shared_memory_status(SystemSharedMemoryStatusRequest::default())
        .await
        .expect("status")
        .into_inner();
    let mut names: Vec<_> = status.regions.keys().cloned().collect();
    names.sort();
    assert_eq!(names, ["in", "out"]);
    assert_eq!(status.regions["out"].offset, OUTPUT_AT as u64);

    let mut request = cnn(None);
    request.inputs[0].parameters = grpc_region("in", INPUT_BYTES, 100);
    request.outputs.push(InferRequestedOutputTensor {
        name: "output".into(),
        parameters: grpc_region("out", OUTPUT_BYTES, 0),
    });
    let answer = client
        .model_infer(request)
        .await
        .expect("placed")
        .into_inner();
    assert!(answer.outputs[0].parameters.is_empty());
    assert_eq!(answer.raw_output_contents, vec![Vec::<u8>::new()]);
    assert_eq!(
        floats(&object.read(OUTPUT_AT, OUTPUT_BYTES)),
        floats(&plain.raw_output_contents[0])
    );

    // Raw contents beside a region: refused with the count named.
    let mut both = cnn(Some(all_input));
    both.inputs[0].parameters = grpc_region("in", INPUT_BYTES, 100);
    let refused = client
        .model_infer(both)
        .await
        .expect_err("raw beside a region");
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused
            .message()
            .contains("raw_input_contents has 1 entries"),
        "{}",
        refused.message()
    );
    let taken = client
        .system_shared_memory_register(register("in", 0, 8))
        .await
        .expect_err("a name taken");
    assert_eq!(taken.code(), Code::InvalidArgument);

    let unregister = |name: &str| SystemSharedMemoryUnregisterRequest { name: name.into() };
    client
        .system_shared_memory_unregister(unregister("in"))
        .await
        .expect("unregister in");
    let gone = client
        .system_shared_memory_status(SystemSharedMemoryStatusRequest { name: "in".into() })
        .await
        .expect_err("unregistered");
    assert_eq!(gone.code(), Code::InvalidArgument);
    client
        .system_shared_memory_unregister(unregister(""))
        .await
        .expect("unregister all");
    let status = client
        .system_shared_memory_status(SystemSharedMemoryStatusRequest::default())
        .await
        .expect("status");
    assert!(status.into_inner().regions.is_empty());
    server.stop().await;
}

/// Over gRPC, `raw_input_contents` holds one entry per input outside shared memory, in
/// order: the emulated `typed` model (five inputs, BYTES among them) with its second and
/// fourth inputs in a region and the other three raw answers as with all five raw.
/// Mutation that breaks it: raw entries taken by input position (the old rule).
#[actix_web::test]
async fn grpc_raw_contents_are_the_inputs_outside_shared_memory() {
    let server = api_support::start_default().await;
    let mut client = grpc(&server.state).await;
    let ints: Vec<u8> = [7i64, -3].iter().flat_map(|v| v.to_le_bytes()).collect();
    let flags = vec![1u8, 0, 1];
    let halves = vec![0u8, 0x3c, 0, 0x40];
    let text: Vec<u8> = [&2u32.to_le_bytes()[..], b"hi"].concat();
    let small = vec![1u8, 2, 3, 4];
    let inputs = || {
        vec![
            input("ints", "INT64", &[2]),
            input("flags", "BOOL", &[3]),
            input("halves", "FP16", &[2]),
            input("text", "BYTES", &[1]),
            input("small", "UINT8", &[2, 2]),
        ]
    };
    let request = |inputs, raw: Vec<&Vec<u8>>| ModelInferRequest {
        model_name: "typed".into(),
        inputs,
        raw_input_contents: raw.into_iter().map(|r| r.clone().into()).collect(),
        ..Default::default()
    };
    let all_raw = request(inputs(), vec![&ints, &flags, &halves, &text, &small]);
    let want = client
        .model_infer(all_raw)
        .await
        .expect("all raw")
        .into_inner();

    let object = Object::new("mixed", 16);
    object.write(0, &flags);
    object.write(8, &text);
    let register = SystemSharedMemoryRegisterRequest {
        name: "mixed".into(),
        key: object.key.clone(),
        offset: 0,
        byte_size: 16,
    };
    client
        .system_shared_memory_register(register)
        .await
        .expect("register");
    let mut placed = inputs();
    placed[1].parameters = grpc_region("mixed", flags.len(), 0);
    placed[3].parameters = grpc_region("mixed", text.len(), 8);
    let mixed = request(placed, vec![&ints, &halves, &small]);
    let got = client.model_infer(mixed).await.expect("mixed").into_inner();
    assert_eq!(got.raw_output_contents, want.raw_output_contents);
    assert!(!want.raw_output_contents.is_empty());
    server.stop().await;
}
