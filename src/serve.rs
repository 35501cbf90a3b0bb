//! `clockwork serve`: the actor system behind the HTTP API, in real time.
//!
//! This function is the one owner of shutdown: on SIGINT or SIGTERM it makes the
//! controller stop admitting (new requests are refused as `shutting_down`), lets the HTTP
//! server finish the requests in flight (each is answered by its deadline at the latest),
//! then stops the actors.
//!
//! It also applies `[server.auth]` (with the tokens of the environment, see
//! `config::AuthConfig`) and `[server.tls]` (`tls.rs`: HTTPS with rustls), and raises the
//! process's open-file limit (`files.rs`).

mod files;
pub mod tls;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use actix_web::HttpServer;
use anyhow::Context as _;

use crate::actors::messages::Drain;
use crate::actors::{Placement, RuntimeBuilder};
use crate::api::{self, Access, ApiSettings, ApiState};
use crate::config::{AuthConfig, Config};
use crate::time::Clock;

/// Serves until a termination signal, then shuts down cleanly.
pub async fn run(config: Config) -> anyhow::Result<()> {
    // Watch the signals before anything else: a SIGTERM that comes while models are
    // being profiled or the port bound is then a clean shutdown, not a default kill.
    let termination = Termination::watch()?;
    // Who may call, and over what, before anything slow: a bad certificate stops the
    // start at once, not after the models are profiled.
    let (auth, tls) = access(&config)?;
    // Before anything opens files: models, devices, sockets.
    let files = files::raise();
    let clock = Clock::start();
    let runtime = RuntimeBuilder::from_config(clock, &config)?
        .placement(Placement::Threads)
        .start()?;
    let state =
        ApiState::new(&runtime, api_settings(&config))?.with_access(Access::from_config(&auth));
    crate::remote::serve_cluster(&config, &runtime, &state).await?;
    let grpc_state = state.clone();
    let cores = runtime.cores.clone();
    // This thread (the system's: timers, the accept loop inherits its mask) belongs to
    // the front end, like the workers below.
    if let Some(core) = cores.as_ref().and_then(|plan| plan.front_core(0)) {
        crate::cores::pin_current(core, "serve");
    }
    let workers = cores
        .as_ref()
        .map_or_else(default_workers, |plan| plan.workers);
    files::report(files, connection_bound(&config));
    let next_worker = Arc::new(AtomicUsize::new(0));
    let connections = connection_counter(&state)?;
    let limits = &config.server.connections;
    let server = HttpServer::new(move || {
        // Called once on each worker's thread as it starts: named, pinned to its
        // front-end core.
        let i = next_worker.fetch_add(1, Ordering::Relaxed);
        crate::cores::enter(cores.as_ref().and_then(|plan| plan.front_core(i)), "http");
        api::app(state.clone())
    })
    .workers(workers)
    .on_connect(move |_, _| connections.inc())
    .disable_signals()
    .shutdown_timeout(config.server.shutdown_grace.as_secs().max(1))
    .client_request_timeout(limits.request_head_timeout)
    .keep_alive(limits.keep_alive)
    .client_disconnect_timeout(limits.disconnect_timeout)
    .max_connections(limits.max_connections)
    .max_connection_rate(limits.max_tls_handshakes);
    let https = tls.is_some();
    let server = match tls {
        Some(tls) => server.bind_rustls_0_23(&config.server.listen, tls),
        None => server.bind(&config.server.listen),
    }
    .with_context(|| format!("cannot listen on {}", config.server.listen))?;
    let guarded = [&auth.admin_tokens, &auth.infer_tokens].map(|t| t.as_ref().map_or(0, Vec::len));
    for address in server.addrs() {
        tracing::info!(%address, https, admin_tokens = guarded[0], infer_tokens = guarded[1], devices = runtime.executors.len(), models = runtime.models.len(), "listening");
    }
    let grpc = match &config.server.grpc_listen {
        Some(address) => Some(start_grpc(grpc_state, address)?),
        None => None,
    };
    let server = server.run();
    let handle = server.handle();
    let serving = actix_web::rt::spawn(server);
    let signal = termination.wait().await;
    tracing::info!(signal, "shutting down: answering requests in flight");
    // Stop admitting first, so nothing new slips in while connections wind down.
    runtime.controller.send(Drain).await.ok();
    if let Some((stop, grpc)) = grpc {
        stop.send(()).ok();
        grpc.await.context("gRPC server thread")??;
    }
    handle.stop(true).await;
    serving.await.context("HTTP server task")??;
    runtime.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

/// `clockwork_http_connections_total`, in the API's registry: connections accepted. Under
/// overload it tells whether refusals keep their connections (a few per client) or cost
/// a new one each (as many as refusals), the difference between a refusal's microseconds
/// and a reconnect's far larger cost on both sides.
fn connection_counter(state: &ApiState) -> anyhow::Result<prometheus::IntCounter> {
    let counter = prometheus::IntCounter::new(
        "clockwork_http_connections_total",
        "HTTP connections accepted (plain or TLS)",
    )?;
    state
        .metrics
        .registry()
        .register(Box::new(counter.clone()))?;
    Ok(counter)
}

/// The tokens (the file's, or the environment's where set) and the TLS configuration,
/// its certificate and key read and checked.
fn access(config: &Config) -> anyhow::Result<(AuthConfig, Option<rustls::ServerConfig>)> {
    let auth = config
        .server
        .auth
        .clone()
        .with_env(|name| std::env::var(name).ok());
    let tls = match config.server.tls.files().map_err(anyhow::Error::msg)? {
        Some((cert, key)) => Some(tls::server_config(cert, key)?),
        None => None,
    };
    Ok((auth, tls))
}

/// What stops the gRPC server, and what says it has stopped.
type GrpcServer = (
    tokio::sync::oneshot::Sender<()>,
    tokio::sync::oneshot::Receiver<anyhow::Result<()>>,
);

/// How many connections the bounds of `[server.connections]` let one HTTP worker and
/// the gRPC port (if it is served) hold at once. Not every worker's: a client's
/// connections go to one worker after another, and on a machine of many cores the sum
/// is past any descriptor limit while no worker comes near its bound.
fn connection_bound(config: &Config) -> u64 {
    let limits = &config.server.connections;
    let grpc = config
        .server
        .grpc_listen
        .as_ref()
        .map_or(0, |_| limits.grpc_max_connections);
    u64::try_from(limits.max_connections.saturating_add(grpc)).unwrap_or(u64::MAX)
}

/// What the API takes from the `[server]` configuration.
fn api_settings(config: &Config) -> ApiSettings {
    let server = &config.server;
    ApiSettings {
        max_body_bytes: server.max_body_bytes,
        decode_threads: server.decoders(),
        decode_queue: server.decode_queue,
        answer_late: server.answer_late,
        grpc_max_connections: server.connections.grpc_max_connections,
        grpc_max_streams: server.connections.grpc_max_streams,
        grpc_preface_within: server.connections.request_head_timeout,
    }
}

/// The gRPC server on a thread of its own (its own runtime, as an HTTP worker has; on the
/// serving thread it competed with the system's timers and accept loop); it stops, after
/// answering the calls in flight, when told. The calls reach the actors by their
/// addresses, which work from any thread.
fn start_grpc(state: ApiState, address: &str) -> anyhow::Result<GrpcServer> {
    let listener = std::net::TcpListener::bind(address)
        .with_context(|| format!("cannot listen on {address} (grpc_listen)"))?;
    listener.set_nonblocking(true)?;
    tracing::info!(grpc = %listener.local_addr()?, "serving gRPC");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (done, finished) = tokio::sync::oneshot::channel();
    let serve = move || {
        let result = runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            let shutdown = async {
                stopped.await.ok();
            };
            api::grpc::serve(state, listener, shutdown).await?;
            anyhow::Ok(())
        });
        done.send(result).ok();
    };
    std::thread::Builder::new()
        .name("grpc".into())
        .spawn(serve)?;
    Ok((stop, finished))
}

/// HTTP workers without a core plan (no cpu devices): actix-web's own default, one per
/// core.
fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// SIGINT and SIGTERM, watched from the moment it is made.
struct Termination {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Termination {
    fn watch() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Self {
                term: signal(SignalKind::terminate()).context("cannot watch SIGTERM")?,
                int: signal(SignalKind::interrupt()).context("cannot watch SIGINT")?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// Waits for the first of them and names it.
    async fn wait(mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.int.recv() => "SIGINT",
                _ = self.term.recv() => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            // Without Unix signals only Ctrl-C can be watched; an error means none can.
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}
