//! Draining: requests admitted before shutdown are answered; later ones are refused.

use clockwork::actors::messages::{Drain, Infer, InferError, SnapshotController};
use clockwork::actors::RuntimeBuilder;
use clockwork::config::Config;
use clockwork::tensor::Tensor;
use clockwork::time::{virtual_system, Clock, MS};

const CONFIG: &str = r#"
[[devices]]
backend = "sim"
profile = "v100"

[[models]]
name = "mlp"
profile = "mlp-small"
slo = "50ms"
"#;

#[test]
fn draining_answers_what_is_in_flight_and_refuses_the_rest() {
    virtual_system().unwrap().block_on(async {
        let clock = Clock::start_virtual();
        let config = Config::parse(CONFIG).unwrap();
        let runtime = RuntimeBuilder::from_config(clock, &config)
            .unwrap()
            .start()
            .unwrap();
        let infer = || Infer {
            model: "mlp".into(),
            inputs: vec![Tensor::from_f32("input", vec![64], &[1.0; 64])],
            slo: None,
            edge: None,
        };
        let in_flight: Vec<_> = (0..20).map(|_| runtime.controller.send(infer())).collect();
        // Let them be admitted, but not finished (the cold load alone takes 0.33 ms).
        clock.sleep_until(clock.now() + 100_000).await;
        let snapshot = runtime.controller.send(SnapshotController).await.unwrap();
        assert_eq!(snapshot.pending, 20, "all admitted, none answered yet");

        let drained = runtime.controller.send(Drain);
        let late_comer = runtime.controller.send(infer()).await.unwrap();
        assert_eq!(late_comer.unwrap_err(), InferError::ShuttingDown);
        drained.await.unwrap();
        assert!(
            clock.now() < 50 * MS,
            "drain waits for answers, not for deadlines"
        );
        for answer in in_flight {
            let answer = answer
                .await
                .unwrap()
                .expect("admitted before shutdown: served");
            assert!(!answer.late);
        }
        let snapshot = runtime.controller.send(SnapshotController).await.unwrap();
        assert!(snapshot.draining);
        assert_eq!((snapshot.pending, snapshot.answered), (0, 20));
    });
}
