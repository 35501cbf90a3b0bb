//! The whole actor system in virtual time: several emulated V100s, many ResNet50 models,
//! a seeded Poisson stream with skewed popularity. Every request must get exactly one
//! answer, and no successful answer may come after its deadline.

use std::cell::RefCell;
use std::rc::Rc;

use clockwork::actors::messages::{Infer, InferError, SnapshotController};
use clockwork::actors::{Placement, RuntimeBuilder};
use clockwork::config::Config;
use clockwork::events::Event;
use clockwork::protocol::ActionTag;
use clockwork::tensor::Tensor;
use clockwork::time::{virtual_system, Clock, Nanos, MS};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, Zipf};

const CONFIG: &str = r#"
[[devices]]
backend = "sim"
profile = "v100"
count = 3
# Room for 5 ResNet50s each: 60 models must share 15 slots, so loads and evictions happen.
pages = 35

[[models]]
name = "resnet50"
profile = "resnet50"
copies = 60
slo = "100ms"
"#;

#[derive(Default)]
struct Tally {
    ok: usize,
    late_ok: usize,
    refused: std::collections::BTreeMap<&'static str, usize>,
    failed: usize,
}

#[test]
fn every_request_answered_and_none_late_at_moderate_load() {
    virtual_system().unwrap().block_on(async {
        let config = Config::parse(CONFIG).unwrap();
        let clock = Clock::start_virtual();
        let runtime = RuntimeBuilder::from_config(clock, &config)
            .unwrap()
            .placement(Placement::CurrentThread)
            .start()
            .unwrap();
        let mut events = runtime.events.subscribe();
        let image = Tensor::from_f32("data", vec![3, 224, 224], &vec![0.25; 150_528]);

        // 600 requests/s for 10 virtual seconds, Zipf popularity over the 60 models.
        let mut rng = StdRng::seed_from_u64(7);
        let gaps = Exp::new(600.0).unwrap();
        let popularity = Zipf::new(60.0, 1.1).unwrap();
        let tally = Rc::new(RefCell::new(Tally::default()));
        let mut at: Nanos = 0;
        let mut tasks = Vec::new();
        while at < 10_000 * MS {
            at += (gaps.sample(&mut rng) * 1e9) as Nanos;
            let model = format!("resnet50-{}", popularity.sample(&mut rng) as usize - 1);
            let controller = runtime.controller.clone();
            let (tally, image) = (Rc::clone(&tally), image.clone());
            let slo = rng.random_bool(0.5).then_some(150 * MS);
            tasks.push(actix_rt::spawn(async move {
                clock.sleep_until(at).await;
                let infer = Infer {
                    model,
                    inputs: vec![image],
                    items: 1,
                    slo,
                    edge: None,
                    root: None,
                };
                let answer = controller.send(infer).await.expect("controller alive");
                let mut t = tally.borrow_mut();
                match answer {
                    Ok(ok) => {
                        assert!(ok.emulated, "sim devices say their outputs are emulated");
                        assert_eq!(ok.outputs[0].shape, vec![1000]);
                        t.ok += 1;
                        let late = ok.late || ok.timing.exec.end > ok.timing.deadline;
                        t.late_ok += usize::from(late);
                    }
                    Err(InferError::Refused(reason)) => {
                        *t.refused.entry(reason.outcome().as_str()).or_default() += 1
                    }
                    Err(_) => t.failed += 1,
                }
            }));
        }
        let sent = tasks.len();
        for task in tasks {
            task.await.expect("request task");
        }

        let t = std::mem::take(&mut *tally.borrow_mut());
        let refused: usize = t.refused.values().sum();
        eprintln!(
            "sent {sent}: ok {} late {} refused {:?} failed {}",
            t.ok, t.late_ok, t.refused, t.failed
        );
        assert_eq!(
            t.ok + refused + t.failed,
            sent,
            "every request answered once"
        );
        assert_eq!(t.late_ok, 0, "no success after its deadline");
        assert_eq!(t.failed, 0);
        assert!(
            t.ok as f64 >= 0.97 * sent as f64,
            "moderate load: nearly all served"
        );

        let snapshot = runtime.controller.send(SnapshotController).await.unwrap();
        assert_eq!(snapshot.pending, 0);
        assert_eq!(snapshot.answered as usize, sent);
        for device in &snapshot.policy.devices {
            assert!(device.pages_used <= device.pages);
        }

        let mut answered = 0;
        let mut loads = 0;
        while let Ok(event) = events.try_recv() {
            match event {
                Event::RequestAnswered(_) => answered += 1,
                Event::ActionDone(done) if done.kind == ActionTag::Load => loads += 1,
                _ => {}
            }
        }
        assert_eq!(answered, sent, "one event per answer");
        assert!(
            loads > 15,
            "60 models on 15 slots must cycle weights ({loads} loads)"
        );
        runtime.shutdown().await;
    });
}
