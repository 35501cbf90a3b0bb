//! The executor rules, checked on the core alone.

use super::*;
use crate::model::{DeviceId, RequestId};

const MODEL: ModelId = ModelId(3);

fn action(id: u64, kind: ActionKind, earliest: Nanos, latest: Nanos) -> Action {
    Action {
        id: ActionId(id),
        device: DeviceId(0),
        model: MODEL,
        earliest,
        latest,
        expected_duration: 0,
        kind,
    }
}

fn infer(id: u64, earliest: Nanos, latest: Nanos) -> Action {
    let requests = vec![RequestId(id)];
    action(id, ActionKind::Infer { requests }, earliest, latest)
}

fn load_of(id: u64, model: ModelId) -> Action {
    Action {
        model,
        ..action(id, ActionKind::Load, 0, Nanos::MAX)
    }
}

fn started(step: Step<Action>) -> Action {
    match step {
        Step::Start(a) => a,
        other => panic!("expected a start, got {other:?}"),
    }
}

/// Loads `model` of `pages` pages to completion.
fn loaded(core: &mut ExecutorCore<Action>, id: u64, model: ModelId, pages: u32) {
    core.submit(load_of(id, model));
    let load = started(core.next(Lane::Load, 0));
    assert_eq!(core.reserve(model, pages), Ok(()));
    core.finish(&load, true);
}

#[test]
fn lanes_release_in_earliest_order_and_never_before() {
    let mut core = ExecutorCore::new(10);
    loaded(&mut core, 1, MODEL, 1);
    core.submit(infer(2, 50, Nanos::MAX));
    core.submit(infer(3, 20, Nanos::MAX));
    assert_eq!(core.next(Lane::Exec, 10), Step::WaitUntil(20));
    let first = started(core.next(Lane::Exec, 20));
    assert_eq!(
        first.id,
        ActionId(3),
        "earliest first, not submission order"
    );
    assert_eq!(
        core.next(Lane::Exec, 60),
        Step::Idle,
        "one action at a time"
    );
    assert!(core.busy(Lane::Exec));
    core.finish(&first, true);
    assert_eq!(core.next(Lane::Exec, 30), Step::WaitUntil(50));
    assert_eq!(started(core.next(Lane::Exec, 50)).id, ActionId(2));
}

#[test]
fn what_cannot_start_by_latest_is_refused_and_frees_the_lane() {
    let mut core = ExecutorCore::new(10);
    core.submit(load_of(1, MODEL));
    core.submit(action(2, ActionKind::Load, 0, 5));
    let load = started(core.next(Lane::Load, 0));
    core.reserve(MODEL, 2).unwrap();
    core.finish(&load, true);
    let Step::Refuse(late, error) = core.next(Lane::Load, 6) else {
        panic!("expected a refusal");
    };
    assert_eq!((late.id, error), (ActionId(2), ActionError::TooLate));
    assert!(!core.busy(Lane::Load));
    assert_eq!(core.next(Lane::Load, 6), Step::Idle);
    assert_eq!(core.pages_used(), 2, "the refused load reserved nothing");
}

#[test]
fn lanes_overlap() {
    let mut core = ExecutorCore::new(10);
    loaded(&mut core, 1, MODEL, 1);
    core.submit(infer(2, 0, Nanos::MAX));
    core.submit(load_of(3, ModelId(4)));
    started(core.next(Lane::Exec, 0));
    started(core.next(Lane::Load, 0));
    assert!(core.busy(Lane::Exec) && core.busy(Lane::Load));
}

#[test]
fn infer_needs_a_finished_load() {
    let mut core = ExecutorCore::new(10);
    core.submit(infer(1, 0, Nanos::MAX));
    assert_eq!(
        core.next(Lane::Exec, 0),
        Step::Refuse(infer(1, 0, Nanos::MAX), ActionError::NotResident)
    );
    core.submit(load_of(2, MODEL));
    let load = started(core.next(Lane::Load, 0));
    core.reserve(MODEL, 3).unwrap();
    core.submit(infer(3, 0, Nanos::MAX));
    assert!(
        matches!(
            core.next(Lane::Exec, 0),
            Step::Refuse(_, ActionError::NotResident)
        ),
        "weights still loading"
    );
    core.finish(&load, true);
    core.submit(infer(4, 0, Nanos::MAX));
    assert_eq!(started(core.next(Lane::Exec, 0)).id, ActionId(4));
    assert_eq!(core.resident().collect::<Vec<_>>(), vec![MODEL]);
}

#[test]
fn pages_are_reserved_refused_and_freed() {
    let mut core = ExecutorCore::new(5);
    loaded(&mut core, 1, ModelId(0), 3);
    core.submit(load_of(2, ModelId(1)));
    let load = started(core.next(Lane::Load, 0));
    assert_eq!(core.reserve(ModelId(1), 3), Err(ActionError::NoFreePages));
    core.finish(&load, false);
    assert_eq!(core.pages_used(), 3, "a refused load holds nothing");
    assert_eq!(
        core.reserve(ModelId(9), u32::MAX),
        Err(ActionError::NoFreePages)
    );
    core.submit(action(3, ActionKind::Unload, 0, Nanos::MAX));
    let unload = started(core.next(Lane::Load, 0));
    assert_eq!(core.pages_used(), 3, "the unload was of a model not held");
    core.finish(&unload, true);
    core.submit(Action {
        model: ModelId(0),
        ..action(4, ActionKind::Unload, 0, Nanos::MAX)
    });
    let unload = started(core.next(Lane::Load, 0));
    assert_eq!(
        core.pages_used(),
        0,
        "an unload frees its pages as it starts"
    );
    core.finish(&unload, true);
    loaded(&mut core, 5, ModelId(1), 5);
    assert_eq!((core.pages_used(), core.pages()), (5, 5));
}

#[test]
fn a_failed_load_gives_its_pages_back() {
    let mut core = ExecutorCore::new(5);
    core.submit(load_of(1, MODEL));
    let load = started(core.next(Lane::Load, 0));
    core.reserve(MODEL, 4).unwrap();
    assert_eq!(core.pages_used(), 4);
    core.finish(&load, false);
    assert_eq!(core.pages_used(), 0);
    assert_eq!(core.resident().count(), 0);
}

#[test]
fn a_second_load_of_the_same_weights_is_refused() {
    let mut core = ExecutorCore::new(10);
    core.submit(load_of(1, MODEL));
    let first = started(core.next(Lane::Load, 0));
    core.reserve(MODEL, 2).unwrap();
    core.finish(&first, true);
    core.submit(load_of(2, MODEL));
    assert_eq!(
        core.next(Lane::Load, 0),
        Step::Refuse(load_of(2, MODEL), ActionError::AlreadyResident)
    );
    assert_eq!(core.pages_used(), 2, "counted once");
    assert_eq!(
        core.reserve(MODEL, 2),
        Err(ActionError::AlreadyResident),
        "reserve keeps the rule too"
    );
}

#[test]
fn a_probe_runs_the_named_model_if_resident_else_loads_it() {
    let mut core = ExecutorCore::new(10);
    let other = ModelId(1);
    assert_eq!(core.probe_work(None), ProbeWork::Nothing);
    assert_eq!(core.probe_work(Some(MODEL)), ProbeWork::LoadAndRun(MODEL));
    loaded(&mut core, 1, MODEL, 2);
    loaded(&mut core, 2, other, 3);
    assert_eq!(core.probe_work(Some(MODEL)), ProbeWork::Run(MODEL));
    assert_eq!(core.probe_work(None), ProbeWork::Run(other), "lowest id");
    assert_eq!(
        core.probe_work(Some(ModelId(7))),
        ProbeWork::LoadAndRun(ModelId(7))
    );
    // A model still loading is not run.
    core.submit(load_of(3, ModelId(8)));
    started(core.next(Lane::Load, 0));
    assert_eq!(core.reserve(ModelId(8), 1), Ok(()));
    assert_eq!(
        core.probe_work(Some(ModelId(8))),
        ProbeWork::LoadAndRun(ModelId(8))
    );
}

#[test]
fn a_probe_gives_back_the_pages_of_its_own_load() {
    let mut core = ExecutorCore::<Action>::new(10);
    loaded(&mut core, 1, MODEL, 4);
    assert_eq!(core.reserve(ModelId(5), 6), Ok(()));
    assert_eq!(core.pages_used(), 10);
    assert_eq!(core.reserve(ModelId(6), 1), Err(ActionError::NoFreePages));
    core.release(ModelId(5));
    assert_eq!(core.pages_used(), 4);
    core.release(ModelId(5));
    assert_eq!(core.pages_used(), 4, "released once");
    assert_eq!(core.resident().collect::<Vec<_>>(), vec![MODEL]);
}
