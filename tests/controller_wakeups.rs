//! The controller wakes the policy for work, not for nothing: under overload it makes
//! about one pass per admission, report or due wake-up. A wake-up timer cancelled while
//! already due once fired anyway, and each such stale timer then lived on beside the armed
//! one, re-arming itself at every wake-up: 40 passes per request at 1.5x of capacity.

use clockwork::actors::messages::{Infer, SnapshotController};
use clockwork::actors::{Placement, RuntimeBuilder};
use clockwork::config::Config;
use clockwork::tensor::Tensor;
use clockwork::time::{virtual_system, Clock, Nanos, MS};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp};

const CONFIG: &str = r#"
[[devices]]
backend = "sim"
profile = "v100"
count = 3

[[models]]
name = "resnet50"
profile = "resnet50"
copies = 12
slo = "100ms"
"#;

/// Arrivals per second: 1.5x of 3 V100s at ResNet50's batch-16 throughput (923/s each).
const RATE: f64 = 4150.0;

#[test]
fn overload_costs_about_one_policy_pass_per_event() {
    virtual_system().unwrap().block_on(async {
        let config = Config::parse(CONFIG).unwrap();
        let clock = Clock::start_virtual();
        let runtime = RuntimeBuilder::from_config(clock, &config)
            .unwrap()
            .placement(Placement::CurrentThread)
            .start()
            .unwrap();
        let image = Tensor::from_f32("data", vec![3, 224, 224], &vec![0.25; 150_528]);
        let mut rng = StdRng::seed_from_u64(11);
        let gaps = Exp::new(RATE).unwrap();
        let (mut at, mut tasks): (Nanos, _) = (0, Vec::new());
        while at < 1_500 * MS {
            at += (gaps.sample(&mut rng) * 1e9) as Nanos;
            let model = format!("resnet50-{}", rng.random_range(0..12));
            let (controller, image) = (runtime.controller.clone(), image.clone());
            tasks.push(actix_rt::spawn(async move {
                clock.sleep_until(at).await;
                let infer = Infer {
                    model,
                    inputs: vec![image],
                    items: 1,
                    slo: None,
                    edge: None,
                    root: None,
                };
                controller.send(infer).await.expect("controller alive")
            }));
        }
        let mut served = 0;
        for task in tasks {
            served += usize::from(task.await.unwrap().is_ok());
        }
        let snapshot = runtime.controller.send(SnapshotController).await.unwrap();
        let requests = snapshot.admitted;
        assert!(
            served as f64 <= 0.8 * requests as f64,
            "overloaded: {served} of {requests} served"
        );
        // Each request is one admission; batches add a report each, expiries and lanes
        // a wake-up now and then.
        assert!(
            snapshot.steps <= 3 * requests,
            "{} policy passes for {requests} requests",
            snapshot.steps
        );
    });
}
