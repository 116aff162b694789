//! Request authentication: V1 (`Signature` parameter, HMAC-SHA1) and V3 (`Authorization:
//! ACS3-HMAC-SHA256 ...`), timestamp skew and nonce replay.
//!
//! Written independently of the `alicloud` client and tested against Alibaba's published examples,
//! so a signing bug cannot hide by being shared between the two sides. The lines this repeats from
//! `alicloud`'s `sign` module are repeated on purpose: do not merge the two.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use axum::http::{HeaderMap, Method};
use base64::Engine as _;
use chrono::{DateTime, NaiveDateTime, Utc};
use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::{Digest, Sha256};

use crate::config::AccessKey;
use crate::wire::{EcsError, canonical_query, encode};

/// Who called and what they asked for, once the signature checked out.
#[derive(Debug)]
pub(crate) struct Authenticated {
    pub(crate) action: String,
    pub(crate) version: String,
    pub(crate) format: Option<String>,
    pub(crate) params: BTreeMap<String, String>,
}

/// The parts of a request authentication looks at.
pub(crate) struct Incoming<'a> {
    pub(crate) method: &'a Method,
    pub(crate) path: &'a str,
    pub(crate) headers: &'a HeaderMap,
    /// Query parameters only (V3 signs these).
    pub(crate) query: BTreeMap<String, String>,
    /// Query and form parameters (V1 signs all of them).
    pub(crate) all: BTreeMap<String, String>,
    pub(crate) body: &'a [u8],
}

/// How many nonces a [`NonceStore`] holds at most. Each entry is a fixed 24 bytes (a timestamp and
/// a 128-bit digest, never the caller's string), so the store's memory is bounded whatever callers
/// send: about 2 MB with its indexes when full.
pub(crate) const MAX_NONCES: usize = 32 * 1024;

/// Nonces seen within the allowed clock skew, so a replayed request is refused.
///
/// A request is accepted only while its own timestamp is within the skew of now, so a nonce needs
/// keeping only until its request's timestamp leaves that window: after that the timestamp check
/// alone refuses a replay. Entries are ordered by that timestamp and dropped as it leaves.
///
/// The store never grows past [`MAX_NONCES`]: when full, the entry with the oldest timestamp is
/// dropped and that timestamp becomes a floor; a request stamped at or before the floor is refused
/// as expired. A replay of a dropped nonce is therefore still refused, and the only cost of a flood
/// is a narrower window for clients whose clocks lag (a client stamping "now" is refused only if
/// more than [`MAX_NONCES`] requests arrived within the same second).
#[derive(Debug)]
pub(crate) struct NonceStore {
    capacity: usize,
    seen: HashSet<u128>,
    by_time: BTreeSet<(i64, u128)>,
    /// Requests stamped at or before this second are refused (see above).
    floor: Option<i64>,
}

impl Default for NonceStore {
    fn default() -> Self {
        NonceStore::with_capacity(MAX_NONCES)
    }
}

/// Why [`NonceStore::insert`] refused a nonce.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NonceRefusal {
    /// The nonce was used before within the window.
    Used,
    /// The request is stamped at or before the floor a full store raised.
    BelowFloor,
}

impl NonceStore {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        NonceStore {
            capacity: capacity.max(1),
            seen: HashSet::new(),
            by_time: BTreeSet::new(),
            floor: None,
        }
    }

    /// Records `nonce` of access key `key`, on a request stamped `stamped` (Unix seconds) and
    /// received at `now` (Unix seconds), for a skew window of `skew`. The caller has checked the
    /// stamp is within the window.
    pub(crate) fn insert(
        &mut self,
        key: &str,
        nonce: &str,
        stamped: i64,
        now: i64,
        skew: Duration,
    ) -> Result<(), NonceRefusal> {
        let oldest_kept = now.saturating_sub(i64::try_from(skew.as_secs()).unwrap_or(i64::MAX));
        while let Some(&(t, digest)) = self.by_time.first() {
            if t >= oldest_kept {
                break;
            }
            self.by_time.pop_first();
            self.seen.remove(&digest);
        }
        if self.floor.is_some_and(|f| stamped <= f) {
            return Err(NonceRefusal::BelowFloor);
        }
        let digest = nonce_digest(key, nonce);
        if !self.seen.insert(digest) {
            return Err(NonceRefusal::Used);
        }
        self.by_time.insert((stamped, digest));
        while self.by_time.len() > self.capacity {
            let (t, old) = self.by_time.pop_first().expect("over capacity");
            self.seen.remove(&old);
            self.floor = Some(self.floor.map_or(t, |f| f.max(t)));
        }
        Ok(())
    }

    /// How many nonces are held.
    pub(crate) fn len(&self) -> usize {
        self.seen.len()
    }

    pub(crate) fn clear(&mut self) {
        self.seen.clear();
        self.by_time.clear();
        self.floor = None;
    }
}

/// 128 bits of SHA-256 over the key id and the nonce, length-prefixed: a fixed size whatever the
/// nonce's length, and no collision short of SHA-256's.
fn nonce_digest(key: &str, nonce: &str) -> u128 {
    let mut h = Sha256::new();
    h.update((key.len() as u64).to_le_bytes());
    h.update(key.as_bytes());
    h.update(nonce.as_bytes());
    u128::from_le_bytes(h.finalize()[..16].try_into().expect("32 bytes"))
}

/// The headers a V3 request must sign: all of ECS's common ones, or one could be swapped in transit.
pub(crate) const REQUIRED_SIGNED_HEADERS: [&str; 6] = [
    "host",
    "x-acs-action",
    "x-acs-content-sha256",
    "x-acs-date",
    "x-acs-signature-nonce",
    "x-acs-version",
];

/// V1's signature over `params` (all but `Signature`).
pub(crate) fn v1_signature(
    method: &str,
    params: &BTreeMap<String, String>,
    secret: &str,
) -> String {
    let string_to_sign = format!(
        "{}&{}&{}",
        method,
        encode("/"),
        encode(&canonical_query(params))
    );
    let mut mac = Hmac::<Sha1>::new_from_slice(format!("{secret}&").as_bytes()).expect("any key");
    mac.update(string_to_sign.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// V3's hex signature for a canonical request.
pub(crate) fn v3_signature(canonical_request: &str, secret: &str) -> String {
    let string_to_sign = format!(
        "ACS3-HMAC-SHA256\n{}",
        hex::encode(Sha256::digest(canonical_request.as_bytes()))
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key");
    mac.update(string_to_sign.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// V3's canonical request, built from exactly the headers `signed_headers` names, in its order.
pub(crate) fn v3_canonical_request(
    method: &str,
    path: &str,
    query: &BTreeMap<String, String>,
    headers: &HeaderMap,
    signed_headers: &[&str],
    payload_hash: &str,
) -> Result<String, EcsError> {
    let mut canonical_headers = String::new();
    for name in signed_headers {
        let values: Vec<&str> = headers
            .get_all(*name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::trim)
            .collect();
        if values.is_empty() {
            return Err(EcsError::new(
                400,
                "IncompleteSignature",
                format!("The signed header \"{name}\" is not present in the request."),
            ));
        }
        canonical_headers.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    Ok(format!(
        "{method}\n{path}\n{}\n{canonical_headers}\n{}\n{payload_hash}",
        canonical_query(query),
        signed_headers.join(";")
    ))
}

fn signature_mismatch() -> EcsError {
    EcsError::new(
        400,
        "SignatureDoesNotMatch",
        "Specified signature is not matched with our calculation.",
    )
}

/// Equal-time comparison, so response timing does not leak how much of a signature was right.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn parse_timestamp(s: &str) -> Result<DateTime<Utc>, EcsError> {
    NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%SZ")
        .map(|t| t.and_utc())
        .or_else(|_| DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc)))
        .map_err(|_| {
            EcsError::new(
                400,
                "InvalidTimeStamp.Format",
                "Specified time stamp or date value is not well formatted.",
            )
        })
}

fn check_skew(ts: DateTime<Utc>, now: DateTime<Utc>, max_skew: Duration) -> Result<(), EcsError> {
    let skew = (now - ts).num_seconds().unsigned_abs();
    if skew > max_skew.as_secs() {
        return Err(expired());
    }
    Ok(())
}

fn expired() -> EcsError {
    EcsError::new(
        400,
        "InvalidTimeStamp.Expired",
        "Specified time stamp or date value is expired.",
    )
}

fn find_key<'k>(keys: &'k [AccessKey], id: &str) -> Result<&'k AccessKey, EcsError> {
    keys.iter().find(|k| k.id == id).ok_or_else(|| {
        EcsError::new(
            404,
            "InvalidAccessKeyId.NotFound",
            "Specified access key is not found.",
        )
    })
}

fn check_token(key: &AccessKey, sent: Option<&str>) -> Result<(), EcsError> {
    match (&key.security_token, sent) {
        (None, _) => Ok(()),
        (Some(want), Some(got)) if same(want, got) => Ok(()),
        (Some(_), None) => Err(EcsError::new(
            400,
            "InvalidSecurityToken.Expired",
            "Specified SecurityToken is missing or expired.",
        )),
        (Some(_), Some(_)) => Err(EcsError::new(
            400,
            "InvalidSecurityToken.Mismatch",
            "Specified SecurityToken mismatch with the AccessKey.",
        )),
    }
}

/// Checks the request's signature, timestamp and nonce; returns the action and its parameters.
pub(crate) fn authenticate(
    req: Incoming<'_>,
    keys: &[AccessKey],
    max_skew: Duration,
    nonces: &mut NonceStore,
) -> Result<Authenticated, EcsError> {
    let authorization = req
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match authorization {
        Some(a) if a.starts_with("ACS3-") => authenticate_v3(req, a, keys, max_skew, nonces),
        _ => authenticate_v1(req, keys, max_skew, nonces),
    }
}

/// What both signature versions check once the signature holds: the security token, the clock
/// skew, and that the nonce is new for this key (kept while the request's timestamp would pass, so
/// a replay is refused for as long as it could be accepted).
fn check_fresh(
    key: &AccessKey,
    token: Option<&str>,
    timestamp: &str,
    nonce: &str,
    max_skew: Duration,
    nonces: &mut NonceStore,
) -> Result<(), EcsError> {
    check_token(key, token)?;
    let stamped = parse_timestamp(timestamp)?;
    let now = Utc::now();
    check_skew(stamped, now, max_skew)?;
    nonces
        .insert(
            &key.id,
            nonce,
            stamped.timestamp(),
            now.timestamp(),
            max_skew,
        )
        .map_err(|refusal| match refusal {
            NonceRefusal::Used => EcsError::new(
                400,
                "SignatureNonceUsed",
                "Specified signature nonce was used already.",
            ),
            NonceRefusal::BelowFloor => expired(),
        })
}

fn authenticate_v1(
    req: Incoming<'_>,
    keys: &[AccessKey],
    max_skew: Duration,
    nonces: &mut NonceStore,
) -> Result<Authenticated, EcsError> {
    let mut params = req.all;
    let Some(signature) = params.remove("Signature") else {
        return Err(EcsError::new(
            400,
            "IncompleteSignature",
            "The request signature does not conform to Aliyun standards (no Signature or Authorization).",
        ));
    };
    let get = |name: &str| {
        params
            .get(name)
            .cloned()
            .ok_or_else(|| EcsError::missing(name))
    };
    let key_id = get("AccessKeyId")?;
    let method = get("SignatureMethod")?;
    if method != "HMAC-SHA1" {
        return Err(EcsError::new(
            400,
            "InvalidSignatureMethod",
            "Specified signature method is not supported.",
        ));
    }
    if get("SignatureVersion")? != "1.0" {
        return Err(EcsError::invalid("SignatureVersion", "must be 1.0"));
    }
    let nonce = get("SignatureNonce")?;
    // Alibaba's own example spells it `TimeStamp`.
    let timestamp = params
        .get("Timestamp")
        .or_else(|| params.get("TimeStamp"))
        .cloned()
        .ok_or_else(|| EcsError::missing("Timestamp"))?;
    let action = get("Action")?;
    let version = get("Version")?;
    let key = find_key(keys, &key_id)?;
    let expected = v1_signature(req.method.as_str(), &params, &key.secret);
    if !same(&expected, &signature) {
        return Err(signature_mismatch());
    }
    let token = params.get("SecurityToken").map(String::as_str);
    check_fresh(key, token, &timestamp, &nonce, max_skew, nonces)?;
    let format = params.get("Format").cloned();
    Ok(Authenticated {
        action,
        version,
        format,
        params,
    })
}

fn authenticate_v3(
    req: Incoming<'_>,
    authorization: &str,
    keys: &[AccessKey],
    max_skew: Duration,
    nonces: &mut NonceStore,
) -> Result<Authenticated, EcsError> {
    let malformed = || {
        EcsError::new(
            400,
            "IncompleteSignature",
            "The Authorization header is not of the form ACS3-HMAC-SHA256 Credential=...,SignedHeaders=...,Signature=...",
        )
    };
    let (algorithm, rest) = authorization.split_once(' ').ok_or_else(malformed)?;
    if algorithm != "ACS3-HMAC-SHA256" {
        return Err(EcsError::new(
            400,
            "InvalidSignatureMethod",
            "Specified signature method is not supported.",
        ));
    }
    let mut credential = None;
    let mut signed = None;
    let mut signature = None;
    for part in rest.split(',') {
        match part.trim().split_once('=') {
            Some(("Credential", v)) => credential = Some(v),
            Some(("SignedHeaders", v)) => signed = Some(v),
            Some(("Signature", v)) => signature = Some(v),
            _ => return Err(malformed()),
        }
    }
    let (Some(key_id), Some(signed), Some(signature)) = (credential, signed, signature) else {
        return Err(malformed());
    };
    let signed_headers: Vec<&str> = signed.split(';').filter(|h| !h.is_empty()).collect();
    // Every common header must be covered by the signature, or it could be swapped in transit.
    for required in REQUIRED_SIGNED_HEADERS {
        if !signed_headers.contains(&required) {
            return Err(EcsError::new(
                400,
                "IncompleteSignature",
                format!("The header \"{required}\" must be signed."),
            ));
        }
    }
    let header = |name: &str| {
        req.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_owned())
            .ok_or_else(|| EcsError::missing(name))
    };
    let action = header("x-acs-action")?;
    let version = header("x-acs-version")?;
    let date = header("x-acs-date")?;
    let nonce = header("x-acs-signature-nonce")?;
    let payload_hash = header("x-acs-content-sha256")?;
    if !same(&payload_hash, &hex::encode(Sha256::digest(req.body))) {
        return Err(EcsError::new(
            400,
            "SignatureDoesNotMatch",
            "x-acs-content-sha256 does not match the request body.",
        ));
    }
    let key = find_key(keys, key_id)?;
    let canonical = v3_canonical_request(
        req.method.as_str(),
        req.path,
        &req.query,
        req.headers,
        &signed_headers,
        &payload_hash,
    )?;
    if !same(&v3_signature(&canonical, &key.secret), signature) {
        return Err(signature_mismatch());
    }
    let token = req
        .headers
        .get("x-acs-security-token")
        .and_then(|v| v.to_str().ok());
    check_fresh(key, token, &date, &nonce, max_skew, nonces)?;
    Ok(Authenticated {
        action,
        version,
        format: None,
        params: req.all,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn v1_matches_the_published_example() {
        let params = map(&[
            ("AccessKeyId", "testid"),
            ("Action", "DescribeRegions"),
            ("Format", "XML"),
            ("SignatureMethod", "HMAC-SHA1"),
            ("SignatureNonce", "3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf"),
            ("SignatureVersion", "1.0"),
            ("TimeStamp", "2016-02-23T12:46:24Z"),
            ("Version", "2014-05-26"),
        ]);
        assert_eq!(
            v1_signature("GET", &params, "testsecret"),
            "CT9X0VtwR86fNWSnsc6v8YGOjuE="
        );
    }

    /// Alibaba's published V3 example (v3-request-structure-and-signature), checked through the
    /// verifier's own canonicalisation of real request headers.
    #[test]
    fn v3_matches_the_published_example() {
        let mut headers = HeaderMap::new();
        for (k, v) in [
            ("host", "ecs.cn-shanghai.aliyuncs.com"),
            ("x-acs-action", "RunInstances"),
            ("x-acs-version", "2014-05-26"),
            ("x-acs-date", "2023-10-26T10:22:32Z"),
            ("x-acs-signature-nonce", "3156853299f313e23d1673dc12e1703d"),
            (
                "x-acs-content-sha256",
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            ),
            ("accept", "application/json"),
        ] {
            headers.insert(axum::http::HeaderName::from_static(k), v.parse().unwrap());
        }
        let query = map(&[
            (
                "ImageId",
                "win2019_1809_x64_dtc_zh-cn_40G_alibase_20230811.vhd",
            ),
            ("RegionId", "cn-shanghai"),
        ]);
        let signed = REQUIRED_SIGNED_HEADERS;
        let canonical = v3_canonical_request(
            "POST",
            "/",
            &query,
            &headers,
            &signed,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        )
        .unwrap();
        assert_eq!(
            hex::encode(Sha256::digest(canonical.as_bytes())),
            "7ea06492da5221eba5297e897ce16e55f964061054b7695beedaac1145b1e259"
        );
        assert_eq!(
            v3_signature(&canonical, "YourAccessKeySecret"),
            "06563a9e1b43f5dfe96b81484da74bceab24a1d853912eee15083a6f0f3283c0"
        );
    }

    const SKEW: Duration = Duration::from_secs(900);

    #[test]
    fn nonces_are_single_use_per_key_and_forgotten_once_their_stamp_leaves_the_window() {
        let mut n = NonceStore::default();
        let t0 = 1_700_000_000;
        assert_eq!(n.insert("k", "a", t0, t0, SKEW), Ok(()));
        assert_eq!(
            n.insert("k", "a", t0, t0 + 1, SKEW),
            Err(NonceRefusal::Used)
        );
        // Another key may use the same nonce.
        assert_eq!(n.insert("k2", "a", t0, t0 + 1, SKEW), Ok(()));
        // Still refused at the window's last second (the timestamp check would pass)...
        assert_eq!(
            n.insert("k", "a", t0, t0 + 900, SKEW),
            Err(NonceRefusal::Used)
        );
        // ...and forgotten after it, when the timestamp check refuses a replay on its own.
        assert_eq!(n.insert("k", "b", t0 + 901, t0 + 901, SKEW), Ok(()));
        assert_eq!(n.len(), 1);
    }

    #[test]
    fn a_nonce_stamped_in_the_future_is_kept_until_its_stamp_leaves_the_window() {
        let mut n = NonceStore::default();
        let t0 = 1_700_000_000;
        assert_eq!(n.insert("k", "a", t0 + 900, t0, SKEW), Ok(()));
        assert_eq!(
            n.insert("k", "a", t0 + 900, t0 + 1700, SKEW),
            Err(NonceRefusal::Used)
        );
    }

    #[test]
    fn the_store_never_holds_more_than_its_capacity_and_still_refuses_dropped_replays() {
        let mut n = NonceStore::with_capacity(100);
        let t0 = 1_700_000_000;
        // 10,000 requests in 100 seconds, every one inside the window.
        for i in 0..10_000i64 {
            let stamped = t0 + i / 100;
            assert_eq!(
                n.insert("k", &format!("n{i}"), stamped, stamped, SKEW),
                Ok(()),
                "request {i} stamped now is accepted"
            );
            assert!(n.len() <= 100);
            assert!(n.by_time.len() <= 100);
        }
        // The first nonce was dropped to make room; replaying it is still refused.
        assert_eq!(
            n.insert("k", "n0", t0, t0 + 100, SKEW),
            Err(NonceRefusal::BelowFloor)
        );
        // A long nonce costs no more than a short one.
        let long = "x".repeat(1 << 20);
        assert_eq!(n.insert("k", &long, t0 + 100, t0 + 100, SKEW), Ok(()));
        assert_eq!(n.len(), 100);
    }
}
