//! Admission in hindsight (`admission_hindsight`, `scheduler/clockwork/hindsight.rs`) and
//! the floor under it (`hindsight_floor`, `scheduler/clockwork/floor.rs`), on the mixes of
//! `tests/mix_support`, in virtual time: what would wait to be refused is refused
//! at arrival instead, no model is refused whole, and a model refused at arrival comes
//! back after an overload.

mod mix_support;

use clockwork::model::RequestId;
use clockwork::scheduler::testbed::Report;
use clockwork::scheduler::Request;
use clockwork::time::{MS, US};
use mix_support::*;
use proptest::prelude::*;

/// The zoo's shape at 5x with admission in hindsight (`admission_hindsight`,
/// `scheduler/clockwork/hindsight.rs`): each model refuses at arrival what has less slack
/// than where its admitted requests missed more than they were served, and so refuses
/// there much of what the expectation of the other models' work admitted to time out:
/// 291 refused after waiting against 538, and more served in time (2,831 against 2,628),
/// every model some (the dear one 58 of 2,043, against 103: its requests, each ten times
/// the others' device time, are the ones refused at arrival). Mutation that breaks it:
/// no request learned as missed in `Hindsight::learn` (no margin: as without).
#[test]
fn admission_in_hindsight_refuses_at_arrival_what_would_time_out() {
    let mix = zoo_like();
    let (with, served) = mix.run(&hindsight());
    let (without, _) = mix.run(&without_hindsight());
    assert!(with.violations.is_empty(), "{:?}", with.violations);
    assert_eq!(with.late, 0, "{with:?}");
    assert!(
        timed_out(&with) * 3 < timed_out(&without) * 2,
        "{with:?} {without:?}"
    );
    assert!(with.completed >= without.completed, "{with:?} {without:?}");
    assert!(served.iter().all(|s| s.in_time > 0), "{served:?}");
}

/// After an overload, a model that its margin had kept refused at arrival is served again
/// within a fraction of a second: with nothing learned for 200 ms one request is admitted
/// without the margin (`hindsight::FORGET`), and served in time, it clears the margin.
/// The zoo's shape at 5x for 4,000 requests, then 0.3x for 1,000: of the requests arriving
/// 0.5 s or more after the overload, every one served in time. Mutation that breaks it:
/// no trial in `Hindsight::keep` (the dear model then waits for its old misses to leave
/// the window: 283 of its 305 served, the rest refused at arrival).
#[test]
fn after_an_overload_a_model_refused_in_hindsight_comes_back() {
    let overload = Mix {
        n: 4000,
        ..zoo_like()
    };
    let calm = Mix {
        load: 0.3,
        n: 1000,
        seed: 12,
        ..zoo_like()
    };
    let mut requests = overload.requests();
    let end = requests.last().map_or(0, |r| r.arrival);
    let settled = end + 500 * MS;
    let first = requests.len() as u64;
    requests.extend(calm.requests().into_iter().map(|r| Request {
        id: RequestId(first + r.id.0),
        arrival: end + r.arrival,
        ..r
    }));
    let after: Vec<bool> = requests.iter().map(|r| r.arrival >= settled).collect();
    let (report, _, answers) = overload.run_recorded(&hindsight(), requests);
    assert_eq!(report.late, 0, "{report:?}");
    let mut offered = vec![0; 3];
    let mut in_time = vec![0; 3];
    for (i, (model, ok)) in answers.iter().enumerate() {
        if after[i] {
            offered[*model] += 1;
            in_time[*model] += usize::from(*ok);
        }
    }
    assert!(offered.iter().all(|&n| n > 50), "{offered:?}");
    assert_eq!(in_time, offered, "{report:?}");
}

/// A model of a tight objective beside one of long runs, at 5.9x (found over random
/// mixes): its requests wait behind the other's runs, which nothing preempts, and about
/// one in three misses whatever its slack. The first rule kept the 99th percentile of the
/// misses' errors (how much later than projected they finished, often far more than
/// their slack) and refused nearly all of it (25 of its 1,940 served in time against
/// 1,308 without). Read by slack, where more missed than were served, it serves nearly as
/// much (1,275) and fewer are refused after waiting (494 against 572). Mutation that
/// breaks it: misses seen at their error rather than their slack (`Seen::slack` from the
/// finish, in `Hindsight::learn`): 1,173 served and 582 refused after waiting.
#[test]
fn a_tight_model_beside_long_runs_is_not_refused_whole() {
    let tight = Mix {
        models: vec![
            Model {
                base: 243 * US,
                growth: 1.293,
                slo: 12_879 * US,
            },
            Model {
                base: 3_880 * US,
                growth: 1.0526,
                slo: 85_360 * US,
            },
        ],
        load: 5.857,
        n: 3945,
        seed: 13892886488423222722,
    };
    let (with, served_with) = tight.run(&hindsight());
    let (without, served_without) = tight.run(&without_hindsight());
    assert_eq!(with.late, 0, "{with:?}");
    assert!(
        served_with[0].in_time * 10 >= served_without[0].in_time * 9,
        "{served_with:?} {served_without:?}"
    );
    assert!(
        timed_out(&with) < timed_out(&without),
        "{with:?} {without:?}"
    );
}

/// A model of long runs and a loose objective beside a tight one, at 6.8x (found over
/// random mixes): admission in hindsight alone serves 14 of the long model's 1,258
/// requests in time, against 75 without it: its admitted requests, overtaken by the
/// tight model's, mostly miss, and so its arrivals are refused. With the floor of 5% (the
/// default `hindsight_floor`, `scheduler/clockwork/floor.rs`), a model losing requests
/// under that share of its arrivals is judged without its margin: 75, the mix as without
/// hindsight. Mutation that breaks it: the floor read as always met
/// (`floor::below_floor` answering false).
#[test]
fn a_floor_keeps_hindsight_from_starving_a_model() {
    let mix = Mix {
        models: vec![
            Model {
                base: 5_093 * US,
                growth: 1.2663,
                slo: 203_720 * US,
            },
            Model {
                base: 1_216 * US,
                growth: 1.2555,
                slo: 52_288 * US,
            },
        ],
        load: 6.845,
        n: 2520,
        seed: 5390058710665584105,
    };
    let (with, served) = mix.run(&floor(0.05));
    let (_, served_alone) = mix.run(&hindsight());
    let (without, _) = mix.run(&without_hindsight());
    assert_eq!(with.late, 0, "{with:?}");
    assert!(served[0].in_time * 20 >= served[0].offered, "{served:?}");
    assert!(
        served_alone[0].in_time * 20 < served_alone[0].offered,
        "{served_alone:?}"
    );
    assert!(with.completed >= without.completed, "{with:?} {without:?}");
    // The floor keeps most of what hindsight gains on the other models: the zoo's shape
    // (its dear model 75 of 2,043 in time, against 58 with hindsight alone and 103
    // without), 380 refused after waiting against 538 without hindsight (291 with it
    // alone), 2,808 served against 2,628.
    let zoo = zoo_like();
    let (with, served) = zoo.run(&floor(0.05));
    let (_, served_alone) = zoo.run(&hindsight());
    let (without, _) = zoo.run(&without_hindsight());
    assert!(
        served[2].in_time > served_alone[2].in_time,
        "{served:?} {served_alone:?}"
    );
    assert!(
        timed_out(&with) * 5 < timed_out(&without) * 4,
        "{with:?} {without:?}"
    );
    assert!(with.completed >= without.completed, "{with:?} {without:?}");
}

/// Admission in hindsight against without, over 192 random mixes of the property above
/// (a fixed seed), alone and with floors (`hindsight_floor`): a markdown table of the
/// totals served and refused after waiting, the mixes that served under 90% of what they
/// served without, and those that left a model under 5% of its requests in time where
/// without it had more.
/// `cargo test --release --test policy_hindsight -- --ignored --nocapture over_random`.
#[test]
#[ignore]
fn hindsight_over_random_mixes() {
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::TestRunner;
    let rules = [
        ("without", without_hindsight()),
        ("hindsight", hindsight()),
        ("hindsight, floor 5%", floor(0.05)),
        ("hindsight, floor 10%", floor(0.1)),
    ];
    let mut runner = TestRunner::deterministic();
    let mixes: Vec<Mix> = (0..192)
        .map(|_| mix().new_tree(&mut runner).expect("a mix").current())
        .collect();
    let without: Vec<(Report, Vec<Served>)> = mixes.iter().map(|m| m.run(&rules[0].1)).collect();
    println!(
        "| rule | mixes | served in time | refused after waiting | under 90% | a model under 5% |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for (name, config) in &rules {
        let (mut served, mut waited, mut fewer, mut starved) = (0, 0, 0, 0);
        for (mix, (base, base_served)) in mixes.iter().zip(&without) {
            let (report, by_model) = mix.run(config);
            assert_eq!(report.late, 0, "{report:?}");
            served += report.completed;
            waited += timed_out(&report);
            let ratio = report.completed as f64 / base.completed.max(1) as f64;
            fewer += usize::from(ratio < 0.9);
            starved += usize::from(
                by_model
                    .iter()
                    .zip(base_served)
                    .any(|(w, o)| w.in_time * 20 < w.offered && o.in_time * 20 >= o.offered),
            );
        }
        println!(
            "| {name} | {} | {served} | {waited} | {fewer} | {starved} |",
            mixes.len()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Over random mixes at 2x-8x, the floor of 5% keeps each model at least half of what
    /// it is owed: 5% of its requests, or what it had in time without hindsight if that
    /// was less (models owed under 20 are too few to judge). Over 400 such mixes the
    /// lowest was 0.69 of it (61 of 1,794 in time, owed 89). Mutation that breaks it: the
    /// floor read as always met (`floor::below_floor` answering false): hindsight alone
    /// holds a model to a fifth of it in a quarter of the mixes.
    #[test]
    fn the_floor_keeps_every_model_near_its_share(mix in mix()) {
        let (with, by_model) = mix.run(&floor(0.05));
        let (_, base) = mix.run(&without_hindsight());
        prop_assert_eq!(with.late, 0, "{:?}", with);
        for (w, o) in by_model.iter().zip(&base) {
            let owed = o.in_time.min(o.offered / 20);
            prop_assert!(owed < 20 || w.in_time * 2 >= owed, "{:?} against {:?}", by_model, base);
        }
    }
}
