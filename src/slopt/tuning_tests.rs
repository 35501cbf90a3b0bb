use super::*;
use crate::slopt::planner::PlannerConfig;

fn profile() -> Vec<BatchLatency> {
    (1..=16)
        .map(|b| BatchLatency {
            batch: b,
            latency: 2 * MS + Nanos::from(b) * MS,
        })
        .collect()
}

/// a -> b, each a's answer making 4 requests at b.
fn pipeline() -> Pipeline {
    let stage =
        |parent, children, single| crate::pipeline::test_stage("s", parent, children, single);
    let mut p = Pipeline {
        name: "p".into(),
        slo: 100 * MS,
        partial_results: false,
        budget: crate::pipeline::BudgetKind::Tuned,
        inputs: vec![],
        outputs: vec![],
        stages: vec![stage(None, vec![1], 3 * MS), stage(Some(0), vec![], 3 * MS)],
    };
    p.stages[1].emulated_fan_out = Some(crate::pipeline::decl::EmulatedFanOut {
        mean: 4.0,
        variance: 1.0,
    });
    p
}

fn tuning(rates: Rates, offline: Option<f64>) -> Tuning {
    let tuned = Tuned {
        rates,
        provision: Provision::Mean,
        planner: PlannerConfig::default(),
    };
    Tuning::with(&pipeline(), vec![profile(), profile()], tuned, offline)
}

/// Roots at 1000/s for a second; their fan-outs (4 each) only after `upstream`.
fn drive(t: &mut Tuning, upstream: Nanos) -> Vec<u32> {
    for i in 0..1000u64 {
        let now = i * MS;
        t.on_root(now).unwrap();
        if now >= upstream {
            t.on_fan_out(1, 4, now);
        }
    }
    t.planner()
        .plan()
        .unwrap()
        .stages
        .iter()
        .map(|s| s.replicas)
        .collect()
}

/// The cascade sees stage b's load the moment roots arrive; counting at b lags by the
/// upstream latency, so it provisions b for less.
/// Mutation that breaks it: `Rates::Measured` mapped to the cascade estimate in `rates`.
#[test]
fn measured_rates_lag_the_cascade_by_the_upstream() {
    let cascade = drive(&mut tuning(Rates::Cascade, None), 500 * MS);
    let measured = drive(&mut tuning(Rates::Measured, None), 500 * MS);
    assert_eq!(cascade[0], measured[0], "the root stage counts the same");
    assert!(measured[1] < cascade[1], "{measured:?} against {cascade:?}");
}

/// An offline plan is made for the known rate before any traffic (the fan-outs from the
/// declaration), and the envelope never provisions below it.
/// Mutation that breaks it: `envelope` taking the smaller of the two.
#[test]
fn offline_plans_for_the_known_rate_and_the_envelope_keeps_it() {
    let mut offline = tuning(Rates::Offline, Some(1000.0));
    offline.on_root(0).unwrap();
    let stages: Vec<_> = [(None, 1000.0), (Some(0), 4000.0)]
        .into_iter()
        .map(|(parent, rate)| crate::slopt::tune::StageLoad {
            parent,
            profile: profile(),
            rate,
        })
        .collect();
    let usable = 100 * MS - DEFAULT_MARGIN;
    let want = crate::slopt::tune::tune(&stages, usable, 200).unwrap();
    assert_eq!(offline.planner().plan(), Some(&want));
    let mut envelope = tuning(Rates::Envelope, Some(1000.0));
    for i in 0..100 {
        envelope.on_root(i * 10 * MS).unwrap();
    }
    let kept = envelope.planner().targets();
    assert!(
        kept.iter().zip(&want.stages).all(|(&k, w)| k >= w.replicas),
        "{kept:?} against {want:?}"
    );
}
