//! The state machine of one root request: fan-out, join, failures, partial answers.

use std::sync::Arc;

use super::*;
use crate::pipeline::budget::Proportional;
use crate::pipeline::decl::PipelineFile;
use crate::pipeline::validate;
use crate::pipeline::validate::tests::{lookup, GOOD};

fn pipeline(text: &str) -> Arc<Pipeline> {
    let file = PipelineFile::parse(text).unwrap();
    Arc::new(validate("p", &file.pipeline, lookup).unwrap())
}

fn run(text: &str) -> Run {
    Run::new(pipeline(text), Arc::new(Proportional), 7, 100_000_000)
}

/// The detector's answer: `scores` and one crop [i, i] per score.
fn detected(scores: &[f32]) -> Answered {
    let crops: Vec<f32> = (0..scores.len())
        .flat_map(|i| [i as f32, i as f32])
        .collect();
    Answered {
        outputs: vec![
            Tensor::from_f32("scores", vec![scores.len()], scores),
            Tensor::from_f32("crops", vec![scores.len(), 2], &crops),
        ],
        emulated: false,
    }
}

/// The classifier's answer to a crop [x, x]: [x, x, x].
fn classified(sub: &SubRequest) -> Answered {
    let x = sub.inputs[0].to_f32().unwrap()[0];
    Answered {
        outputs: vec![Tensor::from_f32("probs", vec![3], &[x; 3])],
        emulated: false,
    }
}

#[test]
fn threshold_fan_out_and_join_in_row_order() {
    let mut r = run(GOOD);
    let step = r.start(vec![Tensor::from_f32("image", vec![4], &[0.0; 4])], 0);
    assert_eq!(step.submit.len(), 1);
    assert!(step.submit[0].deadline <= 100_000_000);
    let step = r.on_answer(SubId(0), Ok(detected(&[0.9, 0.1, 0.7, 0.5])), 10);
    // rows 0, 2 and 3 pass min = 0.5
    assert_eq!(step.submit.len(), 3);
    assert_eq!(step.fan_outs, vec![(1, 3)]);
    assert_eq!(step.submit[1].inputs[0].name, "input");
    assert_eq!(step.submit[1].inputs[0].to_f32().unwrap(), vec![2.0, 2.0]);
    let subs = step.submit;
    assert!(r
        .on_answer(subs[2].sub, Ok(classified(&subs[2])), 20)
        .answer
        .is_none());
    assert!(r
        .on_answer(subs[0].sub, Ok(classified(&subs[0])), 20)
        .answer
        .is_none());
    let answer = r
        .on_answer(subs[1].sub, Ok(classified(&subs[1])), 20)
        .answer;
    let joined = answer.unwrap().unwrap();
    assert_eq!(joined.outputs[0].name, "scores");
    assert_eq!(joined.outputs[1].shape, vec![3, 3]);
    assert_eq!(
        joined.outputs[1].to_f32().unwrap(),
        vec![0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0]
    );
    assert!(r.is_answered());
    assert!(r
        .on_answer(subs[0].sub, Ok(classified(&subs[0])), 30)
        .answer
        .is_none());
}

#[test]
fn zero_rows_join_to_an_empty_tensor() {
    let mut r = run(GOOD);
    r.start(vec![Tensor::from_f32("image", vec![4], &[0.0; 4])], 0);
    let step = r.on_answer(SubId(0), Ok(detected(&[0.1, 0.2])), 10);
    let joined = step.answer.unwrap().unwrap();
    assert_eq!(joined.outputs[1].shape, vec![0, 3]);
    assert!(joined.outputs[1].data.is_empty());
}

fn refused() -> Failure {
    Failure {
        outcome: Outcome::TimedOut,
        message: "late".into(),
    }
}

#[test]
fn a_failure_answers_the_root_once_and_withdraws_the_rest() {
    let mut r = run(GOOD);
    r.start(vec![Tensor::from_f32("image", vec![4], &[0.0; 4])], 0);
    let subs = r
        .on_answer(SubId(0), Ok(detected(&[0.9, 0.9, 0.9])), 10)
        .submit;
    let step = r.on_answer(subs[1].sub, Err(refused()), 20);
    assert_eq!(step.answer, Some(Err(refused())));
    assert_eq!(step.withdraw, vec![subs[0].sub, subs[2].sub]);
    let later = r.on_answer(subs[0].sub, Ok(classified(&subs[0])), 30);
    assert!(later.answer.is_none() && later.submit.is_empty());
}

#[test]
fn partial_results_leave_failed_rows_out_and_name_them() {
    let mut r = run(&GOOD.replace("slo =", "partial_results = true\nslo ="));
    r.start(vec![Tensor::from_f32("image", vec![4], &[0.0; 4])], 0);
    let subs = r.on_answer(SubId(0), Ok(detected(&[0.9, 0.9])), 10).submit;
    let step = r.on_answer(subs[0].sub, Err(refused()), 20);
    assert!(step.answer.is_none() && step.withdraw.is_empty());
    let joined = r
        .on_answer(subs[1].sub, Ok(classified(&subs[1])), 20)
        .answer
        .unwrap()
        .unwrap();
    assert_eq!(joined.outputs[1].shape, vec![1, 3]);
    assert_eq!(
        joined.missing,
        vec![Missing {
            stage: "classify".into(),
            row: vec![0]
        }]
    );
    // A failure above the fan-out still fails the root.
    let mut r = run(&GOOD.replace("slo =", "partial_results = true\nslo ="));
    r.start(vec![Tensor::from_f32("image", vec![4], &[0.0; 4])], 0);
    assert_eq!(
        r.on_answer(SubId(0), Err(refused()), 5).answer,
        Some(Err(refused()))
    );
}

#[test]
fn emulated_answers_draw_the_fan_out_and_cycle_the_rows() {
    let text = GOOD.replace(
        "min = 0.5 }",
        "min = 0.5 }\nemulated_fan_out = { mean = 4.0, variance = 4.0 }",
    );
    let mut r = run(&text);
    r.start(vec![Tensor::from_f32("image", vec![4], &[0.0; 4])], 0);
    let mut answer = detected(&[0.0, 0.0]);
    answer.emulated = true;
    let step = r.on_answer(SubId(0), Ok(answer), 10);
    let expected = draw::count(
        crate::pipeline::EmulatedFanOut {
            mean: 4.0,
            variance: 4.0,
        },
        draw::seed(7, 1, &[]),
    );
    assert_eq!(step.submit.len(), expected);
    for (i, sub) in step.submit.iter().enumerate() {
        assert_eq!(sub.inputs[0].to_f32().unwrap()[0], (i % 2) as f32);
    }
}

#[test]
fn sub_requests_carry_their_downstream_time() {
    let p = pipeline(GOOD);
    let (detector, classifier) = (p.stages[0].single, p.stages[1].single);
    assert!(classifier > 0);
    let mut r = run(GOOD);
    let step = r.start(vec![Tensor::from_f32("image", vec![4], &[0.0; 4])], 0);
    // The detector's R_v is the classifier's batch-1 estimate; a leaf's is 0.
    assert_eq!(step.submit[0].downstream, classifier);
    let step = r.on_answer(SubId(0), Ok(detected(&[0.9])), 10);
    assert_eq!(step.submit[0].downstream, 0);
    // With the classifier's queue known, the first stage sees it (never less than the
    // batch-1 estimate); later stages are not judged by it.
    let mut r = run(GOOD).with_costs(vec![detector, 40_000_000]);
    let step = r.start(vec![Tensor::from_f32("image", vec![4], &[0.0; 4])], 0);
    assert_eq!(step.submit[0].downstream, 40_000_000);
    let mut r = run(GOOD).with_costs(vec![0, 1]);
    let step = r.start(vec![Tensor::from_f32("image", vec![4], &[0.0; 4])], 0);
    assert_eq!(step.submit[0].downstream, classifier);
}
