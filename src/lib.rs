//! clockwork: a model-serving runtime for many DNN models on a pool of accelerators whose
//! promise is predictable latency. See docs/ARCHITECTURE.md for the map.

pub mod actors;
pub mod api;
pub mod config;
pub mod cores;
pub mod events;
pub mod gpu;
pub mod loadgen;
pub mod memory;
pub mod model;
pub mod outcome;
pub mod pipeline;
pub mod protocol;
pub mod remote;
pub mod report;
pub mod repository;
pub mod scheduler;
pub mod serve;
pub mod simulate;
pub mod slopt;
pub mod stats;
pub mod tally;
pub mod tensor;
pub mod time;
pub mod workload;
