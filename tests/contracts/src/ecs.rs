//! The ECS pair's outside facts, so a bug the Alicloud client and the emulator share cannot pass.
//!
//! The client and the emulator each sign and check signatures with their own code, and the emulator
//! answers in the shapes the client decodes. A contract between the two alone would hold if both
//! got the same thing wrong. So the ECS pact is also held to what Alibaba publishes:
//! - [`v1_signature`] is a third implementation of signature V1, written from Alibaba's
//!   documentation and held to its published example ([`PUBLISHED_V1`]); every request in the pact
//!   must carry a signature it reproduces, with the documented common parameters.
//! - [`ReSign`], the verifier's request filter, signs each replayed request afresh with the
//!   emulator's key through [`v1_signature`] (a pact's recorded timestamp is old and its nonce
//!   used), so the emulator's own signature check runs on every replayed call.
//! - [`SDK_ANSWER_FIELDS`] lists the answer fields of each action as the official SDK's models name
//!   them; every field a pact's answer states must be one of them, spelt the same.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use hmac::{Hmac, Mac};
use pact_models::bodies::OptionalBody;
use pact_models::v4::http_parts::HttpRequest;
use pact_verifier::callback_executors::RequestFilterExecutor;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;
use sha1::Sha1;

/// Alibaba's published signature V1 example: the parameters, the secret, the string to sign and the
/// signature (the documentation spells the timestamp parameter `TimeStamp`).
pub struct PublishedExample {
    /// The request's parameters.
    pub params: &'static [(&'static str, &'static str)],
    /// The access key secret.
    pub secret: &'static str,
    /// The HTTP method.
    pub method: &'static str,
    /// The documented string to sign.
    pub string_to_sign: &'static str,
    /// The documented signature.
    pub signature: &'static str,
}

/// The example from Alibaba's "RPC signature" documentation.
pub const PUBLISHED_V1: PublishedExample = PublishedExample {
    params: &[
        ("AccessKeyId", "testid"),
        ("Action", "DescribeRegions"),
        ("Format", "XML"),
        ("SignatureMethod", "HMAC-SHA1"),
        ("SignatureNonce", "3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf"),
        ("SignatureVersion", "1.0"),
        ("TimeStamp", "2016-02-23T12:46:24Z"),
        ("Version", "2014-05-26"),
    ],
    secret: "testsecret",
    method: "GET",
    string_to_sign: "GET&%2F&AccessKeyId%3Dtestid%26Action%3DDescribeRegions%26Format%3DXML%26SignatureMethod%3DHMAC-SHA1%26SignatureNonce%3D3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf%26SignatureVersion%3D1.0%26TimeStamp%3D2016-02-23T12%253A46%253A24Z%26Version%3D2014-05-26",
    signature: "CT9X0VtwR86fNWSnsc6v8YGOjuE=",
};

/// The common parameters every signed V1 call carries, with the value the documentation fixes
/// (`None`: any value of the documented form).
pub const COMMON_PARAMS: &[(&str, Option<&str>)] = &[
    ("Action", None),
    ("Version", Some("2014-05-26")),
    ("Format", Some("JSON")),
    ("AccessKeyId", None),
    ("SignatureMethod", Some("HMAC-SHA1")),
    ("SignatureVersion", Some("1.0")),
    ("SignatureNonce", None),
    ("Timestamp", None),
    ("Signature", None),
];

/// The documented timestamp form, UTC `yyyy-MM-ddTHH:mm:ssZ`.
pub const TIMESTAMP_REGEX: &str = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$";

/// Answer fields per action, as the official SDK's response models name them (reference: the
/// DescribeInstances, RunInstances and DeleteInstance models and the common error body). Paths use
/// `.` between objects and `[]` for array items.
pub const SDK_ANSWER_FIELDS: &[(&str, &[&str])] = &[
    (
        "RunInstances",
        &[
            "RequestId",
            "OrderId",
            "TradePrice",
            "InstanceIdSets",
            "InstanceIdSets.InstanceIdSet",
            "InstanceIdSets.InstanceIdSet[]",
        ],
    ),
    (
        "DescribeInstances",
        &[
            "RequestId",
            "TotalCount",
            "PageNumber",
            "PageSize",
            "NextToken",
            "Instances",
            "Instances.Instance",
            "Instances.Instance[]",
            "Instances.Instance[].InstanceId",
            "Instances.Instance[].InstanceName",
            "Instances.Instance[].HostName",
            "Instances.Instance[].Status",
            "Instances.Instance[].RegionId",
            "Instances.Instance[].ZoneId",
            "Instances.Instance[].InstanceType",
            "Instances.Instance[].ImageId",
            "Instances.Instance[].CreationTime",
            "Instances.Instance[].StartTime",
            "Instances.Instance[].KeyPairName",
            "Instances.Instance[].SpotStrategy",
            "Instances.Instance[].VpcAttributes",
            "Instances.Instance[].VpcAttributes.VpcId",
            "Instances.Instance[].VpcAttributes.VSwitchId",
            "Instances.Instance[].VpcAttributes.PrivateIpAddress",
            "Instances.Instance[].VpcAttributes.PrivateIpAddress.IpAddress",
            "Instances.Instance[].VpcAttributes.PrivateIpAddress.IpAddress[]",
            "Instances.Instance[].Tags",
            "Instances.Instance[].Tags.Tag",
            "Instances.Instance[].Tags.Tag[]",
            "Instances.Instance[].Tags.Tag[].TagKey",
            "Instances.Instance[].Tags.Tag[].TagValue",
        ],
    ),
    ("DeleteInstance", &["RequestId"]),
    // The error body of every action.
    (
        "error",
        &["RequestId", "HostId", "Code", "Message", "Recommend"],
    ),
];

/// The instance statuses the DescribeInstances documentation lists.
pub const SDK_STATUSES: &[&str] = &["Pending", "Running", "Starting", "Stopping", "Stopped"];

/// RFC 3986 unreserved characters stay literal, everything else `%XY` in upper-case hex.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

fn encode(s: &str) -> String {
    utf8_percent_encode(s, UNRESERVED).to_string()
}

/// The V1 string to sign, as documented: `METHOD&%2F&` and the percent-encoded canonical query of
/// every parameter but `Signature`, sorted by key.
pub fn v1_string_to_sign(method: &str, params: &BTreeMap<String, String>) -> String {
    let canonical: Vec<String> = params
        .iter()
        .filter(|(k, _)| k.as_str() != "Signature")
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect();
    format!("{method}&%2F&{}", encode(&canonical.join("&")))
}

/// `Base64(HMAC-SHA1(secret + "&", string to sign))`.
pub fn v1_signature(method: &str, params: &BTreeMap<String, String>, secret: &str) -> String {
    let mut mac =
        Hmac::<Sha1>::new_from_slice(format!("{secret}&").as_bytes()).expect("HMAC takes any key");
    mac.update(v1_string_to_sign(method, params).as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// Decodes an `application/x-www-form-urlencoded` body.
pub fn parse_form(body: &str) -> BTreeMap<String, String> {
    body.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', " "))
                    .decode_utf8()
                    .expect("UTF-8 form")
                    .into_owned()
            };
            (decode(k), decode(v))
        })
        .collect()
}

/// Encodes a form body the way the SDKs do (sorted, RFC 3986).
pub fn form_body(params: &BTreeMap<String, String>) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Every field path of a JSON answer (`A.B`, `A.B[]`, `A.B[].C`).
pub fn field_paths(value: &Value) -> Vec<String> {
    fn walk(value: &Value, prefix: &str, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    if !out.contains(&path) {
                        out.push(path.clone());
                    }
                    walk(v, &path, out);
                }
            }
            Value::Array(items) => {
                let path = format!("{prefix}[]");
                for item in items {
                    if !out.contains(&path) {
                        out.push(path.clone());
                    }
                    walk(item, &path, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, "", &mut out);
    out
}

/// The verifier's request filter for the ECS pact: gives each replayed request a fresh timestamp
/// and nonce, swaps the pact's placeholder resource ids for those the provider state created, and
/// signs it again with the emulator's key, so the emulator checks a valid, current signature.
#[derive(Debug)]
pub struct ReSign {
    secret: String,
    /// Placeholder id in the pact → id the provider state created.
    pub ids: Arc<Mutex<HashMap<String, String>>>,
}

impl ReSign {
    /// A filter signing with `secret`.
    pub fn new(secret: &str) -> Arc<Self> {
        Arc::new(ReSign {
            secret: secret.to_string(),
            ids: Arc::default(),
        })
    }
}

impl RequestFilterExecutor for ReSign {
    fn call(self: Arc<Self>, request: &HttpRequest) -> HttpRequest {
        let mut request = request.clone();
        let OptionalBody::Present(bytes, content_type, hint) = &request.body else {
            return request;
        };
        let mut params = parse_form(std::str::from_utf8(bytes).expect("a UTF-8 form body"));
        {
            let ids = self.ids.lock().expect("ids");
            for value in params.values_mut() {
                if let Some(real) = ids.get(value.as_str()) {
                    *value = real.clone();
                }
            }
        }
        params.insert(
            "Timestamp".into(),
            chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        );
        params.insert(
            "SignatureNonce".into(),
            uuid::Uuid::new_v4().simple().to_string(),
        );
        params.remove("Signature");
        let signature = v1_signature(&request.method.to_uppercase(), &params, &self.secret);
        params.insert("Signature".into(), signature);
        request.body = OptionalBody::Present(
            form_body(&params).into_bytes().into(),
            content_type.clone(),
            *hint,
        );
        request
    }

    fn call_non_http(
        &self,
        request_body: &OptionalBody,
        metadata: &HashMap<String, either::Either<Value, bytes::Bytes>>,
    ) -> (
        OptionalBody,
        HashMap<String, either::Either<Value, bytes::Bytes>>,
    ) {
        (request_body.clone(), metadata.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_independent_signer_reproduces_the_published_example() {
        let params: BTreeMap<String, String> = PUBLISHED_V1
            .params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(
            v1_string_to_sign(PUBLISHED_V1.method, &params),
            PUBLISHED_V1.string_to_sign
        );
        assert_eq!(
            v1_signature(PUBLISHED_V1.method, &params, PUBLISHED_V1.secret),
            PUBLISHED_V1.signature
        );
    }

    #[test]
    fn forms_round_trip() {
        let mut p = BTreeMap::new();
        p.insert("UserData".to_string(), "IyEvYmluL3NoCg==".to_string());
        p.insert(
            "Tag.1.Key".to_string(),
            "kubernetes.io/cluster/a b".to_string(),
        );
        assert_eq!(parse_form(&form_body(&p)), p);
    }

    #[test]
    fn field_paths_name_nested_fields_and_array_items() {
        let v = serde_json::json!({"A": {"B": [{"C": 1}, {"C": 2}]}, "D": "x"});
        assert_eq!(
            field_paths(&v),
            ["A", "A.B", "A.B[]", "A.B[].C", "D"].map(String::from)
        );
    }
}
