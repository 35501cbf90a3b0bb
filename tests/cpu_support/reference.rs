//! The onnx wheel's reference models (see tests/onnx_reference.rs) that the cpu backends
//! serve: where they are, and which ones.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Real architectures ("light": generated weights), with the relative tolerance of their
/// stored outputs.
pub const LIGHT: &[(&str, f32)] = &[
    ("squeezenet", 1e-3),
    ("resnet50", 1e-3),
    ("inception_v1", 1e-3),
    ("densenet121", 2e-3),
    ("shufflenet", 1e-3),
];

/// Operator tests exported from PyTorch, with stored inputs and outputs.
pub const CONVERTED: &[&str] = &[
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

/// The unpacked test data, fetched by `scripts/onnx_testdata.sh` if missing.
pub fn data_root() -> PathBuf {
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
pub fn repo_name(case: &str) -> String {
    case.rsplit('/').next().unwrap_or(case).to_lowercase()
}

/// Copies `model` into the repository at `root` as version 1 of `name`.
pub fn put(root: &Path, name: &str, model: &Path) {
    let dir = root.join(name).join("1");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(model, dir.join("model.onnx")).unwrap();
}
