//! Tests of the workload generators through the module's public API; trace replay and
//! maf-synth tests are in `trace.rs` here.

mod trace;

use super::*;
use crate::time::MS;

pub(super) const SECOND: Nanos = 1_000 * MS;

pub(super) fn params(rate: f64, seconds: u64) -> WorkloadParams {
    WorkloadParams {
        models: 10,
        rate,
        duration: seconds * SECOND,
        ..WorkloadParams::default()
    }
}

pub(super) fn all(kind: &WorkloadKind, p: &WorkloadParams) -> Vec<Arrival> {
    let mut s = open(kind, p).unwrap();
    std::iter::from_fn(|| s.next_arrival()).collect()
}

pub(super) fn assert_ordered(v: &[Arrival], p: &WorkloadParams) {
    assert!(v.windows(2).all(|w| w[0].at <= w[1].at), "not time-ordered");
    assert!(v.iter().all(|a| a.at < p.duration && a.model < p.models));
}

pub(super) fn per_model(v: &[Arrival], models: u32, from: Nanos, until: Nanos) -> Vec<usize> {
    let mut n = vec![0; models as usize];
    for a in v.iter().filter(|a| a.at >= from && a.at < until) {
        n[a.model as usize] += 1;
    }
    n
}

#[test]
fn kinds_parse_and_print() {
    for s in [
        "poisson",
        "fixed",
        "closed",
        "bursty",
        "ramp",
        "maf-synth",
        "maf:/x/y",
    ] {
        let k = WorkloadKind::parse(s).unwrap();
        assert_eq!(k.to_string(), s);
    }
    assert_eq!(
        "maf:traces".parse::<WorkloadKind>().unwrap(),
        WorkloadKind::Maf("traces".into())
    );
    let e = WorkloadKind::parse("maf:").unwrap_err().to_string();
    assert!(e.contains("unknown workload 'maf:'"), "{e}");
    assert!(WorkloadKind::parse("Poisson").is_err());
    let e = open(&WorkloadKind::Closed, &params(1.0, 1)).err().unwrap();
    assert!(e.to_string().contains("ClosedLoop"), "{e}");
}

#[test]
fn synthetic_streams_are_deterministic_ordered_and_seeded() {
    let p = params(5_000.0, 5);
    for kind in [
        WorkloadKind::Poisson,
        WorkloadKind::Fixed,
        WorkloadKind::Bursty,
        WorkloadKind::Ramp,
    ] {
        let a = all(&kind, &p);
        assert!(a.len() > 10_000, "{kind}: {}", a.len());
        assert_eq!(a, all(&kind, &p), "{kind}");
        assert_ordered(&a, &p);
        let other = all(
            &kind,
            &WorkloadParams {
                seed: 9,
                ..p.clone()
            },
        );
        assert_ne!(a, other, "{kind}");
    }
}

#[test]
fn mean_rates_hold_over_a_long_run() {
    let p = params(2_000.0, 200);
    let expect = 400_000.0;
    for kind in [
        WorkloadKind::Poisson,
        WorkloadKind::Bursty,
        WorkloadKind::Ramp,
    ] {
        let n = all(&kind, &p).len() as f64;
        assert!((n / expect - 1.0).abs() < 0.01, "{kind}: {n}");
    }
    let fixed = all(&WorkloadKind::Fixed, &p);
    assert_eq!(fixed.len(), 400_000);
    assert_eq!((fixed[0].at, fixed[1].at), (0, 500_000));
    assert!(fixed.iter().all(|a| a.slo.is_none()));
}

#[test]
fn zipf_makes_model_zero_the_most_popular() {
    let p = params(10_000.0, 10);
    let n = per_model(&all(&WorkloadKind::Poisson, &p), 10, 0, p.duration);
    assert!(n.windows(2).all(|w| w[0] > w[1]), "{n:?}");
    let flat = WorkloadParams {
        popularity: 0.0,
        ..p
    };
    let n = per_model(&all(&WorkloadKind::Poisson, &flat), 10, 0, flat.duration);
    assert!(n.iter().all(|&k| (9_000..11_000).contains(&k)), "{n:?}");
}

#[test]
fn bursts_alternate_with_the_mean_preserved() {
    // On 1 s at rate_on, off 4 s at rate_on / 10: rate_on = 1000 * 5 / 1.4.
    let p = params(1_000.0, 100);
    let v = all(&WorkloadKind::Bursty, &p);
    let on = v.iter().filter(|a| a.at % (5 * SECOND) < SECOND).count() as f64;
    let off = v.len() as f64 - on;
    let expect_on = 1_000.0 * 5.0 / 1.4 * 20.0;
    assert!((on / expect_on - 1.0).abs() < 0.03, "on {on}");
    assert!((on / (off / 4.0) - 10.0).abs() < 0.5, "on {on} off {off}");
}

#[test]
fn ramps_move_rate_and_slo() {
    let p = WorkloadParams {
        ramp_from: 0.0,
        ramp_to: 2.0,
        slo_from: 2.0,
        slo_to: 0.5,
        ..params(1_000.0, 100)
    };
    let v = all(&WorkloadKind::Ramp, &p);
    let first = v.iter().filter(|a| a.at < 10 * SECOND).count();
    let last = v.iter().filter(|a| a.at >= 90 * SECOND).count();
    // Linear from 0 to 2000/s: 1000 in the first tenth, 19000 in the last.
    assert!((800..1200).contains(&first), "{first}");
    assert!((18_000..20_000).contains(&last), "{last}");
    let slo = |a: &Arrival| a.slo.unwrap();
    assert!(slo(&v[0]) <= 200 * MS && slo(&v[0]) > 190 * MS);
    assert!(slo(v.last().unwrap()) < 51 * MS);
    assert!(v.windows(2).all(|w| slo(&w[0]) >= slo(&w[1])));
}

#[test]
fn bad_parameters_name_themselves() {
    let cases: [(&str, WorkloadKind, WorkloadParams); 6] = [
        ("rate", WorkloadKind::Poisson, params(0.0, 1)),
        (
            "models",
            WorkloadKind::Fixed,
            WorkloadParams {
                models: 0,
                ..params(1.0, 1)
            },
        ),
        (
            "burst_off_fraction",
            WorkloadKind::Bursty,
            WorkloadParams {
                burst_off_fraction: 2.0,
                ..params(1.0, 1)
            },
        ),
        (
            "ramp_to",
            WorkloadKind::Ramp,
            WorkloadParams {
                ramp_to: f64::NAN,
                ..params(1.0, 1)
            },
        ),
        (
            "popularity",
            WorkloadKind::Poisson,
            WorkloadParams {
                popularity: -2.0,
                ..params(1.0, 1)
            },
        ),
        (
            "time_compression",
            WorkloadKind::MafSynth,
            WorkloadParams {
                time_compression: 0.0,
                ..params(1.0, 1)
            },
        ),
    ];
    for (name, kind, p) in cases {
        let e = open(&kind, &p).err().unwrap().to_string();
        assert!(
            e.starts_with(&format!("workload parameter {name} =")),
            "{e}"
        );
    }
}
