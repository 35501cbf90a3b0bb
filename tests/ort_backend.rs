//! The `ort` backend (ONNX Runtime) against tract: on every zoo model and every reference
//! model tract serves, the same inputs give the same outputs within tolerance, item by
//! item of a padded batch; models are prepared and profiled for the `ort` kind at
//! registration; and a zoo model is served over HTTP from an `ort` device.
//!
//! ONNX Runtime comes from the `onnxruntime` wheel (`scripts/onnxruntime.sh`, which CI
//! runs, prints the library to export as `ORT_DYLIB_PATH`). Without it every test here
//! prints why and passes without checking anything.

mod api_support;
mod cpu_support;

use std::path::Path;
use std::sync::Arc;

use api_support::start_with;
use clockwork::api::ApiSettings;
use clockwork::config::BackendKind;
use clockwork::gpu::cpu::profile::{sample_item, ProfileSettings};
use clockwork::gpu::cpu::{CpuDevice, CpuSettings};
use clockwork::gpu::ort::{library, OrtDevice, OrtSettings};
use clockwork::gpu::thread::BlockingDevice;
use clockwork::gpu::{InferJob, ModelArtifact};
use clockwork::model::{DataType, ModelId};
use clockwork::repository::{prepare, zoo, PrepareSettings, Registration, Repository};
use clockwork::tensor::Tensor;
use cpu_support::reference::{data_root, put, repo_name, CONVERTED, LIGHT};
use cpu_support::{assert_close, config, start, values, TempDir, SLACK_SLO_MS};
use serde_json::json;

/// Reference models tract serves and ONNX Runtime refuses at registration (operators of
/// opsets it no longer implements): kept off ort devices with its reason, served by tract.
const ORT_REFUSED: &[&str] = &[
    "test_linear",
    "test_batchnorm2d_eval",
    "test_avgpool2d",
    "test_prelu_2d",
    "test_glu",
    "test_operator_addmm",
];

/// Whether ONNX Runtime is installed; if not, says so (the test then checks nothing).
fn installed(test: &str) -> bool {
    match library::available() {
        Ok(_) => true,
        Err(error) => {
            eprintln!("{test}: skipped, {error}");
            false
        }
    }
}

/// Prepares `name` from the repository at `root` for tract and ONNX Runtime, profiled
/// briefly (these tests check outputs, the benchmark checks timing).
fn registration(root: &Path, name: &str) -> Registration {
    let settings = PrepareSettings {
        default_slo: std::time::Duration::from_secs(10),
        threads: vec![1],
        ort_threads: vec![1],
        profiling: ProfileSettings {
            threads: 1,
            warmup: 0,
            runs: 1,
            loads: 1,
        },
    };
    let stored = Repository::new(root).read(name).expect("stored model");
    prepare(&stored, &settings).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Item `i` of a model: the sample item with its float inputs replaced by values of seed
/// `i` (integers stay zero: they may be indices).
fn item(registration: &Registration, i: u64) -> Vec<Tensor> {
    let mut item = sample_item(&registration.spec.inputs);
    for tensor in &mut item {
        if tensor.datatype == DataType::Fp32 {
            let n = tensor.elements();
            *tensor = Tensor::from_f32(&tensor.name, tensor.shape.clone(), &values(n, i));
        }
    }
    item
}

/// Runs the model on tract and on ONNX Runtime, one item and then a batch of the largest
/// allowed size, and checks every item's outputs agree; checks the `ort` profile too.
fn agree(registration: &Registration, rtol: f32, atol: f32) {
    let name = &registration.spec.name;
    assert_eq!(registration.ort_refused, None, "{name}");
    let ort_profile = registration.profiles.iter().find(|p| p.kind == "ort");
    let ort_profile = ort_profile.unwrap_or_else(|| panic!("{name}: no ort profile"));
    let sizes: Vec<u32> = registration
        .spec
        .profile
        .batches
        .iter()
        .map(|b| b.batch)
        .collect();
    let profiled: Vec<u32> = ort_profile
        .profile
        .batches
        .iter()
        .map(|b| b.batch)
        .collect();
    assert_eq!(profiled, sizes, "{name}: every batch size profiled on ort");
    let artifact = ModelArtifact {
        id: ModelId(1),
        spec: registration.spec.clone(),
        bytes: Some(Arc::clone(&registration.bytes)),
        prepared: registration.prepared.clone(),
    };
    let mut tract = CpuDevice::new(CpuSettings {
        pages: 0,
        threads: 1,
    });
    let mut ort = OrtDevice::new(OrtSettings {
        pages: 0,
        threads: 1,
    })
    .expect("ort device");
    tract.load(&artifact).unwrap();
    ort.load(&artifact).unwrap();
    let largest = sizes.iter().copied().max().unwrap_or(1);
    // A batch one short of the largest size (when there is room) is padded.
    let mut counts = vec![1, largest.saturating_sub(1).max(1)];
    counts.dedup();
    for n in counts {
        let inputs = (0..n)
            .map(|i| Arc::new(item(registration, i.into())))
            .collect();
        let job = InferJob {
            model: artifact.id,
            inputs,
        };
        let (want, got) = (tract.infer(&job).unwrap(), ort.infer(&job).unwrap());
        assert_eq!(got.len(), n as usize, "{name}: one answer per item");
        for (i, (got, want)) in got.iter().zip(&want).enumerate() {
            assert_eq!(got.len(), want.len(), "{name}: outputs");
            for (g, w) in got.iter().zip(want) {
                assert_eq!((&g.name, &g.shape), (&w.name, &w.shape), "{name}");
                assert_close(&format!("{name} item {i}/{n} {}", w.name), g, w, rtol, atol);
            }
        }
    }
}

#[test]
fn ort_equals_tract_on_every_zoo_model() {
    if !installed("ort_equals_tract_on_every_zoo_model") {
        return;
    }
    let root = TempDir::new("ort-zoo");
    zoo::write_missing(root.path()).unwrap();
    for name in zoo::MODELS {
        agree(&registration(root.path(), name), 1e-3, 1e-4);
    }
}

#[test]
fn ort_equals_tract_on_the_reference_models() {
    if !installed("ort_equals_tract_on_the_reference_models") {
        return;
    }
    let data = data_root();
    let root = TempDir::new("ort-reference");
    for (name, _) in LIGHT {
        let model = data.join(format!("light/light_{name}.onnx"));
        put(root.path(), name, &model);
        agree(&registration(root.path(), name), 2e-3, 1e-5);
    }
    let mut refused = Vec::new();
    for case in CONVERTED {
        let name = repo_name(case);
        put(root.path(), &name, &data.join(case).join("model.onnx"));
        let registration = registration(root.path(), &name);
        match &registration.ort_refused {
            None => agree(&registration, 1e-3, 1e-5),
            Some(error) => {
                // Kept off ort devices, still served by tract.
                assert!(error.contains("ONNX Runtime"), "{name}: {error}");
                assert!(registration.prepared.ort.is_none(), "{name}");
                assert_eq!(registration.backends, Some(vec![BackendKind::Cpu]));
                assert!(registration.prepared.cpu.is_some(), "{name}");
                eprintln!("{name}: refused by ONNX Runtime: {error}");
                refused.push(name);
            }
        }
    }
    assert_eq!(
        refused, ORT_REFUSED,
        "refused by ONNX Runtime at registration"
    );
}

/// On a server whose only devices run ONNX Runtime (as `auto` chooses where the library
/// loads), a model it refuses is refused at start with ONNX Runtime's reason and the fix,
/// and the others are served.
#[actix_web::test]
async fn a_model_onnx_runtime_refuses_with_no_tract_device_is_refused_with_the_fix() {
    if !installed("a_model_onnx_runtime_refuses_with_no_tract_device_is_refused_with_the_fix") {
        return;
    }
    let root = TempDir::new("ort-only");
    let case = CONVERTED
        .iter()
        .find(|c| repo_name(c) == ORT_REFUSED[0])
        .expect("a model ONNX Runtime refuses");
    put(
        root.path(),
        ORT_REFUSED[0],
        &data_root().join(case).join("model.onnx"),
    );
    zoo::write_missing(root.path()).unwrap();
    let text =
        config(root.path(), 1, 64, 16 << 20).replace("backend = \"cpu\"", "backend = \"ort\"");
    let runtime = start(&text);
    let reason = runtime
        .refused
        .iter()
        .find(|(name, _)| name == ORT_REFUSED[0])
        .map(|(_, reason)| reason.clone())
        .unwrap_or_else(|| panic!("refused: {:?}", runtime.refused));
    assert!(reason.contains("ONNX Runtime refuses it"), "{reason}");
    assert!(reason.contains("backend = \"cpu\""), "{reason}");
    assert!(
        runtime.models.iter().any(|m| m.name == "mlp"),
        "the zoo is served"
    );
    runtime.shutdown().await;
}

#[test]
fn a_missing_library_is_refused_with_how_to_fix_it() {
    let missing = Path::new("/nonexistent/libonnxruntime.so");
    let error = library::resolve(Some(missing)).unwrap_err().to_string();
    assert!(error.contains("scripts/onnxruntime.sh"), "{error}");
    assert!(error.contains("ORT_DYLIB_PATH"), "{error}");
}

#[actix_web::test]
async fn a_zoo_model_is_served_over_http_from_an_ort_device() {
    if !installed("a_zoo_model_is_served_over_http_from_an_ort_device") {
        return;
    }
    let root = TempDir::new("ort-http");
    zoo::write_missing(root.path()).unwrap();
    let text =
        config(root.path(), 1, 64, 16 << 20).replace("backend = \"cpu\"", "backend = \"ort\"");
    let server = start_with(&text, Vec::new(), ApiSettings::default()).await;
    let input = values(256, 3);
    let request = json!({
        "parameters": {"slo_ms": SLACK_SLO_MS},
        "inputs": [{"name": "input", "shape": [1, 256], "datatype": "FP32", "data": input}]
    });
    let (status, answer) = server.post_json("/v2/models/mlp/infer", &request).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["parameters"]["emulated"], false);
    // The same item through tract, run directly: the served answer is ONNX Runtime's.
    let registration = registration(root.path(), "mlp");
    let artifact = ModelArtifact {
        id: ModelId(1),
        spec: registration.spec.clone(),
        bytes: None,
        prepared: registration.prepared.clone(),
    };
    let mut tract = CpuDevice::new(CpuSettings {
        pages: 0,
        threads: 1,
    });
    tract.load(&artifact).unwrap();
    let item = vec![Tensor::from_f32("input", vec![256], &input)];
    let job = InferJob {
        model: artifact.id,
        inputs: vec![Arc::new(item)],
    };
    let want = tract.infer(&job).unwrap()[0][0].to_f32().unwrap();
    let got: Vec<f32> = answer["outputs"][0]["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!(
            (g - w).abs() <= 1e-4 + 1e-3 * w.abs(),
            "{got:?} vs {want:?}"
        );
    }
    server.stop().await;
}
