//! Request signing: RPC signature V1 (HMAC-SHA1) and V3 (`ACS3-HMAC-SHA256`).
//!
//! Both algorithms are pure functions of the request parts, so they are tested against Alibaba's
//! published examples rather than against our own emulator: a bug shared by client and emulator
//! would otherwise pass unnoticed. The lines the emulator's `auth` module repeats from here are
//! repeated on purpose (it signs independently): do not merge the two.

use std::collections::BTreeMap;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use sha1::Sha1;
use sha2::{Digest, Sha256};

/// The name of the V3 algorithm, as it appears at the start of the `Authorization` header.
pub const ACS3_ALGORITHM: &str = "ACS3-HMAC-SHA256";

/// RFC 3986 unreserved characters stay literal; everything else is `%XY` with upper-case hex.
///
/// This is exactly what the SDKs obtain from `url.QueryEscape` followed by `+`→`%20`, `*`→`%2A` and
/// `%7E`→`~`, without the fix-ups.
const RFC3986: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes `s` the way Alibaba Cloud signs it (RFC 3986, UTF-8, upper-case hex).
pub fn percent_encode(s: &str) -> String {
    utf8_percent_encode(s, RFC3986).to_string()
}

/// `k=v` pairs, both sides percent-encoded, sorted by key and joined with `&`.
///
/// Used for the V1 canonicalised query, the V3 canonical query string and the form bodies we send
/// (a body encoded this way is valid `application/x-www-form-urlencoded`). Empty values give `k=`.
pub fn canonical_query(params: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    for (k, v) in params {
        if !out.is_empty() {
            out.push('&');
        }
        out.push_str(&percent_encode(k));
        out.push('=');
        out.push_str(&percent_encode(v));
    }
    out
}

/// The V1 string to sign: `METHOD&%2F&<percent-encoded canonical query>`.
///
/// `params` must hold every query and form parameter except `Signature`.
pub fn v1_string_to_sign(method: &str, params: &BTreeMap<String, String>) -> String {
    format!(
        "{}&{}&{}",
        method.to_ascii_uppercase(),
        percent_encode("/"),
        percent_encode(&canonical_query(params))
    )
}

/// The V1 signature: `Base64(HMAC-SHA1(secret + "&", string_to_sign))`.
pub fn v1_signature(method: &str, params: &BTreeMap<String, String>, secret: &str) -> String {
    let string_to_sign = v1_string_to_sign(method, params);
    let mut mac = Hmac::<Sha1>::new_from_slice(format!("{secret}&").as_bytes())
        .expect("HMAC accepts keys of any length");
    mac.update(string_to_sign.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// Lower-case hex SHA-256, as used for `x-acs-content-sha256` and the V3 string to sign.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// The parts of a request that V3 signs.
#[derive(Debug, Clone)]
pub struct V3Parts<'a> {
    /// HTTP method, e.g. `POST`.
    pub method: &'a str,
    /// The path; `/` for RPC-style APIs.
    pub path: &'a str,
    /// Query parameters (decoded).
    pub query: &'a BTreeMap<String, String>,
    /// Headers to sign, by lower-case name. The signer includes those that V3 requires to be signed
    /// (`host`, `content-type` and every `x-acs-*`) and ignores the rest.
    pub headers: &'a BTreeMap<String, String>,
    /// `hex(SHA-256(body))`.
    pub payload_hash: &'a str,
}

/// Whether V3 signs a header with this lower-case name.
pub fn v3_signs_header(name: &str) -> bool {
    name == "host" || name == "content-type" || name.starts_with("x-acs-")
}

/// The V3 canonical request and the `;`-joined signed header list.
pub fn v3_canonical_request(parts: &V3Parts<'_>) -> (String, String) {
    let signed: BTreeMap<String, &str> = parts
        .headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim()))
        .filter(|(k, _)| v3_signs_header(k))
        .collect();
    let mut canonical_headers = String::new();
    for (k, v) in &signed {
        canonical_headers.push_str(k);
        canonical_headers.push(':');
        canonical_headers.push_str(v);
        canonical_headers.push('\n');
    }
    let signed_headers = signed
        .keys()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(";");
    let canonical = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        parts.method.to_ascii_uppercase(),
        parts.path,
        canonical_query(parts.query),
        canonical_headers,
        signed_headers,
        parts.payload_hash
    );
    (canonical, signed_headers)
}

/// The V3 `Authorization` header value:
/// `ACS3-HMAC-SHA256 Credential=<id>,SignedHeaders=<list>,Signature=<hex>`.
pub fn v3_authorization(parts: &V3Parts<'_>, access_key_id: &str, secret: &str) -> String {
    let (canonical, signed_headers) = v3_canonical_request(parts);
    let string_to_sign = format!("{ACS3_ALGORITHM}\n{}", sha256_hex(canonical.as_bytes()));
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC accepts keys of any length");
    mac.update(string_to_sign.as_bytes());
    let signature = hex::encode(mac.finalize().into_bytes());
    format!(
        "{ACS3_ALGORITHM} Credential={access_key_id},SignedHeaders={signed_headers},Signature={signature}"
    )
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

    /// Alibaba's published V1 example (also in docs/design.md, “Signing”).
    #[test]
    fn v1_reproduces_the_published_example() {
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
            v1_string_to_sign("GET", &params),
            "GET&%2F&AccessKeyId%3Dtestid%26Action%3DDescribeRegions%26Format%3DXML%26SignatureMethod%3DHMAC-SHA1%26SignatureNonce%3D3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf%26SignatureVersion%3D1.0%26TimeStamp%3D2016-02-23T12%253A46%253A24Z%26Version%3D2014-05-26"
        );
        assert_eq!(
            v1_signature("GET", &params, "testsecret"),
            "CT9X0VtwR86fNWSnsc6v8YGOjuE="
        );
    }

    #[test]
    fn v1_empty_request_matches_the_legacy_sdk_test() {
        assert_eq!(v1_string_to_sign("get", &BTreeMap::new()), "GET&%2F&");
    }

    #[test]
    fn percent_encoding_edge_cases() {
        assert_eq!(percent_encode("a b"), "a%20b");
        assert_eq!(percent_encode("*"), "%2A");
        assert_eq!(percent_encode("~"), "~");
        assert_eq!(percent_encode("/"), "%2F");
        assert_eq!(percent_encode("+"), "%2B");
        assert_eq!(percent_encode("-_.~AZaz09"), "-_.~AZaz09");
        assert_eq!(percent_encode("="), "%3D");
        assert_eq!(percent_encode("&"), "%26");
        assert_eq!(percent_encode("%"), "%25");
        // UTF-8 multibyte: each byte encoded, upper-case hex.
        assert_eq!(percent_encode("é"), "%C3%A9");
        assert_eq!(percent_encode("测试"), "%E6%B5%8B%E8%AF%95");
        assert_eq!(percent_encode("🦀"), "%F0%9F%A6%80");
    }

    #[test]
    fn canonical_query_sorts_by_byte_order_and_keeps_empty_values() {
        let q = map(&[("b", ""), ("a", "x y"), ("B", "*"), ("Tag.1.Key", "k/8")]);
        assert_eq!(canonical_query(&q), "B=%2A&Tag.1.Key=k%2F8&a=x%20y&b=");
    }

    /// Alibaba's published V3 example ("V3 request structure and signature",
    /// https://www.alibabacloud.com/help/en/sdk/product-overview/v3-request-structure-and-signature):
    /// RunInstances on ecs.cn-shanghai with fixed date and nonce and the placeholder key pair.
    #[test]
    fn v3_reproduces_the_published_example() {
        let query = map(&[
            (
                "ImageId",
                "win2019_1809_x64_dtc_zh-cn_40G_alibase_20230811.vhd",
            ),
            ("RegionId", "cn-shanghai"),
        ]);
        let empty_hash = sha256_hex(b"");
        assert_eq!(
            empty_hash,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let headers = map(&[
            ("host", "ecs.cn-shanghai.aliyuncs.com"),
            ("x-acs-action", "RunInstances"),
            ("x-acs-version", "2014-05-26"),
            ("x-acs-date", "2023-10-26T10:22:32Z"),
            ("x-acs-signature-nonce", "3156853299f313e23d1673dc12e1703d"),
            ("x-acs-content-sha256", &empty_hash),
            // Not signed by V3: must not change the result.
            ("accept", "application/json"),
        ]);
        let parts = V3Parts {
            method: "POST",
            path: "/",
            query: &query,
            headers: &headers,
            payload_hash: &empty_hash,
        };
        let (canonical, signed) = v3_canonical_request(&parts);
        assert_eq!(
            signed,
            "host;x-acs-action;x-acs-content-sha256;x-acs-date;x-acs-signature-nonce;x-acs-version"
        );
        assert_eq!(
            sha256_hex(canonical.as_bytes()),
            "7ea06492da5221eba5297e897ce16e55f964061054b7695beedaac1145b1e259"
        );
        assert_eq!(
            v3_authorization(&parts, "YourAccessKeyId", "YourAccessKeySecret"),
            "ACS3-HMAC-SHA256 Credential=YourAccessKeyId,SignedHeaders=host;x-acs-action;x-acs-content-sha256;x-acs-date;x-acs-signature-nonce;x-acs-version,Signature=06563a9e1b43f5dfe96b81484da74bceab24a1d853912eee15083a6f0f3283c0"
        );
    }

    #[test]
    fn v3_header_names_are_lower_cased_and_values_trimmed() {
        let query = BTreeMap::new();
        let a = map(&[("X-Acs-Action", "  Run "), ("Host", "h")]);
        let b = map(&[("x-acs-action", "Run"), ("host", "h")]);
        let pa = V3Parts {
            method: "post",
            path: "/",
            query: &query,
            headers: &a,
            payload_hash: "x",
        };
        let pb = V3Parts {
            headers: &b,
            method: "POST",
            ..pa.clone()
        };
        assert_eq!(v3_canonical_request(&pa), v3_canonical_request(&pb));
    }
}
