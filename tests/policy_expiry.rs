//! When the Clockwork policy refuses a request it admitted: as soon as the plan leaves it
//! no start in time on any device, not when its latest start comes. Virtual time, on the
//! in-memory testbed.

use clockwork::config::PolicyConfig;
use clockwork::model::{BatchLatency, ModelId, ModelProfile, RequestId};
use clockwork::scheduler::testbed::{Driver, Reaction, Testbed};
use clockwork::scheduler::{
    ClockworkPolicy, DeviceInfo, ModelInfo, Policy, Refusal, Request, Verdict,
};
use clockwork::time::{Nanos, MS};

/// One batch size, taking `latency`.
fn profile(latency: Nanos) -> ModelProfile {
    ModelProfile {
        weight_bytes: 1 << 20,
        load_latency: MS,
        batches: vec![BatchLatency { batch: 1, latency }],
    }
}

/// A fixed list of arrivals that remembers when each request was answered, and how.
struct Recorder {
    pending: std::collections::VecDeque<Request>,
    arrivals: Vec<Nanos>,
    answers: Vec<(RequestId, Verdict, Nanos)>,
}

impl Driver for Recorder {
    fn next_arrival(&mut self) -> Option<Nanos> {
        self.pending.front().map(|r| r.arrival)
    }

    fn arrivals(&mut self, now: Nanos, _: &dyn Policy) -> Vec<Request> {
        let mut due = Vec::new();
        while self.pending.front().is_some_and(|r| r.arrival <= now) {
            due.extend(self.pending.pop_front());
        }
        due
    }

    fn answered(&mut self, request: RequestId, verdict: &Verdict, now: Nanos) -> Reaction {
        self.answers.push((request, verdict.clone(), now));
        Reaction::default()
    }
}

/// One device shared by a model of long runs (`long`: 80 ms, objective 1 s) and one of
/// short runs (`short`: 2 ms, objective 60 ms), both asked far more than the device can
/// serve: the plan keeps taking long batches ahead of short requests it admitted (their
/// latest starts come later), so some short requests time out.
fn overloaded() -> Recorder {
    let mut pending = std::collections::VecDeque::new();
    let mut arrivals = Vec::new();
    for i in 0..2000u64 {
        let at = i * MS / 2;
        let (model, slo) = if i % 10 == 0 {
            (ModelId(0), 1000 * MS)
        } else {
            (ModelId(1), 60 * MS)
        };
        pending.push_back(Request {
            id: RequestId(i),
            model,
            arrival: at,
            slo,
            latest_finish: None,
            items: 1,
        });
        arrivals.push(at);
    }
    Recorder {
        pending,
        arrivals,
        answers: Vec::new(),
    }
}

/// A short request refused `timed_out` is refused at the step that made it hopeless (a long
/// batch planned ahead of it), not at its latest start. Mutation that breaks it: the second `expire` in `schedule` removed
/// (refusals wait for their latest start, tens of milliseconds after arrival).
#[test]
fn a_request_the_plan_leaves_no_start_is_refused_when_the_plan_shows_it() {
    let config = PolicyConfig::default();
    let mut policy = ClockworkPolicy::new(&config);
    policy.add_device(DeviceInfo {
        kind: "test".into(),
        pages: 8,
    });
    let models = vec![(1, profile(80 * MS)), (1, profile(2 * MS))];
    for (pages, profile) in &models {
        policy.add_model(ModelInfo {
            pages: *pages,
            profile: profile.clone(),
            by_kind: Vec::new(),
            devices: None,
        });
    }
    let mut testbed = Testbed::new(policy, &[8], models, config.max_batch as usize);
    let mut driver = overloaded();
    let report = testbed.run_driven(&mut driver);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.late, 0, "{report:?}");
    let waits: Vec<Nanos> = driver
        .answers
        .iter()
        .filter(|(id, v, _)| id.0 % 10 != 0 && matches!(v, Verdict::Refused(Refusal::TimedOut)))
        .map(|(id, _, at)| at - driver.arrivals[id.0 as usize])
        .collect();
    assert!(!waits.is_empty(), "nothing timed out: {report:?}");
    let mean = waits.iter().sum::<Nanos>() / waits.len() as Nanos;
    // Their latest start is about 58 ms after arrival (a 60 ms objective, a 2 ms run):
    // refused then, the mean wait was 57.7 ms; refused when the long batch ahead of them
    // is planned, it is less than half of that.
    assert!(
        mean < 35 * MS,
        "mean wait {mean} ns of {} timed out: {report:?}",
        waits.len()
    );
}
