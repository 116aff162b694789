//! The document's description of what the Alicloud provider accepts: the spec's rules
//! (`spec/rules.rs`), the machine's identity and the secret's keys as JSON Schema, so a request a
//! generator makes from the document is one the driver takes (`spec/tests/schema_patterns.rs`
//! holds each pattern to its validator). Every call decodes the whole spec, so every field's type
//! holds for every call; the region and tag rules ([`super::ProviderSpec::validate_scope`]) hold
//! for every call that takes a class; the rest ([`super::ProviderSpec::validate_for_create`], user
//! data) for CreateMachine only, so a machine whose class changed since can still be looked at and
//! deleted.
//!
//! Apart from the rules because it is another reader's view of them: the OpenAPI document's, which
//! `api` assembles for every provider.

use serde_json::{Value, json};

use super::rules::{
    API_VERSION, DISK_CATEGORY, DISK_DESCRIPTION, Grammar, IMAGE_ID, INSTANCE_TYPE, KEY_PAIR_NAME,
    PRIVATE_IP, SECURITY_GROUP_ID, V_SWITCH_ID, ZONE_ID,
};
use super::{EPHEMERAL_SSD, MAX_EPHEMERAL_SSD_GIB, MAX_SPEC_TAGS, MAX_TAG_LEN};
use crate::alicloud::identity::{
    CLUSTER_TAG, MACHINE_TAG, MAX_CREATE_NAME_LEN, MAX_UID_LEN, OWNER_TAG, ROLE_TAG,
};
use crate::alicloud::secret::MAX_USER_DATA_BASE64;
use crate::provider::{CheckedFor, NAMESPACE_STAMP};

/// A UID ([`crate::alicloud::identity::Owner::of`]): ASCII letters, digits, `-`, `_` and `.`; and
/// not starting with `aliyun` ([`UID_RESERVED`]), which ECS keeps for itself in tag values.
pub const UID: &str = "^[A-Za-z0-9._-]*$";
/// The UID prefix ECS reserves.
pub const UID_RESERVED: &str = "^aliyun";
/// An ECS instance id ([`crate::alicloud::identity::decode_provider_id`]): `i-` and lower-case
/// letters and digits, 64 characters at most.
pub const INSTANCE_ID: &str = "i-[a-z0-9]{1,62}";
/// A data disk's name ([`super::rules::disk_name_matches`]), at most 64 characters.
pub const DISK_NAME: &str = "^[a-zA-Z][a-zA-Z0-9.\\-_:]+$";
/// Some character other than white space: a required field that `trim()` leaves non-empty.
pub const NOT_BLANK: &str = "\\S";
/// Standard base64 as the driver decodes it: padded, and the last character's unused bits zero.
pub const BASE64: &str =
    "^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$";
/// Base64 of ASCII bytes only (so of UTF-8 text, which the driver requires of a key it reads as
/// text): each group's characters are those an ASCII byte (top bit clear) can produce.
pub const BASE64_ASCII: &str = "^([A-Za-f][A-HQ-Xg-nw-z0-3][ABEFIJMNQRUVYZcdghklopstwx014589][A-Za-z0-9+/])*([A-Za-f][AQgw]==|[A-Za-f][A-HQ-Xg-nw-z0-3][AEIMQUYcgkosw048]=)?$";

/// A regular expression matching `text` literally.
fn literal(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | ':') {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

/// An object with some key containing `part` (`not every key lacks it`).
fn some_key_contains(part: &str) -> Value {
    json!({"not": {"propertyNames": {"not": {"pattern": literal(part)}}}})
}

/// ECS's region-id grammar ([`alicloud::Region::parse`]): two to six words of lower-case letters
/// and digits joined by single hyphens, the first letters only (at most 50 characters).
pub const REGION: &str = "[a-z]+(-[a-z0-9]+){1,5}";

/// The regions a class may name: [`alicloud::endpoint::known_regions`], what a driver calling the
/// regional endpoints admits (with `BERTH_ALICLOUD_REGIONS` set, the operator's list decides).
pub fn regions() -> Vec<&'static str> {
    ::alicloud::endpoint::known_regions()
}

/// `machine.spec.providerID`: empty, or an instance id, or `<region>.<instance id>`.
pub fn provider_id_pattern() -> String {
    format!("^(|({REGION}\\.)?{INSTANCE_ID})$")
}

fn nullable(kind: &str) -> Value {
    json!({"type": [kind, "null"]})
}

/// A required free string: its grammar and bound.
fn required(g: &Grammar) -> Value {
    json!({"type": "string", "pattern": g.pattern, "maxLength": g.max, "description": format!("Must be {}", g.rule)})
}

/// An optional free string (empty or null for none): its grammar and bound.
fn optional(g: &Grammar) -> Value {
    json!({"type": ["string", "null"], "pattern": format!("^$|{}", g.pattern), "maxLength": g.max, "description": format!("Empty, or {}", g.rule)})
}

/// Text ECS takes in a tag or a description: no control characters ([`super::rules::plain_text`]).
pub const PLAIN_TEXT: &str = "^[^\\x00-\\x1f\\x7f-\\x9f]*$";
/// What such text may not contain.
pub const NO_URL: &str = "https?://";

fn integer(min: i64, max: i64) -> Value {
    json!({"type": ["integer", "null"], "minimum": min, "maximum": max})
}

fn one_of_or_unset(values: &[&str]) -> Value {
    let mut all: Vec<Value> = vec![json!(""), Value::Null];
    all.extend(values.iter().map(|v| json!(v)));
    json!({"type": ["string", "null"], "enum": all})
}

/// `machineClass.providerSpec`.
pub fn provider_spec(checked_for: CheckedFor) -> Value {
    let text = || nullable("string");
    let any_i64 = || integer(i64::MIN, i64::MAX);
    let tags = if checked_for == CheckedFor::Create {
        json!({
            "type": "object",
            "description": "Must hold a key containing kubernetes.io/cluster/ and one containing kubernetes.io/role/: they scope what the class may see and touch. At most 17 (ECS takes 20 and Berth adds three), each key 1 to 128 characters, not starting with aliyun or acs: and not one of Berth's own, each value at most 128 characters.",
            "maxProperties": MAX_SPEC_TAGS,
            "propertyNames": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_TAG_LEN,
                "allOf": [
                    {"not": {"pattern": "^aliyun"}},
                    {"not": {"pattern": "^acs:"}},
                    {"not": {"enum": [MACHINE_TAG, OWNER_TAG, NAMESPACE_STAMP]}},
                    {"not": {"pattern": NO_URL}},
                    {"pattern": PLAIN_TEXT}
                ]
            },
            "additionalProperties": {
                "type": "string",
                "maxLength": MAX_TAG_LEN,
                "pattern": PLAIN_TEXT,
                "allOf": [
                    {"not": {"pattern": "^aliyun"}},
                    {"not": {"pattern": "^acs:"}},
                    {"not": {"pattern": NO_URL}}
                ]
            },
            "allOf": [some_key_contains(CLUSTER_TAG), some_key_contains(ROLE_TAG)]
        })
    } else {
        json!({
            "type": "object",
            "description": "Must hold a key containing kubernetes.io/cluster/ and one containing kubernetes.io/role/: they scope what the class may see and touch.",
            "additionalProperties": {"type": "string"},
            "allOf": [some_key_contains(CLUSTER_TAG), some_key_contains(ROLE_TAG)]
        })
    };
    let disk = if checked_for == CheckedFor::Create {
        json!({
            "type": "object",
            "required": ["name", "category", "size"],
            "properties": {
                "name": {"type": "string", "pattern": DISK_NAME, "maxLength": 64},
                "category": required(&DISK_CATEGORY),
                "description": {
                    "type": ["string", "null"],
                    "maxLength": DISK_DESCRIPTION.max,
                    "pattern": DISK_DESCRIPTION.pattern,
                    "not": {"pattern": NO_URL},
                    "description": format!("Empty, or {}", DISK_DESCRIPTION.rule)
                },
                "encrypted": nullable("boolean"),
                "deleteWithInstance": nullable("boolean"),
                "size": {"type": "integer", "minimum": 20, "maximum": 32768}
            },
            "if": {"properties": {"category": {"const": EPHEMERAL_SSD}}, "required": ["category"]},
            "then": {"properties": {"size": {"maximum": MAX_EPHEMERAL_SSD_GIB}}}
        })
    } else {
        json!({
            "type": "object",
            "properties": {
                "name": text(),
                "category": text(),
                "description": text(),
                "encrypted": nullable("boolean"),
                "deleteWithInstance": nullable("boolean"),
                "size": any_i64()
            }
        })
    };
    let mut spec = json!({
        "type": "object",
        "description": "MCM's Alicloud provider spec. A field that is a slip for a known one (at most two edits, `instanceTyp`) is refused naming the one meant; other fields Berth does not know are ignored, as MCM's decoder ignores them (`secretRef`, `credentialsSecretRef` and `kind`, which MCM's classes may carry, among them).",
        "required": ["region", "tags"],
        "properties": {
            "apiVersion": text(),
            "imageID": text(),
            "instanceType": text(),
            "region": {
                "type": "string",
                "pattern": format!("^{REGION}$"),
                "maxLength": 50,
                "examples": regions(),
                "description": "An ECS region id. A driver calling ECS's own endpoints takes the regions ECS is known to serve (the examples) and those its operator allows (BERTH_ALICLOUD_REGIONS); another well-formed one is 412 there. One pointed at a single endpoint (berth up's emulator) takes any well-formed region."
            },
            "zoneID": text(),
            "securityGroupID": text(),
            "vSwitchID": text(),
            "privateIPAddress": text(),
            "systemDisk": {
                "type": ["object", "null"],
                "properties": {"category": text(), "size": any_i64()}
            },
            "dataDisks": {"type": ["array", "null"], "items": disk},
            "instanceChargeType": text(),
            "internetChargeType": text(),
            "internetMaxBandwidthIn": any_i64(),
            "internetMaxBandwidthOut": any_i64(),
            "spotStrategy": text(),
            "IoOptimized": text(),
            "ioOptimized": text(),
            "tags": tags,
            "keyPairName": text()
        },
        // The two spellings are one field: sending both is refused as a duplicate.
        "not": {"required": ["IoOptimized", "ioOptimized"]}
    });
    if checked_for == CheckedFor::Create {
        let p = &mut spec["properties"];
        for (field, g) in [
            ("imageID", &IMAGE_ID),
            ("zoneID", &ZONE_ID),
            ("instanceType", &INSTANCE_TYPE),
            ("vSwitchID", &V_SWITCH_ID),
            ("keyPairName", &KEY_PAIR_NAME),
        ] {
            p[field] = required(g);
        }
        p["apiVersion"] = optional(&API_VERSION);
        p["securityGroupID"] = optional(&SECURITY_GROUP_ID);
        p["privateIPAddress"] = optional(&PRIVATE_IP);
        p["systemDisk"]["properties"]["category"] = optional(&DISK_CATEGORY);
        p["instanceChargeType"] = one_of_or_unset(&["PostPaid", "PrePaid"]);
        p["internetChargeType"] = one_of_or_unset(&["PayByTraffic", "PayByBandwidth"]);
        p["spotStrategy"] = one_of_or_unset(&["NoSpot", "SpotWithPriceLimit", "SpotAsPriceGo"]);
        p["IoOptimized"] = one_of_or_unset(&["none", "optimized"]);
        p["ioOptimized"] = one_of_or_unset(&["none", "optimized"]);
        p["internetMaxBandwidthIn"] = integer(0, 200);
        p["internetMaxBandwidthOut"] = integer(0, 100);
        p["systemDisk"]["properties"]["size"] = json!({
            "description": "GiB: 0 (or none) for ECS's default, else 20 to 2048",
            "anyOf": [{"type": "null"}, {"const": 0}, {"type": "integer", "minimum": 20, "maximum": 2048}]
        });
        p["dataDisks"]["maxItems"] = json!(16);
        p["dataDisks"]["description"] = json!(
            "At most 16; each name unique within the class (it names the disk <machine>-<name>-data-disk)"
        );
        spec["required"] = json!([
            "region",
            "tags",
            "imageID",
            "zoneID",
            "instanceType",
            "vSwitchID",
            "keyPairName"
        ]);
    }
    spec
}

/// `secret`: the access key, plain in `stringData` (the driver also reads it from `data`,
/// base64-encoded, when `stringData` lacks it, and takes the fallback names `accessKeyID` and
/// `accessKeySecret`; this document names the one form a request can rely on).
pub fn secret(checked_for: CheckedFor) -> Value {
    let text_key = json!({"type": "string", "pattern": BASE64_ASCII});
    let mut data = json!({
        "type": "object",
        "description": "Base64-encoded values, every one checked (as Kubernetes does) even where stringData wins",
        "additionalProperties": {"type": "string", "pattern": BASE64},
        "properties": {"alicloudSecurityToken": text_key, "securityToken": text_key}
    });
    let mut string_data = json!({
        "type": "object",
        "required": ["alicloudAccessKeyID", "alicloudAccessKeySecret"],
        "additionalProperties": {"type": "string"},
        "properties": {
            "alicloudAccessKeyID": {"type": "string", "pattern": NOT_BLANK, "description": "The access key id (under `berth up`, the emulator's, which it prints)"},
            "alicloudAccessKeySecret": {"type": "string", "pattern": NOT_BLANK, "description": "Its secret"},
            "alicloudSecurityToken": {"type": "string", "description": "An STS token, if the key is temporary"}
        }
    });
    if checked_for == CheckedFor::Create {
        data["properties"]["userData"] = json!({
            "type": "string",
            "pattern": BASE64,
            "maxLength": MAX_USER_DATA_BASE64,
            "description": "The user data, base64-encoded: at most 32 KiB encoded, ECS's limit"
        });
        string_data["properties"]["userData"] = json!({
            "type": "string",
            "description": "The user data, plain: at most 24 KiB of UTF-8 (32 KiB base64-encoded, ECS's limit)"
        });
    }
    json!({
        "type": "object",
        "required": ["stringData"],
        "properties": {"stringData": string_data, "data": data}
    })
}

/// `machine`: its name (a DNS-1123 subdomain; 2 to 128 characters to be created, ECS's limit),
/// UID and providerID.
pub fn machine(checked_for: CheckedFor) -> Value {
    let mut name = json!({
        "type": "string",
        "pattern": domain::schema::DNS1123_SUBDOMAIN,
        "maxLength": domain::names::MAX_SUBDOMAIN_LEN
    });
    if checked_for == CheckedFor::Create {
        name["minLength"] = json!(2);
        name["maxLength"] = json!(MAX_CREATE_NAME_LEN);
    }
    json!({
        "required": ["metadata"],
        "properties": {
            "metadata": {
                "required": ["name"],
                "properties": {
                    "name": name,
                    "uid": {"type": "string", "pattern": UID, "maxLength": MAX_UID_LEN, "not": {"pattern": UID_RESERVED}}
                }
            },
            "spec": {"properties": {"providerID": {"type": "string", "pattern": provider_id_pattern()}}}
        }
    })
}
