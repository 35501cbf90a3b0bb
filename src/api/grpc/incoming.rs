//! The gRPC port's connections, bounded as the HTTP port's are (`[server.connections]`):
//! at most `grpc_max_connections` open at once (more wait in the listen backlog), each
//! given `request_head_timeout` to send HTTP/2's client preface or closed, and an accept
//! that fails (the process out of file descriptors) tried again rather than ending the
//! server.
//!
//! Why: tonic serves what it is handed for as long as the peer keeps it, and ends its
//! server on the first accept error. A client that opened connections and sent half a
//! preface ran the process out of descriptors, and the gRPC port closed for good while
//! the HTTP port went on (docs/RELIABILITY.md, "Connections").

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::stream::{self, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// HTTP/2's client preface: the first bytes of every connection.
const PREFACE: usize = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".len();

/// How long a failed accept waits before the next: the descriptors a closing connection
/// frees come back within it, and a loop without it would spin on the error.
pub const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// The bounds of the gRPC port's connections.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Time a new connection has to send HTTP/2's preface, whole.
    pub preface_within: Duration,
}

/// The connections of `listener`, as `limits` bound them; never ends.
pub fn incoming(listener: TcpListener, limits: Limits) -> impl Stream<Item = io::Result<Conn>> {
    let open = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    stream::unfold((listener, open), move |(listener, open)| async move {
        // Never closed: this stream holds the semaphore.
        let permit = Arc::clone(&open).acquire_owned().await.ok()?;
        let stream = accept(&listener).await;
        let conn = Conn {
            stream,
            preface: Some((Box::pin(tokio::time::sleep(limits.preface_within)), PREFACE)),
            _open: permit,
        };
        Some((Ok(conn), (listener, open)))
    })
}

/// The next connection, however many accepts fail before it (each failure of a streak
/// after the first is logged at debug level only).
async fn accept(listener: &TcpListener) -> TcpStream {
    let mut failed = false;
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                // Small answers must leave at once: no Nagle delay.
                let _ = stream.set_nodelay(true);
                return stream;
            }
            Err(error) if !failed => {
                failed = true;
                tracing::warn!(%error, "gRPC: accepting a connection failed; trying again");
            }
            Err(error) => tracing::debug!(%error, "gRPC: accepting a connection failed again"),
        }
        tokio::time::sleep(ACCEPT_RETRY).await;
    }
}

/// One accepted connection: its place among the open ones, and until its preface has
/// come, when it is closed if it has not.
pub struct Conn {
    stream: TcpStream,
    /// The preface's deadline and the bytes of it still due; `None` once it came.
    preface: Option<(Pin<Box<Sleep>>, usize)>,
    /// Released when the connection is dropped (closed).
    _open: OwnedSemaphorePermit,
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        let Some((deadline, due)) = &mut this.preface else {
            return read;
        };
        match read {
            Poll::Ready(Ok(())) => {
                let got = buf.filled().len() - before;
                if got >= *due {
                    this.preface = None;
                } else {
                    *due -= got;
                }
            }
            Poll::Pending if deadline.as_mut().poll(cx).is_ready() => {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no HTTP/2 preface within request_head_timeout",
                )));
            }
            _ => {}
        }
        read
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

impl Connected for Conn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}
