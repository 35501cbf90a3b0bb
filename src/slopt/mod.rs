//! SLOpt planning for pipelines: what each stage's load will be and how to provision and
//! split the end-to-end objective for it, ahead of the queues.
//!
//! Pure code (no actix, no clock, no I/O; times are the caller's, passed in):
//! - [`estimate`]: cascade workload estimation, the rate at every stage from the root
//!   rate and the edges' fan-outs, with an upper bound for provisioning;
//! - [`tune`]: ahead-of-time tuning, per stage a latency budget, batch size and replica
//!   count minimising the replicas along the tree (a dynamic program over budget steps);
//! - [`planner`]: when to re-solve, the replica targets' hold before scaling down, and
//!   [`planner::TunedBudget`], the plan as the pipeline's `Budget`;
//! - [`tuning`]: the three tied together for the pipeline actor, fed as a system says;
//! - [`systems`]: SLOpt, its ablations and the baselines as named combinations of parts.
//!
//! See "SLOpt planning" in docs/ARCHITECTURE.md.

pub mod estimate;
pub mod planner;
pub mod systems;
pub mod tune;
pub mod tuning;

use crate::time::{Nanos, MS};

/// One second in [`Nanos`]: rates are per second.
pub const SECOND: Nanos = 1_000 * MS;
