//! The executor actor in virtual time, with an emulated V100 behind it.

use std::sync::Arc;

use actix::prelude::*;
use clockwork::actors::messages::{ActionReport, Execute, RegisterArtifact, SnapshotExecutor};
use clockwork::actors::{Executor, ExecutorLinks, ModelCache};
use clockwork::config::SimConfig;
use clockwork::gpu::profiles;
use clockwork::gpu::sim::{SimDevice, SimSettings};
use clockwork::model::{ActionId, DeviceId, ModelId, RequestId};
use clockwork::scheduler::{Action, ActionError, ActionKind, Measured};
use clockwork::tensor::Tensor;
use clockwork::time::{virtual_system, Clock, Nanos, MS};
use tokio::sync::mpsc;

/// Forwards reports to the test.
struct Collector(mpsc::UnboundedSender<ActionReport>);

impl Actor for Collector {
    type Context = Context<Self>;
}

impl Handler<ActionReport> for Collector {
    type Result = ();
    fn handle(&mut self, report: ActionReport, _: &mut Context<Self>) {
        let _ = self.0.send(report);
    }
}

struct Rig {
    clock: Clock,
    executor: Addr<Executor>,
    reports: mpsc::UnboundedReceiver<ActionReport>,
    next: u64,
}

const RESNET: ModelId = ModelId(0);

/// An executor on a V100 with `pages` pages and ResNet50 registered as model 0.
fn rig(pages: u32) -> Rig {
    let clock = Clock::start_virtual();
    let mut cache = ModelCache::default();
    for (i, name) in ["resnet50-a", "resnet50-b", "resnet50-c"]
        .iter()
        .enumerate()
    {
        let spec = profiles::model("resnet50", name, 100 * MS).unwrap();
        let id = ModelId(i as u32);
        cache.register(RegisterArtifact {
            id,
            spec,
            bytes: None,
            prepared: Default::default(),
        });
    }
    let (tx, reports) = mpsc::unbounded_channel();
    let links = ExecutorLinks {
        reports: Collector(tx).start().recipient(),
        artifacts: cache.start().recipient(),
    };
    let settings = SimSettings {
        profile: profiles::device("v100").unwrap(),
        pages: Some(pages),
        emulation: SimConfig::default(),
    };
    let backend = Box::new(SimDevice::new(clock, settings));
    let executor = Executor::new(DeviceId(0), clock, backend, 16 << 20, links).start();
    Rig {
        clock,
        executor,
        reports,
        next: 0,
    }
}

impl Rig {
    fn send(
        &mut self,
        model: ModelId,
        kind: ActionKind,
        earliest: Nanos,
        latest: Nanos,
    ) -> ActionId {
        self.next += 1;
        let id = ActionId(self.next);
        let n = match &kind {
            ActionKind::Infer { requests } => requests.len(),
            _ => 0,
        };
        let input = Tensor::from_f32("data", vec![3, 224, 224], &vec![0.5; 150_528]);
        let action = Action {
            id,
            device: DeviceId(0),
            model,
            earliest,
            latest,
            expected_duration: 0,
            kind,
        };
        let inputs = (0..n).map(|_| Arc::new(vec![input.clone()])).collect();
        self.executor.do_send(Execute { action, inputs });
        id
    }

    fn infer(&mut self, model: ModelId, batch: u64, earliest: Nanos, latest: Nanos) -> ActionId {
        let requests = (0..batch).map(RequestId).collect();
        self.send(model, ActionKind::Infer { requests }, earliest, latest)
    }

    async fn next(&mut self) -> ActionReport {
        self.reports.recv().await.expect("executor stopped")
    }

    async fn measured(&mut self, id: ActionId) -> Measured {
        let report = self.next().await;
        assert_eq!(report.action, id);
        report.result.expect("action should succeed")
    }
}

#[test]
fn never_starts_before_earliest() {
    virtual_system().unwrap().block_on(async {
        let mut rig = rig(100);
        let load = rig.send(RESNET, ActionKind::Load, 3 * MS, u64::MAX);
        let m = rig.measured(load).await;
        assert_eq!(m.begin, 3 * MS, "waited for earliest");
        assert_eq!(m.duration, 8_310_000, "102 MB at the V100's bandwidth");
        let infer = rig.infer(RESNET, 1, 40 * MS, u64::MAX);
        let m = rig.measured(infer).await;
        assert_eq!((m.begin, m.end), (40 * MS, 40 * MS + 2_730_000));
    });
}

#[test]
fn refuses_what_cannot_start_by_latest() {
    virtual_system().unwrap().block_on(async {
        let mut rig = rig(100);
        let load = rig.send(RESNET, ActionKind::Load, 0, u64::MAX);
        // Queued behind the load on the same lane: starts at 8.31 ms, past its latest.
        let late = rig.send(ModelId(1), ActionKind::Load, 0, 5 * MS);
        rig.measured(load).await;
        let report = rig.next().await;
        assert_eq!(report.action, late);
        assert_eq!(report.result, Err(ActionError::TooLate));
        let snapshot = rig.executor.send(SnapshotExecutor).await.unwrap();
        assert_eq!(
            snapshot.resident,
            vec![RESNET],
            "the refused load did nothing"
        );
        assert_eq!(snapshot.pages_used, 7);
    });
}

#[test]
fn load_lane_overlaps_exec_lane() {
    virtual_system().unwrap().block_on(async {
        let mut rig = rig(100);
        let load = rig.send(RESNET, ActionKind::Load, 0, u64::MAX);
        rig.measured(load).await;
        let start = rig.clock.now();
        let infer = rig.infer(RESNET, 16, start, u64::MAX);
        let second = rig.send(ModelId(1), ActionKind::Load, start, u64::MAX);
        let mut done = Vec::new();
        for _ in 0..2 {
            let r = rig.next().await;
            done.push((r.action, r.result.unwrap()));
        }
        let (load_m, infer_m) = (done[0].1, done[1].1);
        assert_eq!(done[0].0, second, "the shorter load finishes first");
        assert_eq!(done[1].0, infer);
        assert_eq!(load_m.begin, infer_m.begin, "both lanes started together");
        assert!(load_m.end < infer_m.end);
        assert_eq!(
            rig.clock.now() - start,
            17_330_000,
            "overlapped, not serialised"
        );
    });
}

#[test]
fn pages_are_never_over_capacity() {
    virtual_system().unwrap().block_on(async {
        // 14 pages: two ResNet50s (7 pages each) fit, a third does not.
        let mut rig = rig(14);
        let loads: Vec<ActionId> = (0..3)
            .map(|m| rig.send(ModelId(m), ActionKind::Load, 0, u64::MAX))
            .collect();
        rig.measured(loads[0]).await;
        rig.measured(loads[1]).await;
        let third = rig.next().await;
        assert_eq!(
            (third.action, third.result),
            (loads[2], Err(ActionError::NoFreePages))
        );
        let snapshot = rig.executor.send(SnapshotExecutor).await.unwrap();
        assert_eq!((snapshot.pages_used, snapshot.pages), (14, 14));
        // Only an UNLOAD from the controller makes room.
        let unload = rig.send(ModelId(0), ActionKind::Unload, 0, u64::MAX);
        rig.measured(unload).await;
        let retry = rig.send(ModelId(2), ActionKind::Load, 0, u64::MAX);
        rig.measured(retry).await;
        let snapshot = rig.executor.send(SnapshotExecutor).await.unwrap();
        assert_eq!(snapshot.resident, vec![ModelId(1), ModelId(2)]);
        assert!(snapshot.pages_used <= snapshot.pages);
    });
}

#[test]
fn a_second_load_of_resident_weights_is_refused() {
    virtual_system().unwrap().block_on(async {
        let mut rig = rig(100);
        let load = rig.send(RESNET, ActionKind::Load, 0, u64::MAX);
        rig.measured(load).await;
        let again = rig.send(RESNET, ActionKind::Load, 0, u64::MAX);
        let report = rig.next().await;
        assert_eq!(
            (report.action, report.result),
            (again, Err(ActionError::AlreadyResident))
        );
        let snapshot = rig.executor.send(SnapshotExecutor).await.unwrap();
        assert_eq!(snapshot.pages_used, 7, "the weights are counted once");
        assert_eq!(snapshot.resident, vec![RESNET], "and are still usable");
    });
}

#[test]
fn infer_on_weights_that_are_not_resident_fails() {
    virtual_system().unwrap().block_on(async {
        let mut rig = rig(100);
        let infer = rig.infer(RESNET, 1, 0, u64::MAX);
        let report = rig.next().await;
        assert_eq!(
            (report.action, report.result),
            (infer, Err(ActionError::NotResident))
        );
        assert!(report.outputs.is_none());
    });
}

#[test]
fn infer_returns_outputs_per_request() {
    virtual_system().unwrap().block_on(async {
        let mut rig = rig(100);
        let load = rig.send(RESNET, ActionKind::Load, 0, u64::MAX);
        rig.measured(load).await;
        rig.infer(RESNET, 4, 0, u64::MAX);
        let report = rig.next().await;
        let outputs = report.outputs.expect("outputs of a batch");
        assert_eq!(outputs.len(), 4);
        assert_eq!(outputs[0][0].shape, vec![1000]);
        assert_eq!(report.result.unwrap().duration, 5_880_000);
    });
}

/// A probe (`ActionKind::Probe`) naming a model the device does not hold loads it, runs
/// one item of zeros and unloads it: its time is the LOAD's and the run's, and the pages
/// are free again after.
#[test]
fn a_probe_of_a_model_not_resident_loads_runs_and_unloads_it() {
    virtual_system().unwrap().block_on(async {
        let mut rig = rig(100);
        let probe = rig.send(RESNET, ActionKind::Probe, 0, u64::MAX);
        let m = rig.measured(probe).await;
        assert_eq!(m.duration, 8_310_000 + 2_730_000, "the LOAD, then one run");
        let snapshot = rig.executor.send(SnapshotExecutor).await.unwrap();
        assert!(snapshot.resident.is_empty(), "{:?}", snapshot.resident);
        assert_eq!(snapshot.pages_used, 0);
        // Its UNLOAD really dropped the weights: a run now finds none.
        let infer = rig.infer(RESNET, 1, rig.clock.now(), u64::MAX);
        let report = rig.next().await;
        assert_eq!(report.action, infer);
        assert_eq!(report.result, Err(ActionError::NotResident));
    });
}

/// A probe naming a resident model runs it; one naming a model with no room to load it,
/// or none, runs the resident model of lowest id; with nothing resident and nothing
/// named it is an UNLOAD that changes nothing.
#[test]
fn a_probe_without_room_to_load_runs_what_is_resident() {
    use clockwork::actors::health::PROBE_MODEL;
    virtual_system().unwrap().block_on(async {
        let mut rig = rig(7);
        let nothing = rig.send(PROBE_MODEL, ActionKind::Probe, 0, u64::MAX);
        assert_eq!(rig.measured(nothing).await.duration, 0);
        let load = rig.send(RESNET, ActionKind::Load, 0, u64::MAX);
        rig.measured(load).await;
        let now = rig.clock.now();
        for named in [RESNET, ModelId(1), PROBE_MODEL] {
            let probe = rig.send(named, ActionKind::Probe, now, u64::MAX);
            let m = rig.measured(probe).await;
            assert_eq!(m.duration, 2_730_000, "one run of resnet, for {named:?}");
        }
        let snapshot = rig.executor.send(SnapshotExecutor).await.unwrap();
        assert_eq!(snapshot.resident, vec![RESNET]);
        assert_eq!(snapshot.pages_used, 7);
    });
}
