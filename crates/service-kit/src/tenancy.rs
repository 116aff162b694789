//! Who is calling, in which namespaces it may act, and the one audit line per mutating call.
//!
//! Objects (machines, volumes) belong to namespaces; a bearer token belongs to some namespaces or is
//! cluster-wide. Only the gateway sees bearer tokens: on every call it forwards it removes any copy of
//! the two headers below that the caller sent and sets them from the token it checked. A service
//! trusts them because every call to a service carries the internal credential (the stack refuses one
//! without it wherever one is configured). A call without [`NAMESPACES_HEADER`] comes from another
//! service, or from an operator calling a service directly with the internal credential, and is
//! cluster-wide.
//!
//! A handler takes [`Caller`] as an extractor, asks [`Caller::allows`] before it reveals or touches an
//! object, and names the object it acted on with [`Caller::audit_object`]; the middleware stack then
//! writes one `berth::audit` event per mutating call with the token's name, its namespaces, the route,
//! the object and the outcome. The token itself never reaches this module.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method};

use crate::error::ApiError;

/// The caller's token name, set by the gateway (never the token).
pub const TOKEN_NAME_HEADER: &str = "x-berth-token-name";
/// The caller's namespaces, set by the gateway: `*` (cluster-wide) or `a,b` (sorted, no spaces).
pub const NAMESPACES_HEADER: &str = "x-berth-namespaces";
/// How [`NAMESPACES_HEADER`] says "every namespace".
pub const ALL_NAMESPACES: &str = "*";
/// The namespace of an object whose caller named none (Kubernetes' default).
pub const DEFAULT_NAMESPACE: &str = "default";

/// The longest header value read here: a token may hold many namespaces, but never unboundedly many.
const MAX_HEADER_LEN: usize = 16 * 1024;

/// The namespaces a caller may see and act in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespaces {
    /// Every namespace (a cluster-wide token, or another service).
    All,
    /// These namespaces only.
    Only(BTreeSet<String>),
}

impl Namespaces {
    /// Whether an object in `namespace` is visible to the caller (the empty namespace is
    /// [`DEFAULT_NAMESPACE`]).
    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            Namespaces::All => true,
            Namespaces::Only(set) => set.contains(effective_namespace(namespace)),
        }
    }

    /// Whether these are every namespace.
    pub fn is_cluster_wide(&self) -> bool {
        matches!(self, Namespaces::All)
    }

    /// The header value that carries these namespaces.
    pub fn header_value(&self) -> String {
        self.to_string()
    }

    /// Reads [`NAMESPACES_HEADER`]'s value. An empty list is a token of no namespace: it sees nothing.
    pub fn parse(value: &str) -> Result<Self, String> {
        if value.len() > MAX_HEADER_LEN {
            return Err(format!("longer than {MAX_HEADER_LEN} bytes"));
        }
        let value = value.trim();
        if value == ALL_NAMESPACES {
            return Ok(Namespaces::All);
        }
        let mut set = BTreeSet::new();
        for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            domain::names::validate_dns1123_label("namespace", part).map_err(|e| e.message)?;
            set.insert(part.to_owned());
        }
        Ok(Namespaces::Only(set))
    }
}

impl fmt::Display for Namespaces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Namespaces::All => f.write_str(ALL_NAMESPACES),
            Namespaces::Only(set) => {
                let mut first = true;
                for ns in set {
                    if !first {
                        f.write_str(",")?;
                    }
                    first = false;
                    f.write_str(ns)?;
                }
                Ok(())
            }
        }
    }
}

/// The namespace an object is in, the empty one read as [`DEFAULT_NAMESPACE`].
pub fn effective_namespace(namespace: &str) -> &str {
    if namespace.is_empty() {
        DEFAULT_NAMESPACE
    } else {
        namespace
    }
}

/// Where a handler leaves the name of the object a mutating call acted on, for the audit line. The
/// stack puts one in each mutating request's extensions.
#[derive(Debug, Clone, Default)]
pub struct AuditSlot(Arc<Mutex<Option<String>>>);

impl AuditSlot {
    fn set(&self, object: String) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(object);
        }
    }

    fn take(&self) -> Option<String> {
        self.0.lock().ok().and_then(|mut slot| slot.take())
    }
}

/// The caller of one request: its token's name and namespaces.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The token's name, when the call came through the gateway.
    pub name: Option<String>,
    /// What it may see.
    pub namespaces: Namespaces,
    audit: Option<AuditSlot>,
}

impl Caller {
    /// A cluster-wide caller with no token name (another service, a test).
    pub fn cluster_wide() -> Self {
        Caller {
            name: None,
            namespaces: Namespaces::All,
            audit: None,
        }
    }

    /// The caller the gateway's headers describe; no [`NAMESPACES_HEADER`] is cluster-wide.
    pub fn from_headers(headers: &HeaderMap) -> Result<Self, ApiError> {
        let name = match headers.get(TOKEN_NAME_HEADER) {
            None => None,
            Some(v) => Some(
                v.to_str()
                    .ok()
                    .filter(|s| s.len() <= 256)
                    .ok_or_else(|| {
                        ApiError::from_code(domain::Code::InvalidArgument, format!(
                            "header {TOKEN_NAME_HEADER}: expected a token name of at most 256 visible ASCII characters"
                        ))
                    })?
                    .to_owned(),
            ),
        };
        let namespaces = match headers.get(NAMESPACES_HEADER) {
            None => Namespaces::All,
            Some(v) => {
                let text = v.to_str().map_err(|_| {
                    ApiError::from_code(domain::Code::InvalidArgument, format!(
                        "header {NAMESPACES_HEADER}: expected `*` or a comma-separated list of namespaces"
                    ))
                })?;
                Namespaces::parse(text).map_err(|rule| {
                    ApiError::from_code(
                        domain::Code::InvalidArgument,
                        format!("header {NAMESPACES_HEADER}: {rule}"),
                    )
                })?
            }
        };
        Ok(Caller {
            name,
            namespaces,
            audit: None,
        })
    }

    /// Whether an object in `namespace` is visible to this caller.
    pub fn allows(&self, namespace: &str) -> bool {
        self.namespaces.allows(namespace)
    }

    /// Names the object this call acts on (`namespace/name`, or a cluster-wide object's name), for the
    /// audit line the stack writes once the answer is ready.
    pub fn audit_object(&self, object: impl Into<String>) {
        if let Some(slot) = &self.audit {
            slot.set(object.into());
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let mut caller = Caller::from_headers(&parts.headers)?;
        caller.audit = parts.extensions.get::<AuditSlot>().cloned();
        Ok(caller)
    }
}

/// Whether a call with `method` to `route` changes something, and so is audited.
pub fn is_mutating(method: &Method, route: &str) -> bool {
    route.starts_with("/v1")
        && matches!(
            *method,
            Method::POST | Method::PUT | Method::PATCH | Method::DELETE
        )
        // The driver's reads are POSTs (MCM's contract carries the class and secret in a body).
        && !matches!(
            route,
            "/v1/machines:status" | "/v1/machines:list" | "/v1/volume-ids"
        )
}

/// A caller-given text as the audit line writes it: as it is when it holds only the characters of
/// names (so a log search finds `team-a/web-1` as written), otherwise quoted with every control
/// character and quote escaped, so it can neither end the line nor pass for another field.
fn audit_text(text: &str) -> std::borrow::Cow<'_, str> {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '/' | ':'));
    if plain {
        std::borrow::Cow::Borrowed(text)
    } else {
        std::borrow::Cow::Owned(format!("{text:?}"))
    }
}

/// The audit line of a mutating call refused before any service saw it (the gateway's scope check):
/// no service writes one for it, and an attempt to change what a token may not is what an audit is
/// read for. The object is `-`: the refusal comes before the body is read. Such refusals count
/// toward the token's rate, so these lines come no faster than its rate allows.
pub fn audit_refused(
    token: &str,
    namespaces: &Namespaces,
    method: &Method,
    route: &str,
    status: u16,
) {
    if !is_mutating(method, route) {
        return;
    }
    Audit {
        token: token.to_owned(),
        namespaces: namespaces.to_string(),
        slot: AuditSlot::default(),
    }
    .finish(method, route, status);
}

/// One mutating call's audit record, begun before the handler runs and written once after.
pub(crate) struct Audit {
    token: String,
    namespaces: String,
    slot: AuditSlot,
}

impl Audit {
    /// Starts the record of `request` if it is a mutating call, leaving the slot the handler names
    /// its object in.
    pub(crate) fn begin(request: &mut axum::extract::Request, route: &str) -> Option<Audit> {
        if !is_mutating(request.method(), route) {
            return None;
        }
        let headers = request.headers();
        let token = headers
            .get(TOKEN_NAME_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|s| s.len() <= 256)
            .unwrap_or("-")
            .to_owned();
        let namespaces = headers
            .get(NAMESPACES_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| Namespaces::parse(v).ok())
            .unwrap_or(Namespaces::All)
            .to_string();
        let slot = AuditSlot::default();
        request.extensions_mut().insert(slot.clone());
        Some(Audit {
            token,
            namespaces,
            slot,
        })
    }

    /// Writes the one line, with the answer's status as the outcome.
    pub(crate) fn finish(self, method: &Method, route: &str, status: u16) {
        let object = self.slot.take().unwrap_or_else(|| "-".to_owned());
        // The object's name comes from the caller's body, unchecked when the call was refused: it
        // is written quoted and escaped, so no name can end the line or forge another.
        tracing::info!(
            target: "berth::audit",
            token = %audit_text(&self.token),
            namespaces = %self.namespaces,
            route = %format_args!("{method} {route}"),
            object = %audit_text(&object),
            outcome = status,
            "audit"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_parse_and_print_sorted() {
        let ns = Namespaces::parse("team-b,team-a").unwrap();
        assert_eq!(ns.to_string(), "team-a,team-b");
        assert!(ns.allows("team-a"));
        assert!(!ns.allows("team-c"));
        assert!(!ns.allows(""), "the empty namespace is `default`");
        assert!(Namespaces::parse("default").unwrap().allows(""));
        assert_eq!(Namespaces::parse("*").unwrap(), Namespaces::All);
        assert!(Namespaces::All.allows("anything"));
        assert_eq!(
            Namespaces::parse("").unwrap(),
            Namespaces::Only(BTreeSet::new())
        );
        assert!(Namespaces::parse("Bad Name").is_err());
        assert!(Namespaces::parse(&"a,".repeat(10_000)).is_err());
    }

    #[test]
    fn a_call_without_the_header_is_cluster_wide_and_a_bad_header_is_refused() {
        let headers = HeaderMap::new();
        let caller = Caller::from_headers(&headers).unwrap();
        assert!(caller.namespaces.is_cluster_wide());
        assert!(caller.name.is_none());

        let mut headers = HeaderMap::new();
        headers.insert(NAMESPACES_HEADER, "a,b".parse().unwrap());
        headers.insert(TOKEN_NAME_HEADER, "ci".parse().unwrap());
        let caller = Caller::from_headers(&headers).unwrap();
        assert_eq!(caller.name.as_deref(), Some("ci"));
        assert!(caller.allows("b") && !caller.allows("c"));

        let mut headers = HeaderMap::new();
        headers.insert(NAMESPACES_HEADER, "a,UPPER".parse().unwrap());
        let refused = Caller::from_headers(&headers).unwrap_err();
        assert!(refused.to_string().contains(NAMESPACES_HEADER), "{refused}");
    }

    #[test]
    fn an_object_name_cannot_end_the_audit_line_or_forge_another() {
        let object = "team-a/x outcome=201\naudit token=admin namespaces=* \u{1b}[2K\r";
        let written = audit_text(object);
        assert!(!written.contains(['\n', '\r', '\u{1b}']), "{written}");
        assert!(
            written.starts_with('"') && written.ends_with('"'),
            "{written}"
        );
        assert_eq!(audit_text("team-a/web-1"), "team-a/web-1");
        assert_eq!(audit_text("-"), "-");
        assert_eq!(audit_text("a b"), "\"a b\"");
    }

    #[test]
    fn reads_are_not_audited_and_writes_are() {
        assert!(is_mutating(&Method::POST, "/v1/volumes"));
        assert!(is_mutating(
            &Method::DELETE,
            "/v1/volumes/{namespace}/{name}"
        ));
        assert!(is_mutating(&Method::POST, "/v1/machines:create"));
        assert!(!is_mutating(&Method::POST, "/v1/machines:status"));
        assert!(!is_mutating(&Method::GET, "/v1/volumes"));
        assert!(!is_mutating(&Method::POST, "/metrics"));
    }
}
