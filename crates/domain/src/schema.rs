//! The OpenAPI schemas of values whose Rust type says less than their rules: label maps, volume
//! parameters, and the patterns of names and quantities. Each mirrors a validator of this crate
//! exactly (the tests below hold them to it), so a document's schema-valid input is what the
//! services accept.
//!
//! Only built with the `openapi` feature; the types here exist only to name schemas.

use std::borrow::Cow;

use serde_json::json;
use utoipa::openapi::{RefOr, Schema};

/// A DNS-1123 label ([`crate::names::validate_dns1123_label`]); its length is at most
/// [`crate::names::MAX_NAME_LEN`].
pub const DNS1123_LABEL: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// A DNS-1123 label or nothing (a field whose empty value means "the default").
pub const DNS1123_LABEL_OR_EMPTY: &str = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$";
/// A DNS-1123 subdomain ([`crate::names::validate_dns1123_subdomain`]).
pub const DNS1123_SUBDOMAIN: &str =
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A capacity in the plain forms ([`crate::quantity::Quantity::parse_field`]): an optional `+`,
/// a whole number with a non-zero digit, and an optional binary or decimal unit, with no more
/// digits than keep it below 8Ei (`7Ei` is the largest in exbibytes). The service also accepts
/// what this pattern leaves out but still comes to a whole number of bytes (`1.5Gi`, `1e3`); the
/// pattern names the forms a schema-valid request can rely on, every one of which is accepted.
pub const CAPACITY: &str = "^\\+?(0*[1-9][0-9]{0,17}|0*[1-9][0-9]{0,14}k|0*[1-9][0-9]{0,11}M|0*[1-9][0-9]{0,8}G|0*[1-9][0-9]{0,5}T|0*[1-9][0-9]{0,2}P|0*[1-9][0-9]{0,14}Ki|0*[1-9][0-9]{0,11}Mi|0*[1-9][0-9]{0,8}Gi|0*[1-9][0-9]{0,5}Ti|0*[1-9][0-9]{0,2}Pi|0*[1-9]E|0*[1-7]Ei)$";
/// A label selector ([`crate::selector::Selector`]): empty, or comma-separated requirements
/// `key`, `!key`, `key=value`, `key==value`, `key!=value`, `key in (v,..)`, `key notin (v,..)`,
/// with keys and values as [`LABEL_KEY`] and [`LABEL_VALUE`] say.
pub const LABEL_SELECTOR: &str = "^(\\s*|\\s*(!\\s*([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?|([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?(\\s*(!=|==|=)\\s*([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?|\\s+(in|notin)\\s*\\(\\s*([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?|([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?(\\s*,\\s*([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)+)\\s*\\))?)\\s*(,\\s*(!\\s*([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?|([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?(\\s*(!=|==|=)\\s*([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?|\\s+(in|notin)\\s*\\(\\s*([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?|([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?(\\s*,\\s*([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)+)\\s*\\))?)\\s*)*)$";
/// A label key ([`crate::names::validate_label_key`]): an optional DNS-1123 subdomain prefix and
/// `/`, then a name of letters, digits, `-`, `_` and `.` starting and ending with a letter or digit.
pub const LABEL_KEY: &str = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$";
/// A label value ([`crate::names::validate_label_value`]): empty, or like a key's name part.
pub const LABEL_VALUE: &str = "^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$";

fn from_json(value: serde_json::Value) -> RefOr<Schema> {
    RefOr::T(serde_json::from_value(value).expect("a valid schema literal"))
}

/// The schema of a label map (`Labels`): string keys and values, each held to Kubernetes' label
/// rules.
pub struct Labels;

impl utoipa::PartialSchema for Labels {
    fn schema() -> RefOr<Schema> {
        from_json(json!({
            "type": "object",
            "description": "Labels, as Kubernetes writes them: keys are an optional DNS subdomain prefix and '/', then a name of at most 63 letters, digits, '-', '_' and '.'; values are empty or such a name.",
            "propertyNames": {"type": "string", "pattern": LABEL_KEY, "maxLength": 317},
            "additionalProperties": {"type": "string", "pattern": LABEL_VALUE, "maxLength": 63},
            "example": {"app": "db", "tier": "storage"},
        }))
    }
}

impl utoipa::ToSchema for Labels {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Labels")
    }
}

/// The schema of a volume's `parameters`: the two Berth reads, and no other.
pub struct VolumeParameters;

impl utoipa::PartialSchema for VolumeParameters {
    fn schema() -> RefOr<Schema> {
        from_json(json!({
            "type": "object",
            "description": "Backend parameters; only these two exist.",
            "properties": {
                "format": {
                    "type": "string",
                    "enum": ["directory", "file"],
                    "description": "For the local backend: a directory (the default) or a sparse file of the exact capacity."
                },
                "reclaimPolicy": {
                    "type": "string",
                    "enum": ["Delete", "Retain"],
                    "description": "What deleting the volume does to the backend object (Delete, the default, removes it)."
                }
            },
            "additionalProperties": false,
        }))
    }
}

impl utoipa::ToSchema for VolumeParameters {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("VolumeParameters")
    }
}

#[cfg(test)]
mod tests {
    //! Each pattern against the validator it mirrors, on the validators' own hard cases and a few
    //! more: a string matches exactly when the validator accepts it.

    use super::*;
    use crate::names::{
        validate_dns1123_label, validate_label_key, validate_label_value, validate_volume_name,
    };
    use crate::quantity::Quantity;

    fn agree(pattern: &str, max_len: usize, accepts: impl Fn(&str) -> bool, cases: &[&str]) {
        let re = regex::Regex::new(pattern).unwrap();
        for case in cases {
            let by_schema = re.is_match(case) && case.chars().count() <= max_len;
            assert_eq!(by_schema, accepts(case), "{pattern} on {case:?}");
        }
    }

    #[test]
    fn name_patterns_mirror_the_validators() {
        let long = "a".repeat(63);
        let too_long = "a".repeat(64);
        let cases = [
            "a", "vol-1", "0abc", &long, &too_long, "", "-a", "a-", "A", "a_b", "a.b", "a/b", "..",
            "ü", "data.v1", "../etc", "a..b", ".a", "a.", "/abs", "a.-b", "a-.b",
        ];
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
        agree(
            DNS1123_LABEL_OR_EMPTY,
            63,
            |s| s.is_empty() || validate_dns1123_label("n", s).is_ok(),
            &cases,
        );
    }

    #[test]
    fn label_patterns_mirror_the_validators() {
        let long = "a".repeat(63);
        let too_long = "a".repeat(64);
        let keys = [
            "app",
            "app.kubernetes.io/name",
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
        ];
        agree(
            LABEL_KEY,
            317,
            |s| validate_label_key("k", s).is_ok(),
            &keys,
        );
        agree(
            LABEL_VALUE,
            63,
            |s| validate_label_value("v", s).is_ok(),
            &keys,
        );
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
        ];
        for case in allowed {
            assert!(re.is_match(case), "{case:?}");
            let q = Quantity::parse_field("c", case).unwrap();
            assert!(q.bytes() > 0, "{case:?}");
        }
        // Refused by the service, and by the pattern.
        for case in [
            "0",
            "0Gi",
            "-1",
            "",
            "Gi",
            "8Ei",
            "10E",
            "9999999999999999999",
            "1KiB",
        ] {
            assert!(!re.is_match(case), "{case:?}");
            assert!(
                Quantity::parse_field("c", case).map_or(true, |q| q.bytes() == 0),
                "{case:?}"
            );
        }
    }

    #[test]
    fn the_selector_pattern_mirrors_the_parser() {
        let re = regex::Regex::new(LABEL_SELECTOR).unwrap();
        for case in [
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
        ] {
            assert_eq!(
                re.is_match(case),
                case.parse::<crate::selector::Selector>().is_ok(),
                "{case:?}"
            );
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
}
