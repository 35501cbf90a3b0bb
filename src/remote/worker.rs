//! The worker process: `clockwork worker --controller HOST:PORT`.
//!
//! It builds its devices from its configuration's `[[devices]]`, dials the controller,
//! says hello and, once accepted, runs the same executor actors as the embedded runtime
//! on its own clock. Actions arrive on the controller's clock: their `earliest` and
//! `latest` are moved onto the worker's clock on arrival, and the times in its reports
//! back onto the controller's before they leave (saturating), so the controller only ever
//! sees its own clock. A model's bytes arrive before its first LOAD and go to the
//! worker's model cache (the cpu backend's plans are built from them then).
//!
//! When the connection is lost the session's actors stop and the worker dials again with
//! jittered exponential backoff; a new session starts empty (new executors, empty cache),
//! as the controller counts its devices as new ones. A refusal (wrong version or token)
//! ends the process: dialling again would not change the answer.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use rand::Rng;
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::conn::{read_sync, Conn, Inbound, LinkError, SharedSync, Wire};
use super::frame::{Body, DeviceDecl, Hello, ModelBytes, MAGIC, VERSION};
use super::listener::HELLO_WITHIN;
use crate::actors::messages::{ActionReport, Execute, RegisterArtifact};
use crate::actors::{devices_from_config, Executor, ExecutorLinks, ModelCache};
use crate::config::{BackendKind, Config};
use crate::gpu::{Backend, Prepared};
use crate::model::DeviceId;
use crate::time::Clock;

/// First wait before dialling again; doubles up to [`BACKOFF_MAX`], reset by a session.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// What a worker is started with.
pub struct WorkerSettings {
    /// The controller's worker address (`HOST:PORT`).
    pub controller: String,
    /// Its name in the controller's logs and metrics.
    pub name: String,
    /// Its configuration: `[[devices]]`, `[runtime] page_bytes`, `[cluster] token`.
    pub config: Config,
}

/// The host name, the default worker name (a Kubernetes pod's is its name).
pub fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "worker".to_owned())
}

/// Runs the worker until the controller refuses it (an error) or the process is killed.
pub async fn run(settings: WorkerSettings) -> anyhow::Result<()> {
    let clock = Clock::start();
    let token = settings.config.cluster.token_with_env();
    let mut backoff = BACKOFF_MIN;
    loop {
        match session(&settings, clock, token.clone()).await {
            Ok(()) => backoff = BACKOFF_MIN,
            Err(LinkError::Refused(why)) => {
                anyhow::bail!("the controller refused this worker: {why}")
            }
            Err(error) => {
                tracing::warn!(controller = %settings.controller, %error, "cannot reach the controller")
            }
        }
        let jitter = rand::rng().random_range(0.5..1.5);
        tokio::time::sleep(backoff.mul_f64(jitter)).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// One connection: hello, then serve until it is lost.
async fn session(
    settings: &WorkerSettings,
    clock: Clock,
    token: Option<String>,
) -> Result<(), LinkError> {
    let stream = TcpStream::connect(&settings.controller).await?;
    let mut wire = Wire::new(stream, clock);
    let (devices, _cores) = devices_from_config(clock, &settings.config)
        .map_err(|e| LinkError::Refused(format!("cannot start the devices: {e}")))?;
    let page_bytes = settings.config.runtime.page_bytes;
    let decls = devices
        .iter()
        .map(|(kind, b)| declare(*kind, b.as_ref(), page_bytes))
        .collect();
    let hello = Hello {
        magic: MAGIC,
        version: VERSION,
        name: settings.name.clone(),
        devices: decls,
        token,
    };
    wire.send(Body::Hello(hello)).await?;
    match wire.recv(HELLO_WITHIN).await? {
        Body::Accept => {}
        Body::Refuse(why) => return Err(LinkError::Refused(why)),
        _ => return Err(LinkError::Unexpected),
    }
    tracing::info!(controller = %settings.controller, name = %settings.name, devices = devices.len(), "connected to the controller");
    // The session's actors live on an arbiter of their own, stopped with the session.
    let arbiter = Arbiter::new();
    let (lost_tx, lost) = oneshot::channel();
    let cpu = devices.iter().any(|(kind, _)| *kind == BackendKind::Cpu);
    arbiter.spawn(async move {
        start_session(wire, clock, page_bytes, devices, cpu, lost_tx);
    });
    let why = lost.await.unwrap_or_else(|_| "session ended".into());
    tracing::info!(controller = %settings.controller, %why, "connection to the controller lost; starting empty");
    arbiter.stop();
    Ok(())
}

/// What the controller needs to know of a device.
fn declare(kind: BackendKind, backend: &dyn Backend, page_bytes: u64) -> DeviceDecl {
    let info = backend.info();
    DeviceDecl {
        kind: info.kind,
        backend: kind,
        pages: info.pages,
        page_bytes,
        emulated: info.emulated,
        needs_graph: info.needs_graph,
    }
}

/// Starts the session's model cache, executors and link, on the current arbiter.
fn start_session(
    wire: Wire,
    clock: Clock,
    page_bytes: u64,
    devices: Vec<(BackendKind, Box<dyn Backend>)>,
    cpu: bool,
    lost: oneshot::Sender<String>,
) {
    let cache = ModelCache::default().start();
    let (tx, rx) = actix::dev::channel::channel(crate::actors::MAILBOX);
    let link: Addr<WorkerLink> = Addr::new(tx);
    let executors = devices
        .into_iter()
        .enumerate()
        .map(|(i, (_, backend))| {
            let links = ExecutorLinks {
                reports: link.clone().recipient(),
                artifacts: cache.clone().recipient(),
            };
            Executor::new(DeviceId(i as u32), clock, backend, page_bytes, links).start()
        })
        .collect();
    let sync = wire.sync();
    let conn = wire.run(link.clone().recipient());
    let worker = WorkerLink {
        sync,
        conn,
        executors,
        cache,
        cpu,
        lost: Some(lost),
    };
    Context::with_receiver(rx).run(worker);
}

/// The worker's end of the connection: actions in, reports out, clocks translated.
struct WorkerLink {
    sync: SharedSync,
    conn: Conn,
    executors: Vec<Addr<Executor>>,
    cache: Addr<ModelCache>,
    /// It has cpu devices, which need the plans built from a model's bytes.
    cpu: bool,
    lost: Option<oneshot::Sender<String>>,
}

impl Actor for WorkerLink {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(crate::actors::MAILBOX);
    }
}

impl WorkerLink {
    fn execute(&mut self, mut execute: Execute) {
        let action = &mut execute.action;
        let Some(executor) = self.executors.get(action.device.0 as usize) else {
            tracing::warn!(
                device = action.device.0,
                "action for a device this worker does not have"
            );
            return;
        };
        // Onto this worker's clock (`to_local` takes a controller's reading).
        (action.earliest, action.latest) = read_sync(&self.sync, |s| {
            (s.to_local(action.earliest), s.to_local(action.latest))
        });
        executor.do_send(execute);
    }

    fn model(&mut self, model: ModelBytes) {
        let bytes: Option<Arc<[u8]>> = model.bytes.map(Arc::from);
        let mut prepared = Prepared::default();
        if let (true, Some(graph)) = (self.cpu, &bytes) {
            match crate::gpu::cpu::ModelPlans::compile(graph, &model.spec) {
                Ok(plans) => prepared.cpu = Some(Arc::new(plans)),
                Err(error) => {
                    tracing::error!(model = %model.spec.name, %error, "cannot build the model's cpu plans")
                }
            }
        }
        self.cache.do_send(RegisterArtifact {
            id: model.id,
            spec: model.spec,
            bytes,
            prepared,
        });
    }
}

impl Handler<Inbound> for WorkerLink {
    type Result = ();

    fn handle(&mut self, inbound: Inbound, ctx: &mut Context<Self>) {
        match inbound {
            Inbound::Frame(Body::Execute(execute)) => self.execute(execute),
            Inbound::Frame(Body::Model(model)) => self.model(model),
            Inbound::Frame(_) => {}
            Inbound::Lost(why) => {
                if let Some(lost) = self.lost.take() {
                    let _ = lost.send(why);
                }
                ctx.stop();
            }
        }
    }
}

impl Handler<ActionReport> for WorkerLink {
    type Result = ();

    fn handle(&mut self, mut report: ActionReport, _: &mut Context<Self>) {
        if let Ok(measured) = &mut report.result {
            // Back onto the controller's clock (`to_remote` takes this worker's reading).
            (measured.begin, measured.end) = read_sync(&self.sync, |s| {
                (s.to_remote(measured.begin), s.to_remote(measured.end))
            });
        }
        self.conn.send(Body::Report(report));
    }
}
