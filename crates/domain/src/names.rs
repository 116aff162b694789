//! Names and labels, validated as Kubernetes validates them.
//!
//! Volume, namespace and orchestrator names end up in file-system paths, Docker volume names and URLs,
//! so they are held to DNS-1123 (lower-case alphanumerics and `-`, at most 63 characters) before anything
//! else sees them: no `/`, no `..`, nothing that can climb out of a directory. maya let 64+ character
//! names through and broke later; here they are refused at the door.

use std::collections::BTreeMap;

use crate::code::Status;

/// Labels: key/value pairs validated by [`validate_labels`].
pub type Labels = BTreeMap<String, String>;

/// The longest DNS-1123 label, and the longest name Berth accepts for anything it names.
pub const MAX_NAME_LEN: usize = 63;
/// The longest DNS-1123 subdomain (a label key's prefix).
pub const MAX_SUBDOMAIN_LEN: usize = 253;

const LABEL_RULE: &str = "must be a DNS-1123 label: at most 63 characters, lower-case letters, digits and '-', starting and ending with a letter or digit";

/// Checks a DNS-1123 label (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters).
pub fn validate_dns1123_label(field: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() {
        return Err(Status::invalid(
            field,
            format!("must not be empty; {LABEL_RULE}"),
        ));
    }
    if value.len() > MAX_NAME_LEN {
        return Err(Status::invalid(
            field,
            format!(
                "{:?} is {} characters long; {LABEL_RULE}",
                truncated(value),
                value.len()
            ),
        ));
    }
    if !is_dns1123_label(value) {
        return Err(Status::invalid(field, format!("{value:?} {LABEL_RULE}")));
    }
    Ok(())
}

/// Checks a DNS-1123 subdomain: dot-separated labels of at most 63 characters each, at most
/// `max_len` characters in all. The message states the rule that failed: the total length, a
/// part's length, or the characters.
pub fn validate_dns1123_subdomain(field: &str, value: &str, max_len: usize) -> Result<(), Status> {
    const PARTS: &str = "lower-case letters, digits, '-' and '.', each dot-separated part 1 to 63 characters starting and ending with a letter or digit";
    if value.is_empty() {
        return Err(Status::invalid(
            field,
            format!(
                "must not be empty; it must be a DNS-1123 subdomain of at most {max_len} characters: {PARTS}"
            ),
        ));
    }
    if value.len() > max_len {
        return Err(Status::invalid(
            field,
            format!(
                "{:?} is {} characters long; it must be a DNS-1123 subdomain of at most {max_len} characters",
                truncated(value),
                value.len()
            ),
        ));
    }
    if let Some(part) = value.split('.').find(|p| p.len() > MAX_NAME_LEN) {
        return Err(Status::invalid(
            field,
            format!(
                "{:?} has a dot-separated part of {} characters; each part of a DNS-1123 subdomain is at most {MAX_NAME_LEN} characters",
                truncated(value),
                part.len()
            ),
        ));
    }
    if !value.split('.').all(is_dns1123_label) {
        return Err(Status::invalid(
            field,
            format!("{value:?} must be a DNS-1123 subdomain: {PARTS}"),
        ));
    }
    Ok(())
}

/// Checks a volume name: a DNS-1123 subdomain of at most 63 characters, since it becomes part of a
/// directory and a Docker volume name.
pub fn validate_volume_name(field: &str, value: &str) -> Result<(), Status> {
    validate_dns1123_subdomain(field, value, MAX_NAME_LEN)
}

fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_NAME_LEN
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A label name part or value: `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters.
fn is_qualified_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_NAME_LEN
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// Checks a label key: an optional DNS-1123 subdomain prefix and `/`, then a name of at most 63
/// characters of alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric.
pub fn validate_label_key(field: &str, key: &str) -> Result<(), Status> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        validate_dns1123_subdomain(&format!("{field} prefix"), prefix, MAX_SUBDOMAIN_LEN)?;
    }
    if !is_qualified_part(name) {
        return Err(Status::invalid(
            field,
            format!(
                "{:?} is not a valid label key: the name part must be at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit, with an optional DNS subdomain prefix and '/'",
                truncated(key)
            ),
        ));
    }
    Ok(())
}

/// Checks a label value: empty, or at most 63 characters of alphanumerics, `-`, `_` and `.`, starting and
/// ending alphanumeric.
pub fn validate_label_value(field: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() || is_qualified_part(value) {
        return Ok(());
    }
    Err(Status::invalid(
        field,
        format!(
            "{:?} is not a valid label value: it must be empty or at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit",
            truncated(value)
        ),
    ))
}

/// The most labels one object may carry. Kubernetes sets no count, only each key's and value's
/// length; Berth keeps every object's labels in its rows and sends them on every read and watch
/// event, so a caller who may write one object must not be able to make it megabytes (a break-it
/// run grew one volume's labels without bound, and every patch of it slowed with them). 64 is more than
/// the recommended labels and a team's own together.
pub const MAX_LABELS: usize = 64;

/// Checks every key and value of a label map, and how many there are; the field in a message is
/// `<field>[<key>]`.
pub fn validate_labels(field: &str, labels: &Labels) -> Result<(), Status> {
    if labels.len() > MAX_LABELS {
        return Err(Status::invalid(
            field,
            format!(
                "{} labels, more than the {MAX_LABELS} an object may carry",
                labels.len()
            ),
        ));
    }
    for (key, value) in labels {
        validate_label_key(&format!("{field} key"), key)?;
        validate_label_value(&format!("{field}[{key}]"), value)?;
    }
    Ok(())
}

/// Long hostile inputs are cut short in messages so an error never echoes megabytes back.
pub(crate) fn truncated(s: &str) -> String {
    const SHOWN: usize = 80;
    if s.len() <= SHOWN {
        return s.to_string();
    }
    let mut end = SHOWN;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The candidate `name` is a slip of the keyboard for, if any: the closest by edit distance when at
/// most two edits away (a letter missing, added, changed, or two swapped), one for a candidate of
/// four letters or fewer (where two edits make another word), or the same name in other case.
/// A misspelt setting or field is then refused naming what was meant, rather than silently
/// ignored; a name further from every candidate (`BERTH_BIN_DIR` is three from `BERTH_DATA_DIR`)
/// is another name altogether.
pub fn near_miss<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .filter_map(|candidate| {
            if name.eq_ignore_ascii_case(candidate) {
                return Some((0, candidate));
            }
            let limit = if candidate.len() <= 4 { 1 } else { 2 };
            // Lengths further apart than the limit are further apart in edits too: a long
            // hostile name costs nothing to turn down.
            if name.chars().count().abs_diff(candidate.chars().count()) > limit {
                return None;
            }
            let distance = edit_distance(name, candidate);
            (distance <= limit).then_some((distance, candidate))
        })
        .min()
        .map(|(_, candidate)| candidate)
}

/// Edit distance with a swap of two neighbours as one edit (optimal string alignment), by
/// characters: `szie` is one from `size`, as a reader counts it; a non-ASCII letter in a name is
/// one edit, not the two or three of its bytes.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows: two back (for a swap), the last, and the one being filled.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut last: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut row = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let substitution = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (last[j - 1] + substitution)
                .min(last[j] + 1)
                .min(row[j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before[j - 2] + 1);
            }
            row[j] = best;
        }
        before = std::mem::replace(&mut last, row);
    }
    last[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::Code;

    /// `validate` refuses every one of `bad` as invalid input, its message starting with `field` (or a part of it: `labels key prefix`) and saying `rule`.
    fn assert_rejects(
        validate: fn(&str, &str) -> Result<(), Status>,
        field: &str,
        bad: &[&str],
        rule: &str,
    ) {
        for bad in bad {
            let e = validate(field, bad).unwrap_err();
            assert_eq!(e.code, Code::InvalidArgument, "{bad}");
            assert!(e.message.starts_with(field), "{bad}: {}", e.message);
            assert!(e.message.contains(rule), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn dns1123_labels() {
        for ok in ["a", "vol-1", "0abc", &"a".repeat(63)] {
            validate_dns1123_label("metadata.name", ok).unwrap();
        }
        let cases = [
            ("", "must not be empty"),
            ("-a", "DNS-1123 label"),
            ("a-", "DNS-1123 label"),
            ("A", "DNS-1123 label"),
            ("a_b", "DNS-1123 label"),
            ("a.b", "DNS-1123 label"),
            ("a/b", "DNS-1123 label"),
            ("..", "DNS-1123 label"),
            ("ü", "DNS-1123 label"),
        ];
        for (bad, rule) in cases {
            assert_rejects(validate_dns1123_label, "name", &[bad], rule);
        }
        let e = validate_dns1123_label("name", &"a".repeat(64)).unwrap_err();
        assert!(e.message.contains("64 characters long"), "{}", e.message);
    }

    #[test]
    fn volume_names_allow_dots_but_not_traversal_or_length() {
        validate_volume_name("name", "data.v1").unwrap();
        let bad = [
            "..",
            "../etc",
            "a..b",
            ".a",
            "a.",
            "a/b",
            "/abs",
            &"a".repeat(64),
        ];
        assert_rejects(validate_volume_name, "name", &bad, "DNS-1123 subdomain");
        let long = "a".repeat(10_000);
        let e = validate_volume_name("name", &long).unwrap_err();
        assert!(e.message.len() < 400, "message echoes the whole input");
    }

    /// The message states the rule that failed: a part over 63 characters is not called too long
    /// in all, and a name too long in all says the limit of the field.
    #[test]
    fn subdomain_messages_state_the_rule_that_failed() {
        let part = "a".repeat(63);
        let fits = [part.as_str(); 4].join(".")[..253].to_string();
        validate_dns1123_subdomain("name", &fits, MAX_SUBDOMAIN_LEN).unwrap();
        let e = validate_dns1123_subdomain("name", &format!("{part}a.b"), MAX_SUBDOMAIN_LEN)
            .unwrap_err();
        assert!(
            e.message
                .contains("has a dot-separated part of 64 characters; each part of a DNS-1123 subdomain is at most 63 characters"),
            "{}",
            e.message
        );
        assert!(!e.message.contains("253"), "{}", e.message);
        let e =
            validate_dns1123_subdomain("name", &format!("{fits}a"), MAX_SUBDOMAIN_LEN).unwrap_err();
        assert!(
            e.message.contains(
                "is 254 characters long; it must be a DNS-1123 subdomain of at most 253 characters"
            ),
            "{}",
            e.message
        );
        let e = validate_dns1123_subdomain("name", &"a.".repeat(65)[..129], 128).unwrap_err();
        assert!(
            e.message.contains("at most 128 characters"),
            "{}",
            e.message
        );
        let e = validate_dns1123_subdomain("name", "a..b", 128).unwrap_err();
        assert!(
            e.message
                .contains("each dot-separated part 1 to 63 characters"),
            "{}",
            e.message
        );
    }

    #[test]
    fn an_object_carries_at_most_max_labels() {
        let labels =
            |n: usize| -> Labels { (0..n).map(|i| (format!("k{i}"), "v".into())).collect() };
        assert!(validate_labels("metadata.labels", &labels(MAX_LABELS)).is_ok());
        let e = validate_labels("metadata.labels", &labels(MAX_LABELS + 1)).unwrap_err();
        assert!(
            e.message.starts_with("metadata.labels: 65 labels"),
            "{}",
            e.message
        );
    }

    #[test]
    fn label_keys_and_values() {
        for ok in ["app", "app.kubernetes.io/name", "a_b.c-d", "example.com/X"] {
            validate_label_key("labels key", ok).unwrap();
        }
        let bad = [
            "",
            "-a",
            "a-",
            "/a",
            "a/",
            "Example.com/a",
            "a/b/c",
            &"a".repeat(64),
        ];
        assert_rejects(validate_label_key, "labels key", &bad, "");
        for ok in ["", "v1", "a.b_c-d", &"x".repeat(63)] {
            validate_label_value("labels[app]", ok).unwrap();
        }
        let bad = ["-x", "x-", "a b", "a/b", &"x".repeat(64)];
        assert_rejects(
            validate_label_value,
            "labels[app]",
            &bad,
            "not a valid label value",
        );
        let mut labels = Labels::new();
        labels.insert("tier".into(), "bad value".into());
        let e = validate_labels("labels", &labels).unwrap_err();
        assert!(e.message.starts_with("labels[tier]: "), "{}", e.message);
    }

    /// Every name and label Berth takes refuses control bytes (C0, DEL, C1) as a 400 naming the
    /// field, and its message shows them escaped, never raw (they would reach logs and terminals).
    #[test]
    fn control_bytes_are_refused_in_every_name_and_label() {
        type Validate = fn(&str, &str) -> Result<(), Status>;
        let validators: [(&str, Validate); 5] = [
            ("namespace", validate_dns1123_label),
            ("name", validate_volume_name),
            ("machine.metadata.name", |f, v| {
                validate_dns1123_subdomain(f, v, MAX_SUBDOMAIN_LEN)
            }),
            ("labels key", validate_label_key),
            ("labels[app]", validate_label_value),
        ];
        for c in [
            '\0', '\u{1}', '\n', '\u{1b}', '\u{7f}', '\u{80}', '\u{85}', '\u{9b}', '\u{9f}',
        ] {
            for (field, validate) in validators {
                for text in [format!("a{c}b"), format!("{c}ab"), format!("ab{c}")] {
                    let e = validate(field, &text).unwrap_err();
                    assert_eq!(e.code, Code::InvalidArgument, "{field} {text:?}");
                    assert!(
                        e.message.starts_with(field),
                        "{field} {text:?}: {}",
                        e.message
                    );
                    assert!(!e.message.contains(c), "{field} {text:?}: shown raw");
                }
            }
        }
    }

    #[test]
    fn near_misses_are_slips_not_other_names() {
        let fields = ["instanceType", "zoneID", "size", "tags"];
        let near = |n: &str| near_miss(n, fields.iter().copied());
        assert_eq!(near("instanceTyp"), Some("instanceType"));
        assert_eq!(near("instnaceType"), Some("instanceType"));
        assert_eq!(near("zone"), Some("zoneID"));
        assert_eq!(near("ZONEID"), Some("zoneID"));
        assert_eq!(near("sizes"), Some("size"));
        // Two neighbours swapped are one slip, in short names too.
        assert_eq!(near("szie"), Some("size"));
        assert_eq!(near("tgas"), Some("tags"));
        assert_eq!(near("zoenID"), Some("zoneID"));
        // A letter from another script, or an invisible one, is one slip, not its bytes.
        assert_eq!(near("\u{455}ize"), Some("size"));
        assert_eq!(near("zone\u{200b}ID"), Some("zoneID"));
        // Two edits from a short name make another word: not a slip.
        assert_eq!(near("taxes"), None);
        assert_eq!(near("kind"), None);
        assert_eq!(near("secretRef"), None);
        assert_eq!(near(&"x".repeat(100_000)), None);
    }

    #[test]
    fn the_edit_distance_is_levenshtein() {
        assert_eq!(
            edit_distance("BERTH_INTERNAL_TOKN", "BERTH_INTERNAL_TOKEN"),
            1
        );
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "ab"), 2);
        assert_eq!(edit_distance("ab", "ba"), 1);
        assert_eq!(edit_distance("ca", "abc"), 3);
    }
}
