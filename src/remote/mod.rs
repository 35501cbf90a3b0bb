//! Remote workers: executors in other processes, on other machines.
//!
//! A worker process (`clockwork worker`) owns its devices and runs the same executor
//! actors as the embedded runtime; it dials the controller, says hello and then carries
//! `Execute`s in and `ActionReport`s out over one TCP connection. On the controller, a
//! link actor per worker stands in for its executors: the controller sends it `Execute`
//! and gets `ActionReport`s back exactly as from a local executor, all on its own clock.
//!
//! - `frame`: the frames, their framing (length-delimited, a maximum size) and encoding.
//! - `clock`: the offset and round trip of one connection, from the frames' stamps (pure).
//! - `conn`: a connection's reader and writer tasks: stamps, heartbeats, loss.
//! - `link`: the controller's stand-in for one worker's executors.
//! - `listener`: the controller's accept loop and handshake.
//! - `worker`: the worker process.
//! - `stats`: what the controller knows of its workers, for metrics and readiness.

pub mod clock;
pub mod conn;
pub mod frame;
pub mod link;
pub mod listener;
pub mod stats;
pub mod worker;

use crate::api::ApiState;
use crate::config::Config;

/// Starts accepting workers if `[cluster] listen` is set (on the current arbiter; the
/// address bound is logged as `accepting workers address=...`). Their metrics go to the
/// API's registry.
pub async fn serve_cluster(
    config: &Config,
    runtime: &crate::actors::Runtime,
    api: &ApiState,
) -> anyhow::Result<()> {
    let Some(address) = &config.cluster.listen else {
        return Ok(());
    };
    let parts = listener::ListenerParts {
        controller: runtime.controller.clone(),
        artifacts: runtime.cache.clone().recipient(),
        clock: runtime.clock,
        token: config.cluster.token_with_env(),
        page_bytes: config.runtime.page_bytes,
        stats: stats::ClusterStats::new(api.metrics.registry())?,
    };
    listener::listen(address, parts)
        .await
        .map_err(|e| anyhow::anyhow!("cannot accept workers on {address}: {e}"))?;
    Ok(())
}
