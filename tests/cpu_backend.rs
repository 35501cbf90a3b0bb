//! The cpu backend through the real actors (controller, executors on their own threads,
//! model cache) on the built-in zoo: outputs equal tract run directly, memory is counted
//! in pages and never exceeds a device's capacity, and models that cannot be served are
//! refused one by one while the others serve.

mod cpu_support;

use clockwork::actors::messages::Inferred;
use clockwork::actors::messages::SnapshotExecutor;
use clockwork::events::Event;
use clockwork::protocol::ActionTag;
use clockwork::repository::zoo;
use clockwork::tensor::Tensor;
use cpu_support::{
    assert_close, config, from_tract, infer, infer_items, start, tract_direct, values,
    write_broken, TempDir,
};
use tract_onnx::prelude::Tensor as TractTensor;

const MIB: u64 = 1 << 20;

/// Item shape of each zoo model's input.
fn item_shape(model: &str) -> Vec<usize> {
    match model {
        "mlp" => vec![256],
        "cnn" | "detector" => vec![3, 32, 32],
        "classifier" => vec![3, 16, 16],
        _ => vec![3, 64, 64],
    }
}

fn item(model: &str, seed: u64) -> Tensor {
    let shape = item_shape(model);
    let count = shape.iter().product();
    Tensor::from_f32("input", shape, &values(count, seed))
}

/// Items of request `request`: 1 to 3 of them, so that batches of several items run
/// whatever the policy makes of concurrent requests (a request's items run together).
fn items_of(request: u64) -> u64 {
    1 + request % 3
}

/// The seed of item `j` of request `request`: every item of the test is different.
fn seed(request: u64, j: u64) -> u64 {
    request * 4 + j
}

/// Request `request`'s input: its items' values back to back.
fn request_input(model: &str, request: u64) -> Tensor {
    let shape = item_shape(model);
    let count: usize = shape.iter().product();
    let values: Vec<f32> = (0..items_of(request))
        .flat_map(|j| values(count, seed(request, j)))
        .collect();
    Tensor::from_f32("input", shape, &values)
}

#[actix_web::test]
async fn served_outputs_equal_tract_run_directly() {
    let root = TempDir::new("cpu-equal");
    zoo::write_missing(root.path()).unwrap();
    let runtime = start(&config(root.path(), 2, 64, 16 * MIB));
    let mut largest_batch = 0;
    for &model in zoo::MODELS {
        // Concurrent requests, so that the controller may also batch several of them.
        let requests: Vec<_> = (0..12u64)
            .map(|request| {
                let inputs = vec![request_input(model, request)];
                let items = items_of(request) as u32;
                let runtime = &runtime;
                async move { infer_items(runtime, model, inputs, items).await }
            })
            .collect();
        let answers = futures_util::future::join_all(requests).await;
        let onnx = root.path().join(model).join("1/model.onnx");
        for (request, answer) in (0..).zip(answers) {
            assert!(!answer.emulated, "{model}: the cpu backend computes");
            largest_batch = largest_batch.max(answer.timing.batch);
            check_items(&onnx, model, request, &answer);
        }
    }
    assert!(largest_batch > 1, "only batches of {largest_batch} ran");
    runtime.shutdown().await;
}

/// Every output of every item of `answer` equals tract's run of that item alone.
fn check_items(onnx: &std::path::Path, model: &str, request: u64, answer: &Inferred) {
    let batch = answer.timing.batch;
    let shape = item_shape(model);
    let count: usize = shape.iter().product();
    for j in 0..items_of(request) {
        let mut batched = vec![1];
        batched.extend(&shape);
        let direct = TractTensor::from_shape(&batched, &values(count, seed(request, j))).unwrap();
        let want = tract_direct(onnx, &[&direct]);
        // Every output (the detector has two: scores and crops).
        assert_eq!(answer.outputs.len(), want.len(), "{model}");
        for (got, want) in answer.outputs.iter().zip(&want) {
            let mut want = from_tract(&got.name, want);
            want.shape.remove(0);
            assert_eq!(got.shape, want.shape, "{model} {}", got.name);
            let got = item_of(got, j as usize, items_of(request) as usize);
            let what = format!(
                "{model} {} request {request} item {j} (batch {batch})",
                got.name
            );
            assert_close(&what, &got, &want, 1e-4, 1e-5);
        }
    }
}

/// Item `j` of an output holding `items` items back to back.
fn item_of(output: &Tensor, j: usize, items: usize) -> Tensor {
    let per = output.data.len() / items;
    Tensor {
        data: output.data[j * per..(j + 1) * per].to_vec().into(),
        ..output.clone()
    }
}

#[actix_web::test]
async fn loads_beyond_capacity_evict_and_never_overfill_a_device() {
    let root = TempDir::new("cpu-evict");
    zoo::write_missing(root.path()).unwrap();
    // 1 MiB pages: mlp takes 8, cnn 6, resnet 3, detector and classifier 1 each; the one
    // device has 12, so mlp and cnn never fit together.
    let runtime = start(&config(root.path(), 1, 12, MIB));
    let pages: Vec<u32> = runtime
        .models
        .iter()
        .map(|m| m.profile.pages(MIB))
        .collect();
    assert_eq!(pages.len(), zoo::MODELS.len(), "every zoo model registered");
    assert!(pages.iter().all(|&p| p <= 12), "{pages:?}");
    let mut events = runtime.events.subscribe();
    for round in 0..3u64 {
        for &model in &["mlp", "cnn", "resnet"] {
            let answer = infer(&runtime, model, vec![item(model, round)]).await;
            assert!(!answer.outputs.is_empty());
            let snapshot = runtime.executors[0].send(SnapshotExecutor).await.unwrap();
            assert!(
                snapshot.pages_used <= snapshot.pages,
                "{} of {} pages used",
                snapshot.pages_used,
                snapshot.pages
            );
        }
    }
    let mut unloads = 0;
    while let Ok(event) = events.try_recv() {
        if let Event::ActionDone(done) = event {
            unloads += usize::from(done.kind == ActionTag::Unload && done.error.is_none());
        }
    }
    assert!(
        unloads >= 2,
        "mlp and cnn alternate: evictions expected, saw {unloads}"
    );
    runtime.shutdown().await;
}

#[actix_web::test]
async fn models_that_cannot_be_served_are_refused_and_the_others_serve() {
    let root = TempDir::new("cpu-refuse");
    zoo::write_missing(root.path()).unwrap();
    write_broken(root.path(), "garbage");
    // 5 pages of 1 MiB: resnet (3), classifier and detector (1 each) fit, cnn (6) and
    // mlp (8) do not.
    let runtime = start(&config(root.path(), 1, 5, MIB));
    let served: Vec<&str> = runtime.models.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(served, ["classifier", "detector", "resnet"]);
    let reason = |name: &str| {
        runtime
            .refused
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("{name} should be refused: {:?}", runtime.refused))
    };
    assert!(reason("mlp").contains("needs 8 pages"), "{}", reason("mlp"));
    assert!(
        reason("cnn").contains("more than any device"),
        "{}",
        reason("cnn")
    );
    assert!(
        reason("garbage").contains("not an ONNX model"),
        "{}",
        reason("garbage")
    );
    let answer = infer(&runtime, "resnet", vec![item("resnet", 1)]).await;
    assert_eq!(answer.outputs[0].shape, vec![10]);
    runtime.shutdown().await;
}
