//! Fuzzing the configuration readers: the server's `config.toml` (`src/config/`), a
//! model's `config.toml` (`src/repository/model_config.rs`) and a pipeline declaration
//! (`src/pipeline/decl.rs`, then `validate.rs` against the zoo's models). Mutated valid
//! files and arbitrary text are parsed into a configuration or refused with an error,
//! never a panic, and never with an allocation out of proportion to the text.

mod fuzz_support;

use clockwork::config::Config;
use clockwork::model::{DataType, TensorSpec};
use clockwork::pipeline::{validate, PipelineFile, StageModel};
use clockwork::repository::{zoo, ModelFileConfig};
use fuzz_support::{apply_text, config, edits, largest_allocation, ALLOCATION_LIMIT};
use proptest::prelude::*;

/// The shipped server configuration, and one with every device kind and model form.
fn server_texts() -> Vec<String> {
    let shipped = include_str!("../config.toml").to_owned();
    let sim = r#"
[server]
listen = "127.0.0.1:0"
max_body_bytes = 1048576
[policy]
name = "reactive"
max_batch = 8
[[devices]]
backend = "sim"
profile = "v100"
count = 2
pages = 32
sim = { seed = 3, noise_cv = 0.1, failure_rate = 0.01, slowdown = { from = "1s", until = "2s", factor = 3.0 } }
[[models]]
name = "m"
profile = "resnet50"
slo = "100ms"
copies = 2
"#;
    vec![shipped, sim.to_owned()]
}

fn model_texts() -> Vec<String> {
    let mut texts: Vec<String> = ["mlp", "cnn", "resnet", "detector", "classifier"]
        .iter()
        .map(|m| zoo::config_text(m).to_owned())
        .collect();
    texts.push(
        r#"max_batch_size = 8
batch_sizes = [1, 2, 8]
slo = "20ms"
backends = ["cpu", "sim"]
version = 3
inputs = [{ name = "x", datatype = "FP32", shape = [-1, 4] }]
outputs = [{ name = "y", datatype = "INT64", shape = [2] }]
"#
        .to_owned(),
    );
    texts
}

fn pipeline_text() -> String {
    zoo::pipeline_text("detect_classify").expect("zoo pipeline")
}

fn spec(name: &str, shape: &[i64]) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        datatype: DataType::Fp32,
        shape: shape.to_vec(),
    }
}

/// The zoo pipeline's models as validation sees them.
fn lookup(model: &str, _version: Option<u64>) -> Option<StageModel> {
    let (inputs, outputs) = match model {
        "detector" => (
            vec![spec("input", &[3, 32, 32])],
            vec![spec("scores", &[9]), spec("crops", &[9, 3, 16, 16])],
        ),
        "classifier" => (
            vec![spec("input", &[3, 16, 16])],
            vec![spec("probs", &[10])],
        ),
        _ => return None,
    };
    Some(StageModel {
        version: 1,
        inputs,
        outputs,
        single: 1_000_000,
    })
}

/// Parses `text` as every kind of file; checks the allocation bound.
fn parse_all(text: &str) {
    let (_, largest) = largest_allocation(|| {
        let _ = Config::parse(text).map(|c| c.server.decoders());
        if let Ok(model) = ModelFileConfig::parse(text) {
            let _ = model.batch_sizes(None);
            let _ = model.batch_sizes(Some(4));
            let _ = model.batch_sizes(Some(u32::MAX));
        }
        if let Ok(file) = PipelineFile::parse(text) {
            let _ = validate("p", &file.pipeline, lookup);
        }
        let _ = PipelineFile::declares_pipeline(text);
    });
    assert!(
        largest <= ALLOCATION_LIMIT.max(text.len() * 64),
        "{largest} bytes allocated for {} bytes of text",
        text.len()
    );
}

#[test]
fn the_seeds_are_valid() {
    for text in server_texts() {
        Config::parse(&text).expect("a valid server config");
    }
    for text in model_texts() {
        ModelFileConfig::parse(&text).expect("a valid model config");
    }
    let file = PipelineFile::parse(&pipeline_text()).expect("a valid declaration");
    validate("p", &file.pipeline, lookup).expect("a valid pipeline");
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mutated_server_configs_parse_or_are_refused(seed in 0usize..2, edits in edits(6)) {
        parse_all(&apply_text(&server_texts()[seed], &edits));
    }

    #[test]
    fn mutated_model_configs_parse_or_are_refused(seed in 0usize..6, edits in edits(6)) {
        parse_all(&apply_text(&model_texts()[seed], &edits));
    }

    #[test]
    fn mutated_pipelines_parse_validate_or_are_refused(edits in edits(6)) {
        parse_all(&apply_text(&pipeline_text(), &edits));
    }

    #[test]
    fn arbitrary_text_is_refused_or_parsed(text in "\\PC{0,256}") {
        parse_all(&text);
    }

    #[test]
    fn toml_shaped_text_is_refused_or_parsed(
        text in "(\\[{1,2}[a-z.]{1,12}\\]{1,2}\n|[a-z_]{1,14} = (-?[0-9]{1,22}|\"[0-9a-z ]{0,8}\"|\\[[0-9, ]{0,12}\\]|\\{ [a-z]{1,5} = [0-9]{1,3} \\}|true)\n){0,12}"
    ) {
        parse_all(&text);
    }
}
