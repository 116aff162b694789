//! Typed async clients for every Berth service API.
//!
//! Used by storage-ops (to reach the registry), by the gateway's tests, by the CLI and by the contract
//! tests, so each client is the consumer side of its service's contract. All of them are thin layers
//! over [`ServiceClient`], which knows the base URL, the bearer credential and the timeouts, stamps
//! every call with the headers its builder's [`Propagation`] adds (a service hands in service-kit's
//! `traceparent` and `x-request-id` injector; the CLI hands in nothing), retries idempotent calls on
//! connection failures, and decodes problem+json answers ([`domain::Problem`]) back into
//! [`domain::Status`].
//!
//! It depends on `domain` and reqwest only, not on service-kit: a program that calls Berth (the CLI,
//! a test) links no web server, telemetry exporter or allocator of the services'.
//!
//! # Layout
//! - [`ServiceClient`], [`ClientOptions`], [`Propagation`], [`ClientError`], [`pooled_http_client`]
//!   (and [`pooled_http_client_for`], which loads no certificate store for a plain-http base):
//!   the shared plumbing; [`ApiClient`], the one shape of the typed clients below, each of which
//!   is `ApiClient<that API>` with the API's calls.
//! - [`registry`]: the orchestrator-registry API.
//! - [`storage`]: the storage-ops API.
//! - [`machines`]: the machine-driver API.
//! - [`controller`]: the machine-controller API (stored objects and their watch).

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use domain::{Code, Problem, SecretString, Status};
use reqwest::Method;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub mod controller;
pub mod machines;
pub mod registry;
pub mod storage;
pub mod watch;

/// A typed client of the API `A` (a marker named in its module, e.g. [`machines::MachineDriverApi`]):
/// [`ServiceClient`] underneath, and that API's calls, implemented in its module.
#[derive(Debug)]
pub struct ApiClient<A> {
    inner: ServiceClient,
    api: PhantomData<fn() -> A>,
}

// By hand: a derive would ask the marker, never made, to be `Clone` too.
impl<A> Clone for ApiClient<A> {
    fn clone(&self) -> Self {
        ApiClient {
            inner: self.inner.clone(),
            api: PhantomData,
        }
    }
}

impl<A> ApiClient<A> {
    /// Wraps a [`ServiceClient`] pointed at the service (or at the gateway).
    pub fn new(inner: ServiceClient) -> Self {
        ApiClient {
            inner,
            api: PhantomData,
        }
    }

    /// The shared client underneath.
    pub fn service(&self) -> &ServiceClient {
        &self.inner
    }
}

/// How a client connects.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Per-call timeout.
    pub timeout: Duration,
    /// The bearer credential sent with every call (a user token, or the internal credential).
    pub bearer: Option<SecretString>,
    /// Attempts for idempotent calls that fail to connect (1 = no retry).
    pub attempts: u32,
    /// Adds the caller's context (trace, request id) to every call; none by default.
    pub propagation: Option<Propagation>,
}

/// What a client adds to every call's headers before sending it: a service hands in its trace
/// context and request id injector (service-kit's `outbound::inject_propagation`), so a call that
/// crosses services is one trace and one request id. Called once per request, attempt by attempt.
#[derive(Clone)]
pub struct Propagation(Arc<dyn Fn(&mut HeaderMap) + Send + Sync>);

impl Propagation {
    /// Propagation by `inject`, which adds its headers to the map it is given.
    pub fn new(inject: impl Fn(&mut HeaderMap) + Send + Sync + 'static) -> Self {
        Propagation(Arc::new(inject))
    }
}

impl std::fmt::Debug for Propagation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Propagation(..)")
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            timeout: Duration::from_secs(30),
            bearer: None,
            attempts: 3,
            propagation: None,
        }
    }
}

/// A failed call: the status the service answered (or the transport failure as a status), with what
/// the caller needs to act on it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status}")]
pub struct ClientError {
    /// The machine code and message.
    pub status: Status,
    /// The HTTP status, when the service answered at all.
    pub http_status: Option<u16>,
    /// The service's request id, when it answered.
    pub request_id: Option<String>,
    /// `Retry-After`, when given.
    pub retry_after: Option<Duration>,
}

impl ClientError {
    /// The machine code.
    pub fn code(&self) -> Code {
        self.status.code
    }

    /// What went wrong, in words a service may pass on to its own callers: never the URL called
    /// (an internal host and port) nor what a non-Berth answer said. `status.message` keeps both,
    /// for the log and for a CLI user, who chose the URL.
    pub fn public_reason(&self) -> String {
        match self.http_status {
            Some(n) => format!("it answered HTTP {n} ({})", self.status.code.name()),
            None => match self.status.code {
                Code::DeadlineExceeded => "the call timed out".to_string(),
                Code::Internal => "it answered a body that does not decode".to_string(),
                _ if self.request_id.is_some() => {
                    format!("it answered {}", self.status.code.name())
                }
                _ => "the call could not reach it".to_string(),
            },
        }
    }

    fn transport(err: &reqwest::Error, base: &str) -> Self {
        let (code, what) = if err.is_timeout() {
            (Code::DeadlineExceeded, "timed out")
        } else if err.is_connect() && names_dns(err) {
            (Code::Unavailable, HOST_UNRESOLVED)
        } else if err.is_connect() {
            (Code::Unavailable, "could not connect")
        } else if err.is_decode() {
            (Code::Internal, "answered a body that does not decode")
        } else {
            (Code::Unavailable, "failed")
        };
        ClientError {
            status: Status::new(code, format!("call to {base} {what}")),
            http_status: err.status().map(|s| s.as_u16()),
            request_id: None,
            retry_after: None,
        }
    }
}

/// How a call whose host name did not resolve is told: the name is wrong (or the resolver is
/// down), which is not the same as nothing listening.
pub const HOST_UNRESOLVED: &str = "could not resolve its host name";

/// Whether the connect error came from resolving the host name: hyper-util's connector names it
/// "dns error" in its cause chain, the only place the distinction survives.
fn names_dns(err: &reqwest::Error) -> bool {
    let mut cause: Option<&dyn std::error::Error> = std::error::Error::source(err);
    while let Some(e) = cause {
        if e.to_string().starts_with("dns error") {
            return true;
        }
        cause = e.source();
    }
    false
}

impl From<ClientError> for Status {
    fn from(e: ClientError) -> Self {
        e.status
    }
}

/// The one setup of a pooled HTTP client for calls between Berth's programs: `timeout` per call,
/// at most 5 s of it to connect, idle connections kept a minute. Every [`ServiceClient`] has one,
/// and so has service-kit's outbound client.
pub fn pooled_http_client(timeout: Duration) -> reqwest::Client {
    pooled_builder(timeout)
        .build()
        .expect("a client with a TLS backend builds")
}

/// [`pooled_http_client`] for calls to `base_url` only. For a plain `http://` base (every call
/// between Berth's own services) no certificate store is loaded: a client that never verifies a
/// certificate must not pay a store's heap for each client (measured: BENCHMARKS.md, “Memory: each
/// service idle and at peak, and berth up”), and a host without one (an image with no CA bundle)
/// made building the client fail, though no call of it would ever verify a certificate.
pub fn pooled_http_client_for(base_url: &str, timeout: Duration) -> reqwest::Client {
    let plain = base_url
        .get(..7)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"));
    if plain {
        pooled_builder(timeout)
            .tls_certs_only([])
            .build()
            .expect("a client without roots builds")
    } else {
        pooled_http_client(timeout)
    }
}

/// How long a pooled connection may sit idle before the client closes it: well below the 30 s after
/// which Berth's servers close an idle one (`BERTH_IDLE_TIMEOUT`). Kept longer than the server
/// keeps it, a connection was closed by the server just as the next request went out on it, and
/// that request failed though nothing was wrong: the machine controller's health checks, 30 s
/// apart, marked healthy machines Failed "call to … failed" (a break-it finding).
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(20);

fn pooled_builder(timeout: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(5)))
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        // No Berth service redirects. Following one would send the body (a secret's values, a
        // cloud key in a driver request) to wherever the answer pointed (a break-it finding).
        .redirect(reqwest::redirect::Policy::none())
}

/// The shared client of one service.
#[derive(Debug, Clone)]
pub struct ServiceClient {
    base: String,
    http: reqwest::Client,
    bearer: Option<HeaderValue>,
    propagation: Option<Propagation>,
    attempts: u32,
}

impl ServiceClient {
    /// A client for the service at `base_url` (`http://127.0.0.1:8082`).
    pub fn new(base_url: &str, options: ClientOptions) -> Self {
        let http = pooled_http_client_for(base_url, options.timeout);
        // A credential that is not a valid header value cannot be sent; the call then goes without
        // one and the service answers 401, which says more than a panic here would.
        let bearer = options.bearer.as_ref().and_then(|token| {
            let mut v = HeaderValue::from_str(&format!("Bearer {}", token.expose())).ok()?;
            v.set_sensitive(true);
            Some(v)
        });
        ServiceClient {
            base: base_url.trim_end_matches('/').to_string(),
            http,
            bearer,
            propagation: options.propagation,
            attempts: options.attempts.max(1),
        }
    }

    /// The headers every call carries: the propagated context and the bearer credential.
    fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(Propagation(inject)) = &self.propagation {
            inject(&mut headers);
        }
        if let Some(bearer) = &self.bearer {
            headers.insert(AUTHORIZATION, bearer.clone());
        }
        headers
    }

    /// The base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Sends a request and returns the raw response if it is a success, or the decoded error.
    pub async fn call<B: Serialize + ?Sized>(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<&B>,
    ) -> Result<reqwest::Response, ClientError> {
        let response = self.call_any(method, path_and_query, body).await?;
        if response.status().is_success() {
            Ok(response)
        } else {
            Err(decode_error(response).await)
        }
    }

    /// Sends a request and returns the answer whatever its status, for a caller that reads an error
    /// answer's body itself; only a call that got no answer is an error.
    pub async fn call_any<B: Serialize + ?Sized>(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<&B>,
    ) -> Result<reqwest::Response, ClientError> {
        let url = format!("{}{}", self.base, path_and_query);
        let idempotent = matches!(
            method,
            Method::GET | Method::HEAD | Method::PUT | Method::DELETE
        );
        let mut attempt = 1;
        loop {
            let mut request = self
                .http
                .request(method.clone(), &url)
                .headers(self.headers());
            if let Some(body) = body {
                request = request.json(body);
            }
            match request.send().await {
                Ok(response) => return Ok(response),
                // Only a refused connection is safe to retry: the request never reached the service.
                Err(e) if e.is_connect() && idempotent && attempt < self.attempts => {
                    tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
                    attempt += 1;
                }
                Err(e) => return Err(ClientError::transport(&e, &self.base)),
            }
        }
    }

    /// Sends a request and decodes a JSON answer.
    pub async fn json<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        let response = self.call(method, path_and_query, body).await?;
        response
            .json()
            .await
            .map_err(|e| ClientError::transport(&e, &self.base))
    }

    /// GETs and decodes a JSON answer.
    pub async fn get<T: DeserializeOwned>(&self, path_and_query: &str) -> Result<T, ClientError> {
        self.json::<(), T>(Method::GET, path_and_query, None).await
    }

    /// Whether `/readyz` answers 200.
    pub async fn ready(&self) -> Result<(), ClientError> {
        self.call::<()>(Method::GET, "/readyz", None)
            .await
            .map(|_| ())
    }
}

/// Decodes a non-2xx answer: problem+json when the service sent it, the HTTP status otherwise.
pub(crate) async fn decode_error(response: reqwest::Response) -> ClientError {
    let http_status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let request_id = header("x-request-id");
    let retry_after = header("retry-after")
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_secs);
    let text = response.text().await.unwrap_or_default();
    let status = match serde_json::from_str::<Problem>(&text) {
        Ok(p) => Status::new(
            Code::from_u32(p.code).unwrap_or_else(|| Code::from_http_status(http_status)),
            p.detail,
        ),
        // Not a Berth answer (a proxy's page, a crashed server): its words may name anything, so
        // they go to the log, and only the status to the caller.
        Err(_) => {
            let excerpt: String = text.chars().take(200).collect();
            tracing::debug!(http_status, body = %excerpt, "an answer that is not problem+json");
            Status::new(
                Code::from_http_status(http_status),
                format!("HTTP {http_status} without a problem+json body"),
            )
        }
    };
    ClientError {
        status,
        http_status: Some(http_status),
        request_id: request_id.or_else(|| {
            serde_json::from_str::<Problem>(&text)
                .ok()
                .map(|p| p.request_id)
        }),
        retry_after,
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters, so a bad name reaches the service
/// as one segment (and is refused there, naming it) instead of changing the route.
pub(crate) fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `?k=v&…` of `pairs`, each value percent-encoded (empty when there are none).
pub(crate) fn query_string(pairs: &[(&str, String)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let joined: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect();
    format!("?{}", joined.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn public_reasons_name_no_host_port_or_body() {
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let base = format!("http://{closed}");
        let client = ServiceClient::new(
            &base,
            ClientOptions {
                attempts: 1,
                ..ClientOptions::default()
            },
        );
        let e = client.get::<serde_json::Value>("/x").await.unwrap_err();
        assert_eq!(e.code(), Code::Unavailable);
        assert!(e.status.message.contains(&base), "the log keeps the URL");
        let reason = e.public_reason();
        assert_eq!(reason, "the call could not reach it");
        assert!(!reason.contains(&closed.port().to_string()));

        // A foreign answer naming internals: neither its body nor the URL is passed on.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = socket.read(&mut buf).await;
            let body = "upstream http://10.9.8.7:6543/db failed";
            let answer = format!(
                "HTTP/1.1 502 Bad Gateway\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            socket.write_all(answer.as_bytes()).await.unwrap();
        });
        let client = ServiceClient::new(&format!("http://{addr}"), ClientOptions::default());
        let e = client.get::<serde_json::Value>("/x").await.unwrap_err();
        assert_eq!(e.http_status, Some(502));
        assert_eq!(e.status.message, "HTTP 502 without a problem+json body");
        assert_eq!(e.public_reason(), "it answered HTTP 502 (Unavailable)");
    }
}
