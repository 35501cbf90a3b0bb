//! The controller's own refusals. Draining: requests admitted before shutdown are
//! answered, later ones are refused. Unknown models: answered at once, before admission,
//! never reaching the policy (whose refusals are only `deadline_unreachable` and
//! `timed_out`).

use clockwork::actors::messages::{Drain, Infer, InferError, SnapshotController};
use clockwork::actors::{Runtime, RuntimeBuilder};
use clockwork::config::Config;
use clockwork::events::Event;
use clockwork::outcome::Outcome;
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

/// The runtime of `CONFIG` on a virtual clock (inside a virtual system).
fn start() -> (Clock, Runtime) {
    let clock = Clock::start_virtual();
    let config = Config::parse(CONFIG).unwrap();
    let runtime = RuntimeBuilder::from_config(clock, &config)
        .unwrap()
        .start()
        .unwrap();
    (clock, runtime)
}

#[test]
fn draining_answers_what_is_in_flight_and_refuses_the_rest() {
    virtual_system().unwrap().block_on(async {
        let (clock, runtime) = start();
        let infer = || Infer {
            model: "mlp".into(),
            inputs: vec![Tensor::from_f32("input", vec![64], &[1.0; 64])],
            items: 1,
            slo: None,
            edge: None,
            root: None,
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

#[test]
fn an_unknown_model_is_refused_by_the_controller_before_admission() {
    virtual_system().unwrap().block_on(async {
        let (_clock, runtime) = start();
        let mut events = runtime.events.subscribe();
        let infer = |model: &str| Infer {
            model: model.into(),
            inputs: vec![Tensor::from_f32("input", vec![64], &[1.0; 64])],
            items: 1,
            slo: None,
            edge: None,
            root: None,
        };
        let answer = runtime.controller.send(infer("nope")).await.unwrap();
        let error = answer.unwrap_err();
        assert_eq!(error, InferError::UnknownModel("nope".into()));
        assert_eq!(error.kind(), Outcome::UnknownModel);
        assert!(error.to_string().contains("'nope'"), "{error}");

        let snapshot = runtime.controller.send(SnapshotController).await.unwrap();
        assert_eq!(snapshot.admitted, 0, "never admitted");
        assert_eq!(snapshot.answered, 0, "not answered through the policy");

        // A known model is admitted and answered through the policy, with an event; the
        // refusal before it published none.
        let answer = runtime.controller.send(infer("mlp")).await.unwrap();
        assert!(answer.is_ok(), "{answer:?}");
        let answered = loop {
            if let Event::RequestAnswered(answered) = events.recv().await.unwrap() {
                break answered;
            }
        };
        assert_eq!(answered.outcome, Outcome::Ok);
        assert!(answered.outcome.after_admission());
        let snapshot = runtime.controller.send(SnapshotController).await.unwrap();
        assert_eq!((snapshot.admitted, snapshot.answered), (1, 1));
    });
}
