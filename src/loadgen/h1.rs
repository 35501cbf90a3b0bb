//! A small HTTP/1.1 client for the load generator's inference requests over plain TCP.
//!
//! Why not awc for these: at ten times the server's capacity the load generator shares
//! the machine's cores with the server, so its cost per request bounds what the pair can
//! measure. awc builds a new framed codec (buffers and all) per request, copies the body
//! into it, clones its default headers and runs a redirect layer; here a request is a
//! buffer prepared once (head and body together: one write, no copy), and a connection
//! keeps its read buffer from one answer to the next. HTTPS and every other call (the
//! repository index, metadata) still go through awc. Answer heads are parsed by
//! `httparse` (hyper's parser); only the framing around it is here. hyper's own
//! connections (`client::conn`, a dispatcher task per connection and a channel to it)
//! cost the load generator 31 us of CPU per request at 10,000 requests/s, against
//! 16-18 us for this client and 33 us for awc (`bench/overload/run.sh --rate 10000`,
//! alternated in one session; docs/RELIABILITY.md, "Overload").

use std::cell::RefCell;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use actix_web::web::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::answer::{NoAnswer, Reply};
use super::client::{send_awc, Prepared, IDLE_REUSE};
use crate::time::Nanos;

/// How inference requests go out: this module's client over plain TCP, or awc (HTTPS,
/// or a base URL whose address cannot be resolved here).
pub enum Transport {
    Plain(Pool),
    Awc(awc::Client),
}

impl Transport {
    /// The plain client for an `http://host:port` base, else `awc`.
    pub fn for_base(base: &str, timeout: Duration, awc: awc::Client) -> Self {
        use std::net::ToSocketAddrs as _;
        let address = base
            .strip_prefix("http://")
            .map(|rest| rest.split('/').next().unwrap_or(rest))
            .and_then(|authority| authority.to_socket_addrs().ok()?.next());
        match address {
            Some(address) => Transport::Plain(Pool::new(address, timeout)),
            None => Transport::Awc(awc),
        }
    }
}

/// Sends the `n`-th request of a prepared model, with `slo` as its objective if given,
/// and reads its answer.
pub async fn send(transport: &Transport, request: &Prepared, slo: Option<Nanos>, n: u64) -> Reply {
    let pool = match transport {
        Transport::Plain(pool) => pool,
        Transport::Awc(client) => return send_awc(client, request, slo, n).await,
    };
    let whole = request.whole(slo, n);
    let began = std::time::Instant::now();
    let answer = match pool.exchange(&whole).await {
        Ok(answer) => answer,
        Err(why) => return Reply::none(why),
    };
    let body = &answer.body;
    let json = &body[..answer.json_length.unwrap_or(body.len()).min(body.len())];
    let success = (200..300).contains(&answer.status);
    let timing = answer.server_timing.as_deref();
    Reply::read(success, json, timing, began.elapsed())
}

/// Keep-alive connections to one server, reused last in, first out.
pub struct Pool {
    address: SocketAddr,
    timeout: Duration,
    idle: RefCell<Vec<Connection>>,
}

/// One open connection and what it has read past its last answer.
struct Connection {
    stream: TcpStream,
    buffer: BytesMut,
    /// When its last answer was read: a connection idle too long is not reused.
    since: Instant,
}

/// An answer as read: status, the headers the load generator looks at, and the body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    /// `Inference-Header-Content-Length`, if given.
    pub json_length: Option<usize>,
    /// `Server-Timing`, if given.
    pub server_timing: Option<String>,
    pub body: Bytes,
}

/// Answers larger than this are not read (no answer of the API comes near it).
const MAX_ANSWER: usize = 64 << 20;
/// A connection's read buffer to start with: a refusal or a small answer in one read.
const BUFFER: usize = 8 << 10;

impl Pool {
    pub fn new(address: SocketAddr, timeout: Duration) -> Self {
        Self {
            address,
            timeout,
            idle: RefCell::new(Vec::new()),
        }
    }

    /// Sends `request` (a whole HTTP/1.1 request, head and body) and reads its answer,
    /// within the pool's timeout, on a kept connection if one is still open, else on a
    /// new one. A request is written once: one that fails after writing is not sent
    /// again, since the server may have counted it (and served it).
    pub async fn exchange(&self, request: &Bytes) -> Result<Answer, NoAnswer> {
        let work = async {
            let mut connection = match self.kept() {
                Some(connection) => connection,
                None => self.connect().await?,
            };
            let answer = connection
                .exchange(request)
                .await
                .map_err(|Broken| NoAnswer::Other)?;
            self.done(connection, answer)
        };
        tokio::time::timeout(self.timeout, work)
            .await
            .unwrap_or(Err(NoAnswer::Timeout))
    }

    /// The most recently kept connection still fit for a request: idle for less than
    /// `IDLE_REUSE` and neither closed by the server nor holding bytes nobody asked for.
    /// Older ones are closed; they would meet the server's keep-alive close on the way.
    fn kept(&self) -> Option<Connection> {
        let mut idle = self.idle.borrow_mut();
        while let Some(connection) = idle.pop() {
            if connection.since.elapsed() < IDLE_REUSE && connection.is_open() {
                return Some(connection);
            }
        }
        None
    }

    async fn connect(&self) -> Result<Connection, NoAnswer> {
        let stream = TcpStream::connect(self.address)
            .await
            .map_err(|_| NoAnswer::Connect)?;
        // Small answers and requests go out at once, not after the peer's delayed ack.
        stream.set_nodelay(true).map_err(|_| NoAnswer::Connect)?;
        Ok(Connection {
            stream,
            buffer: BytesMut::with_capacity(BUFFER),
            since: Instant::now(),
        })
    }

    /// Keeps the connection for the next request unless the server is closing it.
    fn done(
        &self,
        mut connection: Connection,
        (answer, keep): (Answer, bool),
    ) -> Result<Answer, NoAnswer> {
        if keep {
            connection.since = Instant::now();
            self.idle.borrow_mut().push(connection);
        }
        Ok(answer)
    }
}

/// Why an exchange failed: the connection closed or the answer could not be read.
struct Broken;

impl Connection {
    /// Whether the server has neither closed the connection nor sent anything on it since
    /// its last answer. Asked of the socket itself, not of the reactor's readiness, which
    /// has not seen a close that came while this thread was busy.
    fn is_open(&self) -> bool {
        let mut byte = [std::mem::MaybeUninit::<u8>::uninit()];
        match socket2::SockRef::from(&self.stream).peek(&mut byte) {
            Err(error) => error.kind() == std::io::ErrorKind::WouldBlock,
            Ok(_) => false,
        }
    }

    /// One request and its answer; `true` with it if the connection can be kept.
    async fn exchange(&mut self, request: &Bytes) -> Result<(Answer, bool), Broken> {
        self.buffer.clear();
        // A server that refuses before reading may answer and close while a large body
        // is still being written: the write then fails, but the answer is there to read.
        let written = self.stream.write_all(request).await.is_ok();
        let head = loop {
            if let Some(head) = parse_head(&self.buffer).map_err(|_| Broken)? {
                break head;
            }
            if self.buffer.len() > MAX_ANSWER {
                return Err(Broken);
            }
            self.buffer.reserve(BUFFER);
            match self.stream.read_buf(&mut self.buffer).await {
                Ok(0) | Err(_) => return Err(Broken),
                Ok(_) => {}
            }
        };
        let end = head.length + head.body_length;
        if end > MAX_ANSWER {
            return Err(Broken);
        }
        while self.buffer.len() < end {
            self.buffer.reserve(end - self.buffer.len());
            match self.stream.read_buf(&mut self.buffer).await {
                Ok(0) | Err(_) => return Err(Broken),
                Ok(_) => {}
            }
        }
        let body = self.buffer.split_to(end).freeze().slice(head.length..);
        let answer = Answer {
            status: head.status,
            json_length: head.json_length,
            server_timing: head.server_timing,
            body,
        };
        Ok((answer, written && head.keep_alive && self.buffer.is_empty()))
    }
}

/// What an answer's head says.
#[derive(Debug, PartialEq, Eq)]
struct Head {
    /// Bytes of the head, blank line included.
    length: usize,
    status: u16,
    body_length: usize,
    json_length: Option<usize>,
    server_timing: Option<String>,
    keep_alive: bool,
}

/// Why an answer could not be read as this client expects.
#[derive(Debug, PartialEq, Eq)]
struct Malformed;

/// Headers an answer of the API may carry: more than it does, fewer than a hostile
/// answer could (one with more is malformed to this client).
const MAX_HEADERS: usize = 32;

/// The head at the start of `buffer`, `None` if it has not all come yet (read by
/// `httparse`, hyper's parser). Only what the API's answers use: a `Content-Length` body
/// (a chunked one is refused as malformed).
fn parse_head(buffer: &[u8]) -> Result<Option<Head>, Malformed> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let length = match response.parse(buffer).map_err(|_| Malformed)? {
        httparse::Status::Complete(length) => length,
        httparse::Status::Partial => return Ok(None),
    };
    let mut head = Head {
        length,
        status: response.code.ok_or(Malformed)?,
        body_length: 0,
        json_length: None,
        server_timing: None,
        keep_alive: response.version == Some(1),
    };
    for header in response.headers.iter() {
        let value = std::str::from_utf8(header.value)
            .map_err(|_| Malformed)?
            .trim();
        let number = || value.parse::<usize>().map_err(|_| Malformed);
        let name = header.name;
        if name.eq_ignore_ascii_case("content-length") {
            head.body_length = number()?;
        } else if name.eq_ignore_ascii_case(crate::api::HEADER_LENGTH) {
            head.json_length = Some(number()?);
        } else if name.eq_ignore_ascii_case("server-timing") {
            head.server_timing = Some(value.to_owned());
        } else if name.eq_ignore_ascii_case("connection") {
            head.keep_alive = !value.eq_ignore_ascii_case("close");
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Malformed);
        }
    }
    Ok(Some(head))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_read_once_it_has_all_come() {
        let answer = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 5\r\n\
            Server-Timing: edge;dur=0.020\r\nretry-after: 1\r\n\r\nhello";
        assert_eq!(parse_head(&answer[..40]), Ok(None));
        let head = parse_head(answer).expect("well formed").expect("complete");
        assert_eq!((head.status, head.body_length), (503, 5));
        assert_eq!(head.length, answer.len() - 5);
        assert_eq!(head.server_timing.as_deref(), Some("edge;dur=0.020"));
        assert!(head.keep_alive);
        assert_eq!(head.json_length, None);
    }

    #[test]
    fn closing_and_chunked_answers_are_told_apart() {
        let closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
        let head = parse_head(closing).expect("well formed").expect("complete");
        assert!(!head.keep_alive);
        let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
        assert_eq!(parse_head(chunked), Err(Malformed));
        assert_eq!(parse_head(b"HTTP/1.1 abc\r\n\r\n"), Err(Malformed));
    }

    /// Mutation that breaks it: a failed write returned at once (the 503 the server sent
    /// before closing is never read, and the request ends as `http_error`).
    #[actix_web::test]
    async fn an_answer_sent_before_the_body_was_taken_is_read() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let server = actix_web::rt::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("accept");
            let mut head = [0u8; 256];
            let _ = stream.read(&mut head).await;
            let answer = "HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\n\
                          content-length: 2\r\n\r\n{}";
            stream.write_all(answer.as_bytes()).await.expect("answer");
            // Closed with most of the body unread: the client's write fails.
        });
        let pool = Pool::new(address, Duration::from_secs(5));
        let whole =
            super::super::client::plain_request("h", "/v2/models/m/infer", 2, &vec![0u8; 32 << 20]);
        let answer = pool.exchange(&whole).await.expect("the 503 is read");
        assert_eq!((answer.status, &answer.body[..]), (503, &b"{}"[..]));
        assert!(
            pool.idle.borrow().is_empty(),
            "the closed connection is not kept"
        );
        server.await.expect("server");
    }

    /// How the test server ends a connection.
    #[derive(Clone, Copy)]
    enum Close {
        /// Reads its `n`-th request (counted across connections), then resets the
        /// connection instead of answering.
        ResetAt(usize),
        /// Answers its `n`-th request, then closes the connection, as a server's
        /// keep-alive timeout does.
        After(usize),
    }

    /// A server that answers on keep-alive connections and counts each request it reads
    /// whole; it ends one connection as `close` says, and tells when it has.
    struct Counting {
        address: SocketAddr,
        seen: std::rc::Rc<std::cell::Cell<usize>>,
        closed: tokio::sync::mpsc::UnboundedReceiver<()>,
    }

    const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";

    async fn counting(close: Close) -> Counting {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let seen = std::rc::Rc::new(std::cell::Cell::new(0));
        let (tell, closed) = tokio::sync::mpsc::unbounded_channel();
        let count = seen.clone();
        actix_web::rt::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                while read_request(&mut stream).await {
                    count.set(count.get() + 1);
                    if let Close::ResetAt(n) = close {
                        if count.get() == n {
                            let zero = Some(Duration::ZERO);
                            socket2::SockRef::from(&stream)
                                .set_linger(zero)
                                .expect("linger");
                            break;
                        }
                    }
                    stream.write_all(OK.as_bytes()).await.expect("answer");
                    if let Close::After(n) = close {
                        if count.get() == n {
                            break;
                        }
                    }
                }
                drop(stream);
                let _ = tell.send(());
            }
        });
        Counting {
            address,
            seen,
            closed,
        }
    }

    /// Reads one whole request (head and `content-length` body); `false` at the end.
    async fn read_request(stream: &mut TcpStream) -> bool {
        let mut buffer = Vec::new();
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let mut request = httparse::Request::new(&mut headers);
            if let Ok(httparse::Status::Complete(length)) = request.parse(&buffer) {
                let body = request.headers.iter().find(|h| h.name == "content-length");
                let body: usize = body.map_or(0, |h| {
                    std::str::from_utf8(h.value)
                        .expect("utf-8")
                        .parse()
                        .expect("number")
                });
                if buffer.len() >= length + body {
                    return true;
                }
            }
            let mut more = [0u8; 1024];
            match stream.read(&mut more).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => buffer.extend_from_slice(&more[..n]),
            }
        }
    }

    fn small_request() -> Bytes {
        super::super::client::plain_request("h", "/v2/models/m/infer", 2, b"{}")
    }

    /// The server counted a request and reset the connection without answering it: the
    /// load generator reports it unanswered and does not send it again (the server would
    /// count one request twice, as `tests/loadgen.rs` once saw).
    ///
    /// Mutation that breaks it: a failed exchange on a kept connection sent again on a
    /// new one (the server counts 3).
    #[actix_web::test]
    async fn a_request_is_written_once_even_when_its_connection_breaks() {
        let mut server = counting(Close::ResetAt(2)).await;
        let pool = Pool::new(server.address, Duration::from_secs(5));
        let request = small_request();
        assert!(pool.exchange(&request).await.is_ok());
        let broken = pool.exchange(&request).await;
        assert!(matches!(broken, Err(NoAnswer::Other)), "{broken:?}");
        server.closed.recv().await.expect("closed");
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(server.seen.get(), 2);
    }

    /// The server closed a kept connection (its keep-alive ran out) while the client's
    /// thread was busy, its reactor never seeing the close: the next request goes out on
    /// a new connection and is answered.
    ///
    /// Mutation that breaks it: `is_open` always true (the request is written into the
    /// closed connection and fails).
    #[actix_web::test]
    async fn a_kept_connection_the_server_closed_is_not_written_to() {
        let mut server = counting(Close::After(1)).await;
        let pool = Pool::new(server.address, Duration::from_secs(5));
        let request = small_request();
        assert!(pool.exchange(&request).await.is_ok());
        server.closed.recv().await.expect("closed");
        // Busy: the close reaches the socket, the reactor is not polled.
        std::thread::sleep(Duration::from_millis(50));
        let answer = pool.exchange(&request).await.expect("answered");
        assert_eq!(answer.status, 200);
        assert_eq!(server.seen.get(), 2);
    }
}
