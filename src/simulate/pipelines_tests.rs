//! The built-in pipelines agree with their models' profiles, and their declarations say
//! what their tables say.

use std::collections::HashMap;

use super::*;
use crate::gpu::profiles;
use crate::model::TensorSpec;
use crate::time::MS;

fn args(which: BuiltinPipeline) -> PipelineArgs {
    PipelineArgs {
        budget: Default::default(),
        which,
        fan_out: EmulatedFanOut {
            mean: 2.0,
            variance: 3.0,
        },
        escalate: 0.25,
    }
}

/// Every tensor a stage reads is the root's input or made above it, with the shape the
/// model expects (one row of it below a fan-out); every output the pipeline answers with
/// is made by some stage.
#[test]
fn stages_read_what_their_parents_make_in_the_shapes_their_models_take() {
    for which in [BuiltinPipeline::Traffic, BuiltinPipeline::Cascade] {
        let (input, shape) = which.input();
        // Pipeline tensor -> (its shape, the stage that made it; None for the root).
        let mut made: HashMap<&str, (Vec<i64>, Option<&str>)> =
            HashMap::from([(input, (shape.to_vec(), None))]);
        for stage in which.stages() {
            let spec = profiles::model(stage.model, stage.model, MS).expect(stage.model);
            let find = |specs: &[TensorSpec], name: &str| -> Vec<i64> {
                let spec = specs.iter().find(|t| t.name == name);
                spec.unwrap_or_else(|| panic!("{}: no tensor {name}", stage.model))
                    .shape
                    .clone()
            };
            let (parent, rows) = match stage.edge {
                Edge::Root => (None, None),
                Edge::Rows { after, rows } => (Some(after), Some(rows)),
                Edge::Threshold {
                    after, rows, score, ..
                } => {
                    let (score_shape, by) = &made[score];
                    assert_eq!(*by, Some(after), "{which}: score made by the parent");
                    assert_eq!(score_shape.len(), 1, "{which}: one score per row");
                    (Some(after), Some(rows))
                }
            };
            assert_eq!(stage.input_map.len(), spec.inputs.len(), "{}", stage.name);
            for &(model_input, tensor) in stage.input_map {
                let (shape, by) = made.get(tensor).expect(tensor).clone();
                let shape = if rows == Some(tensor) {
                    assert_eq!(by, parent, "{which}: rows come from the parent");
                    shape[1..].to_vec()
                } else {
                    shape
                };
                assert_eq!(shape, find(&spec.inputs, model_input), "{}", stage.name);
            }
            for &(model_output, tensor) in stage.output_map {
                let shape = find(&spec.outputs, model_output);
                made.insert(tensor, (shape, Some(stage.name)));
            }
        }
        for output in which.outputs() {
            assert!(made.contains_key(output), "{which}: {output} is never made");
        }
    }
}

#[test]
fn the_declaration_renders_every_stage_and_the_emulated_fan_out() {
    let toml: toml::Value = args(BuiltinPipeline::Traffic)
        .declaration(250 * MS)
        .parse()
        .unwrap();
    let pipeline = &toml["pipeline"];
    assert_eq!(pipeline["slo"].as_str(), Some("250000us"));
    assert_eq!(pipeline["inputs"][0]["shape"].as_array().unwrap().len(), 3);
    let stages = pipeline["stages"].as_array().unwrap();
    let names: Vec<&str> = stages.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["detect", "cars", "people"]);
    assert!(stages[0].get("after").is_none() && stages[0].get("fan_out").is_none());
    assert_eq!(stages[2]["after"].as_str(), Some("detect"));
    assert_eq!(stages[2]["fan_out"]["rows"].as_str(), Some("people"));
    assert_eq!(stages[1]["emulated_fan_out"]["mean"].as_float(), Some(2.0));
    assert_eq!(
        stages[1]["emulated_fan_out"]["variance"].as_float(),
        Some(3.0)
    );
    assert_eq!(stages[1]["input_map"]["crop"].as_str(), Some("cars"));

    let toml: toml::Value = args(BuiltinPipeline::Cascade)
        .declaration(100 * MS)
        .parse()
        .unwrap();
    let careful = &toml["pipeline"]["stages"][1];
    assert_eq!(careful["fan_out"]["score"].as_str(), Some("doubt"));
    assert_eq!(careful["fan_out"]["min"].as_float(), Some(0.5));
    let emulated = &careful["emulated_fan_out"];
    assert_eq!(emulated["mean"].as_float(), Some(0.25));
    assert_eq!(emulated["variance"].as_float(), Some(0.25 * 0.75));
}

#[test]
fn names_parse_and_print_back() {
    for name in PIPELINES {
        let which: BuiltinPipeline = name.parse().unwrap();
        assert_eq!(which.to_string(), *name);
    }
    let error = "nope".parse::<BuiltinPipeline>().unwrap_err();
    assert!(error.to_string().contains("traffic, cascade"), "{error}");
}

/// The pipeline core reads both declarations and accepts them against the built-in
/// profiles, with the emulated fan-outs the flags give.
#[test]
fn the_pipeline_core_accepts_both_declarations() {
    use crate::pipeline::{validate, PipelineFile, StageModel};
    let lookup = |model: &str, _: Option<u64>| {
        let spec = profiles::model(model, model, MS)?;
        Some(StageModel {
            version: spec.version,
            single: spec.profile.latency(1)?,
            inputs: spec.inputs,
            outputs: spec.outputs,
        })
    };
    for which in [BuiltinPipeline::Traffic, BuiltinPipeline::Cascade] {
        let args = args(which);
        let file = PipelineFile::parse(&args.declaration(100 * MS)).unwrap();
        let pipeline = validate(&which.to_string(), &file.pipeline, lookup)
            .unwrap_or_else(|e| panic!("{which}: {e}"));
        assert_eq!(pipeline.slo, 100 * MS);
        assert_eq!(pipeline.stages.len(), which.stages().len());
        for (stage, ours) in pipeline.stages.iter().zip(which.stages()) {
            assert_eq!(stage.name, ours.name);
            let emulated = stage.emulated_fan_out.map(|e| (e.mean, e.variance));
            let expected = (ours.edge != Edge::Root).then(|| args.emulated());
            assert_eq!(emulated, expected.map(|e| (e.mean, e.variance)));
        }
    }
}
