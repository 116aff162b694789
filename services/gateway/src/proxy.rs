//! Forwarding: one pooled hyper client, streamed bodies both ways, hop-by-hop headers stripped,
//! `x-forwarded-*` set, trace context and request id passed on, and the internal credential added in
//! place of the caller's token.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Uri, header};
use axum::response::Response;
use domain::Code;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use service_kit::{ApiError, SecretString};

use crate::limits::{Admission, Breaker, BreakerConfig};
use crate::routes::UpstreamId;

/// Headers that describe one connection, not the message, and so never cross a proxy (RFC 9110 §7.6.1).
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

/// One upstream service: where it is, how long it may take, and its breaker.
pub struct Upstream {
    /// Which service.
    pub id: UpstreamId,
    /// `scheme://authority` of the service.
    pub base: Uri,
    /// How long to wait for its answer's headers.
    pub timeout: Duration,
    /// Its circuit breaker.
    pub breaker: Breaker,
}

impl Upstream {
    /// An upstream at `base` (`http://127.0.0.1:8081`).
    pub fn new(
        id: UpstreamId,
        base: &str,
        timeout: Duration,
        breaker: BreakerConfig,
    ) -> Result<Self, String> {
        let base: Uri = base
            .parse()
            .map_err(|e| format!("{}: {base:?} is not a URL: {e}", id.name()))?;
        if base.scheme_str() != Some("http") || base.authority().is_none() {
            return Err(format!(
                "{}: {base} must be an http:// URL with a host",
                id.name()
            ));
        }
        Ok(Upstream {
            id,
            base,
            timeout,
            breaker: Breaker::new(breaker),
        })
    }

    fn uri_for(&self, path_and_query: &axum::http::uri::PathAndQuery) -> Uri {
        let mut parts = self.base.clone().into_parts();
        parts.path_and_query = Some(path_and_query.clone());
        Uri::from_parts(parts).expect("a valid base with a valid path is a valid URI")
    }
}

/// The forwarding client, shared by every upstream.
#[derive(Clone)]
pub struct Forwarder {
    client: Client<HttpConnector, Body>,
    /// `Bearer <internal credential>`, made once (marked sensitive so it is never logged).
    internal_authorization: Option<HeaderValue>,
}

impl Forwarder {
    /// A pooled client; `internal_token` replaces the caller's credential on every forwarded call.
    pub fn new(internal_token: Option<SecretString>) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(256)
            .build(connector);
        Forwarder {
            client,
            internal_authorization: internal_token.and_then(|t| {
                let mut v = HeaderValue::from_str(&format!("Bearer {}", t.expose())).ok()?;
                v.set_sensitive(true);
                Some(v)
            }),
        }
    }

    /// Forwards `request` to `upstream`, through its breaker, within its timeout; GET and HEAD are
    /// retried (twice) when the connection itself fails, since nothing reached the service.
    pub async fn forward(
        &self,
        upstream: &Upstream,
        request: Request,
        client_addr: Option<SocketAddr>,
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
        let (parts, body) = request.into_parts();
        let path_and_query = parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| axum::http::uri::PathAndQuery::from_static("/"));
        let headers = self.upstream_headers(&parts.headers, client_addr);
        let retryable = matches!(parts.method, Method::GET | Method::HEAD);
        let mut body = Some(body);
        let started = Instant::now();
        let mut attempt = 0;
        let outcome = loop {
            attempt += 1;
            let mut builder = axum::http::Request::builder()
                .method(parts.method.clone())
                .uri(upstream.uri_for(&path_and_query))
                .version(axum::http::Version::HTTP_11);
            *builder.headers_mut().expect("a fresh builder") = headers.clone();
            // A GET/HEAD body, if any, is not replayed: retries send none.
            let outgoing = builder
                .body(body.take().unwrap_or_else(Body::empty))
                .expect("parts are valid");
            match tokio::time::timeout(upstream.timeout, self.client.request(outgoing)).await {
                Ok(Ok(response)) => break Ok(response),
                Ok(Err(e)) if e.is_connect() && retryable && attempt < 3 => {
                    tokio::time::sleep(Duration::from_millis(25 * attempt)).await;
                }
                Ok(Err(e)) => break Err((e.is_connect(), e.to_string())),
                Err(_) => break Err((false, "timeout".to_string())),
            }
        };
        let elapsed = started.elapsed().as_secs_f64();
        let upstream_label = upstream.id.name();
        match outcome {
            Ok(response) => {
                upstream.breaker.record(true);
                let status = response.status().as_u16().to_string();
                metrics::histogram!("berth_gateway_upstream_duration_seconds", "upstream" => upstream_label).record(elapsed);
                metrics::counter!("berth_gateway_upstream_responses_total", "upstream" => upstream_label, "status" => status).increment(1);
                let (mut parts, body) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Ok(Response::from_parts(parts, Body::new(body)))
            }
            Err((connect, why)) => {
                upstream.breaker.record(false);
                let result = if why == "timeout" {
                    "timeout"
                } else {
                    "unreachable"
                };
                metrics::counter!("berth_gateway_upstream_responses_total", "upstream" => upstream_label, "status" => result).increment(1);
                if why == "timeout" {
                    Err(ApiError::from_code(
                        Code::DeadlineExceeded,
                        format!(
                            "{upstream_label} did not answer within {:?}",
                            upstream.timeout
                        ),
                    ))
                } else {
                    // The upstream's address stays in the log; the caller learns only which service.
                    tracing::warn!(upstream = upstream_label, connect, error = %why, "upstream call failed");
                    Err(ApiError::from_code(
                        Code::Unavailable,
                        format!("{upstream_label} is unreachable"),
                    ))
                }
            }
        }
    }

    fn upstream_headers(&self, incoming: &HeaderMap, client_addr: Option<SocketAddr>) -> HeaderMap {
        let mut headers = incoming.clone();
        strip_hop_by_hop(&mut headers);
        let original_host = headers.remove(header::HOST);
        headers.remove(header::AUTHORIZATION);
        headers.remove("traceparent");
        headers.remove("tracestate");
        service_kit::telemetry::inject_context(&mut headers);
        if let Some(authorization) = &self.internal_authorization {
            headers.insert(header::AUTHORIZATION, authorization.clone());
        }
        if let Some(addr) = client_addr {
            let forwarded_for = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
                Some(prior) => format!("{prior}, {}", addr.ip()),
                None => addr.ip().to_string(),
            };
            if let Ok(v) = HeaderValue::from_str(&forwarded_for) {
                headers.insert(HeaderName::from_static("x-forwarded-for"), v);
            }
        }
        headers.insert(
            HeaderName::from_static("x-forwarded-proto"),
            HeaderValue::from_static("http"),
        );
        if let Some(host) = original_host {
            headers.insert(HeaderName::from_static("x-forwarded-host"), host);
        }
        headers
    }
}

/// Removes hop-by-hop headers, including any the `Connection` header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
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
    for name in HOP_BY_HOP {
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
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer user-token"),
        );
        h.insert(header::HOST, HeaderValue::from_static("berth.example"));
        h.insert("x-forwarded-for", HeaderValue::from_static("10.1.1.1"));
        let out = f.upstream_headers(&h, Some("192.0.2.7:5555".parse().unwrap()));
        assert_eq!(out[header::AUTHORIZATION], "Bearer inside");
        assert_eq!(out["x-forwarded-for"], "10.1.1.1, 192.0.2.7");
        assert_eq!(out["x-forwarded-host"], "berth.example");
        assert_eq!(out["x-forwarded-proto"], "http");
        assert!(!out.contains_key(header::HOST));
    }
}
