//! Each pattern of [`schema`](crate::alicloud::spec::schema) against the validator it stands for:
//! a value matches exactly when the driver accepts it (or, where a pattern says it is narrower,
//! only values it accepts match).
//!
//! Apart from the spec's other tests because they are the document's: one per pattern, each on
//! the boundaries of the rule it states.

use super::super::schema::*;
use super::*;
use crate::alicloud::identity::{MAX_UID_LEN, decode_provider_id, machine_name};
use crate::alicloud::spec::rules::{
    API_VERSION, DISK_CATEGORY, DISK_DESCRIPTION, IMAGE_ID, INSTANCE_TYPE, KEY_PAIR_NAME,
    PRIVATE_IP, SECURITY_GROUP_ID, V_SWITCH_ID, ZONE_ID, plain_text,
};
use crate::provider::CheckedFor;
use base64::Engine as _;

fn re(pattern: &str) -> regex::Regex {
    regex::Regex::new(pattern).unwrap()
}

/// The name's schema against [`machine_name`], for every call and for CreateMachine, on
/// the boundaries: a part of 63 and 64 characters, 128 and 129 in all, 253 and 254.
#[test]
fn machine_names() {
    let part = "a".repeat(63);
    let long_part = format!("{part}a");
    let parts = [part.as_str(); 4].join(".");
    let n253 = parts[..253].to_string();
    let n254 = parts[..254].to_string();
    let n128 = format!("{part}.{}.b", &part[..62]);
    let n129 = format!("{n128}c");
    let short_then_long = format!("ab.{long_part}");
    let cases = [
        "a",
        "ab",
        "m-1.pool",
        "*",
        "A",
        "a..b",
        "a.",
        "",
        &part,
        &long_part,
        &short_then_long,
        &n128,
        &n129,
        &n253,
        &n254,
    ];
    for checked_for in [CheckedFor::Lookup, CheckedFor::Create] {
        let schema = super::super::schema::machine(checked_for);
        let name = &schema["properties"]["metadata"]["properties"]["name"];
        let pattern = re(name["pattern"].as_str().unwrap());
        let min = name["minLength"].as_u64().unwrap_or(0) as usize;
        let max = name["maxLength"].as_u64().unwrap() as usize;
        for case in cases {
            let by_schema = pattern.is_match(case) && (min..=max).contains(&case.len());
            let mut m = Machine::default();
            m.metadata.name = case.into();
            let by_driver = machine_name(&m, checked_for);
            assert_eq!(by_schema, by_driver.is_ok(), "{checked_for:?} {case:?}");
        }
    }
    // The message says the rule that failed, never a limit that did not.
    let message = |name: &str, checked_for: CheckedFor| {
        let mut m = Machine::default();
        m.metadata.name = name.into();
        machine_name(&m, checked_for).unwrap_err().message
    };
    for checked_for in [CheckedFor::Lookup, CheckedFor::Create] {
        let msg = message(&short_then_long, checked_for);
        assert!(
            msg.contains("part of 64 characters") && msg.contains("at most 63"),
            "{msg}"
        );
        assert!(!msg.contains("253") && !msg.contains("128"), "{msg}");
    }
    let msg = message(&n129, CheckedFor::Create);
    assert!(msg.contains("2 to 128 characters"), "{msg}");
    let msg = message(&n254, CheckedFor::Lookup);
    assert!(msg.contains("at most 253 characters"), "{msg}");
}

#[test]
fn uids() {
    let (uid, reserved) = (re(UID), re(UID_RESERVED));
    let long = "u".repeat(128);
    let too_long = "u".repeat(129);
    for case in [
        "",
        "0d9a3c1e-7f44",
        "a.b_c-D",
        &long,
        &too_long,
        "a b",
        "x:y",
        "aliyun-x",
        "Aliyun",
        "ü",
        "a/b",
    ] {
        let by_schema = uid.is_match(case) && !reserved.is_match(case) && case.len() <= MAX_UID_LEN;
        let mut m = Machine::default();
        m.metadata.uid = case.into();
        assert_eq!(by_schema, Owner::of(&m).is_ok(), "{case:?}");
    }
}

#[test]
fn disk_names() {
    let name = re(DISK_NAME);
    let long = format!("a{}", "b".repeat(63));
    let too_long = format!("a{}", "b".repeat(64));
    for case in [
        "d1",
        "a1.b-c_d:e",
        "a",
        "1bad",
        "a b",
        "",
        &long,
        &too_long,
        "aé",
        "A:",
    ] {
        let by_schema = name.is_match(case) && case.chars().count() <= 64;
        let accepted = disk_name_matches(case) && case.len() <= 64;
        assert_eq!(by_schema, accepted, "{case:?}");
    }
}

#[test]
fn provider_ids() {
    let pattern = re(&provider_id_pattern());
    for case in [
        "cn-shanghai.i-1",
        "i-1",
        "eu-central-1.i-abc123",
        "xx-nowhere-1.i-1",
        "cn-shanghai.",
        " cn-shanghai.i-1",
        "cn-shanghai.I-1",
        "cn-shanghai.i-",
        "cn-shanghai.x-1",
        "x@127.0.0.1:9/.i-1",
        ".i-1",
        &format!("i-{}", "a".repeat(62)),
        &format!("i-{}", "a".repeat(63)),
    ] {
        // What the pattern admits is decoded, or refused only by the driver's set-up (412).
        let decoded = decode_provider_id(case, &policy());
        assert_eq!(
            pattern.is_match(case),
            decoded.is_ok() || decoded.is_err_and(|e| e.code == Code::FailedPrecondition),
            "{case:?}"
        );
    }
    // Empty: the machine has no VM yet (nothing is decoded).
    assert!(pattern.is_match(""));
}

#[test]
fn regions_are_the_known_ones() {
    let listed = regions();
    assert!(listed.contains(&"cn-shanghai") && listed.contains(&"cn-hangzhou"));
    for r in &listed {
        assert!(policy().admit(r).is_ok(), "{r}");
    }
    assert!(policy().admit("xx-nowhere-1").is_err());
    // The grammar the document states is the parser's.
    let grammar = re(&format!("^{REGION}$"));
    for case in [
        "cn-shanghai",
        "eu-central-1",
        "cn-beijing-finance-1",
        "a-b-c-d-e-f",
        "a-b-c-d-e-f-g",
        "1a-b",
        "a1-b",
        "cn",
        "cn-",
        "-cn",
        "cn--x",
        "CN-X",
        "cn-x.y",
        "cn-x/",
        "",
    ] {
        assert_eq!(
            grammar.is_match(case),
            alicloud::Region::parse(case).is_ok(),
            "{case:?}"
        );
    }
}

#[test]
fn base64_is_what_the_secret_decodes() {
    let (any, ascii) = (re(BASE64), re(BASE64_ASCII));
    let engine = base64::engine::general_purpose::STANDARD;
    // Every encoding of short byte strings: matched exactly when decodable; the ASCII
    // pattern exactly when the bytes are ASCII.
    let samples: Vec<Vec<u8>> = (0u16..=255)
        .map(|b| vec![b as u8])
        .chain((0u16..=255).map(|b| vec![b'a', b as u8]))
        .chain((0u16..=255).map(|b| vec![b as u8, b'z', b as u8]))
        .chain((0u16..=255).map(|b| vec![b'x', b'y', b'z', b as u8, b'w']))
        .chain([b"hello world".to_vec(), Vec::new()])
        .collect();
    for bytes in samples {
        let text = engine.encode(&bytes);
        assert!(any.is_match(&text), "{text}");
        assert_eq!(ascii.is_match(&text), bytes.is_ascii(), "{text} {bytes:?}");
    }
    for bad in ["QQ", "QR==", "QUJ=", "a b=", "====", "Q===", "QUJD\n"] {
        assert!(engine.decode(bad).is_err(), "{bad}");
        assert!(!any.is_match(bad), "{bad}");
        assert!(!ascii.is_match(bad), "{bad}");
    }
}

#[test]
fn tag_rules_count_characters() {
    let mut v = valid();
    v["tags"]["ü".repeat(128)] = json!("ü".repeat(128));
    ProviderSpec::decode(&v)
        .unwrap()
        .validate_for_create(&policy())
        .unwrap();
    v["tags"]["ü".repeat(129)] = json!("x");
    let msg = ProviderSpec::decode(&v)
        .unwrap()
        .validate_for_create(&policy())
        .unwrap_err()
        .message;
    assert!(msg.contains("1 to 128 characters"), "{msg}");
}

/// Each free string's pattern against its validator, on values that pass and values that
/// break the grammar.
#[test]
fn free_string_patterns_mirror_their_validators() {
    let cases = [
        "a",
        "ab",
        "A",
        "0",
        "-a",
        "a-",
        "ecs",
        "ecs.",
        "ecs.g6.large",
        "ecs.G6.large",
        "ecs.t5-lc1m1.small",
        "ecs..large",
        "ecsx.g6",
        "cn-shanghai-b",
        "ap-southeast-1a",
        "sg-1",
        "sg-",
        "sg-ABC",
        "sg-abc_1",
        "vsw-demo",
        "vsw-",
        "kp",
        "k",
        "kp:1_a-b",
        "1kp",
        "kp/x",
        "http://x",
        "192.168.0.10",
        "0.0.0.0",
        "255.255.255.255",
        "256.1.1.1",
        "01.2.3.4",
        "1.2.3",
        "1.2.3.4.5",
        "1.2.3.4 ",
        "cloud_essd",
        "DiskEphemeralSSD",
        "cloud-essd",
        "_c",
        "m-demo-image",
        "ubuntu_22_04_x64.vhd",
        ".img",
        "mcm.gardener.cloud/v1alpha1",
        "v1",
        "a b",
        "a\tb",
        "ü",
        "a\u{85}b",
        "text with spaces",
        "\u{7f}",
    ];
    for g in [
        &IMAGE_ID,
        &INSTANCE_TYPE,
        &ZONE_ID,
        &SECURITY_GROUP_ID,
        &V_SWITCH_ID,
        &KEY_PAIR_NAME,
        &PRIVATE_IP,
        &DISK_CATEGORY,
        &API_VERSION,
    ] {
        let pattern = re(g.pattern);
        for case in cases {
            assert_eq!(
                pattern.is_match(case),
                (g.matches)(case),
                "{} on {case:?}",
                g.pattern
            );
        }
    }
    // A description is plain text: the pattern, and no URL (the schema's `not`).
    assert_eq!(DISK_DESCRIPTION.pattern, PLAIN_TEXT);
    let plain = re(PLAIN_TEXT);
    let url = re(NO_URL);
    for case in cases.iter().chain(&["see https://x", "a http://b"]) {
        assert_eq!(
            plain.is_match(case) && !url.is_match(case),
            plain_text(case),
            "{case:?}"
        );
        assert_eq!((DISK_DESCRIPTION.matches)(case), plain_text(case));
    }
}

/// The refusal of `field` set to `value`, for CreateMachine.
fn refusal(field: &str, value: serde_json::Value) -> String {
    let mut v = valid();
    let pointer = format!("/{}", field.replace('.', "/"));
    match v.pointer_mut(&pointer) {
        Some(at) => *at = value,
        None => v[field] = value,
    }
    ProviderSpec::decode(&v)
        .unwrap()
        .validate_for_create(&policy())
        .unwrap_err()
        .message
}

/// Every free string of the spec: an over-long value and one that breaks its grammar are
/// each refused naming the field and the rule, never echoing a long value.
#[test]
fn every_free_string_has_a_bound_and_a_grammar() {
    let cases: [(&str, &str, usize, &str); 10] = [
        ("apiVersion", "apiVersion", 253, "v1 alpha"),
        ("imageID", "imageID", 128, "-image"),
        ("instanceType", "instanceType", 64, "g6.large"),
        ("zoneID", "zoneID", 64, "CN_SHANGHAI"),
        ("securityGroupID", "securityGroupID", 64, "group-1"),
        ("vSwitchID", "vSwitchID", 64, "vsw-A"),
        ("keyPairName", "keyPairName", 128, "1kp"),
        ("privateIPAddress", "privateIPAddress", 15, "10.0.0.256"),
        (
            "systemDisk.category",
            "systemDisk.category",
            64,
            "cloud essd",
        ),
        (
            "dataDisks.0.category",
            "dataDisks[0].category",
            64,
            "cloud-essd",
        ),
    ];
    for (pointer, field, max, bad) in cases {
        let long = "a".repeat(100_000);
        let msg = refusal(pointer, json!(long));
        assert!(msg.contains(&format!("{SPEC}.{field}: ")), "{field}: {msg}");
        assert!(
            msg.contains(&format!("the limit is {max}")),
            "{field}: {msg}"
        );
        assert!(
            msg.len() < 1_000,
            "{field}: the value is echoed: {}",
            msg.len()
        );
        let msg = refusal(pointer, json!(bad));
        assert!(
            msg.contains(&format!("{SPEC}.{field}: must be ")),
            "{field}: {msg}"
        );
    }
    let msg = refusal("dataDisks.0.description", json!("d".repeat(257)));
    assert!(
        msg.contains("dataDisks[0].description: is 257 characters long; the limit is 256"),
        "{msg}"
    );
    let msg = refusal("dataDisks.0.description", json!("see http://example.com"));
    assert!(msg.contains("dataDisks[0].description: must be"), "{msg}");
    // The enums never echo a long value either.
    let msg = refusal("instanceChargeType", json!("x".repeat(100_000)));
    assert!(
        msg.contains("instanceChargeType: Unsupported value: a value of 100000 characters"),
        "{msg}"
    );
    // Tags: control characters and URLs, a reserved value prefix, an over-long key not echoed.
    for (key, value, rule) in [
        ("pool", "a\nb", "no control characters"),
        ("pool", "see https://x", "http://"),
        ("pool", "aliyun-x", "may not start with 'aliyun'"),
        ("a\u{1}b", "1", "no control characters"),
    ] {
        let mut v = valid();
        v["tags"][key] = json!(value);
        let msg = ProviderSpec::decode(&v)
            .unwrap()
            .validate_for_create(&policy())
            .unwrap_err()
            .message;
        assert!(msg.contains(rule), "{key:?}={value:?}: {msg}");
    }
    let mut v = valid();
    v["tags"]["k".repeat(100_000)] = json!("1");
    let msg = ProviderSpec::decode(&v)
        .unwrap()
        .validate_for_create(&policy())
        .unwrap_err()
        .message;
    assert!(msg.contains("tags[<a key of 100000 characters>]"), "{msg}");
    assert!(msg.len() < 1_000, "{}", msg.len());
    // A data disk name over 64 characters is not echoed.
    let msg = refusal("dataDisks.0.name", json!("d".repeat(100_000)));
    assert!(msg.len() < 1_000, "{}", msg.len());
}

#[test]
fn local_ssds_are_at_most_800_gib() {
    let mut v = valid();
    v["dataDisks"] = json!([{"name": "eph", "category": "DiskEphemeralSSD", "size": 800}]);
    ProviderSpec::decode(&v)
        .unwrap()
        .validate_for_create(&policy())
        .unwrap();
    v["dataDisks"][0]["size"] = json!(801);
    let msg = ProviderSpec::decode(&v)
        .unwrap()
        .validate_for_create(&policy())
        .unwrap_err()
        .message;
    assert!(
        msg.contains("dataDisks[0].size: Invalid value: 801: must be between 20 and 800"),
        "{msg}"
    );
}
