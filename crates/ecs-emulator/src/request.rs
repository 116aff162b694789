//! From a call's bytes to an authenticated action: parameter decoding ([`request_params`]) and
//! [`authenticate_request`], the whole check without an emulator.
//!
//! Apart from [`Emulator`](crate::Emulator) because the fuzz targets and property tests hold this
//! verifier against `alicloud`'s signer with no emulator, socket or state: what they run must be
//! the very decoding the emulator serves with, and nothing else.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::http::{HeaderMap, Method, Uri, header};

use crate::AccessKey;
use crate::auth::{self, Incoming, NonceStore};
use crate::wire::{self, EcsError};

/// Decoded request parameters, by name.
type ParamMap = BTreeMap<String, String>;

/// A call's query parameters, and its query and form parameters together, as ECS decodes them.
pub(crate) fn request_params(
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(ParamMap, ParamMap), EcsError> {
    let mut query = BTreeMap::new();
    wire::parse_pairs(uri.query().unwrap_or(""), &mut query);
    let mut all = query.clone();
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if is_form && !body.is_empty() {
        let text = std::str::from_utf8(body)
            .map_err(|_| EcsError::new(400, "InvalidParameter", "The form body is not UTF-8."))?;
        wire::parse_pairs(text, &mut all);
    }
    Ok((query, all))
}

/// Authenticates one call exactly as the emulator's HTTP front does (parameter decoding, V1 or V3
/// signature, security token, clock skew, nonce against a fresh nonce store), without an emulator,
/// a socket or any state: the action and every parameter of a call that passes, else the ECS error
/// code and message it is refused with.
///
/// For property tests and the fuzz targets (`fuzz/`), which hold this verifier, written
/// independently, against `alicloud`'s signer on arbitrary requests.
pub fn authenticate_request(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    keys: &[AccessKey],
    max_skew: Duration,
) -> Result<(String, ParamMap), (String, String)> {
    let refused = |e: EcsError| (e.code, e.message);
    let (query, all) = request_params(uri, headers, body).map_err(refused)?;
    let a = auth::authenticate(
        Incoming {
            method,
            path: uri.path(),
            headers,
            query,
            all,
            body,
        },
        keys,
        max_skew,
        &mut NonceStore::default(),
    )
    .map_err(refused)?;
    Ok((a.action, a.params))
}
