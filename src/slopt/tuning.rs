//! A pipeline's planning as its actor drives it: the estimator, the planner and the
//! tuned budget tied together, fed with each root arrival and fan-out, and with the rates
//! a system's parts say ([`Rates`]: the cascade estimate, rates measured at each stage,
//! a rate known offline, or the envelope of the last two).

use std::sync::Arc;

use super::estimate::{Cascade, RateWindow, StageRate, DEFAULT_HORIZON, DEFAULT_WINDOW, Z_99};
use super::planner::{Planner, TunedBudget};
use super::systems::{Provision, Rates, Tuned};
use super::tune::TuneError;
use super::SECOND;
use crate::model::BatchLatency;
use crate::pipeline::Pipeline;
use crate::time::{Nanos, MS};

/// Margin taken off the objective before it is split: the network and buffers.
pub const DEFAULT_MARGIN: Nanos = 2 * MS;

/// A pipeline's planning as its actor drives it.
#[derive(Debug)]
pub struct Tuning {
    cascade: Cascade,
    /// Per stage, its requests as they are made (for [`Rates::Measured`]).
    measured: Vec<RateWindow>,
    parents: Vec<Option<usize>>,
    rates: Rates,
    provision: Provision,
    /// The roots' rate known ahead (for [`Rates::Offline`] and [`Rates::Envelope`]).
    offline: Option<f64>,
    planner: Planner,
    budget: Arc<TunedBudget>,
}

impl Tuning {
    /// SLOpt's planning for `pipeline` whose stages have `profiles` (in stage order).
    pub fn new(pipeline: &Pipeline, profiles: Vec<Vec<BatchLatency>>) -> Self {
        Self::with(pipeline, profiles, Tuned::slopt(), None)
    }

    /// Planning as `tuned` says; `offline`: the roots' rate known ahead (without it,
    /// offline rates fall back to the cascade estimate).
    pub fn with(
        pipeline: &Pipeline,
        profiles: Vec<Vec<BatchLatency>>,
        tuned: Tuned,
        offline: Option<f64>,
    ) -> Self {
        let parents: Vec<Option<usize>> = pipeline.stages.iter().map(|s| s.parent).collect();
        let stages = parents.iter().copied().zip(profiles).collect();
        let usable = pipeline.slo.saturating_sub(DEFAULT_MARGIN).max(1);
        Self {
            cascade: Cascade::new(pipeline, DEFAULT_WINDOW, DEFAULT_HORIZON),
            measured: parents
                .iter()
                .map(|_| RateWindow::new(DEFAULT_WINDOW))
                .collect(),
            parents,
            rates: tuned.rates,
            provision: tuned.provision,
            offline,
            planner: Planner::new(tuned.planner, usable, stages),
            budget: Arc::new(TunedBudget::new(pipeline)),
        }
    }

    /// The budget to give every run.
    pub fn budget(&self) -> Arc<TunedBudget> {
        Arc::clone(&self.budget)
    }

    /// A root request arrived at `now`: re-plans if due.
    pub fn on_root(&mut self, now: Nanos) -> Result<(), TuneError> {
        self.cascade.on_root(now);
        for (v, parent) in self.parents.iter().enumerate() {
            if parent.is_none() {
                self.measured[v].record(now);
            }
        }
        let rates = self.rates(now);
        if let Some(plan) = self.planner.observe(now, &rates)? {
            self.budget.set(plan);
        }
        Ok(())
    }

    /// One completion of `stage`'s parent made `count` requests at `stage`, at `now`.
    pub fn on_fan_out(&mut self, stage: usize, count: usize, now: Nanos) {
        self.cascade
            .on_fan_out(stage, u32::try_from(count).unwrap_or(u32::MAX));
        if let Some(window) = self.measured.get_mut(stage) {
            for _ in 0..count {
                window.record(now);
            }
        }
    }

    /// Per stage, the rate to provision for at `now`.
    fn rates(&mut self, now: Nanos) -> Vec<f64> {
        let measured = |w: &mut RateWindow| at_stage(w.rate(now));
        let rates: Vec<StageRate> = match (self.rates, self.offline) {
            (Rates::Cascade, _) | (Rates::Offline | Rates::Envelope, None) => {
                self.cascade.estimate(now)
            }
            (Rates::Measured, _) => self.measured.iter_mut().map(measured).collect(),
            (Rates::Offline, Some(rate)) => self.cascade.at_rate(rate),
            (Rates::Envelope, Some(rate)) => {
                let ahead = self.cascade.at_rate(rate);
                let seen = self.measured.iter_mut().map(measured);
                ahead
                    .into_iter()
                    .zip(seen)
                    .map(|(a, s)| envelope(a, s))
                    .collect()
            }
        };
        rates
            .iter()
            .map(|r| match self.provision {
                Provision::Mean => r.mean,
                Provision::Upper => r.upper,
            })
            .collect()
    }

    /// The planner (its plan and replica targets).
    pub fn planner(&self) -> &Planner {
        &self.planner
    }
}

/// A rate counted at a stage, with the bound a Poisson count over the horizon gives it
/// (the fan-outs behind it unknown to whoever only counts).
fn at_stage(mean: f64) -> StageRate {
    let h = DEFAULT_HORIZON as f64 / SECOND as f64;
    StageRate {
        mean,
        upper: mean + Z_99 * (mean / h).sqrt(),
    }
}

/// The larger of each.
fn envelope(a: StageRate, b: StageRate) -> StageRate {
    StageRate {
        mean: a.mean.max(b.mean),
        upper: a.upper.max(b.upper),
    }
}

#[cfg(test)]
#[path = "tuning_tests.rs"]
mod tests;
