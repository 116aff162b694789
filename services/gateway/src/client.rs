//! The gateway's HTTP/1.1 client for its upstreams: one keep-alive connection, driven in the task of
//! the call it carries.
//!
//! Why not hyper's client: each of its connections runs as a task of its own, and a call reaches it
//! through a channel, comes back through another, and streams its answer through a third. On
//! `bench/gateway.sh` that plumbing was about a third of the gateway's own instructions per call
//! (callgrind), more than the parsing and writing it wraps. Here a call writes its request and reads
//! its answer on the connection itself, and an answer that arrives whole (almost every answer of
//! Berth's services) is handed on as one buffer, with the connection back in its pool before the
//! caller sees the first byte.
//!
//! What it speaks: requests with a known length or chunked; answers framed by `Content-Length`,
//! chunked, or by closing the connection (RFC 9112 §6.3), interim (1xx) answers skipped. Heads are
//! parsed with `httparse` (hyper's parser) and bounded in size and header count; a malformed answer
//! is an error, never a guess.

use std::io;
use std::mem::MaybeUninit;
use std::task::Poll;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use bytes::{Bytes, BytesMut};
use hyper::body::{Body as _, Frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

/// The largest answer head accepted from an upstream.
const MAX_HEAD: usize = 64 * 1024;
/// The most headers accepted in one answer.
const MAX_HEADERS: usize = 100;
/// Request bytes gathered before they are written: a small body goes out with its head in one write.
const WRITE_BATCH: usize = 64 * 1024;
/// Room made in the read buffer before each read.
const READ_RESERVE: usize = 8 * 1024;
/// A connection idle for longer is closed rather than reused. Upstreams (hyper servers) close a
/// connection that has waited 30 s for its next request; reusing one just before that would race
/// their close.
pub const IDLE_LIMIT: Duration = Duration::from_secs(20);

/// One keep-alive connection to an upstream.
pub struct Connection {
    stream: TcpStream,
    /// Bytes read and not yet used: the start of the next answer, at most.
    read: BytesMut,
    /// Request bytes waiting to be written; kept to reuse its allocation.
    write: Vec<u8>,
    /// When its last call began (its idle time is counted from there: a little long, never short).
    last_call: Instant,
}

/// Why a call on a connection failed.
#[derive(Debug)]
pub enum CallError {
    /// Nothing was written: the request (whole, as its bytes) may go on another connection, whatever
    /// its method.
    NotSent(io::Error, Vec<u8>),
    /// The request may have reached the upstream, which did not answer properly.
    Upstream(String),
    /// The caller's body could not be read (cut off, or over the body limit): the caller's fault,
    /// not the upstream's.
    Body(axum::Error),
}

/// How an answer's body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Empty,
    Length(u64),
    Chunked,
    UntilClose,
}

/// An answer's head, with how its body ends.
pub struct Head {
    pub status: StatusCode,
    pub headers: HeaderMap,
    framing: Framing,
    /// Whether the connection may carry another request once the body is read.
    keep_alive: bool,
    /// What was read after the head: the body's start, or all of it.
    rest: Bytes,
}

impl Connection {
    /// Opens a connection (`host` may be a name, resolved now).
    pub async fn open(host: &str, port: u16) -> io::Result<Connection> {
        let stream = TcpStream::connect((host, port)).await?;
        // Requests are written whole: Nagle's algorithm would only hold them back.
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream,
            read: BytesMut::with_capacity(READ_RESERVE),
            write: Vec::with_capacity(1024),
            last_call: Instant::now(),
        })
    }

    /// Whether this idle connection can carry another request: not idle too long, and not closed by
    /// the upstream meanwhile. The check costs a system call only when the socket has something to
    /// say, which on an idle connection is its end. `now` is when the call that wants it began.
    pub async fn is_usable(&mut self, now: Instant) -> bool {
        if now.saturating_duration_since(self.last_call) > IDLE_LIMIT || !self.read.is_empty() {
            return false;
        }
        self.last_call = now;
        let readable =
            std::future::poll_fn(|cx| Poll::Ready(self.stream.poll_read_ready(cx).is_ready()))
                .await;
        if !readable {
            return true;
        }
        // Readable while idle: the upstream closed it, or sent what nobody asked for.
        let mut probe = [0u8; 1];
        matches!(self.stream.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Writes the request: `head` (request line and headers, ending in the blank line) and `body`,
    /// framed as the head declares (`chunked` says whether it is chunk-encoded). A body of up to
    /// [`WRITE_BATCH`] bytes goes out with the head in one write.
    pub async fn write_request(
        &mut self,
        head: &[u8],
        mut body: Body,
        chunked: bool,
    ) -> Result<(), CallError> {
        self.write.clear();
        self.write.extend_from_slice(head);
        let mut written_any = false;
        while !body.is_end_stream() {
            let frame =
                std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await;
            let Some(frame) = frame else { break };
            // Trailers are not forwarded.
            let Ok(data) = frame.map_err(CallError::Body)?.into_data() else {
                continue;
            };
            if data.is_empty() {
                continue;
            }
            if chunked {
                self.write
                    .extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                self.write.extend_from_slice(&data);
                self.write.extend_from_slice(b"\r\n");
            } else {
                self.write.extend_from_slice(&data);
            }
            if self.write.len() >= WRITE_BATCH {
                let result = self.stream.write_all(&self.write).await;
                self.write.clear();
                result.map_err(|e| CallError::Upstream(format!("writing the request: {e}")))?;
                written_any = true;
            }
        }
        if chunked {
            self.write.extend_from_slice(b"0\r\n\r\n");
        }
        let request = std::mem::take(&mut self.write);
        if written_any {
            let result = self.stream.write_all(&request).await;
            self.write = request;
            return result.map_err(|e| CallError::Upstream(format!("writing the request: {e}")));
        }
        self.write_whole(request).await
    }

    /// Writes a whole request given as its bytes (one handed back by [`CallError::NotSent`]).
    pub async fn write_whole(&mut self, request: Vec<u8>) -> Result<(), CallError> {
        let mut sent = 0;
        while sent < request.len() {
            match self.stream.write(&request[sent..]).await {
                Ok(0) => return Err(CallError::Upstream("the connection closed".into())),
                Ok(n) => sent += n,
                // A refusal of the first bytes means the upstream had closed the connection before
                // it saw any of this request.
                Err(e) if sent == 0 && is_closed_error(&e) => {
                    return Err(CallError::NotSent(e, request));
                }
                Err(e) => return Err(CallError::Upstream(format!("writing the request: {e}"))),
            }
        }
        // Kept for its allocation.
        self.write = request;
        self.write.clear();
        Ok(())
    }

    /// Reads the answer's head, skipping interim (1xx) answers. `head_request` says the request was
    /// HEAD, whose answer has no body whatever its headers say.
    pub async fn read_head(&mut self, head_request: bool) -> Result<Head, CallError> {
        loop {
            let head = self.parse_head(head_request).await?;
            if !head.status.is_informational() {
                return Ok(head);
            }
            if head.status == StatusCode::SWITCHING_PROTOCOLS {
                return Err(CallError::Upstream(
                    "the upstream switched protocols, which the gateway does not carry".into(),
                ));
            }
            self.read.extend_from_slice(&head.rest);
        }
    }

    /// Reads and parses one answer head. What has been read is frozen before it is parsed, so header
    /// values and a body that came with the head are slices of the bytes read, never copies.
    async fn parse_head(&mut self, head_request: bool) -> Result<Head, CallError> {
        loop {
            if self.read.is_empty() && self.fill().await? == 0 {
                return Err(CallError::Upstream(
                    "the upstream closed the connection without answering".into(),
                ));
            }
            let bytes = self.read.split().freeze();
            if let Some(head) = parse_head(&bytes, head_request)? {
                return Ok(head);
            }
            // Rare: the head came in pieces. What was read goes back before the next piece.
            self.read.extend_from_slice(&bytes);
            if self.fill().await? == 0 {
                return Err(CallError::Upstream(
                    "the upstream closed the connection in the middle of its answer".into(),
                ));
            }
        }
    }

    /// Reads more bytes; 0 at the end of the stream.
    async fn fill(&mut self) -> Result<usize, CallError> {
        self.read.reserve(READ_RESERVE);
        self.stream
            .read_buf(&mut self.read)
            .await
            .map_err(|e| CallError::Upstream(format!("reading the answer: {e}")))
    }

    /// The answer's body. A body already read whole comes back as one buffer with the connection
    /// (`Some` when it may be reused); otherwise the body streams from the connection and `done`
    /// gets the connection back once the body has been read to its end.
    pub fn into_body(
        mut self,
        head: &mut Head,
        done: impl FnOnce(Connection) + Send + 'static,
    ) -> (Body, Option<Connection>) {
        let rest = std::mem::take(&mut head.rest);
        match head.framing {
            Framing::Empty if rest.is_empty() => (Body::empty(), self.finished(head.keep_alive)),
            // Bytes beyond the answer: the connection is out of step, so it is not reused.
            Framing::Empty => (Body::empty(), None),
            Framing::Length(length) if rest.len() as u64 >= length => {
                let keep_alive = head.keep_alive && rest.len() as u64 == length;
                let body = rest.slice(..length as usize);
                (Body::from(body), self.finished(keep_alive))
            }
            framing => {
                // The body continues on the connection; its start is read again from the buffer.
                self.read.extend_from_slice(&rest);
                let reader = BodyReader {
                    connection: Some(self),
                    framing,
                    state: match framing {
                        Framing::Length(n) => Remaining::Bytes(n),
                        Framing::UntilClose => Remaining::Bytes(u64::MAX),
                        _ => Remaining::ChunkSize,
                    },
                    keep_alive: head.keep_alive,
                    done: Some(Box::new(done)),
                };
                let stream = futures::stream::unfold(reader, |mut reader| async move {
                    match reader.next().await {
                        Ok(Some(data)) => Some((Ok(Frame::data(data)), reader)),
                        Ok(None) => None,
                        Err(e) => Some((Err(e), reader.poisoned())),
                    }
                });
                (Body::new(http_body_util::StreamBody::new(stream)), None)
            }
        }
    }

    /// The connection after a complete answer, if it may carry another request.
    fn finished(self, keep_alive: bool) -> Option<Connection> {
        if !keep_alive || !self.read.is_empty() {
            return None;
        }
        // The answer's last read saw the socket readable, and that readiness would stay set until a
        // read found nothing. Clearing it here spares that read (one system call per request); the
        // end of the connection, should it come, is a new event that sets it again.
        let _ = self.stream.try_io(Interest::READABLE, || {
            Err::<(), _>(io::ErrorKind::WouldBlock.into())
        });
        Some(self)
    }
}

/// Whether `error` says the peer had closed the connection.
fn is_closed_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
    )
}

/// Parses the answer head at the start of `bytes`; `None` if it is not all there yet. Not async on
/// purpose: the parser's header slots (kilobytes) stay on this call's stack instead of becoming part
/// of every call's future, which is copied whole when it is boxed.
fn parse_head(bytes: &Bytes, head_request: bool) -> Result<Option<Head>, CallError> {
    let mut slots = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        bytes,
        &mut slots,
    );
    match parsed {
        Ok(httparse::Status::Complete(length)) => {
            build_head(&response, bytes, length, head_request).map(Some)
        }
        Ok(httparse::Status::Partial) if bytes.len() < MAX_HEAD => Ok(None),
        Ok(httparse::Status::Partial) => Err(CallError::Upstream(format!(
            "the answer's head is larger than {MAX_HEAD} bytes"
        ))),
        Err(e) => Err(malformed(&e.to_string())),
    }
}

/// A `Content-Length` value: decimal digits, optionally padded with spaces or tabs.
fn parse_length(value: &[u8]) -> Option<u64> {
    let digits = value.trim_ascii();
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(u64::from(b - b'0')))?
    })
}

fn malformed(what: &str) -> CallError {
    CallError::Upstream(format!("a malformed answer: {what}"))
}

/// The answer's head from its parse: status, framing, reuse, and the headers to pass on (all but
/// hop-by-hop ones), whose values are slices of `bytes`. The head is `head_length` bytes long.
fn build_head(
    response: &httparse::Response<'_, '_>,
    bytes: &Bytes,
    head_length: usize,
    head_request: bool,
) -> Result<Head, CallError> {
    let status = response
        .code
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or_else(|| malformed("bad status"))?;
    let http10 = response.version == Some(0);
    // Names listed in `Connection` are hop-by-hop too; rare, so looked for only when present.
    let mut connection_names: Vec<&str> = Vec::new();
    let mut keep_alive = !http10;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut transfer_encoding = false;
    for h in response.headers.iter() {
        if h.name.eq_ignore_ascii_case("connection") {
            let value = std::str::from_utf8(h.value).map_err(|_| malformed("Connection"))?;
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case("keep-alive") {
                    keep_alive = keep_alive || http10;
                } else {
                    connection_names.push(token);
                }
            }
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let n = parse_length(h.value).ok_or_else(|| malformed("Content-Length"))?;
            if length.is_some_and(|prior| prior != n) {
                return Err(malformed("conflicting Content-Length values"));
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            transfer_encoding = true;
            // Only the last coding decides whether the body is chunked.
            chunked = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.rsplit(',').next())
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        }
    }
    let framing = if head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        Framing::Empty
    } else if transfer_encoding {
        if chunked {
            Framing::Chunked
        } else {
            Framing::UntilClose
        }
    } else {
        match length {
            Some(0) => Framing::Empty,
            Some(n) => Framing::Length(n),
            None => Framing::UntilClose,
        }
    };
    if framing == Framing::UntilClose {
        keep_alive = false;
    }
    let mut headers = HeaderMap::with_capacity(response.headers.len());
    for h in response.headers.iter() {
        if is_hop_by_hop(h.name)
            || connection_names
                .iter()
                .any(|n| n.eq_ignore_ascii_case(h.name))
        {
            continue;
        }
        // Every Berth service answers with this one; made from its static, it costs no allocation.
        let name = if h.name.eq_ignore_ascii_case("x-request-id") {
            service_kit::request_id::X_REQUEST_ID.clone()
        } else {
            HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| malformed("header name"))?
        };
        let value = HeaderValue::from_maybe_shared(bytes.slice_ref(h.value))
            .map_err(|_| malformed("header value"))?;
        headers.append(name, value);
    }
    Ok(Head {
        status,
        headers,
        framing,
        keep_alive,
        rest: bytes.slice(head_length..),
    })
}

/// Headers that describe one connection rather than the message, and so never cross a proxy
/// (RFC 9110 §7.6.1).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Whether `name` (in any case) is a hop-by-hop header. Lengths are compared first, so a name that
/// cannot match costs a few comparisons.
pub fn is_hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP
        .iter()
        .any(|h| h.len() == name.len() && h.eq_ignore_ascii_case(name))
}

/// Where a streamed body stands.
enum Remaining {
    /// Bytes left of a `Content-Length` body, or of the current chunk.
    Bytes(u64),
    /// A chunk-size line comes next.
    ChunkSize,
    /// The CRLF after a chunk's data comes next.
    ChunkEnd,
    /// Nothing more.
    Done,
}

type Done = Box<dyn FnOnce(Connection) + Send>;

/// A body read from its connection as the caller takes it.
struct BodyReader {
    /// `None` once the body has ended.
    connection: Option<Connection>,
    framing: Framing,
    state: Remaining,
    keep_alive: bool,
    done: Option<Done>,
}

impl BodyReader {
    fn connection(&mut self) -> io::Result<&mut Connection> {
        self.connection
            .as_mut()
            .ok_or_else(|| invalid("the body has already ended"))
    }

    /// The next piece of the body; `None` at its end, when the connection is handed back.
    async fn next(&mut self) -> io::Result<Option<Bytes>> {
        loop {
            match self.state {
                Remaining::Done => return Ok(None),
                Remaining::Bytes(0) if self.framing == Framing::Chunked => {
                    self.state = Remaining::ChunkEnd;
                }
                Remaining::Bytes(0) => return Ok(self.end()),
                Remaining::Bytes(left) => {
                    if self.connection()?.read.is_empty() && self.read_more().await? == 0 {
                        if self.framing == Framing::UntilClose {
                            return Ok(self.end());
                        }
                        return Err(truncated());
                    }
                    let framing = self.framing;
                    let read = &mut self.connection()?.read;
                    let take = (read.len() as u64).min(left) as usize;
                    let data = read.split_to(take).freeze();
                    if framing != Framing::UntilClose {
                        self.state = Remaining::Bytes(left - take as u64);
                    }
                    return Ok(Some(data));
                }
                Remaining::ChunkSize => {
                    let line = self.line().await?;
                    let size = line.split(|b| *b == b';').next().unwrap_or_default();
                    let size = std::str::from_utf8(size)
                        .ok()
                        .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
                        .ok_or_else(|| invalid("a malformed chunk size"))?;
                    if size == 0 {
                        // Trailers, if any, end with an empty line; they are not forwarded.
                        while !self.line().await?.is_empty() {}
                        return Ok(self.end());
                    }
                    self.state = Remaining::Bytes(size);
                }
                Remaining::ChunkEnd => {
                    if !self.line().await?.is_empty() {
                        return Err(invalid("a chunk longer than its size"));
                    }
                    self.state = Remaining::ChunkSize;
                }
            }
        }
    }

    /// One CRLF-terminated line, without its end.
    async fn line(&mut self) -> io::Result<Bytes> {
        loop {
            let read = &mut self.connection()?.read;
            if let Some(at) = read.windows(2).position(|w| w == b"\r\n") {
                let line = read.split_to(at + 2).freeze();
                return Ok(line.slice(..at));
            }
            if read.len() > 4096 {
                return Err(invalid("a chunk line longer than 4 KiB"));
            }
            if self.read_more().await? == 0 {
                return Err(truncated());
            }
        }
    }

    async fn read_more(&mut self) -> io::Result<usize> {
        let connection = self.connection()?;
        connection.read.reserve(READ_RESERVE);
        connection.stream.read_buf(&mut connection.read).await
    }

    /// The body has ended: the connection goes back, if it may carry another request.
    fn end(&mut self) -> Option<Bytes> {
        self.state = Remaining::Done;
        if let (Some(connection), Some(done)) = (self.connection.take(), self.done.take())
            && let Some(connection) = connection.finished(self.keep_alive)
        {
            done(connection);
        }
        None
    }

    /// After an error the connection is never reused.
    fn poisoned(mut self) -> Self {
        self.state = Remaining::Done;
        self.connection = None;
        self.done = None;
        self
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

fn truncated() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the upstream closed the connection before the body ended",
    )
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use http_body_util::BodyExt;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    use super::*;

    /// An upstream that answers each request on one connection with the next scripted answer, written
    /// in the pieces given (so heads and bodies arrive split), and keeps the raw requests it got.
    /// After the script it closes the connection.
    async fn scripted(answers: Vec<Vec<&'static [u8]>>) -> (u16, Arc<Mutex<Vec<Vec<u8>>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = Vec::new();
            for pieces in answers {
                // A request ends with its head's blank line, or, chunked, with the last chunk's.
                loop {
                    let text = String::from_utf8_lossy(&buffer).to_string();
                    let complete = match text.find("\r\n\r\n") {
                        Some(end) if text[..end].contains("transfer-encoding: chunked") => {
                            text[end + 4..].contains("0\r\n\r\n")
                        }
                        Some(end) => {
                            let length = text[..end]
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length: "))
                                .map_or(0, |n| n.parse::<usize>().unwrap());
                            buffer.len() >= end + 4 + length
                        }
                        None => false,
                    };
                    if complete {
                        break;
                    }
                    let mut chunk = [0u8; 4096];
                    let n = socket.read(&mut chunk).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    buffer.extend_from_slice(&chunk[..n]);
                }
                record.lock().unwrap().push(std::mem::take(&mut buffer));
                for piece in pieces {
                    socket.write_all(piece).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        });
        (port, seen)
    }

    const GET: &[u8] = b"GET /x HTTP/1.1\r\nhost: upstream\r\n\r\n";

    /// One call on `connection`: the answer's status, headers and whole body, and the connection
    /// back if it may carry another request.
    async fn call(
        mut connection: Connection,
        request: &[u8],
    ) -> (StatusCode, HeaderMap, Bytes, Option<Connection>) {
        connection.write_whole(request.to_vec()).await.unwrap();
        let mut head = connection.read_head(false).await.unwrap();
        let headers = std::mem::take(&mut head.headers);
        let returned = Arc::new(Mutex::new(None));
        let slot = returned.clone();
        let (body, reusable) =
            connection.into_body(&mut head, move |c| *slot.lock().unwrap() = Some(c));
        let bytes = body.collect().await.expect("the body reads").to_bytes();
        let back = reusable.or_else(|| returned.lock().unwrap().take());
        (head.status, headers, bytes, back)
    }

    #[tokio::test]
    async fn answers_by_length_by_chunks_and_after_an_interim_answer() {
        let (port, seen) = scripted(vec![
            vec![b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-request-id: r1\r\n\r\nhello"],
            vec![
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: x-hop\r\nx-hop: 1\r\n\r\n3;ext=1\r\nabc\r",
                b"\n4\r\ndefg\r\n0\r\ntrailer: t\r\n\r\n",
            ],
            vec![b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n", b"ok"],
        ])
        .await;
        let connection = Connection::open("127.0.0.1", port).await.unwrap();
        let (status, headers, body, back) = call(connection, GET).await;
        assert_eq!((status.as_u16(), &body[..]), (200, &b"hello"[..]));
        assert_eq!(headers["x-request-id"], "r1");
        let connection = back.expect("kept after a Content-Length answer");
        let (status, headers, body, back) = call(connection, GET).await;
        assert_eq!((status.as_u16(), &body[..]), (200, &b"abcdefg"[..]));
        for hop in ["transfer-encoding", "connection", "x-hop"] {
            assert!(!headers.contains_key(hop), "{hop} passed on");
        }
        let connection = back.expect("kept after a chunked answer");
        let (status, _, body, back) = call(connection, GET).await;
        assert_eq!((status.as_u16(), &body[..]), (201, &b"ok"[..]));
        let mut connection = back.expect("kept after an interim answer");
        assert_eq!(seen.lock().unwrap().len(), 3);
        // The upstream has closed the connection after its script: the pool must not reuse it.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!connection.is_usable(Instant::now()).await);
    }

    #[test]
    fn content_lengths_are_digits_only() {
        assert_eq!(parse_length(b"1272"), Some(1272));
        assert_eq!(parse_length(b" 7\t"), Some(7));
        for bad in [
            &b""[..],
            b" ",
            b"+5",
            b"-1",
            b"1x",
            b"1 2",
            b"99999999999999999999",
        ] {
            assert_eq!(
                parse_length(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[tokio::test]
    async fn a_body_until_close_is_read_whole_and_its_connection_not_reused() {
        let (port, _) = scripted(vec![vec![b"HTTP/1.1 200 OK\r\n\r\nall ", b"of it"]]).await;
        let connection = Connection::open("127.0.0.1", port).await.unwrap();
        let (_, _, body, back) = call(connection, GET).await;
        assert_eq!(&body[..], b"all of it");
        assert!(back.is_none());
    }

    #[tokio::test]
    async fn malformed_or_cut_off_answers_are_errors() {
        for answer in [
            &b"HTTP/1.1 2000 What\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-le",
        ] {
            let (port, _) = scripted(vec![vec![answer]]).await;
            let mut connection = Connection::open("127.0.0.1", port).await.unwrap();
            connection.write_whole(GET.to_vec()).await.unwrap();
            let result = connection.read_head(false).await;
            assert!(
                matches!(result, Err(CallError::Upstream(_))),
                "{:?} was accepted",
                String::from_utf8_lossy(answer)
            );
        }
        // A body shorter than its declared length ends in an error, not a short success.
        let (port, _) = scripted(vec![vec![
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc",
        ]])
        .await;
        let mut connection = Connection::open("127.0.0.1", port).await.unwrap();
        connection.write_whole(GET.to_vec()).await.unwrap();
        let mut head = connection.read_head(false).await.unwrap();
        let (body, reusable) = connection.into_body(&mut head, |_| panic!("not reusable"));
        assert!(reusable.is_none());
        assert!(body.collect().await.is_err());
    }

    #[tokio::test]
    async fn a_streamed_request_body_goes_out_chunked() {
        let (port, seen) = scripted(vec![vec![b"HTTP/1.1 204 No Content\r\n\r\n"]]).await;
        let mut connection = Connection::open("127.0.0.1", port).await.unwrap();
        let stream =
            futures::stream::iter(["ab", "", "cde"].map(|s| Ok::<_, io::Error>(Bytes::from(s))));
        let head = b"POST /x HTTP/1.1\r\nhost: upstream\r\ntransfer-encoding: chunked\r\n\r\n";
        connection
            .write_request(head, Body::from_stream(stream), true)
            .await
            .unwrap();
        let head = connection.read_head(false).await.unwrap();
        assert_eq!(head.status, StatusCode::NO_CONTENT);
        let sent = String::from_utf8(seen.lock().unwrap()[0].clone()).unwrap();
        assert!(
            sent.ends_with("\r\n\r\n2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n"),
            "{sent:?}"
        );
    }
}
