//! [`Problem`]: the body of every error answer on the wire (`application/problem+json`, RFC 9457).
//!
//! Defined here rather than beside the services' error type because both sides of a call speak it:
//! services answer it (service-kit's `ApiError` renders one) and the typed client decodes it, and a
//! client must not link a web server to read an error.

use serde::{Deserialize, Serialize};

/// The media type of every error answer.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The problem+json body: `{type, title, status, detail, code, requestId}`, plus `machineCodesError`
/// where the machine driver asks for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// Always `about:blank`: the code says what kind of problem this is.
    #[serde(rename = "type", default = "about_blank")]
    pub kind: String,
    /// The code's name (`NotFound`).
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What happened.
    #[serde(default)]
    pub detail: String,
    /// The machine code (0–17), the source of truth.
    pub code: u32,
    /// The request's id, to find it in the logs.
    #[serde(default)]
    pub request_id: String,
    /// The MCM status string (machine-driver answers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_codes_error: Option<String>,
}

/// The `type` of every problem Berth answers.
pub fn about_blank() -> String {
    "about:blank".into()
}

/// What a service answers (401) to a call without the internal credential: a client that sees it was
/// pointed at a service's port rather than the gateway's, and can say so.
pub const INTERNAL_CREDENTIAL_REQUIRED: &str =
    "this service requires the internal credential; call it through the gateway";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_a_minimal_problem_with_defaults() {
        let p: Problem =
            serde_json::from_str(r#"{"title":"NotFound","status":404,"code":5}"#).unwrap();
        assert_eq!(p.kind, "about:blank");
        assert_eq!(p.detail, "");
        assert_eq!(p.request_id, "");
        let text = serde_json::to_string(&p).unwrap();
        assert!(text.contains(r#""type":"about:blank""#), "{text}");
        assert!(text.contains(r#""requestId":"""#), "{text}");
        assert!(!text.contains("machineCodesError"), "{text}");
    }
}
