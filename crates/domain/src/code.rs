//! Machine codes and the status error whose string form MCM parses.
//!
//! The numbering is gRPC's, plus MCM's own `Uninitialized = 17`. The string form of a [`Status`] is a
//! wire contract (MCM's `machinecodes/status` says "one MUST never change the message text"), so
//! [`Status::to_mcm_string`] and [`Status::parse_mcm`] reproduce `Error()` and `FromError()` exactly.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A machine code. `code` in every problem+json answer is one of these, and the HTTP status follows
/// from it ([`Code::http_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum Code {
    /// Not an error.
    Ok = 0,
    /// The caller cancelled the operation (HTTP 499).
    Canceled = 1,
    /// An error with no better code (500).
    Unknown = 2,
    /// The request is malformed or breaks a rule (400).
    InvalidArgument = 3,
    /// The deadline passed before the operation finished (504).
    DeadlineExceeded = 4,
    /// The thing asked for does not exist (404).
    NotFound = 5,
    /// The thing to create exists with other content (409).
    AlreadyExists = 6,
    /// The caller may not do this (403).
    PermissionDenied = 7,
    /// A quota, capacity or rate limit is used up (429).
    ResourceExhausted = 8,
    /// The system is not in the state the operation needs (412).
    FailedPrecondition = 9,
    /// A concurrency conflict aborted the operation (409).
    Aborted = 10,
    /// More than one thing matched where one was expected (409).
    OutOfRange = 11,
    /// The operation is not implemented by this provider or backend (501).
    Unimplemented = 12,
    /// An invariant broke inside Berth (500).
    Internal = 13,
    /// A dependency is unavailable; retrying later may succeed (503).
    Unavailable = 14,
    /// Data was lost or corrupted (500).
    DataLoss = 15,
    /// The caller is not authenticated (401).
    Unauthenticated = 16,
    /// The VM exists but its initialisation was not performed (409); MCM-specific.
    Uninitialized = 17,
}

impl Code {
    /// Every code, in numeric order.
    pub const ALL: [Code; 18] = [
        Code::Ok,
        Code::Canceled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
        Code::Uninitialized,
    ];

    /// The name MCM prints and parses (`NotFound`, `ResourceExhausted`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::Canceled => "Canceled",
            Code::Unknown => "Unknown",
            Code::InvalidArgument => "InvalidArgument",
            Code::DeadlineExceeded => "DeadlineExceeded",
            Code::NotFound => "NotFound",
            Code::AlreadyExists => "AlreadyExists",
            Code::PermissionDenied => "PermissionDenied",
            Code::ResourceExhausted => "ResourceExhausted",
            Code::FailedPrecondition => "FailedPrecondition",
            Code::Aborted => "Aborted",
            Code::OutOfRange => "OutOfRange",
            Code::Unimplemented => "Unimplemented",
            Code::Internal => "Internal",
            Code::Unavailable => "Unavailable",
            Code::DataLoss => "DataLoss",
            Code::Unauthenticated => "Unauthenticated",
            Code::Uninitialized => "Uninitialized",
        }
    }

    /// MCM's `StringToCode`: unknown names become [`Code::Unknown`].
    pub fn from_name(name: &str) -> Code {
        Code::ALL
            .into_iter()
            .find(|c| c.name() == name)
            .unwrap_or(Code::Unknown)
    }

    /// The code with this number, if there is one.
    pub fn from_u32(n: u32) -> Option<Code> {
        Code::ALL.get(n as usize).copied()
    }

    /// The HTTP status this code is answered with (docs/design.md, “Error model”).
    pub fn http_status(self) -> u16 {
        match self {
            Code::Ok => 200,
            Code::Canceled => 499,
            Code::Unknown | Code::Internal | Code::DataLoss => 500,
            Code::InvalidArgument => 400,
            Code::DeadlineExceeded => 504,
            Code::NotFound => 404,
            Code::AlreadyExists | Code::Aborted | Code::OutOfRange | Code::Uninitialized => 409,
            Code::PermissionDenied => 403,
            Code::ResourceExhausted => 429,
            Code::FailedPrecondition => 412,
            Code::Unimplemented => 501,
            Code::Unavailable => 503,
            Code::Unauthenticated => 401,
        }
    }

    /// The code a bare HTTP status implies, for answers that carry no `code` (a proxy's 502, say).
    pub fn from_http_status(status: u16) -> Code {
        match status {
            200..=299 => Code::Ok,
            400 | 413 | 415 | 422 => Code::InvalidArgument,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::NotFound,
            409 => Code::Aborted,
            412 => Code::FailedPrecondition,
            429 => Code::ResourceExhausted,
            499 => Code::Canceled,
            501 => Code::Unimplemented,
            502 | 503 => Code::Unavailable,
            504 => Code::DeadlineExceeded,
            _ => Code::Unknown,
        }
    }

    /// Whether MCM retries this code quickly (ShortRetry): the transient ones.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            Code::Unknown | Code::DeadlineExceeded | Code::Aborted | Code::Unavailable
        )
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(*self as u32)
    }
}

impl<'de> Deserialize<'de> for Code {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u32::deserialize(d)?;
        Code::from_u32(n)
            .ok_or_else(|| serde::de::Error::custom(format!("machine code {n} is not in 0..=17")))
    }
}

/// A machine code with a message: the error every Berth operation returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("machine codes error: code = [{code}] message = [{message}]")]
pub struct Status {
    /// What kind of failure this is.
    pub code: Code,
    /// What happened, for a person; never contains a secret.
    pub message: String,
}

const MCM_PREFIX: &str = "machine codes error: ";

impl Status {
    /// A status with this code and message.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Status {
            code,
            message: message.into(),
        }
    }

    /// An [`Code::InvalidArgument`] naming the field and the rule it broke.
    pub fn invalid(field: &str, rule: impl fmt::Display) -> Self {
        Status::new(Code::InvalidArgument, format!("{field}: {rule}"))
    }

    /// An [`Code::InvalidArgument`] naming a query parameter and the rule it broke
    /// (`query parameter limit: must be a whole number`): said so, because a body may have a
    /// field of the same name, and every refusal of a query parameter reads alike whether the
    /// decoder or a handler made it.
    pub fn invalid_query(name: &str, rule: impl fmt::Display) -> Self {
        Status::invalid(&format!("query parameter {name}"), rule)
    }

    /// A [`Code::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Status::new(Code::NotFound, message)
    }

    /// A [`Code::Internal`].
    pub fn internal(message: impl Into<String>) -> Self {
        Status::new(Code::Internal, message)
    }

    /// A [`Code::Unavailable`].
    pub fn unavailable(message: impl Into<String>) -> Self {
        Status::new(Code::Unavailable, message)
    }

    /// MCM's `Error()`: `machine codes error: code = [<Name>] message = [<message>]`.
    pub fn to_mcm_string(&self) -> String {
        self.to_string()
    }

    /// MCM's `FromError()`: the first two top-level bracket groups are the code name and the message
    /// (brackets nest, so a message may itself contain `[..]`). Text that does not have that shape becomes
    /// `Unknown` with the whole text as message, and `false` says it did not parse.
    pub fn parse_mcm(text: &str) -> (Status, bool) {
        match parse_groups(text) {
            Some((name, message)) => (Status::new(Code::from_name(name), message), true),
            None => (Status::new(Code::Unknown, text), false),
        }
    }
}

/// The contents of the first two top-level `[...]` groups, if the text has the MCM prefix and both.
fn parse_groups(text: &str) -> Option<(&str, &str)> {
    if !text.starts_with(MCM_PREFIX) {
        return None;
    }
    let mut groups = Vec::with_capacity(2);
    let mut depth = 0usize;
    let mut start = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '[' => {
                if depth == 0 {
                    start = i + 1;
                }
                depth += 1;
            }
            ']' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    groups.push(&text[start..i]);
                    if groups.len() == 2 {
                        return Some((groups[0], groups[1]));
                    }
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_maps_to_the_designed_http_status() {
        let expected: [(Code, u16); 18] = [
            (Code::Ok, 200),
            (Code::Canceled, 499),
            (Code::Unknown, 500),
            (Code::InvalidArgument, 400),
            (Code::DeadlineExceeded, 504),
            (Code::NotFound, 404),
            (Code::AlreadyExists, 409),
            (Code::PermissionDenied, 403),
            (Code::ResourceExhausted, 429),
            (Code::FailedPrecondition, 412),
            (Code::Aborted, 409),
            (Code::OutOfRange, 409),
            (Code::Unimplemented, 501),
            (Code::Internal, 500),
            (Code::Unavailable, 503),
            (Code::DataLoss, 500),
            (Code::Unauthenticated, 401),
            (Code::Uninitialized, 409),
        ];
        for (i, (code, status)) in expected.into_iter().enumerate() {
            assert_eq!(code as usize, i, "numbering of {code}");
            assert_eq!(code.http_status(), status, "status of {code}");
            assert_eq!(Code::from_u32(i as u32), Some(code));
        }
        assert_eq!(Code::from_u32(18), None);
    }

    #[test]
    fn every_code_round_trips_through_the_mcm_string() {
        for code in Code::ALL {
            let status = Status::new(code, format!("message for {code}"));
            let text = status.to_mcm_string();
            assert_eq!(
                text,
                format!(
                    "machine codes error: code = [{}] message = [message for {}]",
                    code.name(),
                    code.name()
                )
            );
            let (parsed, ok) = Status::parse_mcm(&text);
            assert!(ok);
            assert_eq!(parsed, status);
        }
    }

    #[test]
    fn mcm_string_matches_the_go_format_exactly() {
        let s = Status::new(
            Code::NotFound,
            "VM instance not found backing this machine object \"m-1\"",
        );
        assert_eq!(
            s.to_string(),
            "machine codes error: code = [NotFound] message = [VM instance not found backing this machine object \"m-1\"]"
        );
    }

    #[test]
    fn brackets_inside_the_message_survive_the_round_trip() {
        let s = Status::new(
            Code::OutOfRange,
            "multiple VM instances found backing this machine object. IDs for all backing VMs - [i-1 i-2] [x]",
        );
        let (parsed, ok) = Status::parse_mcm(&s.to_mcm_string());
        assert!(ok);
        assert_eq!(parsed, s);
        let nested = Status::new(Code::Internal, "a [b [c] d] e");
        assert_eq!(Status::parse_mcm(&nested.to_mcm_string()).0, nested);
    }

    #[test]
    fn unparseable_text_becomes_unknown() {
        for text in [
            "connection refused",
            "machine codes error: code = [NotFound]",
            "machine codes error: code = [NotFound] message = [unterminated",
            "",
        ] {
            let (s, ok) = Status::parse_mcm(text);
            assert!(!ok, "{text:?}");
            assert_eq!(s.code, Code::Unknown);
            assert_eq!(s.message, text);
        }
    }

    #[test]
    fn unknown_code_names_become_unknown() {
        let (s, ok) = Status::parse_mcm("machine codes error: code = [Bogus] message = [x]");
        assert!(ok);
        assert_eq!(s.code, Code::Unknown);
        assert_eq!(Code::from_name("OK"), Code::Ok);
    }

    #[test]
    fn codes_serialise_as_numbers() {
        let s = Status::new(Code::Unavailable, "x");
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"code":14,"message":"x"}"#
        );
        assert!(serde_json::from_str::<Code>("18").is_err());
    }
}
