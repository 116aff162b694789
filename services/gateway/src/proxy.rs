//! Forwarding: keep-alive HTTP/1.1 connections pooled per engine worker, streamed bodies both ways,
//! hop-by-hop headers stripped, `x-forwarded-*` set, trace context and request id passed on, and the
//! internal credential added in place of the caller's token.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use domain::Code;
use futures::future::Either;
use hyper::body::Body as _;
use service_kit::metrics::{Counter, DurationHistogram, Family};
use service_kit::{ApiError, SecretString};

use crate::client::{self, CallError, Connection};
use crate::limits::{Admission, Breaker, BreakerConfig};
use crate::routes::UpstreamId;

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
        let label = id.name();
        Ok(Upstream {
            id,
            host: authority.host().trim_matches(['[', ']']).to_string(),
            port: authority.port_u16().unwrap_or(80),
            host_header: HeaderValue::from_str(authority.as_str())
                .map_err(|e| format!("{}: {base}: {e}", id.name()))?,
            timeout,
            breaker: Breaker::new(breaker),
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

/// Idle keep-alive connections to one upstream, owned by one engine worker thread, so checking one
/// out never contends with another thread. A connection is put back only once its answer's body has
/// been read to the end; one dropped halfway is closed, since it still holds unread bytes.
pub struct ConnectionPool {
    idle: Mutex<Vec<Connection>>,
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

    /// An idle connection that is still usable (the most recently used, which is the likeliest to
    /// be), else a new one. The flag says whether it was reused.
    /// `now` is when the call began.
    async fn checkout(&self, upstream: &Upstream, now: Instant) -> io::Result<(Connection, bool)> {
        loop {
            let idle = self.idle.lock().expect("pool lock").pop();
            let Some(mut connection) = idle else { break };
            if connection.is_usable(now).await {
                return Ok((connection, true));
            }
        }
        // Boxed: connecting (with its name lookup) is a large future that every call would otherwise
        // carry and copy, though only a few calls ever connect.
        let connection = Box::pin(tokio::time::timeout(
            CONNECT_TIMEOUT,
            Connection::open(&upstream.host, upstream.port),
        ))
        .await
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("connecting took longer than {CONNECT_TIMEOUT:?}"),
            )
        })??;
        Ok((connection, false))
    }

    fn checkin(&self, connection: Connection) {
        let mut idle = self.idle.lock().expect("pool lock");
        if idle.len() < MAX_IDLE {
            idle.push(connection);
        }
    }

    /// Closes every idle connection: after one turned out closed, the upstream has likely restarted.
    fn clear(&self) {
        self.idle.lock().expect("pool lock").clear();
    }
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a forwarded call got no answer.
enum Failure {
    Timeout,
    Unreachable(String),
    /// The caller's body could not be read.
    Body(axum::Error),
}

/// The forwarding logic, shared by every engine worker: the request head, the breaker, the timeout
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
    ///
    /// The request's head is written out before the returned future starts, so the future holds the
    /// bytes to send and the body, not the request (copied into every future that holds it).
    pub fn forward<'a>(
        &'a self,
        upstream: &'a Upstream,
        pool: &'a Arc<ConnectionPool>,
        request: Request,
        client_ip: Option<HeaderValue>,
        timer: &'a mut CallTimer,
    ) -> impl Future<Output = Result<Response, ApiError>> + 'a {
        if let Admission::Rejected(wait) = upstream.breaker.admit() {
            return Either::Left(std::future::ready(Err(ApiError::from_code(
                Code::Unavailable,
                format!(
                    "{} is failing; calls to it are paused for a moment (circuit breaker open)",
                    upstream.id.name()
                ),
            )
            .with_retry_after(wait))));
        }
        let (parts, body) = request.into_parts();
        let (head, chunked) = self.request_head(&parts, &body, upstream, client_ip.as_ref());
        let head_request = parts.method == Method::HEAD;
        // Only a call without a body can be sent again once it may have been written.
        let idempotent = matches!(parts.method, Method::GET | Method::HEAD) && body.is_end_stream();
        drop(parts);
        let prepared = Prepared {
            head,
            chunked,
            head_request,
            idempotent,
        };
        Either::Right(self.exchange(upstream, pool, prepared, body, timer))
    }

    /// The forwarding after the head is written: the call within its deadline, its outcome counted.
    async fn exchange(
        &self,
        upstream: &Upstream,
        pool: &Arc<ConnectionPool>,
        prepared: Prepared,
        body: Body,
        timer: &mut CallTimer,
    ) -> Result<Response, ApiError> {
        let started = Instant::now();
        let deadline = tokio::time::Instant::from_std(started + upstream.timeout);
        let outcome = timer
            .within(deadline, send(upstream, pool, &prepared, started, body))
            .await
            .unwrap_or(Err(Failure::Timeout));
        upstream.latency.record(started.elapsed());
        let name = upstream.id.name();
        match outcome {
            Ok((mut head, connection)) => {
                upstream.breaker.record(true);
                upstream.count_response(head.status.as_u16());
                let back = pool.clone();
                let (body, reusable) = connection.into_body(&mut head, move |c| back.checkin(c));
                if let Some(connection) = reusable {
                    pool.checkin(connection);
                }
                let mut response = Response::new(body);
                *response.status_mut() = head.status;
                *response.headers_mut() = head.headers;
                Ok(response)
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
            // The caller's fault, so not counted against the upstream's breaker.
            Err(Failure::Body(e)) => Err(body_error(e)),
        }
    }

    /// The request head as the upstream gets it: the caller's headers without hop-by-hop ones and
    /// without the caller's credential, plus `Host` (the upstream's authority), the internal
    /// credential, `x-forwarded-*`, trace context, and the body's framing. Written straight from the
    /// caller's headers, which costs less than editing the map first. The flag says whether the body
    /// is chunk-encoded.
    fn request_head(
        &self,
        parts: &http::request::Parts,
        body: &Body,
        upstream: &Upstream,
        client_ip: Option<&HeaderValue>,
    ) -> (Vec<u8>, bool) {
        let mut out = Vec::with_capacity(512);
        out.extend_from_slice(parts.method.as_str().as_bytes());
        out.push(b' ');
        // HTTP/1.1 to an origin server takes the path alone; the authority goes into `Host`.
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        out.extend_from_slice(target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        // With the span recorded, this call's context replaces the caller's; without, the caller's
        // passes through unchanged.
        let mut trace = HeaderMap::new();
        service_kit::telemetry::inject_context(&mut trace);
        // Names the caller's `Connection` header lists are hop-by-hop too (rare: looked up only then).
        let listed: Vec<&str> = parts
            .headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect();
        let mut original_host = None;
        let mut forwarded_for = false;
        let mut declared_length = false;
        for (name, value) in &parts.headers {
            match name.as_str() {
                "host" => original_host = Some(value),
                // Joined with the caller's address below.
                "x-forwarded-for" => forwarded_for = true,
                "content-length" => declared_length = true,
                // Replaced below; `expect` was answered by the gateway's own server.
                "authorization" | "x-forwarded-proto" | "x-forwarded-host" | "expect" => {}
                "traceparent" | "tracestate" if !trace.is_empty() => {}
                _ if client::is_hop_by_hop(name.as_str())
                    || listed.iter().any(|n| n.eq_ignore_ascii_case(name.as_str())) => {}
                _ => put_header(&mut out, name.as_str(), value.as_bytes()),
            }
        }
        put_header(&mut out, "host", upstream.host_header.as_bytes());
        if let Some(authorization) = &self.internal_authorization {
            put_header(&mut out, "authorization", authorization.as_bytes());
        }
        // One `x-forwarded-for`: the addresses it already listed (in one line or several), then the
        // caller's.
        let prior = forwarded_for
            .then(|| parts.headers.get_all(X_FORWARDED_FOR).iter())
            .into_iter()
            .flatten();
        let mut addresses = prior
            .map(HeaderValue::as_bytes)
            .chain(client_ip.map(HeaderValue::as_bytes));
        if let Some(first) = addresses.next() {
            out.extend_from_slice(b"x-forwarded-for: ");
            out.extend_from_slice(first);
            for next in addresses {
                out.extend_from_slice(b", ");
                out.extend_from_slice(next);
            }
            out.extend_from_slice(b"\r\n");
        }
        put_header(&mut out, "x-forwarded-proto", b"http");
        if let Some(host) = original_host {
            put_header(&mut out, "x-forwarded-host", host.as_bytes());
        }
        for (name, value) in &trace {
            put_header(&mut out, name.as_str(), value.as_bytes());
        }
        let mut chunked = false;
        if body.is_end_stream() {
            if declared_length {
                put_header(&mut out, "content-length", b"0");
            }
        } else if let Some(length) = body.size_hint().exact() {
            put_header(&mut out, "content-length", length.to_string().as_bytes());
        } else {
            put_header(&mut out, "transfer-encoding", b"chunked");
            chunked = true;
        }
        out.extend_from_slice(b"\r\n");
        (out, chunked)
    }
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

fn put_header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The answer for a caller's body that could not be read: 413 past the body limit, else 400.
fn body_error(error: axum::Error) -> ApiError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return ApiError::from_code(
                Code::InvalidArgument,
                service_kit::middleware::BODY_TOO_LARGE,
            )
            .with_http_status(StatusCode::PAYLOAD_TOO_LARGE);
        }
        source = e.source();
    }
    ApiError::from_code(
        Code::InvalidArgument,
        format!("body: could not be read: {error}"),
    )
}

/// The timer that bounds the calls of one caller connection, reused from call to call. A call's
/// deadline is later than the one before it, and moving a registered timer later is one atomic
/// update; a timer per call would be added to and removed from the runtime's timer wheel each time.
#[derive(Default)]
pub struct CallTimer(Option<Pin<Box<tokio::time::Sleep>>>);

impl CallTimer {
    /// `work`'s output, or `None` if `deadline` passes first.
    pub async fn within<F: Future>(
        &mut self,
        deadline: tokio::time::Instant,
        work: F,
    ) -> Option<F::Output> {
        let timer = match &mut self.0 {
            Some(timer) => {
                timer.as_mut().reset(deadline);
                timer
            }
            empty => empty.insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        tokio::pin!(work);
        tokio::select! {
            biased;
            output = &mut work => Some(output),
            () = timer.as_mut() => None,
        }
    }
}

/// A request ready to go: its head as bytes, and how it may be sent.
struct Prepared {
    head: Vec<u8>,
    /// Whether the body goes chunk-encoded.
    chunked: bool,
    /// A HEAD request, whose answer has no body.
    head_request: bool,
    /// A GET or HEAD without a body: it may be sent again once it may have been written.
    idempotent: bool,
}

/// Sends the request and reads the answer's head. Retries go on a fresh connection, and only where
/// the service cannot have acted on the request: a connection that could not be made (for GET and
/// HEAD, as with any proxy); a reused connection the upstream had closed before taking any of the
/// request (any method: the request goes again whole); and a reused connection that failed
/// afterwards, for a GET or HEAD without a body.
async fn send(
    upstream: &Upstream,
    pool: &Arc<ConnectionPool>,
    request: &Prepared,
    started: Instant,
    body: Body,
) -> Result<(client::Head, Connection), Failure> {
    /// What is left to send: the body not yet read, or a whole request handed back unsent.
    enum Pending {
        Body(Body),
        Whole(Vec<u8>),
    }
    let mut pending = Some(Pending::Body(body));
    let mut attempt = 0;
    loop {
        attempt += 1;
        let retry_allowed = attempt < 3;
        let (mut connection, reused) = match pool.checkout(upstream, started).await {
            Ok(connection) => connection,
            Err(e) if request.idempotent && retry_allowed => {
                tracing::debug!(upstream = upstream.id.name(), error = %e, "connect failed; retrying");
                tokio::time::sleep(Duration::from_millis(25 * attempt)).await;
                continue;
            }
            Err(e) => return Err(Failure::Unreachable(e.to_string())),
        };
        let written = match pending.take() {
            Some(Pending::Body(body)) => {
                connection
                    .write_request(&request.head, body, request.chunked)
                    .await
            }
            Some(Pending::Whole(bytes)) => connection.write_whole(bytes).await,
            None => connection.write_whole(request.head.to_vec()).await,
        };
        let failure = match written {
            Ok(()) => match connection.read_head(request.head_request).await {
                Ok(head) => return Ok((head, connection)),
                Err(e) => e,
            },
            Err(e) => e,
        };
        match failure {
            CallError::NotSent(e, bytes) if reused && retry_allowed => {
                tracing::debug!(upstream = upstream.id.name(), error = %e, "pooled connection was closed; sending again");
                pool.clear();
                pending = Some(Pending::Whole(bytes));
            }
            // A bodiless GET or HEAD is sent again from its head.
            CallError::Upstream(why) if reused && retry_allowed && request.idempotent => {
                tracing::debug!(upstream = upstream.id.name(), error = %why, "pooled connection failed; sending again");
                pool.clear();
            }
            CallError::NotSent(e, _) => return Err(Failure::Unreachable(e.to_string())),
            CallError::Upstream(why) => return Err(Failure::Unreachable(why)),
            CallError::Body(e) => return Err(Failure::Body(e)),
        }
    }
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
            },
        )
        .unwrap()
    }

    fn head_of(request: Request) -> (String, bool) {
        let f = Forwarder::new(Some(SecretString::new("inside")));
        let (parts, body) = request.into_parts();
        let (head, chunked) = f.request_head(
            &parts,
            &body,
            &upstream(),
            Some(&HeaderValue::from_static("192.0.2.7")),
        );
        (String::from_utf8(head).unwrap(), chunked)
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
        let (head, chunked) = head_of(request);
        assert!(!chunked);
        assert!(head.starts_with("GET /v1/kinds?x=1 HTTP/1.1\r\n"), "{head}");
        assert!(head.ends_with("\r\n\r\n"), "{head}");
        let lines: Vec<&str> = head.trim_end().lines().skip(1).collect();
        for want in [
            "authorization: Bearer inside",
            "x-forwarded-for: 10.1.1.1, 192.0.2.7",
            "x-forwarded-host: berth.example",
            "x-forwarded-proto: http",
            "host: registry:8082",
            "x-request-id: r-1",
        ] {
            assert!(lines.contains(&want), "{want} missing from {head}");
        }
        assert_eq!(lines.len(), 6, "{head}");
        assert!(!head.contains("user-token"));
    }

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_dropped() {
        let request = Request::builder()
            .method("POST")
            .uri("/v1/volumes")
            .header("connection", "keep-alive, x-private")
            .header("x-private", "1")
            .header("keep-alive", "timeout=5")
            .header("te", "trailers")
            .header("upgrade", "websocket")
            .header("proxy-authorization", "Basic eA==")
            .header("expect", "100-continue")
            .header("content-type", "application/json")
            .header("content-length", "2")
            .body(Body::from("{}"))
            .unwrap();
        let (head, chunked) = head_of(request);
        assert!(!chunked);
        for gone in [
            "connection",
            "x-private",
            "keep-alive",
            "te:",
            "upgrade",
            "proxy-",
            "expect",
        ] {
            assert!(!head.contains(gone), "{gone} forwarded: {head}");
        }
        assert!(head.contains("content-type: application/json\r\n"));
        assert!(head.contains("content-length: 2\r\n"));
    }

    #[test]
    fn a_body_of_unknown_length_is_chunked_and_an_empty_one_keeps_its_zero() {
        let stream = futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from("a"))]);
        let request = Request::builder()
            .method("PUT")
            .uri("/v1/x")
            .header("transfer-encoding", "chunked")
            .body(Body::from_stream(stream))
            .unwrap();
        let (head, chunked) = head_of(request);
        assert!(chunked);
        assert_eq!(
            head.matches("transfer-encoding: chunked").count(),
            1,
            "{head}"
        );
        let request = Request::builder()
            .method("POST")
            .uri("/v1/x")
            .header("content-length", "0")
            .body(Body::empty())
            .unwrap();
        let (head, chunked) = head_of(request);
        assert!(!chunked);
        assert!(head.contains("content-length: 0\r\n"), "{head}");
    }
}
