//! The client's error, what ECS codes mean, and how they become machine codes.
//!
//! Nothing here ever holds the access key secret or the STS token: API errors carry only what ECS
//! answered (code, message, request id), transport errors have their URL stripped, and request
//! parameters (which may carry user data) are never copied into an error.

use std::time::Duration;

use domain::{Code, Status};

/// The 13 ECS codes that mean "no capacity or quota here; try another zone or later"
/// (MCM alicloud `pkg/alicloud/errors/codes.go`).
pub const RESOURCE_EXHAUSTED_CODES: [&str; 13] = [
    "QuotaExceed.DiskCapacity",
    "QuotaExceed.ElasticQuota",
    "OperationDenied.ZoneSystemCategoryNotMatch",
    "OperationDenied.CloudSSDNotSupported",
    "OperationDenied.ZoneNotAllowed",
    "OperationDenied.NoStock",
    "Zone.NotOnSale",
    "Zone.NotOpen",
    "InvalidVpcZone.NotSupported",
    "InvalidZoneId.NotSupportShareEncryptedImage",
    "InvalidResourceType.NotSupported",
    "InvalidInstanceType.ZoneNotSupported",
    "ResourceNotAvailable",
];

/// Codes that say the addressed resource does not exist.
const NOT_FOUND_CODES: [&str; 5] = [
    "InvalidInstanceId.NotFound",
    "Forbidden.InstanceNotFound",
    "InvalidDiskId.NotFound",
    "InvalidEniId.NotFound",
    "InvalidNetworkInterfaceId.NotFound",
];

/// `Invalid*.NotFound` codes that name a bad *input* (image, vSwitch, ...), not a missing target.
const BAD_REFERENCE_CODES: [&str; 8] = [
    "InvalidRegionId.NotFound",
    "InvalidRegionId.MalFormed",
    "InvalidImageId.NotFound",
    "InvalidVSwitchId.NotFound",
    "InvalidSecurityGroupId.NotFound",
    "InvalidKeyPair.NotFound",
    "InvalidKeyPairName.NotFound",
    "InvalidVpcId.NotFound",
];

/// The machine code an ECS error code implies (docs/design.md, “ECS errors to machine codes”: the
/// 13 ResourceExhausted codes of MCM's provider, and Berth's mapping of the rest).
///
/// Not-found codes map to [`Code::NotFound`]; a delete caller should treat them as success (see
/// [`Error::is_not_found`]). The table's deviations, on purpose:
/// - any `QuotaExceed.*` is ResourceExhausted (a quota is used up whatever its name);
/// - `IdempotentParameterMismatch` is AlreadyExists: a ClientToken was reused with other parameters,
///   i.e. "the thing to create exists with other content";
/// - an unknown code on a 5xx answer is Unavailable (ECS's fault, retry later), not Internal.
pub fn machine_code_for(ecs_code: &str, http_status: u16) -> Code {
    let c = ecs_code;
    if RESOURCE_EXHAUSTED_CODES.contains(&c) || c.starts_with("QuotaExceed.") {
        Code::ResourceExhausted
    } else if NOT_FOUND_CODES.contains(&c) {
        Code::NotFound
    } else if c.starts_with("Throttling")
        || c.starts_with("IncorrectInstanceStatus")
        || c == "ServiceUnavailable"
        || c == "InternalError"
        || c == "InvalidTimeStamp.Expired"
        || c == "SignatureNonceUsed"
    {
        Code::Unavailable
    } else if c.starts_with("InvalidAccessKeyId")
        || c.starts_with("InvalidSecurityToken")
        || c == "SignatureDoesNotMatch"
        || c == "IncompleteSignature"
    {
        Code::Unauthenticated
    } else if c.starts_with("Forbidden") || c == "ActionUnauthorized" {
        Code::PermissionDenied
    } else if c.starts_with("InvalidParameter")
        || c == "MissingParameter"
        || c.starts_with("MissingParameter.")
        || BAD_REFERENCE_CODES.contains(&c)
        || c.starts_with("InvalidUserData")
    {
        Code::InvalidArgument
    } else if c == "IdempotentParameterMismatch" {
        Code::AlreadyExists
    } else if http_status >= 500 {
        Code::Unavailable
    } else {
        Code::Internal
    }
}

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

    /// The machine code this error means (see [`machine_code_for`]).
    pub fn machine_code(&self) -> Code {
        match self {
            Error::Api(e) => machine_code_for(&e.code, e.http_status),
            Error::Timeout { .. } | Error::Transport { .. } => Code::Unavailable,
            Error::DeadlineExceeded { .. } => Code::DeadlineExceeded,
            Error::Decode { http_status, .. } if *http_status >= 500 => Code::Unavailable,
            Error::Decode { .. } => Code::Internal,
            Error::InvalidRequest(_) => Code::InvalidArgument,
        }
    }

    /// A [`Status`] with [`Error::machine_code`] and a message that keeps the ECS code and request
    /// id (and nothing secret).
    pub fn to_status(&self) -> Status {
        Status::new(self.machine_code(), self.to_string())
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

impl From<Error> for Status {
    fn from(e: Error) -> Self {
        e.to_status()
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
    fn the_13_capacity_codes_are_resource_exhausted() {
        for c in RESOURCE_EXHAUSTED_CODES {
            assert_eq!(machine_code_for(c, 403), Code::ResourceExhausted, "{c}");
        }
        assert_eq!(
            machine_code_for("QuotaExceed.Whatever", 400),
            Code::ResourceExhausted
        );
    }

    #[test]
    fn mapping_table() {
        let table = [
            ("Throttling", 400, Code::Unavailable),
            ("Throttling.User", 400, Code::Unavailable),
            ("Throttling.Api", 400, Code::Unavailable),
            ("ServiceUnavailable", 503, Code::Unavailable),
            ("InternalError", 500, Code::Unavailable),
            ("IncorrectInstanceStatus", 403, Code::Unavailable),
            (
                "IncorrectInstanceStatus.Initializing",
                403,
                Code::Unavailable,
            ),
            ("InvalidTimeStamp.Expired", 400, Code::Unavailable),
            ("SignatureNonceUsed", 400, Code::Unavailable),
            ("InvalidInstanceId.NotFound", 404, Code::NotFound),
            ("Forbidden.InstanceNotFound", 404, Code::NotFound),
            ("InvalidAccessKeyId.NotFound", 404, Code::Unauthenticated),
            ("InvalidAccessKeyId.Inactive", 400, Code::Unauthenticated),
            ("SignatureDoesNotMatch", 400, Code::Unauthenticated),
            ("IncompleteSignature", 400, Code::Unauthenticated),
            ("Forbidden.RAM", 403, Code::PermissionDenied),
            ("Forbidden.RiskControl", 403, Code::PermissionDenied),
            ("ActionUnauthorized", 403, Code::PermissionDenied),
            ("InvalidParameter", 400, Code::InvalidArgument),
            ("InvalidParameter.Foo", 400, Code::InvalidArgument),
            ("MissingParameter", 400, Code::InvalidArgument),
            ("InvalidImageId.NotFound", 404, Code::InvalidArgument),
            ("InvalidVSwitchId.NotFound", 404, Code::InvalidArgument),
            (
                "InvalidSecurityGroupId.NotFound",
                404,
                Code::InvalidArgument,
            ),
            ("InvalidKeyPair.NotFound", 404, Code::InvalidArgument),
            ("IdempotentParameterMismatch", 400, Code::AlreadyExists),
            ("InsufficientBalance", 400, Code::Internal),
            ("SomethingNew", 400, Code::Internal),
            ("SomethingNew", 502, Code::Unavailable),
        ];
        for (code, status, want) in table {
            assert_eq!(machine_code_for(code, status), want, "{code}");
        }
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
    fn status_keeps_code_and_request_id() {
        let s = api("OperationDenied.NoStock", 403).to_status();
        assert_eq!(s.code, Code::ResourceExhausted);
        assert!(s.message.contains("OperationDenied.NoStock"));
        assert!(s.message.contains("req-1"));
        assert!(api("InvalidInstanceId.NotFound", 404).is_not_found());
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
