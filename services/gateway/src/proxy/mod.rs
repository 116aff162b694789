//! Forwarding: keep-alive HTTP/1.1 connections (hyper's client, `hyper::client::conn::http1`) pooled
//! per engine worker, streamed bodies both ways, hop-by-hop headers stripped, `x-forwarded-*` set,
//! trace context and request id passed on, and the internal credential added in place of the
//! caller's token.
//!
//! What counts against an upstream's breaker is only what the upstream did: a refused connection, a
//! reset before its answer, no answer within its time once the caller's body is in, and (if
//! configured) a 5xx. A caller whose body is short, broken, too large or too slow gets its own
//! 400/408/413, and the upstream's breaker hears nothing of it ([`CallerBody`] tells the two apart).
//!
//! # Layout
//! - this file: the [`Forwarder`] (a call through the breaker, within its time, with its retries) and
//!   the [`CallTimer`] that bounds it.
//! - `upstream`: each service and the connections to it: the [`Upstream`], its per-worker
//!   [`ConnectionPool`], connecting, and the socket that hears an early answer.
//! - `body`: the caller's body on its way, its progress and its limits.
//! - `headers`: what is forwarded of the caller's headers and of the upstream's.

mod body;
mod headers;
mod upstream;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use domain::Code;
use hyper::body::Body as _;
use service_kit::{ApiError, SecretString};

use crate::limits::Verdict;

use self::body::{BROKEN, BodyProgress, CallerBody, FINISHED, TOO_LARGE, body_stall_limit};
use self::headers::strip_hop_by_hop;
pub(crate) use self::upstream::{ConnectionPool, Upstream, UpstreamUrlError};

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
    use crate::limits::BreakerConfig;
    use crate::routes::UpstreamId;
    use axum::http::HeaderMap;

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
