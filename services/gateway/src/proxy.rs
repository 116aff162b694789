//! Forwarding: keep-alive HTTP/1.1 connections pooled per engine worker, streamed bodies both ways,
//! hop-by-hop headers stripped, `x-forwarded-*` set, trace context and request id passed on, and the
//! internal credential added in place of the caller's token.

use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Uri, Version, header};
use axum::response::Response;
use bytes::Bytes;
use domain::Code;
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use service_kit::{ApiError, SecretString};
use tokio::net::TcpStream;

use crate::limits::{Admission, Breaker, BreakerConfig};
use crate::routes::UpstreamId;

/// Headers that describe one connection, not the message, and so never cross a proxy (RFC 9110 §7.6.1).
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// One upstream service: where it is, how long it may take, its breaker and its metric handles.
pub struct Upstream {
    /// Which service.
    pub id: UpstreamId,
    /// Host and port to connect to (a name is resolved on each new connection, so a moved service
    /// is found again).
    host: String,
    port: u16,
    /// The `Host` header HTTP/1.1 requires on every forwarded request: the upstream's authority.
    host_header: HeaderValue,
    /// How long to wait for its answer's headers.
    pub timeout: Duration,
    /// Its circuit breaker.
    pub breaker: Breaker,
    latency: metrics::Histogram,
    /// Answer counters by status (index: status − 100); a handle costs a registry lookup with
    /// allocated labels, so each is made once, and read without a lock every worker would write to.
    responses: Box<[OnceLock<metrics::Counter>]>,
    timeouts: metrics::Counter,
    unreachable: metrics::Counter,
}

impl Upstream {
    /// An upstream at `base` (`http://127.0.0.1:8081`).
    pub fn new(
        id: UpstreamId,
        base: &str,
        timeout: Duration,
        breaker: BreakerConfig,
    ) -> Result<Self, String> {
        let parsed: Uri = base
            .parse()
            .map_err(|e| format!("{}: {base:?} is not a URL: {e}", id.name()))?;
        let authority = match (parsed.scheme_str(), parsed.authority()) {
            (Some("http"), Some(authority)) => authority.clone(),
            _ => {
                return Err(format!(
                    "{}: {base} must be an http:// URL with a host",
                    id.name()
                ));
            }
        };
        // Handles bound before the recorder is installed would count into nothing.
        let _ = service_kit::metrics::handle();
        let label = id.name();
        Ok(Upstream {
            id,
            host: authority.host().trim_matches(['[', ']']).to_string(),
            port: authority.port_u16().unwrap_or(80),
            host_header: HeaderValue::from_str(authority.as_str())
                .map_err(|e| format!("{}: {base}: {e}", id.name()))?,
            timeout,
            breaker: Breaker::new(breaker),
            latency: metrics::histogram!("berth_gateway_upstream_duration_seconds", "upstream" => label),
            responses: (100..600).map(|_| OnceLock::new()).collect(),
            timeouts: metrics::counter!("berth_gateway_upstream_responses_total", "upstream" => label, "status" => "timeout"),
            unreachable: metrics::counter!("berth_gateway_upstream_responses_total", "upstream" => label, "status" => "unreachable"),
        })
    }

    fn count_response(&self, status: u16) {
        // hyper accepts any three-digit status; the rare one outside 100–599 is counted as the
        // nearest end of that range.
        let status = status.clamp(100, 599);
        let slot = usize::from(status - 100);
        self.responses[slot]
            .get_or_init(|| {
                metrics::counter!("berth_gateway_upstream_responses_total", "upstream" => self.id.name(), "status" => status.to_string())
            })
            .increment(1);
    }
}

/// Idle keep-alive connections to one upstream, owned by one engine worker thread, so checking one
/// out never contends with another thread. A connection is put back only once its answer's body has
/// been read to the end; one dropped halfway is closed, since it still holds unread bytes.
pub struct ConnectionPool {
    idle: Mutex<Vec<SendRequest<Body>>>,
}

/// Idle connections kept per upstream per worker: beyond it, a connection is closed when its answer
/// ends. Set above the concurrent callers one worker usually carries, so steady load never reconnects.
const MAX_IDLE: usize = 512;

impl ConnectionPool {
    /// An empty pool.
    pub fn new() -> Arc<Self> {
        Arc::new(ConnectionPool {
            idle: Mutex::new(Vec::new()),
        })
    }

    /// An idle connection that is still open (the most recently used, which is the likeliest to be),
    /// else a new one. The flag says whether it was reused.
    async fn checkout(
        &self,
        upstream: &Upstream,
    ) -> Result<(SendRequest<Body>, bool), Box<dyn std::error::Error + Send + Sync>> {
        loop {
            let idle = self.idle.lock().expect("pool lock").pop();
            let Some(mut sender) = idle else { break };
            if sender.ready().await.is_ok() {
                return Ok((sender, true));
            }
        }
        // Boxed: connecting (with its name lookup) is a large future that every call would otherwise
        // carry and copy, though only a few calls ever connect.
        let sender = Box::pin(connect(upstream)).await?;
        Ok((sender, false))
    }

    fn checkin(&self, sender: SendRequest<Body>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().expect("pool lock");
        if idle.len() < MAX_IDLE {
            idle.push(sender);
        }
    }

    /// Closes every idle connection: after one turned out stale, the upstream has likely restarted.
    fn clear(&self) {
        self.idle.lock().expect("pool lock").clear();
    }
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A new HTTP/1.1 connection to `upstream`, driven on the calling worker's runtime.
async fn connect(
    upstream: &Upstream,
) -> Result<SendRequest<Body>, Box<dyn std::error::Error + Send + Sync>> {
    let stream = tokio::time::timeout(
        CONNECT_TIMEOUT,
        TcpStream::connect((upstream.host.as_str(), upstream.port)),
    )
    .await
    .map_err(|_| format!("connecting took longer than {CONNECT_TIMEOUT:?}"))??;
    stream.set_nodelay(true)?;
    // One buffer per request, as on the engine's side.
    let (sender, connection) = hyper::client::conn::http1::Builder::new()
        .writev(false)
        .handshake(TokioIo::new(stream))
        .await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// An upstream answer's body, streamed to the caller; when it ends, its connection goes back to the
/// pool.
struct PooledBody {
    inner: Incoming,
    connection: Option<(SendRequest<Body>, Arc<ConnectionPool>)>,
}

impl PooledBody {
    fn release(&mut self) {
        if let Some((sender, pool)) = self.connection.take() {
            pool.checkin(sender);
        }
    }
}

impl hyper::body::Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let frame = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        if frame.is_none() || this.inner.is_end_stream() {
            this.release();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        // A body known to be complete may be dropped without its end ever being polled.
        if self.inner.is_end_stream() {
            self.release();
        }
    }
}

/// Why a forwarded call got no answer.
enum Failure {
    Timeout,
    Unreachable(String),
}

/// The forwarding logic, shared by every engine worker: header rewriting, the breaker, the timeout
/// and retries. Connections come from the calling worker's [`ConnectionPool`].
pub struct Forwarder {
    /// `Bearer <internal credential>`, made once (marked sensitive so it is never logged).
    internal_authorization: Option<HeaderValue>,
}

impl Forwarder {
    /// `internal_token` replaces the caller's credential on every forwarded call.
    pub fn new(internal_token: Option<SecretString>) -> Self {
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
    pub async fn forward(
        &self,
        upstream: &Upstream,
        pool: &Arc<ConnectionPool>,
        request: Request,
        client_ip: Option<HeaderValue>,
    ) -> Result<Response, ApiError> {
        if let Admission::Rejected(wait) = upstream.breaker.admit() {
            return Err(ApiError::from_code(
                Code::Unavailable,
                format!(
                    "{} is failing; calls to it are paused for a moment (circuit breaker open)",
                    upstream.id.name()
                ),
            )
            .with_retry_after(wait));
        }
        let (mut parts, body) = request.into_parts();
        self.rewrite_headers(&mut parts.headers, upstream, client_ip);
        // HTTP/1.1 to an origin server takes the path alone; the authority went into `Host`.
        parts.uri = match parts.uri.path_and_query() {
            Some(path_and_query) => Uri::from(path_and_query.clone()),
            None => Uri::from_static("/"),
        };
        parts.version = Version::HTTP_11;
        let started = Instant::now();
        let outcome = match tokio::time::timeout(
            upstream.timeout,
            send(upstream, pool, Request::from_parts(parts, body)),
        )
        .await
        {
            Ok(outcome) => outcome,
            Err(_) => Err(Failure::Timeout),
        };
        upstream.latency.record(started.elapsed().as_secs_f64());
        let name = upstream.id.name();
        match outcome {
            Ok((response, sender)) => {
                upstream.breaker.record(true);
                upstream.count_response(response.status().as_u16());
                let (mut parts, inner) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                let body = PooledBody {
                    inner,
                    connection: Some((sender, pool.clone())),
                };
                Ok(Response::from_parts(parts, Body::new(body)))
            }
            Err(Failure::Timeout) => {
                upstream.breaker.record(false);
                upstream.timeouts.increment(1);
                Err(ApiError::from_code(
                    Code::DeadlineExceeded,
                    format!("{name} did not answer within {:?}", upstream.timeout),
                ))
            }
            Err(Failure::Unreachable(why)) => {
                upstream.breaker.record(false);
                upstream.unreachable.increment(1);
                // The upstream's address stays in the log; the caller learns only which service.
                tracing::warn!(upstream = name, error = %why, "upstream call failed");
                Err(ApiError::from_code(
                    Code::Unavailable,
                    format!("{name} is unreachable"),
                ))
            }
        }
    }

    /// Rewrites the caller's headers in place for the upstream.
    fn rewrite_headers(
        &self,
        headers: &mut HeaderMap,
        upstream: &Upstream,
        client_ip: Option<HeaderValue>,
    ) {
        strip_hop_by_hop(headers);
        let original_host = headers.remove(header::HOST);
        headers.remove(header::AUTHORIZATION);
        service_kit::telemetry::inject_context(headers);
        if let Some(authorization) = &self.internal_authorization {
            headers.insert(header::AUTHORIZATION, authorization.clone());
        }
        if let Some(ip) = client_ip {
            let forwarded_for = match headers.get(X_FORWARDED_FOR).map(HeaderValue::to_str) {
                Some(Ok(prior)) => {
                    HeaderValue::from_str(&format!("{prior}, {}", ip.to_str().unwrap_or(""))).ok()
                }
                Some(Err(_)) | None => Some(ip),
            };
            if let Some(v) = forwarded_for {
                headers.insert(X_FORWARDED_FOR, v);
            }
        }
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
        if let Some(host) = original_host {
            headers.insert(X_FORWARDED_HOST, host);
        }
        headers.insert(header::HOST, upstream.host_header.clone());
    }
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Sends `request` and waits for the answer's headers. Retries go on a fresh connection, and only
/// where nothing can have reached the service: a connection that could not be made (for GET and
/// HEAD, as with any proxy), or a pooled connection the upstream had already closed, which hands the
/// request back unsent (for any method).
async fn send(
    upstream: &Upstream,
    pool: &Arc<ConnectionPool>,
    mut request: Request,
) -> Result<(hyper::Response<Incoming>, SendRequest<Body>), Failure> {
    let retryable = matches!(*request.method(), Method::GET | Method::HEAD);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (mut sender, reused) = match pool.checkout(upstream).await {
            Ok(connection) => connection,
            Err(e) if retryable && attempt < 3 => {
                tracing::debug!(upstream = upstream.id.name(), error = %e, "connect failed; retrying");
                tokio::time::sleep(Duration::from_millis(25 * attempt)).await;
                continue;
            }
            Err(e) => return Err(Failure::Unreachable(e.to_string())),
        };
        match sender.try_send_request(request).await {
            Ok(response) => return Ok((response, sender)),
            Err(mut error) => match error.take_message() {
                Some(unsent) if reused && attempt < 3 => {
                    pool.clear();
                    request = unsent;
                }
                _ => return Err(Failure::Unreachable(error.into_error().to_string())),
            },
        }
    }
}

/// Removes hop-by-hop headers, including any the `Connection` header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none: one pass over the few headers present is cheaper than eight removals,
    // each of which hashes its name.
    if !headers.keys().any(|name| HOP_BY_HOP.contains(name)) {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_are_stripped() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-private"),
        );
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        h.insert("x-request-id", HeaderValue::from_static("r"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-request-id"));
    }

    #[test]
    fn caller_credentials_are_replaced_and_forwarding_headers_set() {
        let f = Forwarder::new(Some(SecretString::new("inside")));
        let upstream = Upstream::new(
            UpstreamId::Registry,
            "http://registry:8082",
            Duration::from_secs(1),
            BreakerConfig {
                failures: 1,
                open_for: Duration::from_secs(1),
            },
        )
        .unwrap();
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer user-token"),
        );
        h.insert(header::HOST, HeaderValue::from_static("berth.example"));
        h.insert("x-forwarded-for", HeaderValue::from_static("10.1.1.1"));
        f.rewrite_headers(
            &mut h,
            &upstream,
            Some(HeaderValue::from_static("192.0.2.7")),
        );
        let out = h;
        assert_eq!(out[header::AUTHORIZATION], "Bearer inside");
        assert_eq!(out["x-forwarded-for"], "10.1.1.1, 192.0.2.7");
        assert_eq!(out["x-forwarded-host"], "berth.example");
        assert_eq!(out["x-forwarded-proto"], "http");
        assert_eq!(out[header::HOST], "registry:8082");
    }
}
