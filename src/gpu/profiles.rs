//! Built-in device and model profiles, from published measurements.
//!
//! Model profiles are measured on the reference device (a V100); a device profile's
//! `speed` scales them for other devices, and measured estimates take over once serving.

use crate::model::{BatchLatency, DataType, ModelProfile, ModelSpec, TensorSpec};
use crate::time::{Nanos, US};

/// An emulated device's hardware.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceProfile {
    /// Kind name, shared by devices whose estimates may be pooled.
    pub kind: &'static str,
    /// Weight pages (16 MiB each).
    pub pages: u32,
    /// Host-to-device weight transfer rate.
    pub load_bytes_per_s: f64,
    /// Execution speed relative to the reference device of the model profiles.
    pub speed: f64,
}

/// Weight copy rate of a V100: Clockwork copied ResNet50's 102 MB in 8.31 ms.
const V100_LOAD_BYTES_PER_S: f64 = 102e6 / 8.31e-3;

/// Looks up a built-in device profile by name.
pub fn device(name: &str) -> Option<DeviceProfile> {
    match name {
        // Clockwork: a 32 GB V100 gave 1376 pages of 16 MiB to weights.
        "v100" => Some(DeviceProfile {
            kind: "v100",
            pages: 1376,
            load_bytes_per_s: V100_LOAD_BYTES_PER_S,
            speed: 1.0,
        }),
        _ => None,
    }
}

/// Names of the built-in device profiles.
pub const DEVICES: &[&str] = &["v100"];

/// Names of the built-in model profiles.
pub const MODELS: &[&str] = &[
    "resnet50",
    "mlp-small",
    "zero",
    "traffic-detector",
    "car-classifier",
    "person-classifier",
    "cheap-classifier",
    "expensive-classifier",
];

/// Side of the square crops the emulated detector hands to its classifiers. Nominal: an
/// emulated model's time comes from its profile, and a small crop keeps the simulator's
/// per-request copies cheap.
pub const CROP: i64 = 32;

/// Length of the feature vector the emulated cascade's cheap model hands on.
pub const FEATURES: i64 = 512;

fn batches(latencies: &[(u32, Nanos)]) -> Vec<BatchLatency> {
    latencies
        .iter()
        .map(|&(batch, latency)| BatchLatency { batch, latency })
        .collect()
}

fn tensor(name: &str, shape: &[i64]) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        datatype: DataType::Fp32,
        shape: shape.to_vec(),
    }
}

/// A V100 profile of batches 1, 2, 4, 8 and 16 (`latencies_us`, microseconds) for weights
/// of `weight_bytes`, loaded at the rate of the `v100` device profile.
fn cnn(weight_bytes: u64, latencies_us: &[f64; 5]) -> ModelProfile {
    let us = |v: f64| (v * US as f64) as Nanos;
    let sizes = [1, 2, 4, 8, 16];
    ModelProfile {
        weight_bytes,
        load_latency: (weight_bytes as f64 / V100_LOAD_BYTES_PER_S * 1e9) as Nanos,
        batches: sizes
            .iter()
            .zip(latencies_us)
            .map(|(&batch, &t)| BatchLatency {
                batch,
                latency: us(t),
            })
            .collect(),
    }
}

/// Looks up a built-in model profile by name; `name` becomes the model's name.
pub fn model(profile: &str, name: &str, slo: Nanos) -> Option<ModelSpec> {
    let us = |v: f64| (v * US as f64) as Nanos;
    let (inputs, outputs, profile) = match profile {
        // Clockwork's ResNet50 on a V100: batch 1/2/4/8/16, 102 MB of weights.
        "resnet50" => (
            vec![tensor("data", &[3, 224, 224])],
            vec![tensor("prob", &[1000])],
            ModelProfile {
                weight_bytes: 102_000_000,
                load_latency: us(8310.0),
                batches: batches(&[
                    (1, us(2730.0)),
                    (2, us(4050.0)),
                    (4, us(5880.0)),
                    (8, us(9930.0)),
                    (16, us(17330.0)),
                ]),
            },
        ),
        // A small multilayer perceptron: quick to run and to load.
        "mlp-small" => (
            vec![tensor("input", &[64])],
            vec![tensor("output", &[10])],
            ModelProfile {
                weight_bytes: 4_000_000,
                load_latency: us(330.0),
                batches: batches(&[
                    (1, us(120.0)),
                    (2, us(140.0)),
                    (4, us(180.0)),
                    (8, us(260.0)),
                ]),
            },
        ),
        // Takes no time at all: isolates the runtime's own overhead in benchmarks.
        "zero" => (
            vec![tensor("input", &[4])],
            vec![tensor("output", &[4])],
            ModelProfile {
                weight_bytes: 1,
                load_latency: 0,
                batches: batches(&[(1, 0), (2, 0), (4, 0), (8, 0), (16, 0)]),
            },
        ),
        other => pipeline_model(other)?,
    };
    Some(ModelSpec {
        name: name.into(),
        inputs,
        outputs,
        slo,
        profile,
        batched: true,
        version: 1,
    })
}

/// Inputs, outputs and profile of the emulated pipelines' models (`simulate::pipelines`).
/// Latencies are shaped after published V100 figures of similar networks (an SSD-style
/// detector, GoogLeNet, ResNet-18/50/152), rounded; they are not measurements of this
/// project.
fn pipeline_model(profile: &str) -> Option<(Vec<TensorSpec>, Vec<TensorSpec>, ModelProfile)> {
    Some(match profile {
        "traffic-detector" => (
            vec![tensor("image", &[3, 300, 300])],
            // One row per detected object; emulated devices answer one row.
            vec![
                tensor("cars", &[-1, 3, CROP, CROP]),
                tensor("people", &[-1, 3, CROP, CROP]),
            ],
            cnn(120_000_000, &[6000.0, 8500.0, 13000.0, 22000.0, 40000.0]),
        ),
        "car-classifier" => (
            vec![tensor("crop", &[3, CROP, CROP])],
            vec![tensor("make", &[200])],
            cnn(28_000_000, &[1600.0, 2000.0, 2800.0, 4400.0, 7600.0]),
        ),
        "person-classifier" => (
            vec![tensor("crop", &[3, CROP, CROP])],
            vec![tensor("identity", &[128])],
            cnn(102_000_000, &[2730.0, 4050.0, 5880.0, 9930.0, 17330.0]),
        ),
        // A conditional cascade: the cheap model answers and says how unsure it is; the
        // image's features are handed on (one row) for the expensive model when it is. A
        // feature vector, not the image: an emulated device makes every output it
        // declares, and a [3, 224, 224] row per image slowed the simulator ten-fold.
        "cheap-classifier" => (
            vec![tensor("image", &[3, 224, 224])],
            vec![
                tensor("probs", &[1000]),
                tensor("doubt", &[1]),
                tensor("escalate", &[1, FEATURES]),
            ],
            cnn(47_000_000, &[1200.0, 1700.0, 2600.0, 4300.0, 7900.0]),
        ),
        "expensive-classifier" => (
            vec![tensor("features", &[FEATURES])],
            vec![tensor("probs", &[1000])],
            cnn(240_000_000, &[7500.0, 10500.0, 16000.0, 27000.0, 50000.0]),
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::MS;

    #[test]
    fn resnet50_on_v100_matches_the_paper() {
        let spec = model("resnet50", "r", 100 * MS).unwrap();
        assert_eq!(spec.profile.latency(16), Some(17_330_000));
        assert_eq!(spec.profile.pages(16 << 20), 7);
        let v100 = device("v100").unwrap();
        let load_s = spec.profile.weight_bytes as f64 / v100.load_bytes_per_s;
        assert!((load_s - 8.31e-3).abs() < 1e-6);
    }

    #[test]
    fn pipeline_profiles_load_at_the_v100_rate_and_grow_with_the_batch() {
        let spec = model("person-classifier", "p", MS).unwrap();
        let resnet = model("resnet50", "r", MS).unwrap();
        assert_eq!(spec.profile.batches, resnet.profile.batches);
        assert!((spec.profile.load_latency as f64 - 8.31e6).abs() < 1e3);
        for name in MODELS {
            let b = model(name, name, MS).unwrap().profile.batches;
            assert!(b.windows(2).all(|w| w[0].latency <= w[1].latency), "{name}");
        }
    }

    #[test]
    fn every_listed_profile_exists() {
        assert!(MODELS.iter().all(|m| model(m, m, MS).is_some()));
        assert!(DEVICES.iter().all(|d| device(d).is_some()));
        assert!(model("nope", "x", MS).is_none());
    }
}
