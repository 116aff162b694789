//! Typed async clients for every Berth service API.
//!
//! Used by storage-ops (to reach the registry), by the gateway's tests, by the CLI and by the contract
//! tests, so each client is the consumer side of its service's contract. All of them are thin layers
//! over [`ServiceClient`], which knows the base URL, the bearer credential and the timeouts, stamps
//! every call with trace context and request id (through service-kit's outbound client), retries
//! idempotent calls on connection failures, and decodes problem+json answers back into
//! [`domain::Status`].
//!
//! # Layout
//! - [`ServiceClient`], [`ClientError`]: the shared plumbing.
//! - [`registry`]: the orchestrator-registry API.
//! - [`storage`]: the storage-ops API.
//! - [`machines`]: the machine-driver API.

use std::time::Duration;

use domain::{Code, Status};
use reqwest::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;
use service_kit::SecretString;
use service_kit::error::Problem;
use service_kit::outbound::HttpClient;

pub mod machines;
pub mod registry;
pub mod storage;

/// How a client connects.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Per-call timeout.
    pub timeout: Duration,
    /// The bearer credential sent with every call (a user token, or the internal credential).
    pub bearer: Option<SecretString>,
    /// Attempts for idempotent calls that fail to connect (1 = no retry).
    pub attempts: u32,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            timeout: Duration::from_secs(30),
            bearer: None,
            attempts: 3,
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

    fn transport(err: &reqwest::Error, base: &str) -> Self {
        let (code, what) = if err.is_timeout() {
            (Code::DeadlineExceeded, "timed out")
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

impl From<ClientError> for Status {
    fn from(e: ClientError) -> Self {
        e.status
    }
}

/// The shared client of one service.
#[derive(Debug, Clone)]
pub struct ServiceClient {
    base: String,
    http: HttpClient,
    attempts: u32,
}

impl ServiceClient {
    /// A client for the service at `base_url` (`http://127.0.0.1:8082`).
    pub fn new(base_url: &str, options: ClientOptions) -> Self {
        ServiceClient {
            base: base_url.trim_end_matches('/').to_string(),
            http: HttpClient::new(options.timeout, options.bearer),
            attempts: options.attempts.max(1),
        }
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
        let url = format!("{}{}", self.base, path_and_query);
        let idempotent = matches!(
            method,
            Method::GET | Method::HEAD | Method::PUT | Method::DELETE
        );
        let mut attempt = 1;
        loop {
            let mut request = self.http.request(method.clone(), &url);
            if let Some(body) = body {
                request = request.json(body);
            }
            match request.send().await {
                Ok(response) if response.status().is_success() => return Ok(response),
                Ok(response) => return Err(decode_error(response).await),
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
async fn decode_error(response: reqwest::Response) -> ClientError {
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
        Err(_) => Status::new(
            Code::from_http_status(http_status),
            format!(
                "HTTP {http_status}: {}",
                text.chars().take(200).collect::<String>()
            ),
        ),
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
