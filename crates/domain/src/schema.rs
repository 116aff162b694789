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

/// One part of a DNS-1123 subdomain: a DNS-1123 label of at most 63 characters.
macro_rules! subdomain_part {
    () => {
        "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
    };
}

/// A part of at most 30 characters (of a label key's prefix of four to eight parts).
macro_rules! short_subdomain_part {
    () => {
        "[a-z0-9]([-a-z0-9]{0,28}[a-z0-9])?"
    };
}

/// A label key's prefix as a pattern can bound it: one to three parts of at most 63 characters
/// (at most 191 in all), or four to eight parts of at most 30 (at most 247), so never past the
/// 253 characters [`crate::names::validate_label_key`] allows.
macro_rules! label_key_prefix {
    () => {
        concat!(
            "(",
            subdomain_part!(),
            "(\\.",
            subdomain_part!(),
            "){0,2}|",
            short_subdomain_part!(),
            "(\\.",
            short_subdomain_part!(),
            "){3,7})"
        )
    };
}

/// A label key's name part, or a label value: at most 63 letters, digits, `-`, `_` and `.`,
/// starting and ending with a letter or digit.
macro_rules! label_name {
    () => {
        "[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
    };
}

/// A label key with its optional prefix and `/`.
macro_rules! label_key {
    () => {
        concat!("(", label_key_prefix!(), "/)?", label_name!())
    };
}

/// One requirement of a selector.
macro_rules! selector_requirement {
    () => {
        concat!(
            "(!\\s*",
            label_key!(),
            "|",
            label_key!(),
            "(\\s*(!=|==|=)\\s*(",
            label_name!(),
            ")?|\\s+(in|notin)\\s*\\(\\s*(",
            label_name!(),
            "|(",
            label_name!(),
            ")?(\\s*,\\s*(",
            label_name!(),
            ")?)+)\\s*\\))?)"
        )
    };
}

/// A DNS-1123 subdomain ([`crate::names::validate_dns1123_subdomain`]): dot-separated parts of at
/// most 63 characters; its total length is the field's `maxLength`.
pub const DNS1123_SUBDOMAIN: &str =
    concat!("^", subdomain_part!(), "(\\.", subdomain_part!(), ")*$");
/// A capacity ([`crate::quantity::CAPACITY_PATTERN`], which says which forms it allows): every
/// string it allows is a quantity of more than 0 bytes the service accepts; the service also
/// accepts other forms that come to whole bytes.
pub const CAPACITY: &str = crate::quantity::CAPACITY_PATTERN;
/// A label selector ([`crate::selector::Selector`]): empty, or comma-separated requirements
/// `key`, `!key`, `key=value`, `key==value`, `key!=value`, `key in (v,..)`, `key notin (v,..)`,
/// with keys and values as [`LABEL_KEY`] and [`LABEL_VALUE`] say. Like [`LABEL_KEY`], a little
/// narrower than the parser on prefixes (see [`LABEL_KEY_PREFIX_RULE`]).
pub const LABEL_SELECTOR: &str = concat!(
    "^(\\s*|\\s*",
    selector_requirement!(),
    "\\s*(,\\s*",
    selector_requirement!(),
    "\\s*)*)$"
);
/// A label key ([`crate::names::validate_label_key`]): an optional DNS-1123 subdomain prefix and
/// `/`, then a name of letters, digits, `-`, `_` and `.` starting and ending with a letter or digit.
/// The validator bounds the prefix to 253 characters in all, which a pattern without lookahead
/// (that schemathesis cannot generate from) cannot count; the pattern bounds it by the number and
/// length of its parts instead, which is a little narrower ([`LABEL_KEY_PREFIX_RULE`]).
pub const LABEL_KEY: &str = concat!("^", label_key!(), "$");
/// A label value ([`crate::names::validate_label_value`]): empty, or like a key's name part.
pub const LABEL_VALUE: &str = concat!("^(", label_name!(), ")?$");
/// How the documents describe what [`LABEL_KEY`] allows of a prefix, and what the service accepts
/// besides.
pub const LABEL_KEY_PREFIX_RULE: &str = "A prefix is a DNS subdomain of one to three parts of at most 63 characters each, or of four to eight parts of at most 30 characters each (the service accepts any DNS subdomain prefix of at most 253 characters, with parts of at most 63).";

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
            "propertyNames": {
                "type": "string",
                "pattern": LABEL_KEY,
                "maxLength": 317,
                "description": LABEL_KEY_PREFIX_RULE,
            },
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
mod tests;
