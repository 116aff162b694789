//! The ECS signature canonicaliser (`alicloud::sign`), held against the emulator's verifier
//! (`ecs_emulator::authenticate_request`), which was written independently.
//!
//! - `percent_encode` of any text uses only RFC 3986 unreserved characters and `%XX` (upper-case
//!   hex), keeps every unreserved character literal, and decodes back to the text.
//! - `canonical_query` of any parameters is `k=v` pairs joined by `&`, sorted by key, each side
//!   decoding back to the parameter.
//! - A request built the way the client builds it (V1: every parameter and `Signature` in a form
//!   body; V3: parameters in the query and `Authorization: ACS3-HMAC-SHA256 ...`), that is what
//!   `alicloud::sign_call` makes from arbitrary parameters, credentials, security token, action and
//!   host, is accepted by the emulator, which hands on exactly the parameters that were signed;
//!   the same request signed with another secret, or with one signed parameter changed in
//!   transit, is refused.
#![no_main]

use std::collections::BTreeMap;
use std::time::Duration;

use std::sync::atomic::{AtomicU64, Ordering};

use alicloud::{Credentials, Params, SignatureVersion, sign, sign_call};
use ecs_emulator::{AccessKey, authenticate_request};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use libfuzzer_sys::fuzz_target;
use percent_encoding::percent_decode_str;

/// The input, a line each: `v1` or `v3`; the access key id; its secret; the security token (none
/// when empty); the action; the host; `N=value`, the signed parameter to change in transit (none
/// when empty); then one `name=value` parameter a line. The whole input is also percent-encoded.
struct Input<'a> {
    text: &'a str,
    v3: bool,
    key_id: &'a str,
    secret: &'a str,
    token: Option<&'a str>,
    action: &'a str,
    host: &'a str,
    tamper: Option<(usize, &'a str)>,
    params: Vec<(&'a str, &'a str)>,
}

fn input(text: &str) -> Input<'_> {
    let mut lines = text.split('\n');
    let mut line = || lines.next().unwrap_or_default();
    let v3 = line().contains("v3");
    let (key_id, secret, token, action, host) = (line(), line(), line(), line(), line());
    let tamper = line()
        .split_once('=')
        .and_then(|(n, v)| Some((n.parse().ok()?, v)));
    let params = lines
        .map(|l| l.split_once('=').unwrap_or((l, "")))
        .collect();
    Input {
        text,
        v3,
        key_id,
        secret,
        token: (!token.is_empty()).then_some(token),
        action,
        host,
        tamper,
        params,
    }
}

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~')
}

fn decode(s: &str) -> String {
    percent_decode_str(s)
        .decode_utf8()
        .expect("an encoding decodes to UTF-8")
        .into_owned()
}

fn check_encoding(text: &str) {
    let encoded = sign::percent_encode(text);
    let b = encoded.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            assert!(i + 2 < b.len(), "{encoded:?}: a cut escape");
            let hex = &b[i + 1..i + 3];
            assert!(
                hex.iter()
                    .all(|h| h.is_ascii_digit() || (b'A'..=b'F').contains(h)),
                "{encoded:?}"
            );
            let byte = u8::from_str_radix(std::str::from_utf8(hex).unwrap(), 16).unwrap();
            assert!(
                !unreserved(byte),
                "{text:?}: unreserved byte {byte:#x} escaped"
            );
            i += 3;
        } else {
            assert!(unreserved(b[i]), "{encoded:?}: literal {:?}", b[i] as char);
            i += 1;
        }
    }
    assert_eq!(decode(&encoded), text);
}

/// The request `alicloud::sign_call` makes, as the emulator's HTTP front receives it; `None` when
/// a header cannot carry a value (the HTTP client would refuse to send it).
fn build(input: &Input<'_>, params: &Params, secret: &str) -> Option<(Uri, HeaderMap, Vec<u8>)> {
    let nonce = NONCES.fetch_add(1, Ordering::Relaxed).to_string();
    let timestamp = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let mut creds = Credentials::new(input.key_id, secret);
    if let Some(t) = input.token {
        creds = creds.with_security_token(t);
    }
    let version = if input.v3 {
        SignatureVersion::V3
    } else {
        SignatureVersion::V1
    };
    let call = sign_call(
        version,
        input.host,
        &creds,
        input.action,
        params,
        &nonce,
        &timestamp,
    );
    let mut headers = HeaderMap::new();
    for (k, v) in &call.headers {
        let name = HeaderName::from_bytes(k.as_bytes()).ok()?;
        let value = HeaderValue::from_str(v).ok()?;
        // A header is text (visible ASCII, spaces, tabs) to both sides; other bytes are not sent.
        value.to_str().ok()?;
        headers.append(name, value);
    }
    let uri = call
        .path_and_query
        .parse()
        .expect("an encoded query is a valid URI");
    Some((uri, headers, call.body.into_bytes()))
}

static NONCES: AtomicU64 = AtomicU64::new(0);

fn verify(
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    key: &AccessKey,
) -> Result<(String, BTreeMap<String, String>), (String, String)> {
    authenticate_request(
        &Method::POST,
        uri,
        headers,
        body,
        std::slice::from_ref(key),
        Duration::from_secs(900),
    )
}

fn pairs(encoded: &str) -> BTreeMap<String, String> {
    encoded
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').expect("every pair has '='");
            (decode(k), decode(v))
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let input = input(text);
    check_encoding(input.text);
    let mut params = Params::new();
    for (k, v) in &input.params {
        check_encoding(k);
        check_encoding(v);
        // Names come from the actions' fields, never empty.
        if !k.is_empty() {
            params.set(*k, v);
        }
    }
    let canonical = sign::canonical_query(params.as_map());
    let decoded: Vec<(String, String)> = if canonical.is_empty() {
        Vec::new()
    } else {
        canonical
            .split('&')
            .map(|p| {
                let (k, v) = p.split_once('=').expect("every pair has '='");
                (decode(k), decode(v))
            })
            .collect()
    };
    let expected: Vec<(String, String)> = params.as_map().clone().into_iter().collect();
    assert_eq!(decoded, expected, "canonical query {canonical:?}");
    assert!(sign::v1_string_to_sign("post", params.as_map()).starts_with("POST&%2F&"));

    // The emulator's key is the one the client's `Credentials` hold: they trim whitespace at the ends
    // of the id, secret and token (as MCM's secret reader does), and a token that trims to nothing is
    // no token; an operator's key has none at its ends. An empty id or secret is never configured.
    // ACS3's `Authorization` header has no escaping, so an id with a comma cannot be written in it
    // (no access key id has one).
    let (key_id, secret) = (input.key_id.trim(), input.secret.trim());
    let token = input.token.map(str::trim).filter(|t| !t.is_empty());
    if key_id.is_empty() || secret.is_empty() || (input.v3 && key_id.contains(',')) {
        return;
    }
    let key = AccessKey {
        id: key_id.to_owned(),
        secret: secret.to_owned(),
        security_token: token.map(str::to_owned),
    };
    let Some((uri, headers, body)) = build(&input, &params, input.secret) else {
        return;
    };
    let (action, got) = verify(&uri, &headers, &body, &key).unwrap_or_else(|(code, message)| {
        panic!(
            "the emulator refused what the client signed: {code}: {message}\n{uri}\n{headers:?}\n{:?}",
            String::from_utf8_lossy(&body)
        )
    });
    // What the emulator hands on is what was signed: V1 every form parameter but the signature
    // (the caller's, overridden by the common ones), V3 the query.
    let sent = if input.v3 {
        pairs(uri.query().unwrap_or(""))
    } else {
        let mut form = pairs(std::str::from_utf8(&body).expect("UTF-8"));
        form.remove("Signature");
        form
    };
    assert_eq!(got, sent);
    if input.v3 {
        assert_eq!(&got, params.as_map());
        assert_eq!(action, input.action.trim());
    } else {
        assert_eq!(action, input.action);
    }

    // Signed with another secret: refused.
    let other = format!("{}x", input.secret);
    if let Some((uri, headers, body)) = build(&input, &params, &other) {
        let e = verify(&uri, &headers, &body, &key).expect_err("signed with another secret");
        assert_eq!(e.0, "SignatureDoesNotMatch", "{e:?}");
    }

    // One signed parameter changed in transit: refused.
    if let Some((at, value)) = input.tamper
        && !sent.is_empty()
    {
        let name = sent.keys().nth(at % sent.len()).expect("in range").clone();
        if sent[&name] != value {
            let mut changed = sent.clone();
            changed.insert(name.clone(), value.to_owned());
            let (uri, body) = if input.v3 {
                let q = sign::canonical_query(&changed);
                (format!("/?{q}").parse().expect("valid"), body)
            } else {
                let mut form = pairs(std::str::from_utf8(&body).expect("UTF-8"));
                form.insert(name.clone(), value.to_owned());
                (uri, sign::canonical_query(&form).into_bytes())
            };
            if let Ok((_, got)) = verify(&uri, &headers, &body, &key) {
                panic!("{name:?} changed to {value:?} after signing, and accepted: {got:?}");
            }
        }
    }
});
