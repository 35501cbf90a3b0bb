//! The health rule's cases: what takes a device out, probes and their backoff.

use super::*;

const D: DeviceId = DeviceId(0);

fn failed() -> ActionError {
    ActionError::Device("boom".into())
}

fn rule() -> HealthRule {
    HealthRule {
        strikes: 3,
        window: 1_000,
        backoff: 100,
        max_backoff: 350,
        max_relapse_backoff: 1_000,
    }
}

#[test]
fn three_failures_in_a_row_within_the_window_take_a_device_out() {
    let mut h = Health::new(rule());
    assert_eq!(h.reported(D, Err(&failed()), 0), Change::Same);
    assert_eq!(h.reported(D, Err(&failed()), 500), Change::Same);
    assert_eq!(
        h.reported(D, Err(&failed()), 1_000),
        Change::Out(OutCause::Failing)
    );
    assert!(h.is_out(D));
    assert!(!h.is_out(DeviceId(1)));
    assert_eq!(h.next_probe(), Some(1_100));
}

#[test]
fn a_success_or_a_gap_breaks_the_run_and_refusals_do_not_count() {
    let mut h = Health::new(rule());
    h.reported(D, Err(&failed()), 0);
    h.reported(D, Err(&failed()), 1);
    h.reported(D, Ok(Pace::Normal), 2);
    h.reported(D, Err(&failed()), 3);
    h.reported(D, Err(&failed()), 4);
    assert!(!h.is_out(D), "the success reset the count");
    h.reported(D, Err(&ActionError::TooLate), 5);
    h.reported(D, Err(&ActionError::Overdue), 6);
    assert!(
        !h.is_out(D),
        "refusals and overdue actions are not failures here"
    );
    h.reported(D, Err(&failed()), 2_000);
    assert!(!h.is_out(D), "outside the window: a new run");
}

/// A model that fails on a client's values (a run that panicked or erred in the graph's
/// library) says nothing of the device: any number of those in a row leave it in.
/// Mutation that breaks it: `ActionError::Model` counted with `Device` in `reported`.
#[test]
fn a_model_failing_on_its_inputs_is_no_strike() {
    let mut h = Health::new(rule());
    let model = ActionError::Model("tract panicked: index out of range".into());
    for at in 0..10 {
        assert_eq!(h.reported(D, Err(&model), at), Change::Same);
    }
    assert!(!h.is_out(D));
}

#[test]
fn one_crash_is_enough() {
    let mut h = Health::new(rule());
    let crash = ActionError::Crashed("panic".into());
    assert_eq!(
        h.reported(D, Err(&crash), 7),
        Change::Out(OutCause::Crashed)
    );
    assert_eq!(h.cause(D), Some(OutCause::Crashed));
}

#[test]
fn probes_come_after_a_backoff_that_doubles_until_one_succeeds() {
    let mut h = Health::new(rule());
    h.reported(D, Err(&ActionError::Crashed("x".into())), 0);
    assert!(h.probes_due(99).is_empty());
    assert_eq!(h.probes_due(100), vec![D]);
    assert_eq!(h.next_probe(), None, "one probe at a time");
    assert_eq!(h.probed(D, false, 150), Change::Same);
    assert_eq!(h.next_probe(), Some(350), "backoff doubled to 200");
    assert_eq!(h.probes_due(350), vec![D]);
    h.probed(D, false, 400);
    assert_eq!(h.next_probe(), Some(750), "capped at 350");
    h.probes_due(750);
    assert_eq!(h.probed(D, true, 760), Change::Back);
    assert!(!h.is_out(D));
    // Out again before any planned action succeeded: the first wait is longer.
    h.reported(D, Err(&ActionError::Crashed("x".into())), 1_000);
    assert_eq!(h.next_probe(), Some(1_200));
    h.probes_due(1_200);
    h.probed(D, true, 1_201);
    h.reported(D, Ok(Pace::Normal), 1_300);
    h.reported(D, Err(&ActionError::Crashed("x".into())), 2_000);
    assert_eq!(
        h.next_probe(),
        Some(2_100),
        "a success in service resets it"
    );
}

#[test]
fn hangs_in_a_row_keep_a_device_out_at_the_late_report_that_ends_the_last() {
    let mut h = Health::new(rule());
    for at in [0, 10_000] {
        h.hung(D);
        assert_eq!(h.revived(D, at), Change::Same, "a hang ends at its report");
    }
    // Far apart: hangs have no window.
    h.hung(D);
    assert_eq!(h.revived(D, 50_000), Change::Out(OutCause::Slow));
    assert_eq!(h.cause(D), Some(OutCause::Slow));
    assert_eq!(h.next_probe(), Some(50_100));
    h.probes_due(50_100);
    assert_eq!(h.probed(D, true, 50_101), Change::Back);
    // Back, still slow: one more hang and it is out again, for twice as long.
    h.reported(D, Ok(Pace::Slow), 50_200);
    h.hung(D);
    assert_eq!(h.revived(D, 50_300), Change::Out(OutCause::Slow));
    assert_eq!(h.next_probe(), Some(50_500));
}

#[test]
fn a_run_at_normal_pace_ends_the_hangs_and_a_slow_one_does_not() {
    let mut h = Health::new(rule());
    h.hung(D);
    h.hung(D);
    h.reported(D, Ok(Pace::Slow), 1);
    h.hung(D);
    assert_eq!(h.revived(D, 2), Change::Out(OutCause::Slow));
    let mut h = Health::new(rule());
    h.hung(D);
    h.hung(D);
    h.reported(D, Ok(Pace::Normal), 1);
    h.hung(D);
    assert_eq!(
        h.revived(D, 2),
        Change::Same,
        "the normal run reset the count"
    );
    assert_eq!(Pace::of(20, 10), Pace::Normal);
    assert_eq!(Pace::of(21, 10), Pace::Slow);
}

#[test]
fn a_device_that_passes_probes_but_fails_its_work_waits_longer_each_relapse() {
    let mut h = Health::new(rule());
    let mut now = 0;
    let mut waits = Vec::new();
    for _ in 0..7 {
        // Taken out by its work, back at its first probe, and out again.
        h.reported(D, Err(&ActionError::Crashed("x".into())), now);
        let due = h.next_probe().expect("a probe is due");
        waits.push(due - now);
        h.probes_due(due);
        assert_eq!(h.probed(D, true, due), Change::Back);
        now = due + 1;
    }
    // Past `max_backoff` (350), up to `max_relapse_backoff`.
    assert_eq!(waits, [100, 200, 400, 800, 1_000, 1_000, 1_000]);
    // A failed probe keeps the relapse's wait rather than cutting it to `max_backoff`.
    h.reported(D, Err(&ActionError::Crashed("x".into())), now);
    let due = h.next_probe().expect("a probe is due");
    h.probes_due(due);
    h.probed(D, false, due);
    assert_eq!(h.next_probe(), Some(due + 1_000));
    // Serving again resets it.
    h.probes_due(due + 1_000);
    h.probed(D, true, due + 1_000);
    h.reported(D, Ok(Pace::Normal), due + 1_001);
    h.reported(D, Err(&ActionError::Crashed("x".into())), due + 1_002);
    assert_eq!(h.next_probe(), Some(due + 1_102));
}

#[test]
fn a_probe_names_the_model_last_blamed() {
    let mut h = Health::new(rule());
    assert_eq!(h.probe_model(D), PROBE_MODEL);
    h.blame(D, ModelId(4));
    h.blame(D, ModelId(2));
    assert_eq!(h.probe_model(D), ModelId(2));
    assert_eq!(h.probe_model(DeviceId(1)), PROBE_MODEL);
}
