//! The pipeline-serving systems compared in the SLOpt experiments, each a named
//! combination of parts that exist elsewhere: the controller's policy, where the tuner's
//! rates come from, how it splits the objective, when it re-plans, and which requests a
//! stage may still drop. `clockwork simulate --pipeline ... --policy slopt,nexus-like,...`
//! runs them side by side on the same arrivals.
//!
//! | system | policy | rates | split | re-plan | drop |
//! |---|---|---|---|---|---|
//! | `slopt` | clockwork | cascade, upper bound | DP | 1 s, 10% | R_v, earliest stage |
//! | `slopt-noest` | clockwork | measured per stage, upper bound | DP | 1 s, 10% | R_v, earliest stage |
//! | `slopt-notune` | clockwork | cascade, upper bound | even | 1 s, 10% | R_v, earliest stage |
//! | `slopt-nodrop` | clockwork | cascade, upper bound | DP | 1 s, 10% | stage deadline |
//! | `nexus-like` | clockwork | measured per stage, mean | DP | 30 s epochs, 10 s after a move | stage deadline |
//! | `inferline-like` | clockwork | the trace's rate (offline), raised by the measured envelope | DP | 1 s, up only | stage deadline |
//! | `triton-like` | triton | the trace's mean rate, fixed | even | never | timeout at the stage deadline |
//! | `even-split` | clockwork | none (the policy's own placement) | batch-1 proportional | - | stage deadline |
//!
//! Pure: names, the parts, and the one rule of what a drop rule tells the policy.

use std::fmt;
use std::str::FromStr;

use super::planner::PlannerConfig;
use super::tune::Split;
use super::SECOND;
use crate::config::PolicyName;
use crate::time::Nanos;

/// A named pipeline-serving system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum System {
    /// All three SLOpt mechanisms.
    Slopt,
    /// SLOpt with each stage's rate measured at the stage instead of estimated.
    SloptNoest,
    /// SLOpt with the even split instead of the dynamic program.
    SloptNotune,
    /// SLOpt without the adaptive batch drop (stages judged by their own deadlines).
    SloptNodrop,
    /// Nexus: the DP split on measured rates, re-planned in epochs, early drop.
    NexusLike,
    /// InferLine: planned offline on the trace's rate, an online envelope tuner.
    InferlineLike,
    /// Triton: per-stage dynamic batching, fixed replicas for the mean, a timeout.
    TritonLike,
    /// The pipelines issue's default: batch-1 proportional split, Clockwork per stage.
    EvenSplit,
}

impl System {
    /// Every system, in the order reports list them.
    pub const ALL: [System; 8] = [
        Self::Slopt,
        Self::SloptNoest,
        Self::SloptNotune,
        Self::SloptNodrop,
        Self::NexusLike,
        Self::InferlineLike,
        Self::TritonLike,
        Self::EvenSplit,
    ];

    /// The name on the command line and in reports.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Slopt => "slopt",
            Self::SloptNoest => "slopt-noest",
            Self::SloptNotune => "slopt-notune",
            Self::SloptNodrop => "slopt-nodrop",
            Self::NexusLike => "nexus-like",
            Self::InferlineLike => "inferline-like",
            Self::TritonLike => "triton-like",
            Self::EvenSplit => "even-split",
        }
    }

    /// Every name, comma-separated, for messages.
    pub fn known() -> String {
        Self::ALL.map(Self::as_str).join(", ")
    }

    /// What it is made of.
    pub fn parts(self) -> Parts {
        let slopt = Tuned::slopt();
        let adaptive = DropRule::Adaptive { earliest: true };
        let (policy, tuning, drop) = match self {
            Self::Slopt => (PolicyName::Clockwork, Some(slopt), adaptive),
            Self::SloptNoest => {
                let rates = Rates::Measured;
                (
                    PolicyName::Clockwork,
                    Some(Tuned { rates, ..slopt }),
                    adaptive,
                )
            }
            Self::SloptNotune => {
                let planner = PlannerConfig {
                    split: Split::Even,
                    ..slopt.planner
                };
                (
                    PolicyName::Clockwork,
                    Some(Tuned { planner, ..slopt }),
                    adaptive,
                )
            }
            Self::SloptNodrop => (PolicyName::Clockwork, Some(slopt), DropRule::StageDeadline),
            Self::NexusLike => (
                PolicyName::Clockwork,
                Some(nexus()),
                DropRule::StageDeadline,
            ),
            Self::InferlineLike => (
                PolicyName::Clockwork,
                Some(inferline()),
                DropRule::StageDeadline,
            ),
            Self::TritonLike => (PolicyName::Triton, Some(triton()), DropRule::StageDeadline),
            Self::EvenSplit => (PolicyName::Clockwork, None, DropRule::StageDeadline),
        };
        Parts {
            policy,
            tuning,
            drop,
        }
    }
}

/// Nexus's epochs: re-plan every 30 s, or 10 s after the last plan when a stage's rate
/// has moved by more than 10% (Nexus's band is 0.8-1.1x; ours is symmetric).
fn nexus() -> Tuned {
    Tuned {
        rates: Rates::Measured,
        provision: Provision::Mean,
        planner: PlannerConfig {
            every: 30 * SECOND,
            settle: 10 * SECOND,
            ..PlannerConfig::default()
        },
    }
}

/// InferLine: the offline plan for the trace's rate (with its 99% bound) is the floor; the
/// online tuner only raises replicas where the measured envelope passes it.
fn inferline() -> Tuned {
    Tuned {
        rates: Rates::Envelope,
        provision: Provision::Upper,
        planner: PlannerConfig {
            hold_down: Nanos::MAX,
            ..PlannerConfig::default()
        },
    }
}

/// Triton: replicas sized once for the mean load, never re-planned.
fn triton() -> Tuned {
    Tuned {
        rates: Rates::Offline,
        provision: Provision::Mean,
        planner: PlannerConfig {
            every: Nanos::MAX,
            moved: f64::INFINITY,
            split: Split::Even,
            ..PlannerConfig::default()
        },
    }
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of [`System::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown pipeline system '{0}' (known: {known})", known = System::known())]
pub struct UnknownSystem(pub String);

impl FromStr for System {
    type Err = UnknownSystem;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownSystem(s.to_owned()))
    }
}

/// A system's parts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Parts {
    /// The controller's policy (per-stage scheduling and placement).
    pub policy: PolicyName,
    /// The planner of stage budgets and replica floors; `None`: batch-1 proportional
    /// split and the policy's own placement.
    pub tuning: Option<Tuned>,
    /// Which requests a stage may drop, and so how late it may serve them.
    pub drop: DropRule,
}

impl Parts {
    /// The parts the plain `clockwork` policy had before the systems (`--budget even`
    /// or `tuned`): SLOpt's planning when tuned, the adaptive drop either way.
    pub fn legacy(policy: PolicyName, tuned: bool) -> Self {
        Self {
            policy,
            tuning: tuned.then(|| System::Slopt.parts().tuning).flatten(),
            drop: DropRule::Adaptive { earliest: true },
        }
    }
}

/// How a system's planner is fed and run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tuned {
    /// Where each stage's rate comes from.
    pub rates: Rates,
    /// Which rate to provision for.
    pub provision: Provision,
    /// When to re-plan and scale down.
    pub planner: PlannerConfig,
}

impl Tuned {
    /// SLOpt's: the cascade estimate's upper bound, the DP split, re-planned every
    /// second and on a 10% move.
    pub fn slopt() -> Self {
        Self {
            rates: Rates::Cascade,
            provision: Provision::Upper,
            planner: PlannerConfig::default(),
        }
    }
}

/// Where the planner's per-stage rates come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rates {
    /// The cascade estimate: the root rate times the fan-outs, the moment roots arrive.
    Cascade,
    /// Requests counted at each stage as they are made (lags by the upstream latency).
    Measured,
    /// The trace's known root rate through the declared fan-outs, planned once.
    Offline,
    /// The larger of [`Rates::Offline`] and [`Rates::Measured`], per stage.
    Envelope,
}

/// Which rate the replicas are sized for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provision {
    /// The expected rate.
    Mean,
    /// The rate any 1 s interval passes with about 1% probability.
    Upper,
}

/// Which requests a stage may drop, told to the policy as the request's latest useful
/// finish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropRule {
    /// Adaptive batch drop: a request is served (and batched) by its root's deadline less
    /// R_v, the least time still needed below it; with `earliest`, a root's first stage
    /// also sees the queues below (earliest-stage drop).
    Adaptive {
        /// Judge the first stage by the projected waits below.
        earliest: bool,
    },
    /// Each stage by its own deadline: a request that cannot finish by it is dropped.
    StageDeadline,
}

impl DropRule {
    /// The R_v the controller is told for a sub-request whose stage deadline is
    /// `stage_deadline`, of a root due at `root_deadline`, with R_v `downstream` from the
    /// run: the policy serves it until `root_deadline - ` this.
    pub fn downstream(
        self,
        root_deadline: Nanos,
        stage_deadline: Nanos,
        downstream: Nanos,
    ) -> Nanos {
        match self {
            Self::Adaptive { .. } => downstream,
            Self::StageDeadline => root_deadline.saturating_sub(stage_deadline),
        }
    }

    /// Whether the first stage is judged by the queues below it.
    pub fn earliest(self) -> bool {
        matches!(self, Self::Adaptive { earliest: true })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_distinct() {
        for s in System::ALL {
            assert_eq!(s.as_str().parse::<System>(), Ok(s));
        }
        let mut names = System::ALL.map(System::as_str).to_vec();
        names.dedup();
        assert_eq!(names.len(), System::ALL.len());
        assert!("clockwork".parse::<System>().is_err());
    }

    #[test]
    fn each_ablation_differs_from_slopt_in_its_one_part() {
        let full = System::Slopt.parts();
        let tuning = |s: System| s.parts().tuning.expect("tuned");
        assert_eq!(tuning(System::SloptNoest).rates, Rates::Measured);
        assert_eq!(
            Tuned {
                rates: Rates::Cascade,
                ..tuning(System::SloptNoest)
            },
            full.tuning.expect("tuned")
        );
        assert_eq!(tuning(System::SloptNotune).planner.split, Split::Even);
        assert_eq!(System::SloptNotune.parts().drop, full.drop);
        assert_eq!(System::SloptNodrop.parts().tuning, full.tuning);
        assert_eq!(System::SloptNodrop.parts().drop, DropRule::StageDeadline);
    }

    #[test]
    fn a_stage_deadline_drop_serves_until_the_stage_deadline() {
        let rule = DropRule::StageDeadline;
        // Root due at 100, stage due at 40: the policy's latest finish is 100 - 60 = 40.
        assert_eq!(rule.downstream(100, 40, 7), 60);
        assert_eq!(rule.downstream(100, 120, 7), 0, "never past the root");
        assert_eq!(
            DropRule::Adaptive { earliest: false }.downstream(100, 40, 7),
            7
        );
        assert!(!rule.earliest());
    }
}
