//! What an ECS failure means to MCM: the machine code of an ECS error code ([`machine_code_for`],
//! docs/design.md, “ECS errors to machine codes”), of any client error ([`MachineCode`]), and the
//! status the driver answers with ([`ecs_status`]).
//!
//! Apart from the ECS client crate because that crate describes ECS only: which of ECS's codes a
//! caller should see as ResourceExhausted, AlreadyExists or Unavailable is this driver's contract
//! with MCM, decided here, where the answers are made.

use alicloud::Error;
use alicloud::error::NOT_FOUND_CODES;
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
/// Not-found codes ([`NOT_FOUND_CODES`]) map to [`Code::NotFound`]; a delete caller should treat
/// them as success (see [`Error::is_not_found`]). The table's deviations, on purpose:
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

/// An ECS client error as MCM's machine code and status.
pub trait MachineCode {
    /// The machine code this error means (see [`machine_code_for`]).
    fn machine_code(&self) -> Code;

    /// A [`Status`] with [`MachineCode::machine_code`] and a message that keeps the ECS code and
    /// request id (and nothing secret).
    fn to_status(&self) -> Status;
}

impl MachineCode for Error {
    fn machine_code(&self) -> Code {
        match self {
            Error::Api(e) => machine_code_for(&e.code, e.http_status),
            Error::Timeout { .. } | Error::Transport { .. } => Code::Unavailable,
            Error::DeadlineExceeded { .. } => Code::DeadlineExceeded,
            Error::Decode { http_status, .. } if *http_status >= 500 => Code::Unavailable,
            Error::Decode { .. } => Code::Internal,
            Error::InvalidRequest(_) => Code::InvalidArgument,
        }
    }

    fn to_status(&self) -> Status {
        Status::new(self.machine_code(), self.to_string())
    }
}

/// An ECS failure as the driver answers it. When ECS refuses the credentials, the answer says whose
/// they are: a 401 from the driver otherwise reads like the caller's own Berth login failing.
pub(super) fn ecs_status(e: &Error) -> Status {
    let status = e.to_status();
    // The one request field ECS names by its own words: said as the field the caller wrote.
    if e.ecs_code()
        .is_some_and(|c| c.starts_with("InvalidRegionId"))
    {
        return Status::new(
            Code::InvalidArgument,
            format!(
                "machineClass.providerSpec.region: ECS has no such region ({})",
                status.message
            ),
        );
    }
    if status.code != Code::Unauthenticated {
        return status;
    }
    Status::new(
        Code::Unauthenticated,
        format!(
            "{}: ECS refused the cloud access key in the request's secret (secret.data[alicloudAccessKeyID] and [alicloudAccessKeySecret]), {}; put in the key the ECS endpoint accepts (under `berth up`, the emulator key it prints when it starts)",
            status.message,
            domain::machine::CLOUD_KEY_REFUSED
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use alicloud::EcsApiError;

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
    fn status_keeps_code_and_request_id() {
        let s = api("OperationDenied.NoStock", 403).to_status();
        assert_eq!(s.code, Code::ResourceExhausted);
        assert!(s.message.contains("OperationDenied.NoStock"));
        assert!(s.message.contains("req-1"));
        assert!(api("InvalidInstanceId.NotFound", 404).is_not_found());
    }

    #[test]
    fn a_replayed_nonce_is_retryable() {
        // Both map to a retryable machine code: a new nonce and time fix them.
        assert_eq!(
            machine_code_for("SignatureNonceUsed", 400),
            Code::Unavailable
        );
    }
}
