//! Forwarding: keep-alive HTTP/1.1 connections (hyper's client, `hyper::client::conn::http1`) pooled
//! per engine worker, streamed bodies both ways, hop-by-hop headers stripped, `x-forwarded-*` set,
//! trace context and request id passed on, and the internal credential added in place of the
//! caller's token.
//!
//! What counts against an upstream's breaker is only what the upstream did: a refused connection, a
//! reset before its answer, no answer within its time once the caller's body is in, and (if
//! configured) a 5xx. A caller whose body is short, broken, too large or too slow gets its own
//! 400/408/413, and the upstream's breaker hears nothing of it ([`CallerBody`] tells the two apart).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use bytes::Bytes;
use domain::Code;
use hyper::body::{Body as _, Frame, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use service_kit::metrics::{Counter, DurationHistogram, Family};
use service_kit::{ApiError, SecretString};

use crate::limits::{Breaker, BreakerConfig, Verdict};
use crate::routes::UpstreamId;

/// One upstream service: where it is, how long it may take, its breaker and its metric handles.
pub(crate) struct Upstream {
    /// Which service.
    pub(crate) id: UpstreamId,
    /// Host and port to connect to (a name is resolved on each new connection, so a moved service
    /// is found again).
    host: String,
    port: u16,
    /// The `Host` header HTTP/1.1 requires on every forwarded request: the upstream's authority.
    host_header: HeaderValue,
    /// How long to wait for its answer's head once the caller's body is in.
    pub(crate) timeout: Duration,
    /// Its circuit breaker.
    pub(crate) breaker: Breaker,
    latency: Arc<DurationHistogram>,
    /// Answer counters by status (index: status − 100); finding a series costs a lock and allocated
    /// labels, so each is found once, and read without a lock every worker would write to.
    responses: Box<[OnceLock<Arc<Counter>>]>,
    timeouts: Arc<Counter>,
    unreachable: Arc<Counter>,
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

    fn count_response(&self, status: u16) {
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
    async fn checkout(
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
    fn checkin(&self, sender: SendRequest<CallerBody>) {
        let mut senders = self.senders.lock().expect("pool lock");
        if senders.len() < MAX_POOLED {
            senders.push(sender);
        }
    }

    /// Closes every connection not in use: after one turned out closed, the upstream has likely
    /// restarted.
    fn clear(&self) {
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

/// What became of the caller's body, as the call goes.
struct BodyProgress {
    state: AtomicU8,
    /// When the body ended, once it has.
    finished_at: OnceLock<Instant>,
    /// When the call began, and how long after that the body last brought bytes (in nanoseconds).
    began: Instant,
    last_bytes_after: AtomicU64,
}

// The state starts at 0: still streaming.
const FINISHED: u8 = 1;
const TOO_LARGE: u8 = 2;
const BROKEN: u8 = 3;

impl BodyProgress {
    fn new() -> Self {
        BodyProgress {
            state: AtomicU8::new(0),
            finished_at: OnceLock::new(),
            began: Instant::now(),
            last_bytes_after: AtomicU64::new(0),
        }
    }

    fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    fn brought_bytes(&self) {
        let after = u64::try_from(self.began.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_bytes_after.store(after, Ordering::Relaxed);
    }

    /// When the body last brought bytes (or the call began).
    fn last_bytes_at(&self) -> Instant {
        self.began + Duration::from_nanos(self.last_bytes_after.load(Ordering::Relaxed))
    }
}

/// The caller's body on its way to the upstream, reporting its progress, so a failure of the call
/// can be told apart: the caller's body broke or stalled (the caller's fault), or the upstream
/// failed.
pub(crate) struct CallerBody {
    inner: Body,
    progress: Arc<BodyProgress>,
}

impl CallerBody {
    fn new(inner: Body) -> (Self, Arc<BodyProgress>) {
        let progress = Arc::new(BodyProgress::new());
        let body = CallerBody {
            inner,
            progress: progress.clone(),
        };
        body.finish_if_ended();
        (body, progress)
    }

    /// Records the end once the caller's body has none left. Hyper stops polling a body whose
    /// declared length it has sent (it asks `is_end_stream` instead of waiting for the `None`), so
    /// the end must be read off the body after every frame, not only from a final poll: else the
    /// body never counts as in, and an upstream slower than the stall limit looks like a caller
    /// that stopped sending (a 408 for every slow CreateMachine).
    fn finish_if_ended(&self) {
        if self.inner.is_end_stream() {
            self.finish();
        }
    }

    fn finish(&self) {
        let _ = self.progress.finished_at.set(Instant::now());
        // Only a body still streaming ends well; a broken or oversized one stays what it was.
        let _ =
            self.progress
                .state
                .compare_exchange(0, FINISHED, Ordering::AcqRel, Ordering::Acquire);
    }
}

impl hyper::body::Body for CallerBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(_))) => {
                self.progress.brought_bytes();
                self.finish_if_ended();
            }
            Poll::Ready(None) => self.finish(),
            Poll::Ready(Some(Err(e))) => {
                let state = if is_too_large(e) { TOO_LARGE } else { BROKEN };
                self.progress.state.store(state, Ordering::Release);
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        let ended = self.inner.is_end_stream();
        if ended {
            self.finish();
        }
        ended
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

fn is_too_large(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// Why a forwarded call got no answer.
enum Failure {
    /// The upstream did not answer within its time after the caller's body was in.
    Timeout,
    /// The upstream refused the connection or failed before answering.
    Unreachable(String),
    /// The caller's body was larger than the limit.
    BodyTooLarge,
    /// The caller's body ended early or broke.
    BodyBroken,
    /// The caller's body did not arrive within the upstream's time.
    BodyTooSlow,
    /// The upstream gave up waiting for the caller's body (its own 504 before the body was in).
    BodyTooSlowForUpstream,
    /// The caller's body stopped bringing bytes for [`body_stall_limit`].
    BodyStalled(Duration),
}

/// How long a caller's body may bring no bytes before the call is answered 408: half the upstream's
/// time, at most 10 s. Well inside the upstream's own request limit, so a stalled caller is told by
/// the gateway (408) before the upstream gives up on the body itself (its 504, which would read as
/// the upstream's failure).
fn body_stall_limit(upstream_timeout: Duration) -> Duration {
    (upstream_timeout / 2).min(Duration::from_secs(10))
}

/// The forwarding logic, shared by every engine worker: the request head, the breaker, the timeout
/// and retries. Connections come from the calling worker's [`ConnectionPool`].
pub(crate) struct Forwarder {
    /// `Bearer <internal credential>`, made once (marked sensitive so it is never logged).
    internal_authorization: Option<HeaderValue>,
}

impl Forwarder {
    /// `internal_token` replaces the caller's credential on every forwarded call.
    pub(crate) fn new(internal_token: Option<SecretString>) -> Self {
        Forwarder {
            internal_authorization: internal_token.and_then(|t| {
                let mut v = HeaderValue::from_str(&format!("Bearer {}", t.expose())).ok()?;
                v.set_sensitive(true);
                Some(v)
            }),
        }
    }

    /// Forwards `request` to `upstream` on a connection from `pool`, through the breaker, within the
    /// upstream's timeout.
    pub(crate) fn forward<'a>(
        &'a self,
        upstream: &'a Upstream,
        pool: &'a Arc<ConnectionPool>,
        request: Request,
        client_ip: Option<HeaderValue>,
        timer: &'a mut CallTimer,
    ) -> impl Future<Output = Result<Response, ApiError>> + 'a {
        let (parts, body) = request.into_parts();
        // Only a call without a body can be sent again once it may have been written.
        let idempotent = matches!(parts.method, Method::GET | Method::HEAD) && body.is_end_stream();
        let headers = self.forwarded_headers(&parts, upstream, client_ip.as_ref());
        let target = parts
            .uri
            .path_and_query()
            .map_or_else(|| Uri::from_static("/"), |p| Uri::from(p.clone()));
        let (body, progress) = CallerBody::new(body);
        let mut outgoing = hyper::Request::new(body);
        *outgoing.method_mut() = parts.method;
        *outgoing.uri_mut() = target;
        *outgoing.headers_mut() = headers;
        self.exchange(upstream, pool, outgoing, progress, idempotent, timer)
    }

    /// The call within its deadline, its outcome counted and told to the breaker.
    async fn exchange(
        &self,
        upstream: &Upstream,
        pool: &Arc<ConnectionPool>,
        request: hyper::Request<CallerBody>,
        progress: Arc<BodyProgress>,
        idempotent: bool,
        timer: &mut CallTimer,
    ) -> Result<Response, ApiError> {
        let name = upstream.id.name();
        let permit = upstream.breaker.admit().map_err(|wait| {
            ApiError::from_code(
                Code::Unavailable,
                format!(
                    "{name} is failing; calls to it are paused for a moment (circuit breaker open)"
                ),
            )
            .with_retry_after(wait)
        })?;
        let started = Instant::now();
        let call = send(upstream, pool, request, idempotent, &progress);
        tokio::pin!(call);
        // The upstream's time starts once the caller's body is in: until then a slow answer may be
        // the caller's doing. While the body streams, it must keep bringing bytes.
        let stall = body_stall_limit(upstream.timeout);
        let body_deadline = started + upstream.timeout;
        let outcome = loop {
            let deadline = match progress.finished_at.get() {
                Some(&finished) => finished + upstream.timeout,
                None => (progress.last_bytes_at() + stall).min(body_deadline),
            };
            match timer
                .within(tokio::time::Instant::from_std(deadline), call.as_mut())
                .await
            {
                Some(outcome) => break outcome,
                None => {
                    let now = Instant::now();
                    match progress.finished_at.get() {
                        Some(&finished) if now >= finished + upstream.timeout => {
                            break Err(Failure::Timeout);
                        }
                        Some(_) => {}
                        None if now >= body_deadline => break Err(Failure::BodyTooSlow),
                        None if now >= progress.last_bytes_at() + stall => {
                            break Err(Failure::BodyStalled(stall));
                        }
                        None => {}
                    }
                }
            }
        };
        upstream.latency.record(started.elapsed());
        // A call that failed while the caller's body was failing is the caller's failure; so is a
        // service's own timeout (504) given before the caller's body was all in: that slow body is
        // what it timed out on.
        let outcome = match (outcome, progress.state()) {
            (Ok(response), state)
                if response.status() == StatusCode::GATEWAY_TIMEOUT && state != FINISHED =>
            {
                Err(Failure::BodyTooSlowForUpstream)
            }
            (Err(Failure::Unreachable(_) | Failure::Timeout), TOO_LARGE) => {
                Err(Failure::BodyTooLarge)
            }
            (Err(Failure::Unreachable(_) | Failure::Timeout), BROKEN) => Err(Failure::BodyBroken),
            (outcome, _) => outcome,
        };
        match outcome {
            Ok(response) => {
                let status = response.status().as_u16();
                // A 5xx the upstream gave before the caller's body was in may be its answer to that
                // body (its own timeout on a slow caller): not counted against it.
                let body_in = progress.state() == FINISHED;
                permit.record(if body_in && upstream.breaker.counts_status(status) {
                    Verdict::Failed
                } else {
                    Verdict::Healthy
                });
                upstream.count_response(status);
                let (mut parts, body) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                if !body_in {
                    // The upstream answered before the caller's body was all in: the rest will
                    // never be read, so this connection ends after the answer. Said in the
                    // answer, or a client that finished sending puts the connection back in its
                    // pool and its next call goes out on a socket that is closing.
                    parts
                        .headers
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                Ok(Response::from_parts(parts, Body::new(body)))
            }
            Err(Failure::Timeout) => {
                permit.record(Verdict::Failed);
                upstream.timeouts.increment(1);
                Err(ApiError::from_code(
                    Code::DeadlineExceeded,
                    format!("{name} did not answer within {:?}", upstream.timeout),
                ))
            }
            Err(Failure::Unreachable(why)) => {
                permit.record(Verdict::Failed);
                upstream.unreachable.increment(1);
                // The upstream's address stays in the log; the caller learns only which service.
                tracing::warn!(upstream = name, error = %why, "upstream call failed");
                Err(ApiError::from_code(
                    Code::Unavailable,
                    format!("{name} is unreachable"),
                ))
            }
            // The caller's faults: the permit goes back without a verdict on the upstream.
            Err(Failure::BodyTooLarge) => Err(ApiError::from_code(
                Code::InvalidArgument,
                service_kit::middleware::BODY_TOO_LARGE,
            )
            .with_http_status(StatusCode::PAYLOAD_TOO_LARGE)),
            Err(Failure::BodyBroken) => Err(ApiError::from_code(
                Code::InvalidArgument,
                "body: ended before its declared length, or was malformed",
            )),
            // The service's own limit, which may be shorter than the gateway's: not a figure
            // the gateway can state.
            Err(Failure::BodyTooSlowForUpstream) => Err(ApiError::from_code(
                Code::DeadlineExceeded,
                format!(
                    "body: did not arrive whole before {name} stopped waiting for it; send it faster, or a smaller one"
                ),
            )
            .with_http_status(StatusCode::REQUEST_TIMEOUT)),
            Err(Failure::BodyTooSlow) => Err(ApiError::from_code(
                Code::DeadlineExceeded,
                format!(
                    "body: did not arrive whole within {:?}; send it faster, or a smaller one",
                    upstream.timeout
                ),
            )
            .with_http_status(StatusCode::REQUEST_TIMEOUT)),
            Err(Failure::BodyStalled(stall)) => Err(ApiError::from_code(
                Code::DeadlineExceeded,
                format!(
                    "body: no bytes arrived for {stall:?}; send the request body without pausing"
                ),
            )
            .with_http_status(StatusCode::REQUEST_TIMEOUT)),
        }
    }

    /// The headers the upstream gets: the caller's without hop-by-hop ones and without the caller's
    /// credential, plus `Host` (the upstream's authority), the internal credential, `x-forwarded-*`
    /// and trace context. The body's framing is hyper's to set.
    fn forwarded_headers(
        &self,
        parts: &http::request::Parts,
        upstream: &Upstream,
        client_ip: Option<&HeaderValue>,
    ) -> HeaderMap {
        let mut out = HeaderMap::with_capacity(parts.headers.len() + 6);
        // With the span recorded, this call's context replaces the caller's; without, the caller's
        // passes through unchanged.
        let mut trace = HeaderMap::new();
        service_kit::telemetry::inject_context(&mut trace);
        // Names the caller's `Connection` header lists are hop-by-hop too, except those the gateway
        // itself stands behind (the request id it set, trace context).
        let listed: Vec<&str> = parts
            .headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|name| !is_end_to_end_by_us(name))
            .collect();
        let mut forwarded_for: Option<Vec<u8>> = None;
        for (name, value) in &parts.headers {
            match name.as_str() {
                // Joined with the caller's address below.
                "x-forwarded-for" => {
                    let joined = forwarded_for.get_or_insert_with(Vec::new);
                    if !joined.is_empty() {
                        joined.extend_from_slice(b", ");
                    }
                    joined.extend_from_slice(value.as_bytes());
                }
                // Replaced below; `expect` was answered by the gateway's own server; framing is
                // hyper's.
                "host" | "authorization" | "x-forwarded-proto" | "x-forwarded-host" | "expect"
                | "content-length" | "transfer-encoding" => {}
                // The caller's identity is the gateway's to say (below), never the caller's.
                service_kit::tenancy::TOKEN_NAME_HEADER
                | service_kit::tenancy::NAMESPACES_HEADER => {}
                "traceparent" | "tracestate" if !trace.is_empty() => {}
                _ if is_hop_by_hop(name.as_str())
                    || listed.iter().any(|n| n.eq_ignore_ascii_case(name.as_str())) => {}
                _ => {
                    out.append(name.clone(), value.clone());
                }
            }
        }
        // The framing the caller declared, where the body is known to be empty: hyper sends no
        // length for an empty body of its own accord.
        if let Some(length) = parts.headers.get(header::CONTENT_LENGTH)
            && length.as_bytes() == b"0"
        {
            out.insert(header::CONTENT_LENGTH, length.clone());
        }
        out.insert(header::HOST, upstream.host_header.clone());
        if let Some(authorization) = &self.internal_authorization {
            out.insert(header::AUTHORIZATION, authorization.clone());
        }
        if let Some(identity) = parts.extensions.get::<crate::auth::Forwarded>() {
            out.insert(TOKEN_NAME, identity.name.clone());
            out.insert(NAMESPACES, identity.namespaces.clone());
        }
        if let Some(ip) = client_ip {
            let joined = forwarded_for.get_or_insert_with(Vec::new);
            if !joined.is_empty() {
                joined.extend_from_slice(b", ");
            }
            joined.extend_from_slice(ip.as_bytes());
        }
        if let Some(joined) = forwarded_for
            && let Ok(value) = HeaderValue::from_bytes(&joined)
        {
            out.insert(X_FORWARDED_FOR, value);
        }
        out.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
        if let Some(host) = parts.headers.get(header::HOST) {
            out.insert(X_FORWARDED_HOST, host.clone());
        }
        for (name, value) in trace {
            // An empty `tracestate` says nothing and some parsers refuse it.
            if let Some(name) = name
                && !value.is_empty()
            {
                out.insert(name, value);
            }
        }
        out
    }
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const TOKEN_NAME: HeaderName = HeaderName::from_static(service_kit::tenancy::TOKEN_NAME_HEADER);
const NAMESPACES: HeaderName = HeaderName::from_static(service_kit::tenancy::NAMESPACES_HEADER);
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Whether a header applies to one connection only (RFC 9110 §7.6.1), `Proxy-Connection` included.
fn is_hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "proxy-connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// Headers the gateway forwards whatever a caller's `Connection` header lists.
fn is_end_to_end_by_us(name: &str) -> bool {
    [
        "x-request-id",
        "traceparent",
        "tracestate",
        "host",
        "authorization",
    ]
    .iter()
    .any(|ours| name.eq_ignore_ascii_case(ours))
}

/// Drops an upstream answer's hop-by-hop headers, and those its `Connection` header lists; the
/// gateway's server frames the answer for the caller itself.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        if !is_end_to_end_by_us(name.as_str()) && name != header::CONTENT_LENGTH {
            headers.remove(name);
        }
    }
    for name in [
        "connection",
        "proxy-connection",
        "keep-alive",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ] {
        headers.remove(name);
    }
}

/// The timer that bounds the calls of one caller connection, reused from call to call. A call's
/// deadline is later than the one before it, and moving a registered timer later is one atomic
/// update; a timer per call would be added to and removed from the runtime's timer wheel each time.
#[derive(Default)]
pub(crate) struct CallTimer(Option<Pin<Box<tokio::time::Sleep>>>);

impl CallTimer {
    /// The timer, set to fire at `deadline` (made on first use, reused after).
    pub(crate) fn set(&mut self, deadline: tokio::time::Instant) -> Pin<&mut tokio::time::Sleep> {
        match &mut self.0 {
            Some(timer) => {
                timer.as_mut().reset(deadline);
                timer.as_mut()
            }
            empty => empty
                .insert(Box::pin(tokio::time::sleep_until(deadline)))
                .as_mut(),
        }
    }

    /// `work`'s output, or `None` if `deadline` passes first.
    pub(crate) async fn within<F: Future>(
        &mut self,
        deadline: tokio::time::Instant,
        work: F,
    ) -> Option<F::Output> {
        let mut timer = self.set(deadline);
        tokio::pin!(work);
        tokio::select! {
            biased;
            output = &mut work => Some(output),
            () = timer.as_mut() => None,
        }
    }
}

/// Sends the request and waits for the answer's head. Retries go on a fresh connection, and only where
/// the service cannot have acted on the request: a connection that could not be made (for GET and
/// HEAD, as with any proxy); a request hyper hands back unsent because its pooled connection had
/// closed (any method: the request goes again whole, `try_send_request`); and a pooled connection that
/// failed afterwards, for a GET or HEAD without a body.
async fn send(
    upstream: &Upstream,
    pool: &Arc<ConnectionPool>,
    request: hyper::Request<CallerBody>,
    idempotent: bool,
    progress: &BodyProgress,
) -> Result<hyper::Response<hyper::body::Incoming>, Failure> {
    // A bodiless GET or HEAD can be rebuilt from its head for a retry after it was sent.
    let resend_head = idempotent.then(|| {
        let mut head = hyper::Request::new(());
        *head.method_mut() = request.method().clone();
        *head.uri_mut() = request.uri().clone();
        *head.headers_mut() = request.headers().clone();
        head
    });
    let mut request = Some(request);
    for attempt in 1..=3u64 {
        let last = attempt == 3;
        let next = match request.take() {
            Some(request) => request,
            None => match &resend_head {
                Some(head) => {
                    let mut again = hyper::Request::new(CallerBody::new(Body::empty()).0);
                    *again.method_mut() = head.method().clone();
                    *again.uri_mut() = head.uri().clone();
                    *again.headers_mut() = head.headers().clone();
                    again
                }
                None => break,
            },
        };
        let (mut sender, reused) = match pool.checkout(upstream).await {
            Ok(connection) => connection,
            Err(e) if idempotent && !last => {
                tracing::debug!(upstream = upstream.id.name(), error = %e, "connect failed; retrying");
                tokio::time::sleep(Duration::from_millis(25 * attempt)).await;
                request = Some(next);
                continue;
            }
            Err(e) => return Err(Failure::Unreachable(e)),
        };
        match sender.try_send_request(next).await {
            Ok(response) => {
                pool.checkin(sender);
                return Ok(response);
            }
            Err(mut e) => {
                let unsent = e.take_message();
                let error = e.into_error();
                let caller_fault = matches!(progress.state(), TOO_LARGE | BROKEN);
                match unsent {
                    // Never written: safe to send again, whatever the method.
                    Some(unsent) if !last && !caller_fault => {
                        tracing::debug!(upstream = upstream.id.name(), %error, "pooled connection was closed; sending again");
                        pool.clear();
                        request = Some(unsent);
                    }
                    _ if reused && idempotent && !last && !caller_fault => {
                        tracing::debug!(upstream = upstream.id.name(), %error, "pooled connection failed; sending again");
                        pool.clear();
                    }
                    _ => return Err(Failure::Unreachable(error.to_string())),
                }
            }
        }
    }
    Err(Failure::Unreachable(
        "no connection could take the call".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream() -> Upstream {
        Upstream::new(
            UpstreamId::Registry,
            "http://registry:8082",
            Duration::from_secs(1),
            BreakerConfig {
                failures: 1,
                open_for: Duration::from_secs(1),
                count_5xx: false,
            },
        )
        .unwrap()
    }

    fn headers_of(request: Request) -> HeaderMap {
        let f = Forwarder::new(Some(SecretString::new("inside")));
        let (parts, _body) = request.into_parts();
        f.forwarded_headers(
            &parts,
            &upstream(),
            Some(&HeaderValue::from_static("192.0.2.7")),
        )
    }

    #[test]
    fn caller_credentials_are_replaced_and_forwarding_headers_set() {
        let request = Request::builder()
            .method("GET")
            .uri("http://berth.example/v1/kinds?x=1")
            .header(header::AUTHORIZATION, "Bearer user-token")
            .header(header::HOST, "berth.example")
            .header("x-forwarded-for", "10.1.1.1")
            .header("x-forwarded-proto", "https")
            .header("x-request-id", "r-1")
            .body(Body::empty())
            .unwrap();
        let headers = headers_of(request);
        for (name, want) in [
            ("authorization", "Bearer inside"),
            ("x-forwarded-for", "10.1.1.1, 192.0.2.7"),
            ("x-forwarded-host", "berth.example"),
            ("x-forwarded-proto", "http"),
            ("host", "registry:8082"),
            ("x-request-id", "r-1"),
        ] {
            assert_eq!(headers.get(name).unwrap(), want, "{headers:?}");
            assert_eq!(headers.get_all(name).iter().count(), 1, "{name}");
        }
        assert_eq!(headers.len(), 6, "{headers:?}");
    }

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_dropped() {
        let request = Request::builder()
            .method("POST")
            .uri("/v1/volumes")
            .header(
                "connection",
                "keep-alive, x-private, x-request-id, traceparent",
            )
            .header("x-private", "1")
            .header("keep-alive", "timeout=5")
            .header("proxy-connection", "keep-alive")
            .header("te", "trailers")
            .header("upgrade", "websocket")
            .header("proxy-authorization", "Basic eA==")
            .header("expect", "100-continue")
            .header("content-type", "application/json")
            .header("content-length", "2")
            .header("x-request-id", "r-2")
            .body(Body::from("{}"))
            .unwrap();
        let headers = headers_of(request);
        for gone in [
            "connection",
            "x-private",
            "keep-alive",
            "proxy-connection",
            "te",
            "upgrade",
            "proxy-authorization",
            "expect",
            "content-length",
        ] {
            assert!(!headers.contains_key(gone), "{gone} forwarded: {headers:?}");
        }
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(
            headers["x-request-id"], "r-2",
            "a Connection header cannot drop the request id"
        );
    }

    #[test]
    fn answers_lose_their_hop_by_hop_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("connection", HeaderValue::from_static("close, x-secret"));
        headers.insert("x-secret", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.len(), 1, "{headers:?}");
        assert!(headers.contains_key("content-type"));
    }
}
