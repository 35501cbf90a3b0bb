//! The Clockwork policy under overload on one shared device, in virtual time on the
//! in-memory testbed: models whose batches take very different times share the device,
//! none is left to time out, and what is admitted is mostly served: the other models'
//! work is counted at arrival (`shared_arrival`, `scheduler/clockwork/shared.rs`).
//!
//! On a cpu a larger batch is no cheaper per request (the zoo's resnet on tract runs
//! batch 8 in about 10 times its batch 1). Ranked by the largest batch its queue fills, such a
//! model's latest start lies far before its front's own, so under overload it ranked first
//! throughout while running small batches, and the requests the other models had admitted
//! waited behind it until they timed out. It now ranks by the batch it would run (see
//! `ClockworkPolicy::priority`).

mod mix_support;

use clockwork::config::PolicyConfig;
use mix_support::*;
use proptest::prelude::*;

#[test]
fn under_overload_no_model_is_left_to_time_out() {
    let (report, served) = zoo_like().run(&without_hindsight());
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.late, 0, "{report:?}");
    // Old rule: the model of dear batches ranked first throughout (567 of 2,043 in time)
    // and the others were left to time out (26 of 2,001 and 8 of 1,956 in time; 3,851
    // `timed_out`). Ranked by the batch it would run: 1,085, 940 and 194, but 2,245
    // refused after waiting (832 `timed_out`, the rest then named `deadline_unreachable`).
    // With the other models' work counted at arrival (`shared_arrival`): 1,410, 1,115
    // and 103, and 538 refused after waiting: the dear model, whose requests cost the
    // most device time, is served least (mostly refused when they arrive), but served.
    for (i, s) in served.iter().enumerate() {
        assert!(
            s.in_time * 20 >= s.offered,
            "model {i} starved: {served:?} {report:?}"
        );
    }
    assert!(
        report.refused.get("timed_out").copied().unwrap_or(0) * 2 < report.completed,
        "{served:?} {report:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any mix of cpu-like models at 2x-8x of one exact device, each request's projection
    /// counting the other models' work due before it (`shared_arrival`): nothing late,
    /// and no more admitted requests time out in the queue than are served in time.
    /// (Without `shared_arrival` each model admits as if it had the device alone, and with
    /// four models as many time out as are served.)
    #[test]
    fn admitted_requests_rarely_time_out(mix in mix()) {
        let shared = PolicyConfig { shared_arrival: true, ..PolicyConfig::default() };
        let (report, served) = mix.run(&shared);
        prop_assert!(report.violations.is_empty(), "{:?}", report.violations);
        prop_assert_eq!(report.late, 0, "{:?}", report);
        let timed_out = report.refused.get("timed_out").copied().unwrap_or(0);
        prop_assert!(timed_out <= report.completed, "{:?} {:?}", served, report);
    }
}

/// The zoo's shape at 5x: counting, at arrival, the work the other models will run first
/// (`shared_arrival`: queued and to come, each at the share it serves) refuses there what
/// would otherwise wait to time out, 538 against 2,245 with each model admitting as if
/// it had the device alone, and serves more in time (2,628 against 2,219): without it the
/// device spent time on requests that then expired. Mutation that breaks it: the requests
/// to come left out (`to_come` 0 in `shared.rs`: 2,143 served, fewer than alone).
#[test]
fn other_models_work_counted_at_arrival_refuses_there_what_would_time_out() {
    let (shared, alone) = zoo_like().shared_and_alone();
    assert_eq!(shared.late, 0, "{shared:?}");
    assert!(
        timed_out(&shared) * 3 < timed_out(&alone),
        "{shared:?} {alone:?}"
    );
    assert!(shared.completed >= alone.completed, "{shared:?} {alone:?}");
}

/// The zoo's shape at 5x: a model of long objectives (200 ms) must not book the device to
/// their end, or the tight model (50 ms) finds its work due first and is refused, and what
/// was admitted under the expectation of the other models' work times out. With the
/// booking horizon (`booking_horizon`, `scheduler/clockwork/horizon.rs`) a looser request
/// books the device no further ahead than its busy neighbours' tightest objective: 99
/// refused after waiting against 538 without, 2,839 served in time against 2,628, no model
/// starved. Mutation that breaks it: `booking_bound` answering the request's own deadline
/// (no bound).
#[test]
fn a_model_of_long_objectives_does_not_book_the_device_to_their_end() {
    let mix = zoo_like();
    let (with, served) = mix.run(&horizon());
    let (without, _) = mix.run(&without_hindsight());
    assert!(with.violations.is_empty(), "{:?}", with.violations);
    assert_eq!(with.late, 0, "{with:?}");
    assert!(
        timed_out(&with) * 3 < timed_out(&without),
        "{with:?} {without:?}"
    );
    assert!(with.completed > without.completed, "{with:?} {without:?}");
    for (i, s) in served.iter().enumerate() {
        assert!(
            s.in_time * 20 >= s.offered,
            "model {i} starved: {served:?} {with:?}"
        );
    }
}

/// Below the device's capacity the booking horizon must not refuse what a model of long
/// objectives can be served: its bursts (16 requests of 200 ms objectives at once, 43% of
/// the device on average) beside one request of 50 ms every 400 ms. The bound holds only
/// on an overloaded device (`ClockworkPolicy::overloaded`); held always, it refused each
/// burst's tail, 1,349 of 3,264 in time against 2,937 without it (the mutation that breaks
/// this: `overloaded` answering true), the tight requests all in time either way.
#[test]
fn below_capacity_the_horizon_leaves_a_burst_its_objective() {
    let (mix, requests) = bursts_beside_a_trickle();
    let (with, served, _) = mix.run_recorded(&horizon(), requests.clone());
    let (without, before, _) = mix.run_recorded(&without_hindsight(), requests);
    assert!(with.violations.is_empty(), "{:?}", with.violations);
    assert_eq!(with.late, 0, "{with:?}");
    let (tight, loose) = (&served[0], &served[1]);
    assert_eq!(tight.in_time, before[0].in_time, "{served:?} {before:?}");
    assert!(
        loose.in_time * 100 >= before[1].in_time * 98,
        "{served:?} {before:?} {with:?} {without:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Any mix of cpu-like models at 2x-8x of one exact device, with the booking horizon:
    /// nothing late, no more admitted requests time out than are served in time, and
    /// every model keeps at least half the share of its requests served in time that it
    /// had without the horizon, or half the floor of service (`hindsight_floor`, 5%) if
    /// that is less: the bound must not starve the model of long objectives. The bound is
    /// lifted for a model below its floor, which holds such a model near 5%, not at it
    /// (CI's seed 238954767437733 found a dear loose model at 72 of 1,509 in time, 4.8%,
    /// against 220 without, its neighbour at 977 against 727). Mutation that breaks it:
    /// the bound kept for a model below its floor (`below_floor` left out of
    /// `judge_queue`): 30 of 1,327 against 224 without.
    #[test]
    fn the_booking_horizon_starves_no_model(mix in mix()) {
        let (with, served) = mix.run(&horizon());
        let (_, before) = mix.run(&without_hindsight());
        prop_assert!(with.violations.is_empty(), "{:?}", with.violations);
        prop_assert_eq!(with.late, 0, "{:?}", with);
        prop_assert!(timed_out(&with) <= with.completed, "{:?} {:?}", served, with);
        for (s, b) in served.iter().zip(&before) {
            let floor = (b.in_time as f64 / 2.0).min(s.offered as f64 * 0.025);
            prop_assert!(s.in_time as f64 >= floor, "{:?} {:?} {:?}", served, before, with);
        }
    }
}

/// Eight models on a device where batches are cheaper per request (a GPU's shape: batch 8
/// in 2.3 times batch 1), at about twice what it serves: counting the other models' work
/// at arrival must not cost goodput there. Of each model's queue only the share it serves
/// is counted: counted whole (the mutation: `served` 1 in `shared.rs`), the work that will
/// time out anyway refused at arrival requests the device would have served (9,793
/// served against 9,986 without counting; with the share, 9,967).
#[test]
fn on_a_batching_device_counting_the_others_serves_as_much() {
    let (shared, alone) = batching().shared_and_alone();
    assert_eq!(shared.late, 0, "{shared:?}");
    assert!(
        shared.completed * 1000 >= alone.completed * 995,
        "{shared:?} {alone:?}"
    );
    assert!(
        timed_out(&shared) < timed_out(&alone),
        "{shared:?} {alone:?}"
    );
}

/// The table "Admission in hindsight" of docs/EXPERIMENTS.md, from this code (the
/// thirteenth session's, `s14-virtual`, had the first two rows of each mix):
/// `cargo test --release --test policy_overload -q -- --ignored --nocapture | grep '^|' |
/// scripts/doc_table.py docs/EXPERIMENTS.md s19-hindsight`.
#[test]
#[ignore]
fn table_of_the_two_mixes() {
    println!("| mix | counted | served in time | refused at arrival | refused after waiting |");
    println!("| --- | --- | --- | --- | --- |");
    let mixes = [
        ("zoo-like at 5x (1, 2, 8 ms; 50, 100, 200 ms)", zoo_like()),
        (
            "8 models batching (batch 8 in 2.3 x batch 1), load 7",
            batching(),
        ),
    ];
    for (name, mix) in mixes {
        let (shared, alone) = mix.shared_and_alone();
        let (hindsight, _) = mix.run(&hindsight());
        let (floor, _) = mix.run(&floor(0.05));
        let rows = [
            (name, "alone", alone),
            ("", "queued and to come, at the share served", shared),
            ("", "the same, and admission in hindsight", hindsight),
            ("", "the same, with a floor of 5%", floor),
        ];
        for (name, counted, r) in rows {
            println!(
                "| {name} | {counted} | {} | {} | {} |",
                r.completed,
                r.refused_on_arrival,
                timed_out(&r)
            );
        }
    }
}
