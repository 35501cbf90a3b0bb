//! JSON tensors: decoding and encoding a 150,528-element FP32 tensor (squeezenet's
//! 1x3x224x224 input) against a baseline measured in the same run.
//!
//! Decode: the body as the edge benchmark's client sends it (numbers rounded to five
//! decimals, `", "` between them) read by `codec::parse_request` and `codec::from_json`
//! (to the tensor's bytes), against `serde_json::from_slice` into a `Value` of the same
//! body (the first step of the old path alone), and against the whole old path (that
//! `Value`, its `data` flattened, each scalar converted).
//! The same for a body of shortest `f32` texts (what this server's own answers hold).
//! Encode: `codec::to_json` and `serde_json::to_vec` of the tensor's bytes (the answer's
//! `data`), against `serde_json::to_vec` of a `Value` array of the same numbers.
//!
//! `cargo bench --bench json -- [reps]` (default 30): the best and the median of `reps`
//! runs of each (baseline and new in turns), and the ratio baseline / new of the medians.

use std::time::Instant;

use bytes::Bytes;
use clockwork::api::codec;
use clockwork::model::DataType;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};
use serde_json::Value;

const ELEMENTS: usize = 3 * 224 * 224;

/// Best and median seconds of `reps` runs of `baseline` and of `new`, taken in turns so
/// that both see the same machine (this one is shared and busy).
fn time<A, B>(
    reps: usize,
    mut baseline: impl FnMut() -> A,
    mut new: impl FnMut() -> B,
) -> ((f64, f64), (f64, f64)) {
    let mut runs = (Vec::with_capacity(reps), Vec::with_capacity(reps));
    for _ in 0..reps {
        let start = Instant::now();
        std::hint::black_box(baseline());
        runs.0.push(start.elapsed().as_secs_f64());
        let start = Instant::now();
        std::hint::black_box(new());
        runs.1.push(start.elapsed().as_secs_f64());
    }
    let summary = |mut runs: Vec<f64>| {
        runs.sort_by(f64::total_cmp);
        (runs[0], runs[reps / 2])
    };
    (summary(runs.0), summary(runs.1))
}

/// A request body with one FP32 input whose elements are written by `text`.
fn body(values: &[f32], text: impl Fn(f32) -> String) -> Bytes {
    let data: Vec<String> = values.iter().map(|&v| text(v)).collect();
    format!(
        r#"{{"inputs": [{{"name": "data_0", "shape": [1, 3, 224, 224], "datatype": "FP32", "data": [{}]}}]}}"#,
        data.join(", ")
    )
    .into()
}

/// The tensor's bytes as the old path read them: the whole body into a `Value`, its
/// `data` flattened, each scalar converted.
fn decode_old(body: &Bytes) -> Vec<u8> {
    fn flatten<'a>(value: &'a Value, out: &mut Vec<&'a Value>) {
        match value {
            Value::Array(items) => items.iter().for_each(|item| flatten(item, out)),
            scalar => out.push(scalar),
        }
    }
    let request: Value = serde_json::from_slice(body).expect("JSON");
    let mut scalars = Vec::new();
    flatten(&request["inputs"][0]["data"], &mut scalars);
    let mut out = Vec::with_capacity(scalars.len() * 4);
    for scalar in scalars {
        let x = scalar.as_f64().expect("a number") as f32;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// The tensor's bytes as the new path reads them.
fn decode(body: &Bytes) -> Vec<u8> {
    let request = codec::parse_request(body).expect("a valid request");
    let input = &request.inputs[0];
    let data = input.data.as_ref().expect("JSON data");
    codec::from_json(&input.name, DataType::Fp32, ELEMENTS, data).expect("FP32 data")
}

fn row(name: &str, baseline: (f64, f64), new: (f64, f64)) {
    let ms = |s: f64| s * 1e3;
    println!(
        "| {name} | {:.2} / {:.2} | {:.2} / {:.2} | {:.1}x |",
        ms(baseline.0),
        ms(baseline.1),
        ms(new.0),
        ms(new.1),
        baseline.1 / new.1
    );
}

fn main() {
    let reps = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(30)
        .max(1);
    let mut rng = StdRng::seed_from_u64(11);
    let values: Vec<f32> = (0..ELEMENTS)
        .map(|_| StandardNormal.sample(&mut rng))
        .collect();
    let rounded = body(&values, |v| {
        format!("{}", (f64::from(v) * 1e5).round() / 1e5)
    });
    let shortest = body(&values, |v| serde_json::to_string(&v).unwrap_or_default());
    let exact: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(decode(&shortest), exact, "shortest texts read back exactly");
    println!(
        "{ELEMENTS} FP32 elements; bodies of {} KB (5 decimals) and {} KB (shortest); {reps} runs\n",
        rounded.len() / 1000,
        shortest.len() / 1000
    );
    println!("| what | baseline best / median (ms) | new best / median (ms) | baseline / new |");
    println!("| --- | --- | --- | --- |");
    for (name, body) in [("5 decimals", &rounded), ("shortest f32", &shortest)] {
        assert_eq!(
            decode(body),
            decode_old(body),
            "{name}: the old path's bytes"
        );
        let (baseline, new) = time(
            reps,
            || serde_json::from_slice::<Value>(body).expect("JSON"),
            || decode(body),
        );
        row(&format!("decode, {name}: Value only"), baseline, new);
        let (old, new) = time(reps, || decode_old(body), || decode(body));
        row(&format!("decode, {name}: old path"), old, new);
    }
    let numbers = Value::Array(
        values
            .iter()
            .map(|&v| serde_json::from_str(&serde_json::to_string(&v).unwrap_or_default()))
            .collect::<Result<_, _>>()
            .expect("numbers"),
    );
    let (baseline, new) = time(
        reps,
        || serde_json::to_vec(&numbers).expect("JSON"),
        || serde_json::to_vec(&codec::to_json(DataType::Fp32, &exact)).expect("JSON"),
    );
    row("encode (typed elements)", baseline, new);
}
