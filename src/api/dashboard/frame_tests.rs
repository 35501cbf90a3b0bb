use super::*;
use crate::events::{ActionDone, ActionPlanned, RequestAnswered};
use crate::model::RequestId;
use crate::protocol::{ActionError, Measured};

fn planned(action: u64, device: u32, kind: ActionTag, earliest: Nanos, expected: Nanos) -> Event {
    Event::ActionPlanned(ActionPlanned {
        action: ActionId(action),
        device: DeviceId(device),
        model: ModelId(0),
        kind,
        batch: u32::from(kind == ActionTag::Infer),
        earliest,
        latest: earliest + 5 * MS,
        expected,
    })
}

fn done(action: u64, device: u32, kind: ActionTag, ran: Option<(Nanos, Nanos)>) -> Event {
    Event::ActionDone(ActionDone {
        action: ActionId(action),
        device: DeviceId(device),
        model: ModelId(0),
        kind,
        batch: 1,
        expected: MS,
        measured: ran.map(|(begin, end)| Measured {
            begin,
            end,
            duration: end - begin,
        }),
        error: ran.is_none().then_some(ActionError::TooLate),
    })
}

fn answered(request: u64, at: Nanos, outcome: Outcome) -> Event {
    Event::RequestAnswered(RequestAnswered {
        request: RequestId(request),
        model: ModelId(1),
        arrival: 0,
        answered: at,
        slo: 100 * MS,
        outcome,
        batch: None,
        items: 1,
        ran: None,
        tally: None,
    })
}

#[test]
fn planned_bars_queue_behind_their_lane_and_lanes_are_apart() {
    let mut c = Coalescer::new(Limits::default());
    c.push(&planned(1, 0, ActionTag::Infer, 10 * MS, 3 * MS));
    // Behind the first on the exec lane: starts at its end, not at its own earliest.
    c.push(&planned(2, 0, ActionTag::Infer, 11 * MS, 2 * MS));
    // Another lane and another device start at their own earliest.
    c.push(&planned(3, 0, ActionTag::Load, 11 * MS, 8 * MS));
    c.push(&planned(4, 1, ActionTag::Infer, 11 * MS, 2 * MS));
    let frame = c.take(20 * MS).unwrap();
    let spans: Vec<(Lane, Nanos, Nanos)> = frame
        .bars
        .iter()
        .map(|b| (b.lane, b.begin, b.end))
        .collect();
    assert_eq!(
        spans,
        [
            (Lane::Exec, 10 * MS, 13 * MS),
            (Lane::Exec, 13 * MS, 15 * MS),
            (Lane::Load, 11 * MS, 19 * MS),
            (Lane::Exec, 11 * MS, 13 * MS),
        ]
    );
    assert!(frame.bars.iter().all(|b| !b.measured));
}

#[test]
fn a_report_replaces_its_plan_and_an_idle_lane_restarts_from_what_ran() {
    let mut c = Coalescer::new(Limits::default());
    c.push(&planned(1, 0, ActionTag::Infer, 10 * MS, 3 * MS));
    c.push(&done(1, 0, ActionTag::Infer, Some((10 * MS, 11 * MS))));
    let frame = c.take(20 * MS).unwrap();
    assert_eq!(frame.bars.len(), 1);
    let bar = &frame.bars[0];
    assert!(bar.measured);
    assert_eq!((bar.begin, bar.end), (10 * MS, 11 * MS));
    // The lane ran dry at 11 ms, before the planned 13 ms.
    c.push(&planned(2, 0, ActionTag::Infer, 11 * MS, MS));
    let frame = c.take(200 * MS).unwrap();
    assert_eq!((frame.bars[0].begin, frame.bars[0].end), (11 * MS, 12 * MS));
    // A refused action keeps its planned span and says why.
    c.push(&done(2, 0, ActionTag::Infer, None));
    let frame = c.take(400 * MS).unwrap();
    let bar = &frame.bars[0];
    assert!(!bar.measured);
    assert!(bar.error.is_some());
}

#[test]
fn only_late_refused_and_failed_answers_become_marks() {
    let mut c = Coalescer::new(Limits::default());
    let outcomes = [
        Outcome::Ok,
        Outcome::Late,
        Outcome::DeadlineUnreachable,
        Outcome::TimedOut,
        Outcome::ExecutionFailed,
    ];
    for (i, &o) in outcomes.iter().enumerate() {
        c.push(&answered(i as u64, MS * i as u64, o));
    }
    let frame = c.take(0).unwrap();
    let marked: Vec<Outcome> = frame.marks.iter().map(|m| m.outcome).collect();
    assert_eq!(marked, &outcomes[1..]);
}

#[test]
fn frames_are_bounded_and_count_what_they_left_out() {
    let limits = Limits {
        interval: 100 * MS,
        bars: 4,
        marks: 3,
    };
    let mut c = Coalescer::new(limits);
    for a in 0..10 {
        c.push(&planned(a, 0, ActionTag::Infer, a * MS, MS));
        c.push(&answered(a, a * MS, Outcome::Late));
    }
    c.lost(7);
    let frame = c.take(0).unwrap();
    assert_eq!(frame.bars.len(), 4);
    assert_eq!(frame.marks.len(), 3);
    // The newest are kept.
    assert_eq!(frame.bars[0].action, ActionId(6));
    assert_eq!(frame.marks[0].at, 7 * MS);
    assert_eq!(frame.dropped, 6 + 7);
    assert_eq!(frame.lost, 7);
    // A report of an action already in the frame replaces it and drops nothing.
    c.push(&planned(20, 0, ActionTag::Infer, 0, MS));
    c.push(&done(20, 0, ActionTag::Infer, Some((0, MS))));
    let frame = c.take(100 * MS).unwrap();
    assert_eq!((frame.bars.len(), frame.dropped), (1, 0));
}

#[test]
fn at_most_one_frame_per_interval_and_none_when_nothing_happened() {
    let mut c = Coalescer::new(Limits::default());
    assert!(c.take(0).is_none(), "nothing to send");
    c.push(&planned(1, 0, ActionTag::Infer, 0, MS));
    assert!(c.take(0).is_some());
    c.push(&planned(2, 0, ActionTag::Infer, 0, MS));
    assert!(c.take(99 * MS).is_none(), "too soon");
    let frame = c.take(100 * MS).unwrap();
    assert_eq!(frame.now, 100 * MS);
    assert_eq!(frame.bars.len(), 1, "what waited is sent, once");
    assert!(c.take(500 * MS).is_none());
    c.snapshot(Arc::new(Snapshot::default()));
    assert!(c.take(500 * MS).unwrap().snapshot.is_some());
}
