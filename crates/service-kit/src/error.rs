//! [`ApiError`]: the one error answer of every Berth service.
//!
//! Every non-2xx answer is `application/problem+json` (RFC 9457) with the machine code as the source of
//! truth: `{type, title, status, detail, code, requestId}`, plus `machineCodesError` (the string MCM
//! parses) where the machine driver asks for it, and `Retry-After` on 429/503. An error built from an
//! unexpected cause ([`ApiError::internal`]) logs the cause and answers a generic sentence, so a 5xx never
//! carries a stack trace, a secret or an internal address.

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use domain::Status;
use domain::problem::about_blank;

use crate::request_id;

/// The machine codes an [`ApiError`] is built from, for crates that answer errors without depending
/// on `domain` themselves (the emulator's admin API).
pub use domain::Code;
/// The media type of every error answer (defined in `domain`, beside [`Problem`]).
pub use domain::PROBLEM_JSON;
/// The problem+json body (defined in `domain`, which the typed client shares).
pub use domain::Problem;

/// How long callers are told to wait on 429/503 when nothing better is known.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: Status,
    retry_after: Option<Duration>,
    /// A 429 that waiting does not cure (a capacity or a quota full): no `Retry-After`.
    not_retryable: bool,
    machine_codes_error: bool,
    http_status: Option<StatusCode>,
    cause: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl ApiError {
    /// An error answering this status as it is.
    pub fn new(status: Status) -> Self {
        ApiError {
            status,
            retry_after: None,
            not_retryable: false,
            machine_codes_error: false,
            http_status: None,
            cause: None,
        }
    }

    /// An error with this code and message.
    pub fn from_code(code: Code, message: impl Into<String>) -> Self {
        ApiError::new(Status::new(code, message))
    }

    /// An unexpected failure: the cause is logged with the request id, the caller sees only a generic
    /// sentence (no internals on a 5xx).
    pub fn internal(cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        ApiError {
            status: Status::new(
                Code::Internal,
                "internal error; the request id finds the details in the service's log",
            ),
            retry_after: None,
            not_retryable: false,
            machine_codes_error: false,
            http_status: None,
            cause: Some(Box::new(cause)),
        }
    }

    /// Keeps a cause for the log without showing it to the caller.
    pub fn with_cause(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.cause = Some(Box::new(cause));
        self
    }

    /// Sets `Retry-After` (only sent on 429 and 503).
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// Sends no `Retry-After`: a `ResourceExhausted` that waiting does not cure (a capacity or a
    /// quota that is full until something is freed or the limit raised), unlike a rate limit.
    pub fn not_retryable(mut self) -> Self {
        self.not_retryable = true;
        self.retry_after = None;
        self
    }

    /// Answers with this HTTP status instead of the code's own (413 for an oversized body, 405 for a
    /// wrong method: HTTP has words for these that the code table does not).
    pub fn with_http_status(mut self, status: StatusCode) -> Self {
        self.http_status = Some(status);
        self
    }

    /// The HTTP status this error answers with.
    pub fn http_status(&self) -> StatusCode {
        self.http_status.unwrap_or_else(|| {
            StatusCode::from_u16(self.status.code.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
        })
    }

    /// Adds `machineCodesError`, the MCM status string, to the body.
    pub fn with_machine_codes_error(mut self) -> Self {
        self.machine_codes_error = true;
        self
    }

    /// The status this error answers.
    pub fn status(&self) -> &Status {
        &self.status
    }

    /// The problem's title: the code's name (`NotFound`), or, when the answer's HTTP status is not
    /// the code's own (a 415 for a body that is not JSON, a 413, a 405: HTTP has words for these
    /// that the code table does not), that status's reason phrase in the same style
    /// (`UnsupportedMediaType`), so the title says what the status says rather than a generic
    /// `InvalidArgument`.
    pub fn title(&self) -> String {
        match self.http_status {
            Some(status) if status.as_u16() != self.status.code.http_status() => status
                .canonical_reason()
                .map(|reason| reason.split([' ', '-']).collect::<String>())
                .unwrap_or_else(|| self.status.code.name().to_string()),
            _ => self.status.code.name().to_string(),
        }
    }

    /// The problem body this error answers with, for the given request id.
    pub fn problem(&self, request_id: &str) -> Problem {
        Problem {
            kind: about_blank(),
            title: self.title(),
            status: self.http_status().as_u16(),
            detail: self.status.message.clone(),
            code: self.status.code as u32,
            request_id: request_id.to_string(),
            machine_codes_error: self
                .machine_codes_error
                .then(|| self.status.to_mcm_string()),
        }
    }
}

impl From<Status> for ApiError {
    fn from(status: Status) -> Self {
        ApiError::new(status)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.status.fmt(f)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let request_id = request_id::current().unwrap_or_default();
        let http = self.http_status();
        // Logged once, here, inside the request's span; server faults loudly, caller faults quietly.
        match &self.cause {
            Some(cause) if http.is_server_error() => {
                tracing::error!(code = %self.status.code, error = %cause, cause = ?cause, "request failed")
            }
            Some(cause) => {
                tracing::info!(code = %self.status.code, error = %cause, "request refused")
            }
            None if http.is_server_error() => {
                tracing::warn!(code = %self.status.code, message = %self.status.message, "request failed")
            }
            None => {
                tracing::debug!(code = %self.status.code, message = %self.status.message, "request refused")
            }
        }
        let body = serde_json::to_vec(&self.problem(&request_id)).unwrap_or_default();
        let mut response = (http, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if matches!(
            self.status.code,
            Code::ResourceExhausted | Code::Unavailable
        ) && !self.not_retryable
        {
            let secs = self
                .retry_after
                .unwrap_or(DEFAULT_RETRY_AFTER)
                .as_secs_f64()
                .ceil()
                .max(1.0) as u64;
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if http == StatusCode::UNAUTHORIZED {
            // RFC 9110: a 401 names the scheme to authenticate with. Every credential Berth takes
            // is a bearer token (the gateway's tokens, the internal credential).
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"berth\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_401_names_the_bearer_scheme_and_a_429_when_to_come_back() {
        let r = ApiError::from_code(Code::Unauthenticated, "a bearer token is required")
            .into_response();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            r.headers()[header::WWW_AUTHENTICATE],
            "Bearer realm=\"berth\""
        );
        let r = ApiError::from_code(Code::ResourceExhausted, "slow down").into_response();
        assert!(r.headers().contains_key(header::RETRY_AFTER));
        assert!(!r.headers().contains_key(header::WWW_AUTHENTICATE));
    }

    #[test]
    fn internal_errors_hide_their_cause() {
        let err = ApiError::internal(std::io::Error::other("connect to 10.0.0.7:5432 refused"));
        let p = err.problem("rid");
        assert_eq!(p.status, 500);
        assert_eq!(p.code, 13);
        assert!(!p.detail.contains("10.0.0.7"));
    }

    #[test]
    fn a_status_the_code_does_not_name_titles_the_problem() {
        let e = ApiError::from_code(Code::InvalidArgument, "body: expected JSON")
            .with_http_status(StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let p = e.problem("r");
        assert_eq!(
            (p.status, p.code, p.title.as_str()),
            (415, 3, "UnsupportedMediaType")
        );
        let e = ApiError::from_code(Code::InvalidArgument, "too big")
            .with_http_status(StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(e.problem("r").title, "PayloadTooLarge");
        // The code's own status keeps the code's name.
        let e = ApiError::from_code(Code::InvalidArgument, "bad")
            .with_http_status(StatusCode::BAD_REQUEST);
        assert_eq!(e.problem("r").title, "InvalidArgument");
        assert_eq!(
            ApiError::from_code(Code::NotFound, "x").problem("r").title,
            "NotFound"
        );
    }

    #[test]
    fn machine_codes_error_is_opt_in() {
        let e = ApiError::from_code(Code::NotFound, "gone [x]");
        assert_eq!(e.problem("r").machine_codes_error, None);
        let e = e.with_machine_codes_error();
        assert_eq!(
            e.problem("r").machine_codes_error.as_deref(),
            Some("machine codes error: code = [NotFound] message = [gone [x]]")
        );
    }

    #[test]
    fn retry_after_only_on_429_and_503() {
        let r = ApiError::from_code(Code::Unavailable, "down")
            .with_retry_after(Duration::from_millis(2500))
            .into_response();
        assert_eq!(r.headers()[header::RETRY_AFTER], "3");
        assert_eq!(r.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        let r = ApiError::from_code(Code::ResourceExhausted, "slow down").into_response();
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
        let r = ApiError::from_code(Code::NotFound, "x")
            .with_retry_after(Duration::from_secs(5))
            .into_response();
        assert!(r.headers().get(header::RETRY_AFTER).is_none());
    }
}
