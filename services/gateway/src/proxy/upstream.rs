//! The upstream side of forwarding: each service as the gateway knows it ([`Upstream`]: where it
//! is, its time, its breaker and metric handles), the keep-alive connections to it that each engine
//! worker pools, making a new one, and the socket wrapper that lets hyper read an answer the service
//! gave before it read the whole request.
//!
//! Apart from the forwarder because it is about connections, not calls: how a socket to a service is
//! made, kept and reused changes for reasons of its own (pool size, connect time, a peer that closes
//! early), and none of it needs to know what a call's outcome means to the caller or the breaker.

use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{HeaderValue, Uri};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use service_kit::metrics::{Counter, DurationHistogram, Family};

use crate::limits::{Breaker, BreakerConfig};
use crate::routes::UpstreamId;

use super::body::CallerBody;

/// One upstream service: where it is, how long it may take, its breaker and its metric handles.
pub(crate) struct Upstream {
    /// Which service.
    pub(crate) id: UpstreamId,
    /// Host and port to connect to (a name is resolved on each new connection, so a moved service
    /// is found again).
    host: String,
    port: u16,
    /// The `Host` header HTTP/1.1 requires on every forwarded request: the upstream's authority.
    pub(super) host_header: HeaderValue,
    /// How long to wait for its answer's head once the caller's body is in.
    pub(crate) timeout: Duration,
    /// Its circuit breaker.
    pub(crate) breaker: Breaker,
    pub(super) latency: Arc<DurationHistogram>,
    /// Answer counters by status (index: status − 100); finding a series costs a lock and allocated
    /// labels, so each is found once, and read without a lock every worker would write to.
    responses: Box<[OnceLock<Arc<Counter>>]>,
    pub(super) timeouts: Arc<Counter>,
    pub(super) unreachable: Arc<Counter>,
}

/// Upstream latency, by upstream.
static UPSTREAM_LATENCY: Family<DurationHistogram> = Family::new(
    "berth_gateway_upstream_duration_seconds",
    "Time for an upstream to answer a forwarded call, until the answer's head.",
    &["upstream"],
);

/// Upstream answers by upstream and status (`timeout` and `unreachable` for no answer).
static UPSTREAM_RESPONSES: Family<Counter> = Family::new(
    "berth_gateway_upstream_responses_total",
    "Forwarded calls by upstream and outcome.",
    &["upstream", "status"],
);

/// Why an upstream's configured URL cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamUrlError {
    /// It does not parse as a URI.
    #[error("{upstream}: {base:?} is not a URL: {source}")]
    NotAUrl {
        /// Which upstream.
        upstream: &'static str,
        /// The URL given.
        base: String,
        /// Why.
        source: http::uri::InvalidUri,
    },
    /// It is not `http://` with a host.
    #[error("{upstream}: {base} must be an http:// URL with a host")]
    NotHttp {
        /// Which upstream.
        upstream: &'static str,
        /// The URL given.
        base: String,
    },
}

impl Upstream {
    /// An upstream at `base` (`http://127.0.0.1:8081`).
    pub(crate) fn new(
        id: UpstreamId,
        base: &str,
        timeout: Duration,
        breaker: BreakerConfig,
    ) -> Result<Self, UpstreamUrlError> {
        let parsed: Uri = base.parse().map_err(|source| UpstreamUrlError::NotAUrl {
            upstream: id.name(),
            base: base.to_string(),
            source,
        })?;
        let authority = match (parsed.scheme_str(), parsed.authority()) {
            (Some("http"), Some(authority)) => authority.clone(),
            _ => {
                return Err(UpstreamUrlError::NotHttp {
                    upstream: id.name(),
                    base: base.to_string(),
                });
            }
        };
        let label = id.name();
        Ok(Upstream {
            id,
            host: authority.host().trim_matches(['[', ']']).to_string(),
            port: authority.port_u16().unwrap_or(80),
            // An authority that parsed as part of a URI is a valid header value.
            host_header: HeaderValue::from_str(authority.as_str()).map_err(|_| {
                UpstreamUrlError::NotHttp {
                    upstream: id.name(),
                    base: base.to_string(),
                }
            })?,
            timeout,
            // A trial call may take the upstream's whole time, and a caller's body a little more.
            breaker: Breaker::new(breaker, timeout + Duration::from_secs(5)).publishing_as(label),
            latency: UPSTREAM_LATENCY.series(&[label]),
            responses: (100..600).map(|_| OnceLock::new()).collect(),
            timeouts: UPSTREAM_RESPONSES.series(&[label, "timeout"]),
            unreachable: UPSTREAM_RESPONSES.series(&[label, "unreachable"]),
        })
    }

    pub(super) fn count_response(&self, status: u16) {
        // hyper accepts any three-digit status; the rare one outside 100–599 is counted as the
        // nearest end of that range.
        let status = status.clamp(100, 599);
        let slot = usize::from(status - 100);
        self.responses[slot]
            .get_or_init(|| UPSTREAM_RESPONSES.series(&[self.id.name(), &status.to_string()]))
            .increment(1);
    }
}

/// Keep-alive connections to one upstream, owned by one engine worker thread, so checking one out
/// never contends with another thread. Each is a hyper `SendRequest` whose connection task runs on
/// the same worker's runtime; one is handed out only when hyper says it is ready for a new request
/// (the previous answer read to its end), and dropped once hyper says its connection closed.
pub(crate) struct ConnectionPool {
    senders: Mutex<Vec<SendRequest<CallerBody>>>,
}

/// Connections kept per upstream per worker: beyond it, a connection is closed when its call ends.
/// Set above the concurrent calls one worker usually carries, so steady load never reconnects, and
/// low enough that the pools stay well within the file limit (see the engine's connection cap).
const MAX_POOLED: usize = 128;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

impl ConnectionPool {
    /// An empty pool.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(ConnectionPool {
            senders: Mutex::new(Vec::new()),
        })
    }

    /// A ready connection (the most recently used, which is the likeliest to be), else a new one.
    /// The flag says whether it was reused.
    pub(super) async fn checkout(
        &self,
        upstream: &Upstream,
    ) -> Result<(SendRequest<CallerBody>, bool), String> {
        {
            let mut senders = self.senders.lock().expect("pool lock");
            senders.retain(|s| !s.is_closed());
            if let Some(at) = senders.iter().rposition(SendRequest::is_ready) {
                return Ok((senders.swap_remove(at), true));
            }
        }
        // Boxed: connecting (with its name lookup) is a large future that every call would otherwise
        // carry and copy, though only a few calls ever connect.
        Box::pin(connect(upstream)).await.map(|s| (s, false))
    }

    /// Puts a connection back. Its answer may still be streaming: it is handed out again once hyper
    /// says it is ready.
    pub(super) fn checkin(&self, sender: SendRequest<CallerBody>) {
        let mut senders = self.senders.lock().expect("pool lock");
        if senders.len() < MAX_POOLED {
            senders.push(sender);
        }
    }

    /// Closes every connection not in use: after one turned out closed, the upstream has likely
    /// restarted.
    pub(super) fn clear(&self) {
        self.senders
            .lock()
            .expect("pool lock")
            .retain(|s| !s.is_ready() && !s.is_closed());
    }
}

/// A new connection to `upstream`, its hyper connection task spawned on the calling worker's runtime.
async fn connect(upstream: &Upstream) -> Result<SendRequest<CallerBody>, String> {
    let stream = tokio::time::timeout(
        CONNECT_TIMEOUT,
        tokio::net::TcpStream::connect((upstream.host.as_str(), upstream.port)),
    )
    .await
    .map_err(|_| format!("connecting took longer than {CONNECT_TIMEOUT:?}"))?
    .map_err(|e| format!("could not connect: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (sender, connection) = hyper::client::conn::http1::Builder::new()
        .handshake(TokioIo::new(HearsEarlyAnswers::new(stream)))
        .await
        .map_err(|e| format!("handshake failed: {e}"))?;
    let name = upstream.id.name();
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(upstream = name, error = %e, "upstream connection ended");
        }
    });
    Ok(sender)
}

/// An upstream connection on which a failed write does not stop hyper from reading the answer.
///
/// A service may answer before it has read the whole request (a 413 or 400 decided from the head)
/// and close. Writing the rest of the body then fails (broken pipe, reset), and hyper would fail the
/// whole call with that write error, though the answer is already waiting in the socket: the caller
/// would get a 503 for the upstream's real answer, and the upstream a failure on its breaker. Here a
/// write that fails because the peer closed is taken as written (the peer will never read it), so
/// hyper goes on to read what the upstream said. An upstream that closed without answering still
/// fails the call, on the read.
struct HearsEarlyAnswers {
    stream: tokio::net::TcpStream,
    /// Set once the peer has closed its reading side: writes go nowhere from then on.
    peer_closed: bool,
}

impl HearsEarlyAnswers {
    fn new(stream: tokio::net::TcpStream) -> Self {
        HearsEarlyAnswers {
            stream,
            peer_closed: false,
        }
    }

    fn closed_by_peer(error: &std::io::Error) -> bool {
        matches!(
            error.kind(),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
        )
    }
}

impl tokio::io::AsyncRead for HearsEarlyAnswers {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for HearsEarlyAnswers {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.peer_closed {
            return Poll::Ready(Ok(buf.len()));
        }
        match Pin::new(&mut self.stream).poll_write(cx, buf) {
            Poll::Ready(Err(e)) if Self::closed_by_peer(&e) => {
                self.peer_closed = true;
                Poll::Ready(Ok(buf.len()))
            }
            other => other,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.peer_closed {
            return Poll::Ready(Ok(()));
        }
        match Pin::new(&mut self.stream).poll_flush(cx) {
            Poll::Ready(Err(e)) if Self::closed_by_peer(&e) => {
                self.peer_closed = true;
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
