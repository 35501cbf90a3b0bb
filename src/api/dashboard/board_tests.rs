use super::*;

fn counts(ok: u64, late: u64, refused: u64) -> Vec<(Outcome, u64)> {
    vec![
        (Outcome::Ok, ok),
        (Outcome::Late, late),
        (Outcome::DeadlineUnreachable, refused),
        (Outcome::BadInput, 1),
    ]
}

fn inputs(now: Nanos, models: &[(&str, u64)]) -> Inputs {
    Inputs {
        now,
        counts: models
            .iter()
            .map(|&(name, ok)| (name.to_owned(), counts(ok, 0, 0)))
            .collect(),
        views: Vec::new(),
        devices: Vec::new(),
        queued: 0,
    }
}

#[test]
fn answers_are_summed_by_class() {
    let a = Answers::from_counts(&counts(5, 2, 3));
    assert_eq!(
        a,
        Answers {
            ok: 5,
            late: 2,
            refused: 3,
            errors: 1
        }
    );
}

#[test]
fn goodput_is_over_the_last_minute() {
    let mut h = History::default();
    let first = snapshot(&mut h, inputs(0, &[("m", 0)]));
    assert_eq!(first.models[0].goodput, 0.0);
    // 10 answers a second for two minutes: the rate stays 10/s over the sliding minute.
    for s in 1..=120 {
        let snap = snapshot(&mut h, inputs(s * SEC, &[("m", 10 * s)]));
        assert!((snap.models[0].goodput - 10.0).abs() < 1e-9, "{s}");
        assert_eq!(snap.models[0].traffic, 10 * s.min(60), "{s}");
    }
    // Then silence: after a minute of it, no goodput is left.
    for s in 121..=180 {
        let snap = snapshot(&mut h, inputs(s * SEC, &[("m", 1200)]));
        assert_eq!(snap.models[0].goodput > 0.0, s < 180, "{s}");
    }
}

#[test]
fn only_the_busiest_models_are_listed() {
    let mut h = History::default();
    let names: Vec<String> = (0..1000).map(|i| format!("m{i:04}")).collect();
    let zero: Vec<(&str, u64)> = names.iter().map(|n| (n.as_str(), 0)).collect();
    snapshot(&mut h, inputs(0, &zero));
    // Model i answered i requests.
    let busy: Vec<(&str, u64)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i as u64))
        .collect();
    let snap = snapshot(&mut h, inputs(SEC, &busy));
    assert_eq!(snap.models_total, 1000);
    assert_eq!(snap.models.len(), TOP);
    let listed: Vec<u32> = snap.models.iter().map(|m| m.id.0).collect();
    let wanted: Vec<u32> = (0..TOP as u32).map(|i| 999 - i).collect();
    assert_eq!(listed, wanted);
    // Every model's goodput counts in the total, listed or not.
    assert!((snap.goodput - (0..1000).sum::<u64>() as f64).abs() < 1e-6);
}
