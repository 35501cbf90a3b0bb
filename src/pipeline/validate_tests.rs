//! Each mistake of a declaration is refused with its own error.

use super::*;
use crate::model::{DataType, TensorSpec};
use crate::pipeline::decl::PipelineFile;

pub(crate) fn spec(name: &str, shape: &[i64]) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        datatype: DataType::Fp32,
        shape: shape.to_vec(),
    }
}

/// A detector (image [4] -> scores [n], crops [n, 2]) and a classifier ([2] -> [3]).
pub(crate) fn lookup(model: &str, version: Option<u64>) -> Option<StageModel> {
    if version.is_some_and(|v| v != 1) {
        return None;
    }
    let (inputs, outputs) = match model {
        "det" => (
            vec![spec("image", &[4])],
            vec![spec("scores", &[-1]), spec("crops", &[-1, 2])],
        ),
        "cls" => (vec![spec("input", &[2])], vec![spec("probs", &[3])]),
        _ => return None,
    };
    Some(StageModel {
        version: 1,
        inputs,
        outputs,
        single: 1_000_000,
    })
}

pub(crate) const GOOD: &str = r#"
[pipeline]
slo = "100ms"
inputs = [{ name = "image", datatype = "FP32", shape = [4] }]
outputs = ["scores", "labels"]

[[pipeline.stages]]
name = "classify"
model = "cls"
after = "detect"
fan_out = { rows = "crops", score = "scores", min = 0.5 }
input_map = { input = "crops" }
output_map = { probs = "labels" }

[[pipeline.stages]]
name = "detect"
model = "det"
input_map = { image = "image" }
output_map = { scores = "scores", crops = "crops" }
"#;

fn check(text: &str) -> Result<crate::pipeline::Pipeline, PipelineError> {
    let file = PipelineFile::parse(text).expect("parses");
    validate("p", &file.pipeline, lookup)
}

#[test]
fn a_good_declaration_is_ordered_and_typed() {
    let p = check(GOOD).unwrap();
    assert_eq!(p.stages[0].name, "detect", "parents come first");
    assert_eq!(p.stages[0].children, vec![1]);
    assert_eq!(p.stages[1].parent, Some(0));
    assert!(p.stages[1].fanned && !p.stages[0].fanned);
    assert_eq!(p.stages[1].row, Some(spec("crops", &[2])));
    assert!(!p.outputs[0].joined);
    assert!(p.outputs[1].joined);
    assert_eq!(p.outputs[1].spec.shape, vec![-1, 3]);
}

type Expect = fn(&PipelineError) -> bool;

/// One declaration per mistake, with the error it must get.
fn mistakes() -> Vec<(String, Expect)> {
    let mut all = stage_mistakes();
    all.extend(tensor_mistakes());
    all
}

/// Mistakes in the stages: models, versions, the tree.
fn stage_mistakes() -> Vec<(String, Expect)> {
    use PipelineError as E;
    vec![
        (GOOD.replace("\"cls\"", "\"nope\""), |e| {
            matches!(e, E::UnknownModel { .. })
        }),
        (
            GOOD.replace("model = \"cls\"", "model = \"cls\"\nversion = 3"),
            |e| {
                matches!(
                    e,
                    E::UnknownModel {
                        version: Some(3),
                        ..
                    }
                )
            },
        ),
        (
            GOOD.replace("after = \"detect\"", "after = \"dtect\""),
            |e| matches!(e, E::UnknownAfter { .. }),
        ),
        (
            GOOD.replace(
                "input_map = { image = \"image\" }",
                "after = \"classify\"\ninput_map = { image = \"image\" }",
            ),
            |e| matches!(e, E::Cycle(_)),
        ),
        (
            GOOD.replace("name = \"classify\"", "name = \"detect\""),
            |e| matches!(e, E::DuplicateStage(_)),
        ),
    ]
}

/// Mistakes in the tensors: names, shapes, datatypes, fan-outs, outputs, the objective.
fn tensor_mistakes() -> Vec<(String, Expect)> {
    use PipelineError as E;
    vec![
        (
            GOOD.replace("{ input = \"crops\" }", "{ input = \"crop\" }"),
            |e| matches!(e, E::UnknownTensor { .. }),
        ),
        (
            GOOD.replace("{ input = \"crops\" }", "{ input = \"image\" }"),
            |e| matches!(e, E::Mismatch { .. }),
        ),
        (GOOD.replace("shape = [4]", "shape = [5]"), |e| {
            matches!(e, E::Mismatch { .. })
        }),
        (
            GOOD.replace("datatype = \"FP32\"", "datatype = \"INT64\""),
            |e| matches!(e, E::Mismatch { .. }),
        ),
        (
            GOOD.replace("{ input = \"crops\" }", "{ inpt = \"crops\" }"),
            |e| matches!(e, E::UnknownModelTensor { .. }),
        ),
        (
            GOOD.replace("input_map = { image = \"image\" }", "input_map = {}"),
            |e| matches!(e, E::MissingInput { .. }),
        ),
        (
            GOOD.replace("score = \"scores\"", "score = \"crops\""),
            |e| matches!(e, E::ScoreRows { .. }),
        ),
        (
            GOOD.replace("rows = \"crops\"", "rows = \"image\"")
                .replace("{ input = \"crops\" }", "{ input = \"image\" }"),
            |e| matches!(e, E::ScoreRows { .. } | E::Mismatch { .. }),
        ),
        (
            GOOD.replace("\"scores\", \"labels\"", "\"scores\", \"label\""),
            |e| matches!(e, E::NeverProduced(_)),
        ),
        (
            GOOD.replace("probs = \"labels\"", "probs = \"scores\""),
            |e| matches!(e, E::DuplicateTensor(_)),
        ),
        (GOOD.replace("slo = \"100ms\"", "slo = \"0ms\""), |e| {
            matches!(e, E::ZeroSlo)
        }),
        (
            GOOD.replace(
                "min = 0.5 }",
                "min = 0.5 }\nemulated_fan_out = { mean = 1.0, variance = 0.0 }",
            ),
            |e| matches!(e, E::BadEmulatedFanOut(_)),
        ),
    ]
}

#[test]
fn each_mistake_has_its_error() {
    for (text, expected) in mistakes() {
        let error = check(&text).expect_err(&text);
        assert!(expected(&error), "{error:?} for\n{text}");
        assert!(!error.to_string().is_empty());
    }
}

#[test]
fn fan_out_on_a_tensor_without_rows_is_refused() {
    let scalar = |model: &str, v: Option<u64>| {
        let mut m = lookup(model, v)?;
        if model == "det" {
            m.outputs[1] = spec("crops", &[]);
        }
        Some(m)
    };
    let file = PipelineFile::parse(GOOD).unwrap();
    let error = validate("p", &file.pipeline, scalar).unwrap_err();
    assert!(matches!(error, PipelineError::NoRows { .. }), "{error:?}");
}
