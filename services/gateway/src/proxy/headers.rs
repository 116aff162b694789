//! The headers of a forwarded call: what the upstream gets in place of the caller's (the
//! forwarder's `forwarded_headers`: hop-by-hop ones dropped, the caller's credential and identity
//! replaced, `x-forwarded-*` and trace context set), and what the caller gets of the upstream's
//! answer ([`strip_hop_by_hop`]).
//!
//! Apart because these are rules (RFC 9110's hop-by-hop set, what the gateway itself vouches for)
//! that are read and tested on their own, with no connection, body or timing in them: the forwarder
//! only calls them.

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};

use super::Forwarder;
use super::upstream::Upstream;

impl Forwarder {
    /// The headers the upstream gets: the caller's without hop-by-hop ones and without the caller's
    /// credential, plus `Host` (the upstream's authority), the internal credential, `x-forwarded-*`
    /// and trace context. The body's framing is hyper's to set.
    pub(super) fn forwarded_headers(
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
pub(super) fn strip_hop_by_hop(headers: &mut HeaderMap) {
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
