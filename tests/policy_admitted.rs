//! Admitted requests keep their place: in virtual time, on the in-memory testbed with
//! exact timing, requests of one model with different objectives (a client's own `slo_ms`,
//! or a pipeline's sub-requests beside the model's direct traffic) are refused when they
//! arrive, not after waiting. Without `PolicyConfig::protect_admitted`, a request with a
//! tight objective arriving later is queued ahead of those admitted with a loose one (the
//! queue is in deadline order), and under overload they wait most of their objective and
//! are then refused as timed out: the refusal the plan could have given at once.

use std::collections::HashMap;

use clockwork::config::PolicyConfig;
use clockwork::model::{ModelId, RequestId};
use clockwork::scheduler::testbed::{Driver, Reaction, Report, Testbed};
use clockwork::scheduler::{ClockworkPolicy, DeviceInfo, ModelInfo, Policy, Request, Verdict};
use clockwork::time::{Nanos, MS, US};
use proptest::prelude::*;

mod policy_support;
use policy_support::{profile, uniform};

/// A model on `devices` devices, offered `n` requests at exponential gaps of mean `gap`,
/// each with one of `slos` drawn at random; with `pipeline`, those with the loosest are
/// pipeline sub-requests (their objective, the stage's share, is half of it, and their
/// latest useful finish is the whole).
#[derive(Clone, Debug)]
struct Mix {
    devices: usize,
    base: Nanos,
    n: usize,
    gap: Nanos,
    slos: Vec<Nanos>,
    pipeline: bool,
    seed: u64,
}

impl Mix {
    /// The requests, each with whether it has the loosest objective.
    fn requests(&self) -> Vec<(Request, bool)> {
        let mut next = uniform(self.seed);
        let loosest = self.slos.iter().copied().max().unwrap_or(0);
        let mut arrival = 0;
        (0..self.n)
            .map(|i| {
                arrival += (-(1.0 - next()).ln() * self.gap as f64) as Nanos;
                let slo = self.slos[(next() * self.slos.len() as f64) as usize % self.slos.len()];
                let sub = self.pipeline && slo == loosest;
                let request = Request {
                    id: RequestId(i as u64),
                    model: ModelId(0),
                    arrival,
                    slo: if sub { slo / 2 } else { slo },
                    latest_finish: sub.then(|| arrival + slo),
                    items: 1,
                };
                (request, slo == loosest)
            })
            .collect()
    }

    fn run(&self, protect: bool) -> Outcomes {
        let config = PolicyConfig {
            protect_admitted: protect,
            ..PolicyConfig::default()
        };
        let mut policy = ClockworkPolicy::new(&config);
        for _ in 0..self.devices {
            policy.add_device(DeviceInfo {
                kind: "test".into(),
                pages: 8,
            });
        }
        let model = (1, profile(self.base));
        policy.add_model(ModelInfo {
            pages: model.0,
            profile: model.1.clone(),
            by_kind: Vec::new(),
            devices: None,
        });
        let pages = vec![8; self.devices];
        let mut testbed = Testbed::new(policy, &pages, vec![model], config.max_batch as usize);
        let mut driver = Recorder {
            arrivals: self.requests().into_iter().peekable(),
            waiting: HashMap::new(),
            outcomes: Outcomes::default(),
        };
        driver.outcomes.report = testbed.run_driven(&mut driver);
        driver.outcomes
    }
}

/// What became of the requests, by whether theirs was the loosest objective.
#[derive(Debug, Default)]
struct Outcomes {
    /// 0: the tighter objectives; 1: the loosest.
    classes: [Class; 2],
    report: Report,
}

#[derive(Debug, Default, Clone, Copy)]
struct Class {
    served: usize,
    on_arrival: usize,
    after_waiting: usize,
}

impl Outcomes {
    fn after_waiting(&self) -> usize {
        self.classes.iter().map(|c| c.after_waiting).sum()
    }

    fn served(&self) -> usize {
        self.classes.iter().map(|c| c.served).sum()
    }
}

/// Sends the requests and sorts their answers by class.
struct Recorder {
    arrivals: std::iter::Peekable<std::vec::IntoIter<(Request, bool)>>,
    /// Requests sent and not answered: (arrival, whether of the loosest class).
    waiting: HashMap<u64, (Nanos, bool)>,
    outcomes: Outcomes,
}

impl Driver for Recorder {
    fn next_arrival(&mut self) -> Option<Nanos> {
        self.arrivals.peek().map(|r| r.0.arrival)
    }

    fn arrivals(&mut self, now: Nanos, _: &dyn Policy) -> Vec<Request> {
        let mut due = Vec::new();
        while let Some((r, loose)) = self.arrivals.next_if(|r| r.0.arrival <= now) {
            self.waiting.insert(r.id.0, (r.arrival, loose));
            due.push(r);
        }
        due
    }

    fn answered(&mut self, request: RequestId, verdict: &Verdict, now: Nanos) -> Reaction {
        if let Some((arrival, loose)) = self.waiting.remove(&request.0) {
            let class = &mut self.outcomes.classes[usize::from(loose)];
            match verdict {
                Verdict::Refused(_) if now == arrival => class.on_arrival += 1,
                Verdict::Refused(_) => class.after_waiting += 1,
                _ => class.served += 1,
            }
        }
        Reaction::default()
    }
}

/// One device at about 1.4 times its capacity, requests with objectives of 20 and 100 ms.
fn overload() -> Mix {
    Mix {
        devices: 1,
        base: 2 * MS,
        n: 6000,
        gap: 700 * US,
        slos: vec![20 * MS, 100 * MS],
        pipeline: false,
        seed: 3,
    }
}

/// Mutation that breaks it: `keeps_those_behind` always true.
#[test]
fn a_later_request_due_sooner_does_not_push_out_admitted_ones() {
    let protected = overload().run(true);
    let open = overload().run(false);
    for o in [&protected, &open] {
        assert!(o.report.violations.is_empty(), "{:?}", o.report.violations);
        assert_eq!(o.report.late, 0, "{o:?}");
    }
    let loose = |o: &Outcomes| o.classes[1];
    assert!(
        loose(&protected).after_waiting * 10 <= loose(&open).after_waiting,
        "loose requests refused after waiting: {:?} protected, {:?} without",
        loose(&protected),
        loose(&open)
    );
    assert!(
        protected.after_waiting() * 2 <= open.after_waiting(),
        "refused after waiting: {protected:?} protected, {open:?} without"
    );
    // The work done is the same: the refusals move to arrival, they do not grow.
    assert!(
        protected.served() * 100 >= open.served() * 99,
        "served {protected:?} protected, {open:?} without"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// On exact devices, at any load and mix of objectives: the check never leaves more
    /// of the loosest requests (those that later, tighter ones are queued ahead of)
    /// refused after waiting (give or take one in a hundred), costs hardly any served request, and where the loosest
    /// objective is at least twice every other and 40 ms, refuses at most one in fifty
    /// of them after waiting. (With objectives this close to a batch's run, the batch
    /// choice itself skips requests, whatever their place: that is not this check's.
    /// Nor is an objective close to the loosest: at 3.7 times one device's capacity with
    /// objectives of 14, 52 and 58 ms, the 52 ms requests overtake the 58 ms ones by less
    /// than a batch's run each, every push within what the check lets pass, and 2-3% of
    /// the 58 ms ones time out after waiting, against 8-11% without it.)
    #[test]
    fn requests_queued_behind_later_ones_are_not_refused_after_waiting(
        devices in 1usize..=2,
        load in 0.5f64..4.0,
        slos in prop::collection::vec(10u64..200, 2..=4),
        pipeline: bool,
        seed: u64,
    ) {
        let base = 2 * MS;
        let capacity = devices as f64 / base as f64;
        let mix = Mix {
            devices,
            base,
            n: 2000,
            gap: (1.0 / (capacity * load)) as Nanos,
            slos: slos.iter().map(|s| s * MS).collect(),
            pipeline,
            seed,
        };
        let protected = mix.run(true);
        let open = mix.run(false);
        let violations = &protected.report.violations;
        prop_assert!(violations.is_empty(), "{:?}", violations);
        prop_assert_eq!(protected.report.late, 0);
        let (loose, was) = (protected.classes[1], open.classes[1]);
        let offered = loose.served + loose.on_arrival + loose.after_waiting;
        // Within one in a hundred: objectives within a batch's run of each other (54 and
        // 55 ms) gave 62 against 61, the batches merely falling otherwise.
        prop_assert!(
            loose.after_waiting * 100 <= was.after_waiting * 100 + offered,
            "{:?} {:?}", protected, open
        );
        // Where every objective is at least ten runs: within a few runs the refusals at
        // arrival can cost served requests (objectives of 10 and 11 ms, 2 ms runs, a
        // pipeline, 3x two devices' capacity: 916 served against 1,011, found by CI's
        // seed 218677864109045), the trade for which `protect_admitted` is off by default.
        let tightest = slos.iter().copied().min().unwrap_or(0) * MS;
        if tightest >= 10 * base {
            prop_assert!(protected.served() * 100 >= open.served() * 95, "{:?} {:?}", protected, open);
        }
        let loosest = slos.iter().copied().max().unwrap_or(0);
        let next = slos.iter().copied().filter(|&s| s < loosest).max().unwrap_or(loosest);
        if loosest >= 2 * next && loosest >= 40 {
            prop_assert!(loose.after_waiting * 50 <= offered, "{:?} {:?}", protected, open);
        }
    }
}
