//! Fuzzing the ONNX signature reader (`src/gpu/cpu/graph.rs`, what the repository reads of
//! a model's graph) and the plan compiler behind it: mutated bytes of the zoo's models
//! are read or refused with an error, never a panic.

mod fuzz_support;

use std::sync::OnceLock;

use clockwork::gpu::cpu::graph::Signature;
use clockwork::gpu::cpu::plan::{Plan, PlanRequest};
use clockwork::model::TensorSpec;
use clockwork::repository::zoo::{self, Batch};
use fuzz_support::{apply, cases, config, edits};
use proptest::prelude::*;

const MODELS: [&str; 3] = ["mlp", "detector", "classifier"];

/// The zoo models' bytes, built once.
fn models() -> &'static [Vec<u8>] {
    static MODELS_BYTES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    MODELS_BYTES.get_or_init(|| {
        MODELS
            .iter()
            .map(|m| zoo::build(m, Batch::Dynamic, zoo::SEED).expect("zoo model"))
            .collect()
    })
}

#[test]
fn the_seeds_are_read() {
    for bytes in models() {
        Signature::read(bytes).expect("a zoo model's signature");
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mutated_models_are_read_or_refused(model in 0usize..3, edits in edits(8)) {
        let bytes = apply(&models()[model], &edits);
        if let Ok(signature) = Signature::read(&bytes) {
            let _ = signature.batch_dim();
        }
    }

    #[test]
    fn arbitrary_bytes_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = Signature::read(&bytes);
    }
}

/// Compiles a batch-1 plan of `bytes` as the repository would from their signature.
fn compile(bytes: &[u8], signature: &Signature) {
    let inputs: Vec<TensorSpec> = signature
        .inputs
        .iter()
        .map(|i| TensorSpec {
            name: i.name.clone(),
            datatype: i.datatype,
            shape: i
                .dims
                .iter()
                .skip(1)
                .map(|d| d.and_then(|d| i64::try_from(d).ok()).unwrap_or(-1))
                .collect(),
        })
        .collect();
    let request = PlanRequest {
        inputs: &inputs,
        outputs: &signature.outputs,
        batched: true,
        batch: 1,
    };
    let _ = Plan::compile(bytes, request);
}

proptest! {
    // Compiling takes milliseconds: a sixteenth of the cases.
    #![proptest_config(ProptestConfig { cases: cases().div_ceil(16), ..config() })]

    #[test]
    fn mutated_models_compile_or_are_refused(model in 0usize..3, edits in edits(4)) {
        let bytes = apply(&models()[model], &edits);
        if let Ok(signature) = Signature::read(&bytes) {
            compile(&bytes, &signature);
        }
    }
}
