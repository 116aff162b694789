//! Each pattern against the validator it mirrors, on the validators' own hard cases and a few
//! more: a string matches exactly when the validator accepts it, except where a pattern says
//! it is narrower, and then only on the cases listed as that gap.

use super::*;
use crate::names::{
    MAX_SUBDOMAIN_LEN, validate_dns1123_label, validate_dns1123_subdomain, validate_label_key,
    validate_label_value, validate_volume_name,
};
use crate::quantity::Quantity;

fn agree(pattern: &str, max_len: usize, accepts: impl Fn(&str) -> bool, cases: &[&str]) {
    let re = regex::Regex::new(pattern).unwrap();
    for case in cases {
        let by_schema = re.is_match(case) && case.chars().count() <= max_len;
        assert_eq!(by_schema, accepts(case), "{pattern} on {case:?}");
    }
}

/// `n` copies of `part` joined by dots.
fn dotted(part: &str, n: usize) -> String {
    vec![part; n].join(".")
}

/// Subdomains on the boundaries: parts of 63 and 64 characters, 253 and 254 in all.
fn subdomain_cases() -> Vec<String> {
    let p63 = "a".repeat(63);
    let p64 = "a".repeat(64);
    let four = dotted(&p63, 4);
    vec![
        p63.clone(),
        p64.clone(),
        format!("x.{p63}"),
        format!("x.{p64}"),
        format!("{p64}.x"),
        dotted(&p63, 3),
        four[..253].to_string(),
        four[..254].to_string(),
        four.clone(),
        format!("{}.b", &four[..251]),
        dotted("a", 127),
        dotted("a", 128),
        format!("{p63}.{}.b", &p63[..62]),
        format!("{p63}.{}.bc", &p63[..62]),
    ]
}

#[test]
fn name_patterns_mirror_the_validators() {
    let long = "a".repeat(63);
    let too_long = "a".repeat(64);
    let mut cases: Vec<String> = [
        "a", "vol-1", "0abc", &long, &too_long, "", "-a", "a-", "A", "a_b", "a.b", "a/b", "..",
        "ü", "data.v1", "../etc", "a..b", ".a", "a.", "/abs", "a.-b", "a-.b",
    ]
    .map(String::from)
    .to_vec();
    cases.extend(subdomain_cases());
    let cases: Vec<&str> = cases.iter().map(String::as_str).collect();
    agree(
        DNS1123_LABEL,
        63,
        |s| validate_dns1123_label("n", s).is_ok(),
        &cases,
    );
    agree(
        DNS1123_SUBDOMAIN,
        63,
        |s| validate_volume_name("n", s).is_ok(),
        &cases,
    );
    // As a machine name: at most 253, and 128 for an Alicloud CreateMachine.
    for max in [MAX_SUBDOMAIN_LEN, 128] {
        agree(
            DNS1123_SUBDOMAIN,
            max,
            |s| validate_dns1123_subdomain("n", s, max).is_ok(),
            &cases,
        );
    }
    agree(
        DNS1123_LABEL_OR_EMPTY,
        63,
        |s| s.is_empty() || validate_dns1123_label("n", s).is_ok(),
        &cases,
    );
}

/// Label keys on the prefix's boundaries, as `(key, accepted by the service)`; and the keys the
/// pattern refuses although the service accepts them (the gap [`LABEL_KEY_PREFIX_RULE`] states).
fn key_cases() -> (Vec<String>, Vec<String>) {
    let p63 = "a".repeat(63);
    let p64 = "a".repeat(64);
    let p30 = "b".repeat(30);
    let p31 = "b".repeat(31);
    let long = "a".repeat(63);
    let too_long = "a".repeat(64);
    let exact: Vec<String> = [
        "app",
        "app.kubernetes.io/name",
        "feature.node.kubernetes.io/cpu",
        "a_b.c-d",
        "example.com/X",
        "",
        "/x",
        "a/",
        "a/b/c",
        "-a",
        "a-",
        "_a",
        "Ex.com/x",
        &long,
        &too_long,
        "x.y/a.b",
        "ü",
        "a..b/x",
        ".a/x",
        "a-/x",
    ]
    .map(String::from)
    .to_vec()
    .into_iter()
    .chain([
        format!("{p63}/x"),
        format!("{p64}/x"),
        format!("x.{p64}/x"),
        format!("{}/x", dotted(&p63, 3)),
        format!("{}/{long}", dotted(&p63, 3)),
        format!("{}/x", dotted(&p30, 4)),
        format!("{}/x", dotted(&p30, 8)),
        format!("{}/{long}", dotted(&p30, 8)),
        format!("{}/x", dotted(&p63, 4)),
        format!("{}/x", &dotted(&p63, 4)[..254]),
    ])
    .collect();
    let gap = vec![
        format!("{}/x", &dotted(&p63, 4)[..253]),
        format!("{}/x", dotted(&p31, 4)),
        format!("{}/x", dotted("a", 9)),
        format!("{}/x", dotted("a", 127)),
    ];
    (exact, gap)
}

#[test]
fn label_patterns_mirror_the_validators() {
    let (exact, gap) = key_cases();
    let exact: Vec<&str> = exact.iter().map(String::as_str).collect();
    agree(
        LABEL_KEY,
        317,
        |s| validate_label_key("k", s).is_ok(),
        &exact,
    );
    agree(
        LABEL_VALUE,
        63,
        |s| validate_label_value("v", s).is_ok(),
        &exact,
    );
    let re = regex::Regex::new(LABEL_KEY).unwrap();
    for key in &gap {
        assert!(validate_label_key("k", key).is_ok(), "{key}");
        assert!(!re.is_match(key), "{key}");
    }
}

/// No prefix the key pattern allows is longer than the validator's 253: its longest forms.
#[test]
fn the_key_pattern_never_allows_a_prefix_past_253() {
    let re = regex::Regex::new(LABEL_KEY).unwrap();
    let longest = [dotted(&"a".repeat(63), 3), dotted(&"b".repeat(30), 8)];
    for prefix in longest {
        assert!(prefix.len() <= MAX_SUBDOMAIN_LEN);
        let key = format!("{prefix}/x");
        assert!(re.is_match(&key), "{key}");
        for longer in [format!("{prefix}a/x"), format!("{prefix}.a/x")] {
            assert!(!re.is_match(&longer), "{longer}");
        }
    }
}

/// Whether the service takes `case` as a capacity: a quantity of more than 0 bytes (whose
/// canonical form, as the service answers it, reads back as the same bytes).
fn capacity_accepted(case: &str) -> bool {
    Quantity::parse_field("c", case).is_ok_and(|q| {
        let again: Quantity = q.to_string().parse().unwrap();
        assert_eq!(again.bytes(), q.bytes(), "{case:?}");
        q.bytes() > 0
    })
}

#[test]
fn every_capacity_the_pattern_allows_is_accepted() {
    let re = regex::Regex::new(CAPACITY).unwrap();
    let allowed = [
        "1",
        "10Gi",
        "500M",
        "+5Ki",
        "0001Gi",
        "7Ei",
        "9E",
        "999999999999999999",
        "999Pi",
        "999999Ti",
        "999999999Gi",
        // Fractions with a decimal unit, never more fraction digits than its power.
        "1.5G",
        "2.125k",
        "0.5M",
        ".5M",
        "0.001k",
        "1.000000000000000001E",
        "8.999999999999999999E",
        ".000000000000000001E",
        "999999999999999.999k",
        "1.5000000000G",
        "1.",
        "5.0",
        "9.0E",
        "1.k",
        // Halves and quarters of a binary unit.
        "1.5Gi",
        "0.5Ki",
        ".25Ki",
        "7.75Ei",
        "999.75Pi",
        "1.50Mi",
        "1.Ki",
        // Integer exponents.
        "1e9",
        "5E3",
        "1e0",
        "1e+9",
        "999999999e9",
        "9e18",
        "1E10",
        "1e09",
    ];
    for case in allowed {
        assert!(re.is_match(case), "{case:?}");
        assert!(capacity_accepted(case), "{case:?}");
    }
    // Refused by the service, and by the pattern.
    for case in [
        "0",
        "000",
        "0Gi",
        "0.0G",
        ".0Ki",
        "0e9",
        "-1",
        "-0",
        "",
        "Gi",
        "8Ei",
        "10E",
        "9999999999999999999",
        "1KiB",
        "1.0000000000000000001E",
        "9.3E",
        "1.5",
        "1.0001k",
        "0.0001k",
        "1.1Ki",
        "0.1Ki",
        "100m",
        "1e-1",
        "1e19",
        "10e18",
        "1e3Gi",
        " 1",
        "1 ",
        "0.0Ki1",
    ] {
        assert!(!re.is_match(case), "{case:?}");
        assert!(!capacity_accepted(case), "{case:?}");
    }
    // Accepted by the service, but beyond what a pattern states (its description says so).
    for case in [
        "1.125Ki",
        "1000m",
        "1.5e3",
        "9223372036854775807",
        "9.2E",
        "1e-0",
        "10e17",
    ] {
        assert!(!re.is_match(case), "{case:?}");
        assert!(capacity_accepted(case), "{case:?}");
    }
}

/// Every string of quantity characters up to a few long, and many longer ones made from
/// pieces: whatever the pattern allows, the service accepts.
#[test]
fn no_capacity_the_pattern_allows_is_refused() {
    let re = regex::Regex::new(CAPACITY).unwrap();
    let pieces = [
        "", "0", "1", "5", "9", "25", "75", "50", "000", "999999", "+", "-", ".", "e", "E", "e1",
        "e+", "1", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "m", "8",
        "18", "17",
    ];
    let mut checked = 0;
    // Up to four pieces: every combination.
    let n = pieces.len();
    for a in 0..n {
        for b in 0..n {
            for c in 0..n {
                for d in 0..n {
                    let case = format!("{}{}{}{}", pieces[a], pieces[b], pieces[c], pieces[d]);
                    if re.is_match(&case) {
                        checked += 1;
                        assert!(capacity_accepted(&case), "{case:?}");
                    }
                }
            }
        }
    }
    assert!(checked > 10_000, "{checked}");
    // Long mantissas on each unit's bound.
    for unit in [
        "", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
    ] {
        for digits in 1..=20 {
            for fraction in [
                "",
                ".",
                ".5",
                ".75",
                ".999999999999999999",
                ".0000000000000000009",
            ] {
                for lead in ["", "0", "9"] {
                    let case = format!("{lead}{}{fraction}{unit}", "9".repeat(digits));
                    if re.is_match(&case) {
                        assert!(capacity_accepted(&case), "{case:?}");
                    }
                    let case = format!("{}{fraction}{unit}", "1".repeat(digits));
                    if re.is_match(&case) {
                        assert!(capacity_accepted(&case), "{case:?}");
                    }
                }
            }
        }
    }
    for exponent in 0..=25 {
        for digits in 1..=12 {
            let case = format!("{}e{exponent}", "9".repeat(digits));
            if re.is_match(&case) {
                assert!(capacity_accepted(&case), "{case:?}");
            }
        }
    }
}

#[test]
fn the_selector_pattern_mirrors_the_parser() {
    let re = regex::Regex::new(LABEL_SELECTOR).unwrap();
    let mut cases: Vec<String> = [
        "",
        "  ",
        "app=db",
        "app=db,tier in (a,b),!legacy",
        "a in ()",
        "a in (,)",
        "a notin(b)",
        "x,",
        "a==b",
        "a!=",
        "ü",
        "!a",
        "! a",
        "!a=b",
        "a b",
        "a in b",
        "example.com/x=y",
        "a = b",
        ",",
        "a,,b",
        "a in (b",
        "a=b)",
        "a inx (b)",
    ]
    .map(String::from)
    .to_vec();
    // Each key boundary case as a key in a selector, with and without `!` and an operator.
    let (exact, gap) = key_cases();
    for key in exact
        .iter()
        .filter(|k| !k.is_empty() && !k.contains([' ', ',', '!', '=']))
    {
        cases.push(key.clone());
        cases.push(format!("!{key}"));
        cases.push(format!("a=b,{key} in (x, y)"));
        cases.push(format!("{key}!=v"));
    }
    for case in &cases {
        assert_eq!(
            re.is_match(case),
            case.parse::<crate::selector::Selector>().is_ok(),
            "{case:?}"
        );
    }
    for key in &gap {
        for case in [key.clone(), format!("!{key}"), format!("a,{key}=v")] {
            assert!(case.parse::<crate::selector::Selector>().is_ok(), "{case}");
            assert!(!re.is_match(&case), "{case}");
        }
    }
}

/// The derive attributes take only literals: the profile's must be these constants.
#[test]
fn the_volume_profile_carries_these_patterns() {
    let schema = serde_json::to_value(
        <crate::volume::VolumeProvisionerProfile as utoipa::PartialSchema>::schema(),
    )
    .unwrap();
    let p = &schema["properties"];
    let pattern = |v: &serde_json::Value| -> String {
        // An optional field's schema is a `oneOf` with null.
        v["pattern"]
            .as_str()
            .or_else(|| v["oneOf"][1]["pattern"].as_str())
            .or_else(|| v["oneOf"][0]["pattern"].as_str())
            .unwrap_or_else(|| panic!("no pattern in {v}"))
            .to_string()
    };
    assert_eq!(pattern(&p["name"]), DNS1123_SUBDOMAIN);
    assert_eq!(pattern(&p["capacity"]), CAPACITY);
    assert_eq!(pattern(&p["namespace"]), DNS1123_LABEL_OR_EMPTY);
    assert_eq!(pattern(&p["orchestrator"]), DNS1123_LABEL_OR_EMPTY);
}

/// A local orchestrator's `config.capacity` (as `GET /v1/kinds` answers it) carries the same
/// pattern as a volume's, and the registration's validator holds to it, zero included.
#[test]
fn the_local_config_capacity_carries_the_pattern() {
    use crate::orchestrator::OrchestratorKind;
    let schema = OrchestratorKind::Local.config_schema();
    assert_eq!(schema["properties"]["capacity"]["pattern"], CAPACITY);
    let re = regex::Regex::new(CAPACITY).unwrap();
    for capacity in [
        "10Gi", "1.5Gi", "1e9", "0", "000", "0Gi", "-0", "1.1Ki", "8Ei", "x",
    ] {
        let config = serde_json::json!({"basePath": "/srv", "capacity": capacity});
        let accepted = OrchestratorKind::Local.validate_config(Some(&config));
        assert_eq!(re.is_match(capacity), accepted.is_ok(), "{capacity:?}");
        if let Err(e) = accepted {
            assert!(e.message.starts_with("config.capacity: "), "{}", e.message);
        }
    }
}

/// A registration's `label` and `region` patterns against the registry's rule (no character
/// [`char::is_control`] says is one), on each end of the control ranges, and the documented
/// example (`{"kind":"nomad","label":"batch jobs","region":"eu-1"}`) validates.
#[test]
fn the_registration_text_patterns_refuse_exactly_control_characters() {
    let schema = serde_json::to_value(
        <crate::orchestrator::RegisterOrchestrator as utoipa::PartialSchema>::schema(),
    )
    .unwrap();
    for (field, max) in [("label", 253), ("region", 63)] {
        let property = &schema["properties"][field];
        let text = property["pattern"]
            .as_str()
            .or_else(|| property["oneOf"][0]["pattern"].as_str())
            .or_else(|| property["oneOf"][1]["pattern"].as_str())
            .unwrap_or_else(|| panic!("no pattern in {property}"));
        let re = regex::Regex::new(text).unwrap();
        let max_in_schema = property["maxLength"]
            .as_u64()
            .or_else(|| property["oneOf"][0]["maxLength"].as_u64())
            .or_else(|| property["oneOf"][1]["maxLength"].as_u64())
            .unwrap();
        assert_eq!(max_in_schema, max);
        for example in ["batch jobs", "eu-1", "", "a-b-c", "ü é", "\u{a0}", "~"] {
            assert!(re.is_match(example), "{field}: {example:?}");
        }
        for c in (0u32..0x250).filter_map(char::from_u32) {
            let case = format!("a{c}-b");
            assert_eq!(re.is_match(&case), !c.is_control(), "{field}: {c:?}");
        }
    }
}

#[test]
fn the_schemas_are_objects_with_the_rules() {
    let labels = serde_json::to_value(<Labels as utoipa::PartialSchema>::schema()).unwrap();
    assert_eq!(labels["propertyNames"]["pattern"], LABEL_KEY);
    assert_eq!(labels["additionalProperties"]["pattern"], LABEL_VALUE);
    for (k, v) in labels["example"].as_object().unwrap() {
        validate_label_key("k", k).unwrap();
        validate_label_value("v", v.as_str().unwrap()).unwrap();
    }
    let params =
        serde_json::to_value(<VolumeParameters as utoipa::PartialSchema>::schema()).unwrap();
    assert_eq!(params["additionalProperties"], false);
}
