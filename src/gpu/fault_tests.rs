//! The fault layer on a `sim` device in virtual time: each fault fires when and as often
//! as configured, and a panic is caught as a failed action.

use std::time::Duration;

use super::*;
use crate::config::{SimConfig, SlowdownConfig};
use crate::gpu::profiles;
use crate::gpu::sim::{SimDevice, SimSettings};
use crate::tensor::Tensor;
use crate::time::MS;

fn faulty(config: FaultConfig) -> (Faulty, Clock) {
    let clock = Clock::start_virtual();
    let settings = SimSettings {
        profile: profiles::device("v100").unwrap(),
        pages: None,
        emulation: SimConfig::default(),
    };
    let sim = SimDevice::new(clock, settings);
    (Faulty::new(Box::new(sim), clock, &config, 0), clock)
}

fn artifact() -> Arc<ModelArtifact> {
    Arc::new(ModelArtifact {
        id: ModelId(0),
        spec: profiles::model("resnet50", "r", 100 * MS).unwrap(),
        bytes: None,
        prepared: Default::default(),
    })
}

fn job() -> InferJob {
    let input = Tensor::from_f32("data", vec![3, 224, 224], &vec![0.5; 150_528]);
    InferJob {
        model: ModelId(0),
        inputs: vec![Arc::new(vec![input])],
    }
}

fn episode(from: u64, lasting: Option<u64>) -> FaultEpisode {
    FaultEpisode {
        from: Duration::from_millis(from),
        lasting: lasting.map(Duration::from_millis),
    }
}

/// Batch-1 resnet50 on a V100.
const INFER: Nanos = 2_730_000;

#[tokio::test(start_paused = true)]
async fn failures_follow_the_seeded_rate() {
    let count = |seed| async move {
        let config = FaultConfig {
            seed,
            failure_rate: 0.25,
            ..FaultConfig::default()
        };
        let (dev, _) = faulty(config);
        let mut failed = Vec::new();
        for i in 0..400 {
            if dev.unload(ModelId(0)).await.is_err() {
                failed.push(i);
            }
        }
        failed
    };
    let (a, b) = (count(1).await, count(1).await);
    assert_eq!(a, b, "same seed, same failures");
    assert!((70..130).contains(&a.len()), "{} of 400 at 25%", a.len());
}

#[tokio::test(start_paused = true)]
async fn weights_fail_to_load_and_nothing_else_fails() {
    let (dev, _) = faulty(FaultConfig {
        load_failure_rate: 1.0,
        ..FaultConfig::default()
    });
    let failed = dev.load(artifact()).await.unwrap_err();
    assert_eq!(failed, DeviceError::Injected("weights failed to load"));
    assert!(dev.unload(ModelId(0)).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn slow_inside_the_window_only() {
    let slowdown = SlowdownConfig {
        from: Duration::from_millis(100),
        until: Duration::from_millis(200),
        factor: 4.0,
    };
    let (dev, clock) = faulty(FaultConfig {
        slowdown: Some(slowdown),
        ..FaultConfig::default()
    });
    dev.load(artifact()).await.unwrap();
    let before = dev.infer(job()).await.unwrap().device_time;
    assert_eq!(before, Some(INFER));
    clock.sleep_until(150 * MS).await;
    let inside = dev.infer(job()).await.unwrap().device_time;
    assert_eq!(inside, Some(4 * INFER));
    assert_eq!(
        clock.now(),
        150 * MS + 4 * INFER,
        "it took that long on the clock"
    );
    clock.sleep_until(200 * MS).await;
    assert_eq!(dev.infer(job()).await.unwrap().device_time, Some(INFER));
}

#[tokio::test(start_paused = true)]
async fn a_hang_holds_actions_until_it_ends() {
    let (dev, clock) = faulty(FaultConfig {
        hang: Some(episode(10, Some(500))),
        ..FaultConfig::default()
    });
    dev.load(artifact()).await.unwrap();
    clock.sleep_until(20 * MS).await;
    dev.infer(job()).await.unwrap();
    assert_eq!(
        clock.now(),
        510 * MS + INFER,
        "held until the hang ended, then ran"
    );
}

#[tokio::test(start_paused = true)]
async fn a_panic_is_caught_as_a_failed_action() {
    let (dev, clock) = faulty(FaultConfig {
        panic: Some(episode(10, Some(10))),
        ..FaultConfig::default()
    });
    dev.load(artifact()).await.unwrap();
    clock.sleep_until(10 * MS).await;
    let failed = catch_panics(dev.infer(job())).await.unwrap_err();
    assert!(matches!(failed, DeviceError::Panicked(ref m) if m.contains("injected")));
    clock.sleep_until(20 * MS).await;
    assert!(
        catch_panics(dev.infer(job())).await.is_ok(),
        "the episode ended"
    );
}
