//! How one call is laid out and signed: V1 as a POST form, V3 with the parameters in the query and
//! the signature in `Authorization` ([`sign_call`], [`SignedCall`]).
//!
//! Apart because it is pure (no clock, no randomness, no I/O: the nonce and the timestamp are the
//! caller's), so the fuzz targets and the tests hold exactly what the client sends against the
//! emulator's verifier; `crate::sign` holds the algorithms, this file where each value goes.

use std::collections::BTreeMap;

use super::API_VERSION;
use crate::config::SignatureVersion;
use crate::credentials::Credentials;
use crate::params::Params;
use crate::sign;

/// One signed ECS call, as [`EcsClient`](super::EcsClient) sends it (always a POST).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedCall {
    /// What follows the endpoint: `/`, or `/?<canonical query>`.
    pub path_and_query: String,
    /// The headers, lower-case names, in the order they are sent.
    pub headers: Vec<(String, String)>,
    /// The body: V1's form, V3's empty one.
    pub body: String,
}

/// Signs one call: V1 as a POST form (every parameter, common ones and `Signature` included, in the
/// body, so long user data never hits URL limits); V3 as the SDKs send it, parameters in the query,
/// an empty body, and the signature in `Authorization`. Pure (the nonce and the timestamp,
/// `%Y-%m-%dT%H:%M:%SZ` in UTC, are the caller's), so the fuzz targets hold exactly what the client
/// sends against the emulator's independent verifier.
pub fn sign_call(
    version: SignatureVersion,
    host: &str,
    creds: &Credentials,
    action: &str,
    params: &Params,
    nonce: &str,
    timestamp: &str,
) -> SignedCall {
    match version {
        SignatureVersion::V1 => {
            let mut all: BTreeMap<String, String> = params.as_map().clone();
            // `Signature` is the protocol's: a parameter of that name would be signed, then
            // replaced by the signature, and the verifier (which signs all but it) would refuse.
            all.remove("Signature");
            for (k, v) in [
                ("Action", action),
                ("Version", API_VERSION),
                ("Format", "JSON"),
                ("AccessKeyId", creds.access_key_id()),
                ("SignatureMethod", "HMAC-SHA1"),
                ("SignatureVersion", "1.0"),
                ("SignatureNonce", nonce),
                ("Timestamp", timestamp),
            ] {
                all.insert(k.to_owned(), v.to_owned());
            }
            if let Some(token) = creds.security_token() {
                all.insert("SecurityToken".into(), token.expose().to_owned());
            }
            let signature = sign::v1_signature("POST", &all, creds.access_key_secret().expose());
            all.insert("Signature".into(), signature);
            SignedCall {
                path_and_query: "/".to_owned(),
                headers: vec![
                    ("host".to_owned(), host.to_owned()),
                    (
                        "content-type".to_owned(),
                        "application/x-www-form-urlencoded".to_owned(),
                    ),
                    ("accept".to_owned(), "application/json".to_owned()),
                ],
                body: sign::canonical_query(&all),
            }
        }
        SignatureVersion::V3 => {
            let payload_hash = sign::sha256_hex(b"");
            let mut headers: BTreeMap<String, String> = BTreeMap::new();
            headers.insert("host".into(), host.to_owned());
            headers.insert("x-acs-action".into(), action.to_owned());
            headers.insert("x-acs-version".into(), API_VERSION.into());
            headers.insert("x-acs-date".into(), timestamp.to_owned());
            headers.insert("x-acs-signature-nonce".into(), nonce.to_owned());
            headers.insert("x-acs-content-sha256".into(), payload_hash.clone());
            if let Some(token) = creds.security_token() {
                headers.insert("x-acs-security-token".into(), token.expose().to_owned());
            }
            let parts = sign::V3Parts {
                method: "POST",
                path: "/",
                query: params.as_map(),
                headers: &headers,
                payload_hash: &payload_hash,
            };
            let authorization = sign::v3_authorization(
                &parts,
                creds.access_key_id(),
                creds.access_key_secret().expose(),
            );
            let query = sign::canonical_query(params.as_map());
            let path_and_query = if query.is_empty() {
                "/".to_owned()
            } else {
                format!("/?{query}")
            };
            let mut sent = vec![
                ("accept".to_owned(), "application/json".to_owned()),
                ("authorization".to_owned(), authorization),
            ];
            sent.extend(headers);
            SignedCall {
                path_and_query,
                headers: sent,
                body: String::new(),
            }
        }
    }
}
