//! The controller's door for workers: the accept loop and the handshake.
//!
//! A worker dials, sends its hello first (within [`HELLO_WITHIN`]) and gets `Accept` or
//! `Refuse` with the reason (wrong magic, version, token or page size: see
//! `frame::check_hello`). Accepted, its devices join the controller ([`Join`]) and a
//! [`Link`] stands in for their executors until the connection is lost.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::net::{TcpListener, TcpStream};

use super::conn::{LinkError, Wire};
use super::frame::{check_hello, Body, DeviceDecl, Hello};
use super::link::{Link, LinkPeers};
use super::stats::ClusterStats;
use crate::actors::eligibility::DeviceFacts;
use crate::actors::messages::FetchArtifact;
use crate::actors::{Controller, Join, JoiningDevice, Leave};
use crate::scheduler::DeviceInfo;
use crate::time::Clock;

/// A worker that connects must say hello within this long.
pub const HELLO_WITHIN: Duration = Duration::from_secs(5);

/// What accepting workers needs.
#[derive(Clone)]
pub struct ListenerParts {
    pub controller: Addr<Controller>,
    /// The model cache, whose artifacts workers get before their LOADs.
    pub artifacts: Recipient<FetchArtifact>,
    pub clock: Clock,
    /// The token workers must send; `None`: any worker joins.
    pub token: Option<String>,
    /// The controller's page size, which workers' devices must share.
    pub page_bytes: u64,
    pub stats: ClusterStats,
}

/// Binds `address` and accepts workers on the current arbiter from then on; answers the
/// address bound (port 0 picks one).
pub async fn listen(address: &str, parts: ListenerParts) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    tracing::info!(address = %bound, "accepting workers");
    actix_rt::spawn(accept_loop(listener, Arc::new(parts)));
    Ok(bound)
}

async fn accept_loop(listener: TcpListener, parts: Arc<ListenerParts>) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let parts = Arc::clone(&parts);
                actix_rt::spawn(async move {
                    if let Err(error) = join(stream, &parts).await {
                        tracing::warn!(%peer, %error, "worker not joined");
                    }
                });
            }
            Err(error) => {
                // Out of descriptors, say: wait a little rather than spin.
                tracing::warn!(%error, "cannot accept a worker");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The handshake, then the link.
async fn join(stream: TcpStream, parts: &ListenerParts) -> Result<(), LinkError> {
    let mut wire = Wire::new(stream, parts.clock);
    let Body::Hello(hello) = wire.recv(HELLO_WITHIN).await? else {
        return Err(LinkError::Unexpected);
    };
    if let Err(why) = check_hello(&hello, parts.token.as_deref(), parts.page_bytes) {
        let _ = wire.send(Body::Refuse(why.clone())).await;
        return Err(LinkError::Refused(why));
    }
    let Hello { name, devices, .. } = hello;
    // The link's address exists before it starts: the controller needs it to join the
    // devices, and the link needs their ids. Actions sent meanwhile wait in its mailbox.
    let (tx, rx) = actix::dev::channel::channel(crate::actors::MAILBOX);
    let addr: Addr<Link> = Addr::new(tx);
    let join = Join {
        worker: name.clone(),
        devices: devices.iter().map(joining).collect(),
        link: addr.clone().recipient(),
    };
    let ids = parts
        .controller
        .send(join)
        .await
        .map_err(|_| LinkError::Closed)?;
    if let Err(error) = wire.send(Body::Accept).await {
        parts.controller.do_send(Leave {
            worker: name,
            devices: ids,
        });
        return Err(error);
    }
    tracing::info!(worker = %name, devices = ids.len(), "worker connected");
    let sync = wire.sync();
    let conn = wire.run(addr.recipient());
    let peers = LinkPeers {
        reports: parts.controller.clone().recipient(),
        leave: parts.controller.clone().recipient(),
        lag: parts.controller.clone().recipient(),
        artifacts: parts.artifacts.clone(),
        stats: parts.stats.clone(),
    };
    let link = Link::new(name, ids, parts.clock, (conn, sync), peers);
    Context::with_receiver(rx).run(link);
    Ok(())
}

/// A worker's device as the controller's policy and registration take it.
fn joining(device: &DeviceDecl) -> JoiningDevice {
    JoiningDevice {
        info: DeviceInfo {
            kind: device.kind.clone(),
            pages: device.pages,
        },
        facts: DeviceFacts {
            backend: Some(device.backend),
            pages: device.pages,
            emulated: device.emulated,
            needs_graph: device.needs_graph,
        },
    }
}
