//! The workload generators through the crate's public API, as the simulator uses them.

use clockwork::time::MS;
use clockwork::workload::{open, ClosedLoop, WorkloadKind, WorkloadParams};

#[test]
fn every_open_kind_streams_through_the_public_api() {
    let dir = std::env::temp_dir().join(format!("clockwork-workload-it-{}", std::process::id()));
    let params = WorkloadParams {
        models: 8,
        rate: 200.0,
        duration: 10_000 * MS,
        scratch_dir: dir.clone(),
        ..WorkloadParams::default()
    };
    for name in ["poisson", "fixed", "bursty", "ramp", "maf-synth"] {
        let kind: WorkloadKind = name.parse().unwrap();
        let stream = open(&kind, &params).unwrap();
        let arrivals: Vec<_> = stream.collect();
        assert!(
            (1_500..2_500).contains(&arrivals.len()),
            "{name}: {}",
            arrivals.len()
        );
        assert!(arrivals.windows(2).all(|w| w[0].at <= w[1].at), "{name}");
        assert!(arrivals
            .iter()
            .all(|a| a.model < 8 && a.at < params.duration));
    }
    // What maf-synth wrote replays as a plain trace directory.
    let replay = WorkloadKind::parse(&format!("maf:{}", dir.display())).unwrap();
    let synth: Vec<_> = open(&WorkloadKind::MafSynth, &params).unwrap().collect();
    let replayed: Vec<_> = open(&replay, &params).unwrap().collect();
    assert_eq!(synth, replayed);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn duration_zero_is_an_empty_run() {
    let params = WorkloadParams {
        duration: 0,
        ..WorkloadParams::default()
    };
    for kind in [
        WorkloadKind::Poisson,
        WorkloadKind::Fixed,
        WorkloadKind::Ramp,
    ] {
        assert_eq!(open(&kind, &params).unwrap().count(), 0, "{kind}");
    }
}

#[test]
fn closed_loop_picks_models_for_the_driver() {
    let params = WorkloadParams {
        models: 4,
        ..WorkloadParams::default()
    };
    let mut closed = ClosedLoop::new(2, 5 * MS, &params);
    assert_eq!((closed.clients(), closed.think()), (2, 5 * MS));
    let a = closed.next_request(1, 42 * MS);
    assert_eq!(a.at, 42 * MS);
    assert!(a.model < 4 && a.slo.is_none());
}
