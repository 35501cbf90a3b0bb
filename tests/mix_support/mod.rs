//! Shared by the overload and hindsight tests: mixes of cpu-like models on one exact
//! device of the in-memory testbed, their requests, and what each model had served.
//! (Not every test file that includes this module uses all of it.)
#![allow(dead_code)]

use clockwork::config::PolicyConfig;
use clockwork::model::{BatchLatency, ModelId, ModelProfile, RequestId};
use clockwork::scheduler::testbed::{Driver, Reaction, Report, Testbed};
use clockwork::scheduler::{ClockworkPolicy, DeviceInfo, ModelInfo, Policy, Request, Verdict};
use clockwork::time::{Nanos, MS, US};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A cpu's profile: a batch of `b` takes `b^growth` times `base` (growth 1: no gain from
/// batching; above 1, a larger batch is dearer per request, as the zoo's resnet on tract,
/// whose batch 8 takes about 10 times its batch 1).
pub fn cpu_like(base: Nanos, growth: f64) -> ModelProfile {
    ModelProfile {
        weight_bytes: 1 << 24,
        load_latency: 5 * MS,
        batches: [1u32, 2, 4, 8]
            .iter()
            .map(|&batch| BatchLatency {
                batch,
                latency: (base as f64 * f64::from(batch).powf(growth)) as Nanos,
            })
            .collect(),
    }
}

/// One model of a mix: its batch-1 time, how its batches grow (see [`cpu_like`]) and
/// its objective.
#[derive(Clone, Copy, Debug)]
pub struct Model {
    pub base: Nanos,
    pub growth: f64,
    pub slo: Nanos,
}

/// A mix of models on one device, offered at `load` times what the device serves at
/// batch 1 (the requests spread evenly over the models), `n` requests with exponential
/// gaps.
#[derive(Clone, Debug)]
pub struct Mix {
    pub models: Vec<Model>,
    pub load: f64,
    pub n: usize,
    pub seed: u64,
}

/// Per model: requests offered and served in time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Served {
    pub offered: usize,
    pub in_time: usize,
}

/// A fixed stream of arrivals that keeps each answer's model: what the testbed's report
/// does not say.
struct Recorder {
    arrivals: std::iter::Peekable<std::vec::IntoIter<Request>>,
    model_of: Vec<usize>,
    served: Vec<Served>,
    /// By request: served in time.
    in_time: Vec<bool>,
}

impl Driver for Recorder {
    fn next_arrival(&mut self) -> Option<Nanos> {
        self.arrivals.peek().map(|r| r.arrival)
    }

    fn arrivals(&mut self, now: Nanos, _: &dyn Policy) -> Vec<Request> {
        let mut due = Vec::new();
        while let Some(r) = self.arrivals.next_if(|r| r.arrival <= now) {
            due.push(r);
        }
        due
    }

    fn answered(&mut self, request: RequestId, verdict: &Verdict, _: Nanos) -> Reaction {
        if matches!(verdict, Verdict::Completed { late: false, .. }) {
            self.served[self.model_of[request.0 as usize]].in_time += 1;
            self.in_time[request.0 as usize] = true;
        }
        Reaction::default()
    }
}

impl Mix {
    pub fn requests(&self) -> Vec<Request> {
        let mut rng = StdRng::seed_from_u64(self.seed);
        let mut next = move || rng.random::<f64>();
        let count = self.models.len();
        let mean_cost = self.models.iter().map(|m| m.base).sum::<Nanos>() as f64 / count as f64;
        let gap = mean_cost / self.load;
        let mut arrival = 0;
        (0..self.n)
            .map(|i| {
                arrival += (-(1.0 - next()).ln() * gap) as Nanos;
                let model = (next() * count as f64) as usize % count;
                Request {
                    id: RequestId(i as u64),
                    model: ModelId(model as u32),
                    arrival,
                    slo: self.models[model].slo,
                    latest_finish: None,
                    items: 1,
                }
            })
            .collect()
    }

    /// Runs the mix on one exact device with `config`: the testbed's report and each
    /// model's requests offered and served in time.
    pub fn run(&self, config: &PolicyConfig) -> (Report, Vec<Served>) {
        let (report, served, _) = self.run_recorded(config, self.requests());
        (report, served)
    }

    /// Runs `requests` (ids from 0, in arrival order) to the mix's models on one exact
    /// device with `config`; also answers, by request, its model and whether it was served
    /// in time.
    pub fn run_recorded(
        &self,
        config: &PolicyConfig,
        requests: Vec<Request>,
    ) -> (Report, Vec<Served>, Vec<(usize, bool)>) {
        let mut policy = ClockworkPolicy::new(config);
        policy.add_device(DeviceInfo {
            kind: "cpu".into(),
            pages: 16,
        });
        let models: Vec<(u32, ModelProfile)> = self
            .models
            .iter()
            .map(|m| (1, cpu_like(m.base, m.growth)))
            .collect();
        for (pages, profile) in &models {
            policy.add_model(ModelInfo {
                pages: *pages,
                profile: profile.clone(),
                by_kind: Vec::new(),
                devices: None,
            });
        }
        let mut served = vec![Served::default(); self.models.len()];
        for r in &requests {
            served[r.model.0 as usize].offered += 1;
        }
        let mut recorder = Recorder {
            in_time: vec![false; requests.len()],
            model_of: requests.iter().map(|r| r.model.0 as usize).collect(),
            arrivals: requests.into_iter().peekable(),
            served,
        };
        let mut testbed = Testbed::new(policy, &[16], models, 8);
        let report = testbed.run_driven(&mut recorder);
        let answers = recorder
            .model_of
            .into_iter()
            .zip(recorder.in_time)
            .collect();
        (report, recorder.served, answers)
    }
}

/// The zoo's shape on a cpu: a model of short batches with a tight objective, one of
/// middling batches, and one whose larger batches are dearer per request, at 5x the
/// device.
pub fn zoo_like() -> Mix {
    let model = |base, growth, slo| Model { base, growth, slo };
    Mix {
        models: vec![
            model(MS, 1.0, 50 * MS),
            model(2 * MS, 1.0, 100 * MS),
            model(8 * MS, 1.25, 200 * MS),
        ],
        load: 5.0,
        n: 6000,
        seed: 11,
    }
}

/// A model of long objectives (200 ms, the zoo's resnet's shape) arriving in bursts of 16
/// (10 us apart, a Poisson stream of bursts 300 ms apart: 43% of the device) beside a
/// trickle of a tight one (50 ms, one request every 400 ms), for 60 s: the mix and its
/// requests.
pub fn bursts_beside_a_trickle() -> (Mix, Vec<Request>) {
    let mix = Mix {
        models: vec![
            Model {
                base: MS,
                growth: 1.0,
                slo: 50 * MS,
            },
            Model {
                base: 8 * MS,
                growth: 1.25,
                slo: 200 * MS,
            },
        ],
        load: 0.0,
        n: 0,
        seed: 5,
    };
    let mut rng = StdRng::seed_from_u64(mix.seed);
    let mut gap = |mean: Nanos| (-(1.0 - rng.random::<f64>()).ln() * mean as f64) as Nanos;
    let end = 60_000 * MS;
    let mut arrivals = Vec::new();
    let mut t = gap(300 * MS);
    while t < end {
        arrivals.extend((0..16).map(|k| (t + k * 10 * US, 1)));
        t += gap(300 * MS);
    }
    let mut t = gap(400 * MS);
    while t < end {
        arrivals.push((t, 0));
        t += gap(400 * MS);
    }
    arrivals.sort_unstable();
    let requests = arrivals
        .into_iter()
        .enumerate()
        .map(|(i, (arrival, model))| Request {
            id: RequestId(i as u64),
            model: ModelId(model),
            arrival,
            slo: mix.models[model as usize].slo,
            latest_finish: None,
            items: 1,
        })
        .collect();
    (mix, requests)
}

pub fn mix() -> impl Strategy<Value = Mix> {
    let model = (200u64..8_000, 1.0f64..1.3, 20u64..60).prop_map(|(base_us, growth, factor)| {
        let base = base_us * US;
        Model {
            base,
            growth,
            slo: (base * factor).max(10 * MS),
        }
    });
    (
        prop::collection::vec(model, 2..5),
        2.0f64..8.0,
        1500usize..4000,
        any::<u64>(),
    )
        .prop_map(|(models, load, n, seed)| Mix {
            models,
            load,
            n,
            seed,
        })
}

impl Mix {
    /// The testbed's reports with the other models' work counted at arrival (the
    /// default) and with each model admitting as if it had the device alone, both without
    /// admission in hindsight.
    pub fn shared_and_alone(&self) -> (Report, Report) {
        let alone = PolicyConfig {
            shared_arrival: false,
            ..without_hindsight()
        };
        (self.run(&without_hindsight()).0, self.run(&alone).0)
    }
}

/// Timed-out requests counted by the testbed (refused after they were admitted).
pub fn timed_out(report: &Report) -> usize {
    report.refused.get("timed_out").copied().unwrap_or(0)
}

/// Eight models of a GPU's shape (batch 8 in 2.3 times batch 1) at load 7.
pub fn batching() -> Mix {
    let model = Model {
        base: 3 * MS,
        growth: 0.4,
        slo: 100 * MS,
    };
    Mix {
        models: vec![model; 8],
        load: 7.0,
        n: 20_000,
        seed: 3,
    }
}

/// Admission in hindsight alone: without the floor under it (`hindsight_floor`).
pub fn hindsight() -> PolicyConfig {
    PolicyConfig {
        admission_hindsight: true,
        hindsight_floor: 0.0,
        ..before_the_horizon()
    }
}

/// Admission in hindsight with a floor of `share` under it (the default: 5%).
pub fn floor(share: f64) -> PolicyConfig {
    PolicyConfig {
        admission_hindsight: true,
        hindsight_floor: share,
        ..before_the_horizon()
    }
}

/// Neither admission in hindsight nor its floor: what the policy did before them.
pub fn without_hindsight() -> PolicyConfig {
    PolicyConfig {
        admission_hindsight: false,
        ..before_the_horizon()
    }
}

/// The default policy without the booking horizon (`booking_horizon`,
/// `scheduler/clockwork/horizon.rs`), which on these mixes refuses at arrival most of what
/// the rules before it (the other models' work counted at arrival, admission in
/// hindsight) were built to: those are tested as they were built, the horizon on top of
/// them (`tests/policy_overload.rs`).
pub fn before_the_horizon() -> PolicyConfig {
    PolicyConfig {
        booking_horizon: false,
        ..PolicyConfig::default()
    }
}

/// Without admission in hindsight, with the booking horizon.
pub fn horizon() -> PolicyConfig {
    PolicyConfig {
        booking_horizon: true,
        ..without_hindsight()
    }
}
