//! The watchdog, in virtual time, with a device that hangs: every request still gets
//! exactly one answer, none later than its deadline plus the watchdog's allowance, the
//! hung device is suspect and gets no work, the other device serves, and the hung device
//! serves again once it reports. A drain with a hung device ends at its deadline.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clockwork::actors::messages::{Drain, Infer, InferError, SnapshotController};
use clockwork::actors::{ControllerSettings, RuntimeBuilder};
use clockwork::config::{PolicyConfig, SimConfig};
use clockwork::events::Event;
use clockwork::gpu::profiles;
use clockwork::gpu::sim::{SimDevice, SimSettings};
use clockwork::gpu::ModelArtifact;
use clockwork::gpu::{Backend, BackendFuture, BackendInfo, BatchOutputs, Executed, InferJob};
use clockwork::model::ModelId;
use clockwork::protocol::ActionTag;
use clockwork::tensor::Tensor;
use clockwork::time::{virtual_system, Clock, Nanos, MS};

/// A sim device whose every operation waits, before it even starts, while `hang` is set:
/// a device thread stuck in a driver call.
struct Hanging {
    inner: Arc<SimDevice>,
    clock: Clock,
    hang: Arc<AtomicBool>,
}

impl Hanging {
    fn new(clock: Clock, hang: Arc<AtomicBool>) -> Self {
        let settings = SimSettings {
            profile: profiles::device("v100").expect("built-in profile"),
            pages: None,
            emulation: SimConfig::default(),
        };
        Self {
            inner: Arc::new(SimDevice::new(clock, settings)),
            clock,
            hang,
        }
    }

    fn stall<T: 'static>(
        &self,
        work: impl FnOnce(&SimDevice) -> BackendFuture<T> + 'static,
    ) -> BackendFuture<T> {
        let (inner, clock, hang) = (Arc::clone(&self.inner), self.clock, Arc::clone(&self.hang));
        Box::pin(async move {
            while hang.load(Ordering::SeqCst) {
                clock.sleep_until(clock.now() + MS).await;
            }
            work(&inner).await
        })
    }
}

impl Backend for Hanging {
    fn info(&self) -> BackendInfo {
        self.inner.info()
    }

    fn load(&self, artifact: Arc<ModelArtifact>) -> BackendFuture<Executed<()>> {
        self.stall(move |d| d.load(artifact))
    }

    fn unload(&self, model: ModelId) -> BackendFuture<Executed<()>> {
        self.stall(move |d| d.unload(model))
    }

    fn infer(&self, job: InferJob) -> BackendFuture<Executed<BatchOutputs>> {
        self.stall(move |d| d.infer(job))
    }
}

const GRACE: Nanos = 20 * MS;
const SLO: Nanos = 100 * MS;

#[derive(Default, Debug)]
struct Tally {
    ok: usize,
    late: usize,
    failed: usize,
    refused: usize,
    /// Latest answer relative to its deadline.
    worst_overrun: Nanos,
}

fn image() -> Tensor {
    Tensor::from_f32("data", vec![3, 224, 224], &vec![0.5; 150_528])
}

#[test]
fn a_hung_device_is_given_up_on_and_serves_again_when_it_reports() {
    virtual_system().unwrap().block_on(async {
        let clock = Clock::start_virtual();
        let hang = [
            Arc::new(AtomicBool::new(true)),
            Arc::new(AtomicBool::new(false)),
        ];
        let spec = profiles::model("resnet50", "resnet", SLO).unwrap();
        let settings = ControllerSettings {
            watchdog_grace: GRACE,
            ..ControllerSettings::default()
        };
        let runtime = RuntimeBuilder::new(clock, PolicyConfig::default())
            .model(spec)
            .device(Box::new(Hanging::new(clock, Arc::clone(&hang[0]))))
            .device(Box::new(Hanging::new(clock, Arc::clone(&hang[1]))))
            .controller_settings(settings)
            .start()
            .unwrap();
        let mut events = runtime.events.subscribe();
        // 1200 requests/s for 2 s: more than one V100 serves in time, so both are wanted.
        let tally = Rc::new(RefCell::new(Tally::default()));
        let mut tasks = Vec::new();
        let release = 1_000 * MS;
        let image = image();
        for i in 0..2_400u64 {
            let at = i * 833_333;
            let (controller, tally) = (runtime.controller.clone(), Rc::clone(&tally));
            let image = image.clone();
            tasks.push(actix_rt::spawn(async move {
                clock.sleep_until(at).await;
                let arrival = clock.now();
                let infer = Infer {
                    model: "resnet".into(),
                    inputs: vec![image],
                    slo: None,
                    edge: None,
                    root: None,
                };
                let answer = controller.send(infer).await.expect("controller alive");
                let overrun = clock.now().saturating_sub(arrival + SLO);
                let mut t = tally.borrow_mut();
                t.worst_overrun = t.worst_overrun.max(overrun);
                match answer {
                    Ok(ok) if ok.late => t.late += 1,
                    Ok(_) => t.ok += 1,
                    Err(InferError::Failed(_)) => t.failed += 1,
                    Err(_) => t.refused += 1,
                }
            }));
        }
        clock.sleep_until(release - MS).await;
        let snapshot = runtime.controller.send(SnapshotController).await.unwrap();
        let suspect_seen = snapshot.policy.devices[0].suspect;
        clock.sleep_until(release).await;
        hang[0].store(false, Ordering::SeqCst);
        let answered = async {
            for task in tasks {
                task.await.unwrap();
            }
        };
        tokio::select! {
            _ = answered => {}
            _ = clock.sleep_until(60_000 * MS) => panic!("requests left unanswered after 60 s"),
        }
        let snapshot = runtime.controller.send(SnapshotController).await.unwrap();
        let t = tally.borrow();
        assert_eq!(t.ok + t.late + t.failed + t.refused, 2_400, "{t:?}");
        assert_eq!(snapshot.pending, 0);
        assert!(suspect_seen, "device 0 hung and was not suspected");
        assert!(!snapshot.policy.devices[0].suspect, "it reported again");
        assert_eq!(t.late, 0, "{t:?}");
        // Nothing waits for a hung device past its deadline by more than the allowance.
        assert!(t.worst_overrun <= 2 * GRACE, "{t:?}");
        assert!(t.ok > 1_500, "the healthy device serves meanwhile: {t:?}");

        // Device 0 ran INFERs after it was released, and none while it hung.
        let (mut before, mut after) = (0, 0);
        while let Ok(event) = events.try_recv() {
            if let Event::ActionDone(done) = event {
                let ran = done.measured.is_some() && done.kind == ActionTag::Infer;
                if done.device.0 == 0 && ran {
                    match done.measured.map(|m| m.begin) {
                        Some(begin) if begin < release => before += 1,
                        _ => after += 1,
                    }
                }
            }
        }
        assert_eq!(before, 0, "nothing ran on the hung device");
        assert!(after > 0, "the device came back into service");
    });
}

#[test]
fn a_drain_ends_at_its_deadline_even_if_a_device_hangs() {
    virtual_system().unwrap().block_on(async {
        let clock = Clock::start_virtual();
        let hang = Arc::new(AtomicBool::new(true));
        let spec = profiles::model("resnet50", "resnet", 10_000 * MS).unwrap();
        let settings = ControllerSettings {
            watchdog_grace: GRACE,
            shutdown_grace: 200 * MS,
            ..ControllerSettings::default()
        };
        let runtime = RuntimeBuilder::new(clock, PolicyConfig::default())
            .model(spec)
            .device(Box::new(Hanging::new(clock, hang)))
            .controller_settings(settings)
            .start()
            .unwrap();
        let infer = || Infer {
            model: "resnet".into(),
            inputs: vec![image()],
            slo: None,
            edge: None,
            root: None,
        };
        let waiting: Vec<_> = (0..5).map(|_| runtime.controller.send(infer())).collect();
        clock.sleep_until(50 * MS).await;
        let began = clock.now();
        runtime.controller.send(Drain).await.unwrap();
        let took = clock.now() - began;
        assert!(
            (200 * MS..=201 * MS).contains(&took),
            "drain took {took} ns, its grace is 200 ms"
        );
        for answer in waiting {
            assert_eq!(answer.await.unwrap().unwrap_err(), InferError::ShuttingDown);
        }
    });
}
