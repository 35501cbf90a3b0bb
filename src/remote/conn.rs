//! One connection, either side: frames stamped on the way out and measured on the way
//! in, heartbeats, and loss.
//!
//! [`Wire`] is the socket in frames, for the handshake. [`Conn`] then runs it as two tasks:
//! the writer sends what its owner queues and a `Ping` after [`IDLE_PING`] without
//! anything to send; the reader feeds every frame's stamps to the connection's
//! [`ClockSync`], answers pings, hands the rest to its owner, and reports the connection
//! lost on end of stream, a socket or decoding error, or [`SILENCE`] without a frame (any
//! frame is a heartbeat). Dropping the `Conn` ends both tasks and closes the socket.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::{Message, Recipient};
use futures_util::{SinkExt, StreamExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

use super::clock::ClockSync;
use super::frame::{self, Body, Envelope};
use crate::protocol::WireError;
use crate::time::Clock;

/// A sender with nothing to say pings after this long, so the peer's reader hears from
/// it well within [`SILENCE`].
pub const IDLE_PING: Duration = Duration::from_millis(100);

/// A peer silent this long is lost (ten missed pings).
pub const SILENCE: Duration = Duration::from_secs(1);

/// The clock estimate of a connection, shared by its reader, its writer and its owner.
pub type SharedSync = Arc<Mutex<ClockSync>>;

/// Reads the shared estimate (a poisoned lock still holds a usable estimate).
pub fn read_sync<T>(sync: &SharedSync, f: impl FnOnce(&ClockSync) -> T) -> T {
    f(&sync.lock().unwrap_or_else(|e| e.into_inner()))
}

fn write_sync(sync: &SharedSync, f: impl FnOnce(&mut ClockSync)) {
    f(&mut sync.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Why a connection could not go on.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("the peer closed the connection")]
    Closed,
    #[error("no frame from the peer within {0:?}")]
    Silent(Duration),
    #[error("refused: {0}")]
    Refused(String),
    #[error("unexpected frame during the handshake")]
    Unexpected,
}

/// What a running connection tells its owner.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub enum Inbound {
    /// A frame other than a ping or pong.
    Frame(Body),
    /// The connection is gone, and why.
    Lost(String),
}

/// A socket in frames, with its clock estimate.
pub struct Wire {
    read: FramedRead<OwnedReadHalf, LengthDelimitedCodec>,
    write: FramedWrite<OwnedWriteHalf, LengthDelimitedCodec>,
    clock: Clock,
    sync: SharedSync,
}

impl Wire {
    pub fn new(stream: TcpStream, clock: Clock) -> Self {
        // Frames are whole messages: do not hold small ones back.
        let _ = stream.set_nodelay(true);
        let (read, write) = stream.into_split();
        Self {
            read: FramedRead::new(read, frame::codec()),
            write: FramedWrite::new(write, frame::codec()),
            clock,
            sync: SharedSync::default(),
        }
    }

    /// The connection's clock estimate.
    pub fn sync(&self) -> SharedSync {
        Arc::clone(&self.sync)
    }

    /// Sends one frame.
    pub async fn send(&mut self, body: Body) -> Result<(), LinkError> {
        send(&mut self.write, self.clock, &self.sync, body).await
    }

    /// Waits up to `within` for the next frame.
    pub async fn recv(&mut self, within: Duration) -> Result<Body, LinkError> {
        let next = tokio::time::timeout(within, self.read.next()).await;
        let bytes = match next {
            Err(_) => return Err(LinkError::Silent(within)),
            Ok(None) => return Err(LinkError::Closed),
            Ok(Some(read)) => read?,
        };
        let received = self.clock.now();
        let envelope = frame::decode(&bytes)?;
        write_sync(&self.sync, |s| {
            s.observe(envelope.sent, received, envelope.min_delta)
        });
        Ok(envelope.body)
    }

    /// Runs the connection for `owner` (see the module's doc).
    pub fn run(self, owner: Recipient<Inbound>) -> Conn {
        let (outbox, queued) = mpsc::unbounded_channel();
        let Wire {
            read,
            write,
            clock,
            sync,
        } = self;
        let writer = tokio::spawn(write_loop(
            write,
            queued,
            clock,
            Arc::clone(&sync),
            owner.clone(),
        ));
        let pong = outbox.clone();
        let reader = tokio::spawn(read_loop(read, clock, sync, owner, pong));
        Conn {
            outbox,
            tasks: [reader, writer],
        }
    }
}

/// A running connection; dropping it closes the socket.
pub struct Conn {
    outbox: mpsc::UnboundedSender<Body>,
    tasks: [JoinHandle<()>; 2],
}

impl Conn {
    /// Queues a frame; false if the writer has stopped (the loss is on its way).
    pub fn send(&self, body: Body) -> bool {
        self.outbox.send(body).is_ok()
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn send(
    write: &mut FramedWrite<OwnedWriteHalf, LengthDelimitedCodec>,
    clock: Clock,
    sync: &SharedSync,
    body: Body,
) -> Result<(), LinkError> {
    let envelope = Envelope {
        sent: clock.now(),
        min_delta: read_sync(sync, |s| s.local_min()),
        body,
    };
    let bytes = frame::encode(&envelope)?;
    write.send(bytes::Bytes::from(bytes)).await?;
    Ok(())
}

async fn write_loop(
    mut write: FramedWrite<OwnedWriteHalf, LengthDelimitedCodec>,
    mut queued: mpsc::UnboundedReceiver<Body>,
    clock: Clock,
    sync: SharedSync,
    owner: Recipient<Inbound>,
) {
    loop {
        let body = match tokio::time::timeout(IDLE_PING, queued.recv()).await {
            Ok(Some(body)) => body,
            Ok(None) => return,
            Err(_) => Body::Ping,
        };
        if let Err(error) = send(&mut write, clock, &sync, body).await {
            owner.do_send(Inbound::Lost(format!("send failed: {error}")));
            return;
        }
    }
}

async fn read_loop(
    mut read: FramedRead<OwnedReadHalf, LengthDelimitedCodec>,
    clock: Clock,
    sync: SharedSync,
    owner: Recipient<Inbound>,
    pong: mpsc::UnboundedSender<Body>,
) {
    let why = loop {
        let bytes = match tokio::time::timeout(SILENCE, read.next()).await {
            Err(_) => break LinkError::Silent(SILENCE),
            Ok(None) => break LinkError::Closed,
            Ok(Some(Err(error))) => break error.into(),
            Ok(Some(Ok(bytes))) => bytes,
        };
        let received = clock.now();
        let envelope = match frame::decode(&bytes) {
            Ok(envelope) => envelope,
            Err(error) => break error.into(),
        };
        write_sync(&sync, |s| {
            s.observe(envelope.sent, received, envelope.min_delta)
        });
        match envelope.body {
            Body::Ping => {
                let _ = pong.send(Body::Pong);
            }
            Body::Pong => {}
            body => owner.do_send(Inbound::Frame(body)),
        }
    };
    owner.do_send(Inbound::Lost(why.to_string()));
}
