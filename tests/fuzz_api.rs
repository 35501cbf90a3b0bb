//! Fuzzing the inference body decoding (V2 JSON, Triton binary tensors, tensors placed in
//! a system shared-memory region: `src/api/body.rs`, `binary.rs`, `codec.rs`, `v2.rs`,
//! `regions.rs`) through a real server on port 0: valid requests with mutated fields
//! (shapes, datatypes, `binary_data_size`, `Inference-Header-Content-Length`, a region's
//! name, size and offset, huge numbers, deep nesting) and then mutated bytes. Every body gets a JSON answer, a
//! success or a 4xx/503 of a known kind, never a 5xx failure or a dropped connection, and
//! the server stays ready and keeps serving.

mod api_support;
mod fuzz_support;

use api_support::{start_with, typed_model};
use clockwork::api::{ApiSettings, HEADER_LENGTH};
use clockwork::gpu::profiles;
use clockwork::model::{DataType, ModelSpec, TensorSpec};
use clockwork::outcome::Outcome;
use clockwork::time::MS;
use fuzz_support::{apply, cases, edits, Edit};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::{json, Value};

/// One emulated device; `mlp` (one FP32 [64] input) besides the test models.
const CONFIG: &str = r#"
[[devices]]
backend = "sim"
profile = "v100"

[[models]]
name = "mlp"
profile = "mlp-small"
slo = "100ms"
"#;

/// A model with dynamic dimensions: the client's shape decides the element count.
fn dynamic_model() -> ModelSpec {
    let mut spec = profiles::model("mlp-small", "dynamic", 100 * MS).expect("built-in profile");
    let tensor = |name: &str, datatype, shape: &[i64]| TensorSpec {
        name: name.into(),
        datatype,
        shape: shape.to_vec(),
    };
    spec.inputs = vec![
        tensor("x", DataType::Fp32, &[-1, 4]),
        tensor("s", DataType::Bytes, &[-1]),
    ];
    spec.outputs = vec![tensor("y", DataType::Fp32, &[2])];
    spec
}

/// A request to send: its model, headers and body.
#[derive(Clone, Debug)]
struct Body {
    model: &'static str,
    header: Option<String>,
    json: Value,
    binary: Vec<u8>,
}

impl Body {
    fn json(model: &'static str, json: Value) -> Self {
        Self {
            model,
            header: None,
            json,
            binary: Vec::new(),
        }
    }

    fn binary(model: &'static str, json: Value, binary: Vec<u8>) -> Self {
        Self {
            model,
            header: Some(String::new()),
            json,
            binary,
        }
    }

    /// Headers and bytes; an empty header value means "the JSON's real length".
    fn encode(&self, byte_edits: &[Edit]) -> (Vec<(&'static str, String)>, Vec<u8>) {
        let json = apply(&serde_json::to_vec(&self.json).expect("json"), byte_edits);
        let headers = match &self.header {
            Some(h) if h.is_empty() => vec![(HEADER_LENGTH, json.len().to_string())],
            Some(h) => vec![(HEADER_LENGTH, h.clone())],
            None => Vec::new(),
        };
        let mut bytes = json;
        bytes.extend_from_slice(&self.binary);
        (headers, bytes)
    }
}

/// Valid requests of every kind the API takes.
fn seeds() -> Vec<Body> {
    let floats: Vec<u8> = (0..64).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let text: Vec<u8> = [&[2u8, 0, 0, 0][..], b"ab", &[0, 0, 0, 0]].concat();
    vec![
        Body::json(
            "mlp",
            json!({"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": vec![0.5; 64]}]}),
        ),
        Body::json(
            "typed",
            json!({"id": "a", "parameters": {"slo_ms": 50}, "inputs": [
                {"name": "ints", "shape": [2], "datatype": "INT64", "data": [1, -2]},
                {"name": "flags", "shape": [3], "datatype": "BOOL", "data": [true, false, true]},
                {"name": "halves", "shape": [2], "datatype": "FP16", "data": [1.5, 2.0]},
                {"name": "text", "shape": [2], "datatype": "BYTES", "data": ["a", "bc"]},
                {"name": "small", "shape": [2, 2], "datatype": "UINT8", "data": [[1, 2], [3, 4]]}],
              "outputs": [{"name": "ids", "parameters": {"binary_data": true}}]}),
        ),
        Body::json(
            "dynamic",
            json!({"inputs": [
                {"name": "x", "shape": [2, 4], "datatype": "FP32", "data": [[1, 2, 3, 4], [5, 6, 7, 8]]},
                {"name": "s", "shape": [1], "datatype": "BYTES", "data": ["z"]}]}),
        ),
        Body::binary(
            "mlp",
            json!({"parameters": {"binary_data_output": true}, "inputs": [{"name": "input", "shape": [64], "datatype": "FP32",
                "parameters": {"binary_data_size": 256}}]}),
            floats.clone(),
        ),
        Body::binary(
            "dynamic",
            json!({"inputs": [
                {"name": "x", "shape": [4, 4], "datatype": "FP32", "parameters": {"binary_data_size": 64}},
                {"name": "s", "shape": [2], "datatype": "BYTES", "parameters": {"binary_data_size": 10}}]}),
            [&floats[..64], &text[..]].concat(),
        ),
        Body::json(
            "mlp",
            json!({"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32",
                "parameters": {"shared_memory_region": REGION, "shared_memory_byte_size": 256}}],
              "outputs": [{"name": "output", "parameters": {"shared_memory_region": REGION,
                "shared_memory_byte_size": 40, "shared_memory_offset": 512}}]}),
        ),
    ]
}

/// The shared-memory region the fuzzed requests may place tensors in: `REGION_BYTES` of a
/// `/dev/shm` object of this process, registered at the start.
const REGION: &str = "fuzz";
const REGION_BYTES: usize = 1024;

/// The region's object, removed when dropped.
struct Object(std::path::PathBuf);

impl Drop for Object {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Creates the object and registers [`REGION`] on `server`.
async fn register_region(server: &api_support::TestServer) -> Object {
    let name = format!("clockwork-fuzz-{}", std::process::id());
    let path = std::path::PathBuf::from("/dev/shm").join(&name);
    std::fs::write(&path, vec![0u8; REGION_BYTES]).expect("write /dev/shm object");
    let object = Object(path);
    let body = json!({"key": format!("/{name}"), "byte_size": REGION_BYTES});
    let route = format!("/v2/systemsharedmemory/region/{REGION}/register");
    let (status, answer) = server.post_json(&route, &body).await;
    assert_eq!(status, 200, "{answer}");
    object
}

/// Numbers that break decoders.
const NUMBERS: &[i64] = &[
    -1,
    0,
    1,
    3,
    64,
    1 << 31,
    1 << 40,
    (1 << 60) + 1,
    i64::MAX,
    i64::MIN,
];

/// A change to one field of a valid request.
#[derive(Clone, Debug)]
enum Field {
    Shape(usize, Vec<usize>),
    Datatype(usize, usize),
    BinarySize(usize, usize),
    Data(usize, usize),
    Header(usize),
    Parameter(usize),
    Drop(usize),
    /// Input `.0` placed in region `.1` of [`PLACES`], with `NUMBERS[.2]` bytes at offset
    /// `NUMBERS[.3]`.
    Placed(usize, usize, usize, usize),
}

/// Regions a request may name: the registered one, one that is not, and names that are
/// not names.
fn places() -> [Value; 4] {
    [json!(REGION), json!("nowhere"), json!(5), json!("")]
}

const DATATYPES: &[&str] = &[
    "FP32", "FP16", "FP64", "INT8", "UINT64", "BOOL", "BYTES", "fp32", "", "FP33",
];

fn field() -> impl Strategy<Value = Field> {
    let index = 0usize..3;
    prop_oneof![
        (
            index.clone(),
            proptest::collection::vec(0..NUMBERS.len(), 0..4)
        )
            .prop_map(|(i, s)| Field::Shape(i, s)),
        (index.clone(), 0..DATATYPES.len()).prop_map(|(i, d)| Field::Datatype(i, d)),
        (index.clone(), 0..NUMBERS.len()).prop_map(|(i, n)| Field::BinarySize(i, n)),
        (index.clone(), 0usize..6).prop_map(|(i, d)| Field::Data(i, d)),
        (0usize..7).prop_map(Field::Header),
        (0usize..6).prop_map(Field::Parameter),
        index.clone().prop_map(Field::Drop),
        (index, 0..places().len(), 0..NUMBERS.len(), 0..NUMBERS.len())
            .prop_map(|(i, r, n, o)| Field::Placed(i, r, n, o)),
    ]
}

/// JSON data that is wrong in each way a decoder must catch.
fn bad_data(kind: usize) -> Value {
    let mut deep = json!(1.0);
    for _ in 0..200 {
        deep = json!([deep]);
    }
    match kind {
        0 => deep,
        1 => json!([1e308, -1e308, 1.0]),
        2 => json!(["a", 1, null, true]),
        3 => json!([18446744073709551615u64, -9223372036854775808i64]),
        4 => json!({"a": 1}),
        _ => json!([]),
    }
}

/// `body` with `change` applied to its JSON or its header.
fn change(body: &mut Body, change: &Field) {
    let json = &mut body.json;
    match change {
        Field::Shape(i, dims) => {
            let shape: Vec<i64> = dims.iter().map(|&d| NUMBERS[d]).collect();
            with_input(json, *i, |v| v["shape"] = json!(shape));
        }
        Field::Datatype(i, d) => with_input(json, *i, |v| v["datatype"] = json!(DATATYPES[*d])),
        Field::BinarySize(i, n) => with_input(json, *i, |v| {
            v["parameters"] = json!({"binary_data_size": NUMBERS[*n]});
        }),
        Field::Data(i, d) => with_input(json, *i, |v| v["data"] = bad_data(*d)),
        Field::Header(h) => {
            body.header = Some(match h {
                0 => "0".into(),
                1 => "-1".into(),
                2 => "18446744073709551616".into(),
                3 => "abc".into(),
                4 => " 3 ".into(),
                5 => (1u64 << 40).to_string(),
                _ => String::new(),
            })
        }
        Field::Parameter(p) => {
            json["parameters"] = match p {
                0 => json!({"slo_ms": -1}),
                1 => json!({"slo_ms": 1e300}),
                2 => json!({"slo_ms": "fast"}),
                3 => json!({"binary_data_output": 3}),
                4 => json!([1, 2]),
                _ => json!({"slo_ms": 0.000001}),
            }
        }
        Field::Placed(i, r, n, o) => with_input(json, *i, |v| {
            v["parameters"] = json!({"shared_memory_region": places()[*r],
                "shared_memory_byte_size": NUMBERS[*n], "shared_memory_offset": NUMBERS[*o]});
        }),
        Field::Drop(i) => with_input(json, *i, |v| {
            if let Some(map) = v.as_object_mut() {
                let key = map.keys().nth(*i).cloned();
                if let Some(key) = key {
                    map.remove(&key);
                }
            }
        }),
    }
}

fn with_input(json: &mut Value, i: usize, f: impl FnOnce(&mut Value)) {
    if let Some(inputs) = json["inputs"].as_array_mut() {
        let n = inputs.len().max(1);
        if let Some(v) = inputs.get_mut(i % n) {
            f(v);
        }
    }
}

/// A fuzzed request: a seed, field changes, then (sometimes) byte edits.
fn fuzzed() -> impl Strategy<Value = (usize, Vec<Field>, Vec<Edit>)> {
    (
        0..seeds().len(),
        proptest::collection::vec(field(), 0..4),
        prop_oneof![Just(Vec::new()), edits(4)],
    )
}

/// Sends `headers` and `bytes` and checks the answer: JSON, a success or a known 4xx/503.
async fn check(
    server: &api_support::TestServer,
    model: &str,
    headers: &[(&str, String)],
    bytes: Vec<u8>,
) {
    let path = format!("/v2/models/{model}/infer");
    let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned();
    let (status, answer, body) = server.post_raw(&path, headers, bytes).await;
    let binary = answer
        .get("content-type")
        .is_some_and(|v| v.as_bytes() == b"application/octet-stream");
    if status == 200 && binary {
        return;
    }
    let value: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{status}: not JSON ({e}) for {headers:?} {shown}"));
    if status == 200 {
        assert!(value["outputs"].is_array(), "{value}");
        return;
    }
    let kind: Outcome = value["error_type"]
        .as_str()
        .unwrap_or_default()
        .parse()
        .unwrap_or_else(|e| panic!("{status} {value}: {e}, for {headers:?} {shown}"));
    assert!(
        (400..500).contains(&status) || status == 503,
        "{status} {kind} {value} for {headers:?} {shown}"
    );
}

async fn server() -> api_support::TestServer {
    start_with(
        CONFIG,
        vec![typed_model(), dynamic_model()],
        ApiSettings::default(),
    )
    .await
}

async fn assert_serving(server: &api_support::TestServer) {
    let (status, _) = server.get("/v2/health/ready").await;
    assert_eq!(status, 200, "the server is no longer ready");
    let (headers, bytes) = seeds()[0].encode(&[]);
    let (status, _, body) = server
        .post_raw("/v2/models/mlp/infer", &headers, bytes)
        .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
}

#[actix_web::test]
async fn every_fuzzed_body_gets_a_typed_answer_and_the_server_stays_ready() {
    let server = server().await;
    let _region = register_region(&server).await;
    // The region's seed unchanged is served: the fuzzer starts from a request that works.
    let placed = seeds().pop().expect("seeds");
    let (headers, bytes) = placed.encode(&[]);
    let (status, _, answer) = server
        .post_raw("/v2/models/mlp/infer", &headers, bytes)
        .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let seeds = seeds();
    let mut runner = TestRunner::deterministic();
    let strategy = fuzzed();
    for _ in 0..cases() {
        let (seed, fields, byte_edits) = strategy.new_tree(&mut runner).expect("tree").current();
        let mut body = seeds[seed].clone();
        for f in &fields {
            change(&mut body, f);
        }
        let (headers, bytes) = body.encode(&byte_edits);
        check(&server, body.model, &headers, bytes).await;
    }
    assert_serving(&server).await;
    server.stop().await;
}

#[actix_web::test]
async fn random_bytes_get_a_typed_answer() {
    let server = server().await;
    let mut runner = TestRunner::deterministic();
    let strategy = (
        proptest::collection::vec(any::<u8>(), 0..512),
        proptest::option::of(0usize..600),
    );
    for _ in 0..cases().div_ceil(4) {
        let (bytes, header) = strategy.new_tree(&mut runner).expect("tree").current();
        let headers: Vec<_> = header
            .map(|h| (HEADER_LENGTH, h.to_string()))
            .into_iter()
            .collect();
        check(&server, "dynamic", &headers, bytes).await;
    }
    assert_serving(&server).await;
    server.stop().await;
}

/// Found while writing this fuzzer: JSON data reserved room for the declared element
/// count, so a declared shape of 2^42 elements asked for 32 TiB and aborted the process.
#[actix_web::test]
async fn a_shape_of_2_pow_40_is_refused_before_anything_is_allocated() {
    let server = server().await;
    let body = json!({"inputs": [
        {"name": "x", "shape": [1u64 << 40, 4], "datatype": "FP32", "data": [1.0]},
        {"name": "s", "shape": [1], "datatype": "BYTES", "data": ["z"]}]});
    let bytes = serde_json::to_vec(&body).expect("json");
    let (status, _, answer) = server
        .post_raw("/v2/models/dynamic/infer", &[], bytes)
        .await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&answer));
    assert_serving(&server).await;
    server.stop().await;
}

/// A BYTES input (whose length only its data tells) placed in shared memory with a size of
/// 2^60 is refused by its region's size, before a buffer of that size is asked for.
#[actix_web::test]
async fn a_placed_size_past_its_region_is_refused_before_anything_is_allocated() {
    let server = server().await;
    let _region = register_region(&server).await;
    let placed = json!({"shared_memory_region": REGION, "shared_memory_byte_size": 1u64 << 60});
    let body = json!({"inputs": [
        {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]},
        {"name": "s", "shape": [1], "datatype": "BYTES", "parameters": placed}]});
    let answer = server.post_json("/v2/models/dynamic/infer", &body).await;
    assert_eq!(answer.0, 400, "{}", answer.1);
    assert!(
        answer.1["error"]
            .as_str()
            .unwrap_or_default()
            .contains("which holds 1024"),
        "{}",
        answer.1
    );
    assert_serving(&server).await;
    server.stop().await;
}

/// Found while writing this fuzzer: a binary input whose element count times its element
/// size overflows (2^62 FP32 elements) panicked in the size check instead of being refused.
#[actix_web::test]
async fn a_binary_size_that_overflows_is_refused() {
    let server = server().await;
    let json = json!({"inputs": [
        {"name": "x", "shape": [1u64 << 60, 4], "datatype": "FP32", "parameters": {"binary_data_size": 16}},
        {"name": "s", "shape": [1], "datatype": "BYTES", "data": ["z"]}]});
    let json = serde_json::to_vec(&json).expect("json");
    let headers = [(HEADER_LENGTH, json.len().to_string())];
    let bytes = [json, vec![0; 16]].concat();
    let (status, _, answer) = server
        .post_raw("/v2/models/dynamic/infer", &headers, bytes)
        .await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&answer));
    assert_serving(&server).await;
    server.stop().await;
}
