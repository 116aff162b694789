//! The ECS wire format, server side: parameter decoding, percent-encoding, and error answers.

use std::collections::BTreeMap;

use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// RFC 3986 unreserved characters stay literal; this is how Alibaba canonicalises for signing.
const RFC3986: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes as Alibaba signs (space → `%20`, `*` → `%2A`, `~` literal).
pub(crate) fn encode(s: &str) -> String {
    utf8_percent_encode(s, RFC3986).to_string()
}

/// Sorted `k=v` pairs, both percent-encoded, joined with `&`.
pub(crate) fn canonical_query(params: &BTreeMap<String, String>) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Decodes `a=b&c=d` (a query string or an `application/x-www-form-urlencoded` body), `+` being a
/// space. A repeated name keeps its last value, as the ECS gateway does.
pub(crate) fn parse_pairs(raw: &str, into: &mut BTreeMap<String, String>) {
    for pair in raw.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = decode(k);
        if !k.is_empty() {
            into.insert(k, decode(v));
        }
    }
}

fn decode(s: &str) -> String {
    let s = s.replace('+', " ");
    percent_decode_str(&s).decode_utf8_lossy().into_owned()
}

/// An ECS error answer: HTTP status plus `{RequestId, HostId, Code, Message, Recommend}`.
#[derive(Debug, Clone)]
pub(crate) struct EcsError {
    pub(crate) status: StatusCode,
    pub(crate) code: String,
    pub(crate) message: String,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
}

impl EcsError {
    pub(crate) fn new(status: u16, code: &str, message: impl Into<String>) -> Self {
        EcsError {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            code: code.to_owned(),
            message: message.into(),
            headers: Vec::new(),
        }
    }

    pub(crate) fn missing(name: &str) -> Self {
        EcsError::new(
            400,
            "MissingParameter",
            format!(
                "The input parameter \"{name}\" that is mandatory for processing this request is not supplied."
            ),
        )
    }

    pub(crate) fn invalid(name: &str, why: impl std::fmt::Display) -> Self {
        EcsError::new(
            400,
            &format!("InvalidParameter.{name}"),
            format!("The specified parameter \"{name}\" is not valid: {why}"),
        )
    }

    pub(crate) fn instance_not_found() -> Self {
        EcsError::new(
            404,
            "InvalidInstanceId.NotFound",
            "The specified InstanceId does not exist.",
        )
    }

    pub(crate) fn incorrect_status(code: &str) -> Self {
        EcsError::new(
            403,
            code,
            "The current status of the resource does not support this operation.",
        )
    }

    /// The JSON answer, with ECS's `Recommend` troubleshooting link.
    pub(crate) fn into_response(self, request_id: &str) -> Response {
        let body = serde_json::json!({
            "RequestId": request_id,
            "HostId": "ecs.aliyuncs.com",
            "Code": self.code,
            "Message": self.message,
            "Recommend": format!(
                "https://api.aliyun.com/troubleshoot?q={}&product=Ecs&requestId={request_id}",
                self.code
            ),
        });
        let mut resp = (self.status, axum::Json(body)).into_response();
        for (k, v) in self.headers {
            resp.headers_mut().insert(k, v);
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_decode_plus_and_percent() {
        let mut m = BTreeMap::new();
        parse_pairs("a=x+y&b=%2A%20~&c&Tag.1.Key=k%2F1&&d=%E6%B5%8B", &mut m);
        assert_eq!(m["a"], "x y");
        assert_eq!(m["b"], "* ~");
        assert_eq!(m["c"], "");
        assert_eq!(m["Tag.1.Key"], "k/1");
        assert_eq!(m["d"], "测");
    }

    #[test]
    fn encoding_is_rfc3986() {
        assert_eq!(encode("a b*~/é"), "a%20b%2A~%2F%C3%A9");
    }
}
