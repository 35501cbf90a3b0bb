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

use std::path::{Path, PathBuf};
use std::process::Command;

use clockwork::actors::Runtime;
use clockwork::model::{ModelSpec, TensorSpec};
use clockwork::tensor::Tensor;
use cpu_support::{assert_close, config, from_tract, infer, start, TempDir};
use tract_onnx::data_resolver::FopenDataResolver;
use tract_onnx::tensor::{load_tensor, proto_from_reader};

/// Real architectures: inputs are generated as onnx's runner does, outputs stored.
const LIGHT: &[(&str, f32)] = &[
    ("squeezenet", 1e-3),
    ("resnet50", 1e-3),
    ("inception_v1", 1e-3),
    ("densenet121", 2e-3),
    ("shufflenet", 1e-3),
];

/// Operator tests exported from PyTorch, with stored inputs and outputs.
const CONVERTED: &[&str] = &[
    "pytorch-converted/test_Conv2d",
    "pytorch-converted/test_Conv2d_groups",
    "pytorch-converted/test_Conv2d_depthwise_strided",
    "pytorch-converted/test_ConvTranspose2d",
    "pytorch-converted/test_Linear",
    "pytorch-converted/test_BatchNorm2d_eval",
    "pytorch-converted/test_MaxPool2d",
    "pytorch-converted/test_AvgPool2d",
    "pytorch-converted/test_PReLU_2d",
    "pytorch-converted/test_Softmax",
    "pytorch-converted/test_Embedding",
    "pytorch-converted/test_GLU",
    "pytorch-operator/test_operator_addmm",
    "pytorch-operator/test_operator_conv",
    "pytorch-operator/test_operator_maxpool",
    "pytorch-operator/test_operator_reduced_mean_keepdim",
];

/// A model the cpu backend cannot serve (string tensors): refused, never fatal.
const UNSERVABLE: &str = "simple/test_strnorm_model_monday_casesensintive_lower";

fn data_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data = root.join("target/onnx-testdata/onnx/backend/test/data");
    if !data.join("light").is_dir() {
        let status = Command::new(root.join("scripts/onnx_testdata.sh"))
            .status()
            .expect("run scripts/onnx_testdata.sh");
        assert!(
            status.success(),
            "scripts/onnx_testdata.sh failed: the onnx wheel comes from PyPI"
        );
    }
    data
}

/// A repository name for a test case.
fn repo_name(case: &str) -> String {
    case.rsplit('/').next().unwrap_or(case).to_lowercase()
}

fn put(root: &Path, name: &str, model: &Path) {
    let dir = root.join(name).join("1");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(model, dir.join("model.onnx")).unwrap();
}

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
