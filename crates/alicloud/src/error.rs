//! The client's error and what ECS's codes say (a missing resource, a retry, throttling).
//!
//! What an ECS code means to a caller (MCM's machine codes, say) is the caller's: the machine
//! driver maps them (`machine_driver::alicloud::codes`); this crate describes ECS only.
//!
//! Nothing here ever holds the access key secret or the STS token: API errors carry only what ECS
//! answered (code, message, request id), transport errors have their URL stripped, and request
//! parameters (which may carry user data) are never copied into an error.

use std::time::Duration;

/// Codes that say the addressed resource does not exist.
pub const NOT_FOUND_CODES: [&str; 5] = [
    "InvalidInstanceId.NotFound",
    "Forbidden.InstanceNotFound",
    "InvalidDiskId.NotFound",
    "InvalidEniId.NotFound",
    "InvalidNetworkInterfaceId.NotFound",
];

/// An error answer from ECS: `{RequestId, HostId, Code, Message, Recommend}` plus the HTTP status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EcsApiError {
    /// The action that failed.
    pub action: String,
    /// ECS's `Code`, e.g. `OperationDenied.NoStock`.
    pub code: String,
    /// ECS's `Message`.
    pub message: String,
    /// ECS's `RequestId` (quote it to Alibaba support).
    pub request_id: String,
    /// ECS's `Recommend` link, if any.
    pub recommend: Option<String>,
    /// The HTTP status of the answer.
    pub http_status: u16,
    /// For throttling: how long ECS asked us to wait (`TimeLeft` of `x-ratelimit-*`).
    pub retry_after: Option<Duration>,
}

/// Everything an ECS call can fail with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// ECS answered with an error.
    #[error("ECS {} failed: {} ({}) [RequestId {}, HTTP {}]", .0.action, .0.code, .0.message, .0.request_id, .0.http_status)]
    Api(Box<EcsApiError>),
    /// One attempt took longer than its timeout and no retry was possible.
    #[error("ECS {action}: request timed out after {after:?}")]
    Timeout {
        /// The action.
        action: String,
        /// The timeout of the last attempt.
        after: Duration,
    },
    /// The caller's deadline passed before ECS answered (possibly while waiting for the rate limiter
    /// or a backoff).
    #[error("ECS {action}: caller deadline exceeded")]
    DeadlineExceeded {
        /// The action.
        action: String,
    },
    /// Could not reach ECS (DNS, connect, TLS, connection reset).
    #[error("ECS {action}: transport error: {message}")]
    Transport {
        /// The action.
        action: String,
        /// What went wrong, without the URL.
        message: String,
    },
    /// ECS answered something that is not the expected JSON.
    #[error("ECS {action}: unexpected response (HTTP {http_status}): {message}")]
    Decode {
        /// The action.
        action: String,
        /// The HTTP status.
        http_status: u16,
        /// What did not parse.
        message: String,
    },
    /// The request could not be built (bad configuration or arguments); nothing was sent.
    #[error("ECS request not sent: {0}")]
    InvalidRequest(String),
}

impl Error {
    /// The ECS error code, for API errors.
    pub fn ecs_code(&self) -> Option<&str> {
        match self {
            Error::Api(e) => Some(&e.code),
            _ => None,
        }
    }

    /// ECS's request id, for API errors.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Error::Api(e) => Some(&e.request_id),
            _ => None,
        }
    }

    /// The HTTP status, when ECS answered.
    pub fn http_status(&self) -> Option<u16> {
        match self {
            Error::Api(e) => Some(e.http_status),
            Error::Decode { http_status, .. } => Some(*http_status),
            _ => None,
        }
    }

    /// The API error, if ECS answered with one.
    pub fn api(&self) -> Option<&EcsApiError> {
        match self {
            Error::Api(e) => Some(e),
            _ => None,
        }
    }

    /// Whether the addressed instance, disk or NIC does not exist. Delete callers treat this as
    /// success (the MCM contract: deleting a missing VM is OK).
    pub fn is_not_found(&self) -> bool {
        self.ecs_code()
            .is_some_and(|c| NOT_FOUND_CODES.contains(&c))
    }

    /// Whether ECS throttled the call (`Throttling`, `Throttling.User`, `Throttling.Api`, ...).
    pub fn is_throttling(&self) -> bool {
        self.ecs_code().is_some_and(|c| c.starts_with("Throttling"))
    }

    /// Whether a retry of the same call may succeed: throttling, 5xx, timeouts, connection errors and
    /// `IncorrectInstanceStatus*` (the instance is mid-transition).
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Api(e) => {
                e.http_status >= 500
                    || e.code.starts_with("Throttling")
                    || e.code.starts_with("IncorrectInstanceStatus")
            }
            Error::Timeout { .. } | Error::Transport { .. } => true,
            Error::Decode { http_status, .. } => *http_status >= 500,
            Error::DeadlineExceeded { .. } | Error::InvalidRequest(_) => false,
        }
    }

    /// How long ECS asked us to wait before retrying, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        self.api().and_then(|e| e.retry_after)
    }

    /// A short label for metrics: `ok` is never returned; ECS codes as they are, else the kind.
    pub(crate) fn metric_result(&self) -> String {
        match self {
            Error::Api(e) => e.code.clone(),
            Error::Timeout { .. } => "timeout".into(),
            Error::DeadlineExceeded { .. } => "deadline_exceeded".into(),
            Error::Transport { .. } => "transport".into(),
            Error::Decode { .. } => "decode".into(),
            Error::InvalidRequest(_) => "invalid_request".into(),
        }
    }
}

/// Parses ECS's throttling hint: headers `x-ratelimit-user-api` or `x-ratelimit-user` hold
/// `Key:Value` pairs separated by `,`, one of them `TimeLeft:<milliseconds>`.
pub fn parse_time_left(header_value: &str) -> Option<Duration> {
    header_value.split(',').find_map(|pair| {
        let (k, v) = pair.split_once(':')?;
        (k.trim() == "TimeLeft")
            .then(|| v.trim().parse::<u64>().ok())
            .flatten()
            .map(Duration::from_millis)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: &str, status: u16) -> Error {
        Error::Api(Box::new(EcsApiError {
            action: "RunInstances".into(),
            code: code.into(),
            message: "m".into(),
            request_id: "req-1".into(),
            recommend: None,
            http_status: status,
            retry_after: None,
        }))
    }

    #[test]
    fn retry_classes() {
        assert!(api("Throttling.User", 400).is_retryable());
        assert!(api("IncorrectInstanceStatus", 403).is_retryable());
        assert!(api("InternalError", 500).is_retryable());
        assert!(!api("OperationDenied.NoStock", 403).is_retryable());
        assert!(!api("SignatureDoesNotMatch", 400).is_retryable());
        assert!(
            Error::Timeout {
                action: "a".into(),
                after: Duration::from_secs(1)
            }
            .is_retryable()
        );
        assert!(!Error::DeadlineExceeded { action: "a".into() }.is_retryable());
    }

    #[test]
    fn time_left_parses_from_the_header_format() {
        assert_eq!(
            parse_time_left("Limit:100,Remain:0,TimeLeft:1200,Reset:1700000000"),
            Some(Duration::from_millis(1200))
        );
        assert_eq!(parse_time_left("Limit:100"), None);
        assert_eq!(parse_time_left("TimeLeft:x"), None);
    }
}
