//! Third-party models through the cpu backend, checked against their reference outputs.
//!
//! The `onnx` package on PyPI ships, inside its wheel, real model graphs ("light"
//! ResNet50, SqueezeNet, DenseNet121, Inception v1, ShuffleNet: the real architectures
//! with generated weights) and PyTorch-exported operator tests, each with reference
//! outputs. `scripts/onnx_testdata.sh` unpacks that data into target/onnx-testdata (this
//! test runs it if the data is missing). Every model is put into a repository, registered
//! and profiled by the runtime, and served through the real actors; the answers must
//! match the references within the tolerances onnx's own backend tests use.
//!
//! What each part proves: the light models' weights are constants, so their reference
//! outputs hardly depend on the input (uniform softmax); they prove that whole real
//! architectures are read, planned and run with the right shapes. The PyTorch exports
//! have random inputs and weights: they check the numbers (a 1% change of an input
//! fails them).

mod cpu_support;

use std::path::Path;

use clockwork::actors::Runtime;
use clockwork::model::{ModelSpec, TensorSpec};
use clockwork::tensor::Tensor;
use cpu_support::reference::{data_root, put, repo_name, CONVERTED, LIGHT};
use cpu_support::{assert_close, config, from_tract, infer, start, TempDir};
use tract_onnx::data_resolver::FopenDataResolver;
use tract_onnx::tensor::{load_tensor, proto_from_reader};

/// A model the cpu backend cannot serve (string tensors): refused, never fatal.
const UNSERVABLE: &str = "simple/test_strnorm_model_monday_casesensintive_lower";

fn read_pb(path: &Path) -> tract_onnx::prelude::Tensor {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let proto = proto_from_reader(file).expect("a TensorProto");
    load_tensor(&FopenDataResolver, &proto, None).expect("a tensor")
}

/// The spec `model` was registered with.
fn spec<'a>(runtime: &'a Runtime, model: &str) -> &'a ModelSpec {
    runtime
        .models
        .iter()
        .find(|m| m.name == model)
        .unwrap_or_else(|| panic!("{model} was refused: {:?}", runtime.refused))
}

/// A tensor as one item of `model`: without the batch dimension if the model has one.
fn as_item(runtime: &Runtime, model: &str, name: &str, t: &tract_onnx::prelude::Tensor) -> Tensor {
    let mut tensor = from_tract(name, t);
    if spec(runtime, model).batched {
        assert_eq!(tensor.shape.first(), Some(&1), "{model}: batch of one");
        tensor.shape.remove(0);
    }
    tensor
}

/// The stored tensors `<prefix>_<i>.pb` of a test data set, named after `declared`.
fn stored(
    runtime: &Runtime,
    model: &str,
    declared: &[TensorSpec],
    set: &Path,
    prefix: &str,
) -> Vec<Tensor> {
    declared
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let t = read_pb(&set.join(format!("{prefix}_{i}.pb")));
            as_item(runtime, model, &d.name, &t)
        })
        .collect()
}

/// onnx's runner feeds light models `arange(n).reshape(shape) / n` as float32.
fn light_input(shape: &[usize]) -> tract_onnx::prelude::Tensor {
    let n: usize = shape.iter().product();
    let values: Vec<f32> = (0..n).map(|i| (i as f64 / n as f64) as f32).collect();
    tract_onnx::prelude::Tensor::from_shape(shape, &values).unwrap()
}

async fn check(
    runtime: &Runtime,
    model: &str,
    inputs: Vec<Tensor>,
    expected: Vec<Tensor>,
    rtol: f32,
) {
    let answer = infer(runtime, model, inputs).await;
    assert!(!answer.emulated);
    assert_eq!(answer.outputs.len(), expected.len(), "{model}: outputs");
    for (got, want) in answer.outputs.iter().zip(&expected) {
        assert_eq!(got.shape, want.shape, "{model}: shape of {}", want.name);
        assert_close(&format!("{model}/{}", want.name), got, want, rtol, 1e-7);
    }
}

#[actix_web::test]
async fn reference_models_match_their_outputs() {
    let data = data_root();
    let repo = TempDir::new("onnx-reference");
    for (name, _) in LIGHT {
        put(
            repo.path(),
            name,
            &data.join(format!("light/light_{name}.onnx")),
        );
    }
    for case in CONVERTED {
        put(
            repo.path(),
            &repo_name(case),
            &data.join(case).join("model.onnx"),
        );
    }
    put(
        repo.path(),
        &repo_name(UNSERVABLE),
        &data.join(UNSERVABLE).join("model.onnx"),
    );
    let runtime = start(&config(repo.path(), 1, 64, 16 << 20));

    let refused: Vec<&str> = runtime.refused.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(refused, [repo_name(UNSERVABLE)], "{:?}", runtime.refused);
    assert!(
        runtime.refused[0].1.contains("not served"),
        "{:?}",
        runtime.refused
    );

    for (name, rtol) in LIGHT {
        let model = spec(&runtime, name);
        let mut shape = vec![1];
        shape.extend(model.inputs[0].shape.iter().map(|&d| d as usize));
        let input = light_input(&shape);
        let inputs = vec![as_item(&runtime, name, &model.inputs[0].name, &input)];
        let reference = read_pb(&data.join(format!("light/light_{name}_output_0.pb")));
        let expected = vec![as_item(&runtime, name, &model.outputs[0].name, &reference)];
        check(&runtime, name, inputs, expected, *rtol).await;
    }
    for case in CONVERTED {
        let name = repo_name(case);
        let set = data.join(case).join("test_data_set_0");
        let model = spec(&runtime, &name);
        let inputs = stored(&runtime, &name, &model.inputs, &set, "input");
        let expected = stored(&runtime, &name, &model.outputs, &set, "output");
        check(&runtime, &name, inputs, expected, 1e-3).await;
    }
    runtime.shutdown().await;
}
