//! The rules a spec's fields obey whatever the operator allows: bounds, grammar, the image
//! reference. A field breaking one is a 400 on every driver.
//!
//! Apart from the operator's allowances ([`super::allowances`]) because the two answer
//! differently and change for different reasons: these rules are Berth's and the Engine's (and
//! the document's schema repeats them, [`super::schema`]); the allowances are one driver's
//! settings, and a request they refuse is a 412 that another driver might take.

use domain::names;

use super::decode::ProviderSpec;
use super::{RESERVED_LABEL_PREFIX, reserved_prefix};
use crate::docker::settings::{DOCKER_HUB, is_registry_host};
use crate::provider::Violations;

/// The longest `command` or `args` entry, in characters.
pub(super) const MAX_ARG_CHARS: usize = 4096;
/// The longest `env` value, in characters.
pub(super) const MAX_ENV_VALUE_CHARS: usize = 32 * 1024;
/// The longest `labels` value, in characters.
pub(super) const MAX_LABEL_VALUE_CHARS: usize = 1024;
/// The longest informational text (`apiVersion`, `kind`), in characters.
pub(super) const MAX_INFO_CHARS: usize = 256;
/// The most `tags` entries.
pub(super) const MAX_TAGS: usize = 64;
/// The longest tag key, in characters (a label key: a 253-character prefix, '/', a 63-character name).
pub(super) const MAX_TAG_KEY_CHARS: usize = 317;
/// The longest tag value, in characters.
pub(super) const MAX_TAG_VALUE_CHARS: usize = 1024;

/// A checked image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// As written.
    pub reference: String,
    /// The registry it comes from (`docker.io` when it names none).
    pub registry: String,
}

/// Whether `s` has a control character (NUL, newline, ...), which no Engine field here may hold.
pub(super) fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

/// Why a text is not an image reference ([`parse_image`]); the text completes a sentence that
/// starts with the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ImageRefError {
    /// Empty.
    #[error("is required")]
    Required,
    /// Not of the form the Engine reads.
    #[error(
        "must be an image reference: [registry/]name[:tag][@sha256:<64 hex digits>] (or sha384, sha512), the name in lower-case letters, digits, '.', '_', '-' and '/'"
    )]
    Malformed,
}

/// Parses and checks an image reference: `[registry/]path[:tag][@digest]`, as the Engine reads it.
pub fn parse_image(text: &str) -> Result<ImageRef, ImageRefError> {
    const RULE: ImageRefError = ImageRefError::Malformed;
    if text.is_empty() {
        return Err(ImageRefError::Required);
    }
    if text.len() > 512 || has_control(text) {
        return Err(RULE);
    }
    let (rest, digest) = match text.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (text, None),
    };
    if let Some(d) = digest {
        // The digests the Engine verifies (OCI's registered algorithms): anything else it refuses
        // only when the container is made, which would read as the Engine's fault.
        let ok = d.split_once(':').is_some_and(|(algo, hex)| {
            let len = match algo {
                "sha256" => 64,
                "sha384" => 96,
                "sha512" => 128,
                _ => return false,
            };
            hex.len() == len
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        });
        if !ok {
            return Err(RULE);
        }
    }
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (path, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(tag) = tag {
        let ok = !tag.is_empty()
            && tag.len() <= 128
            && tag
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
            && !tag.starts_with(['.', '-']);
        if !ok {
            return Err(RULE);
        }
    }
    let mut parts: Vec<&str> = path.split('/').collect();
    let registry = if parts.len() > 1 && (parts[0].contains(['.', ':']) || parts[0] == "localhost")
    {
        let host = parts.remove(0);
        if !is_registry_host(host) {
            return Err(RULE);
        }
        host.to_ascii_lowercase()
    } else {
        DOCKER_HUB.to_owned()
    };
    let component_ok = |c: &str| {
        !c.is_empty()
            && c.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
            })
            && c.as_bytes()[0].is_ascii_alphanumeric()
            && c.as_bytes()[c.len() - 1].is_ascii_alphanumeric()
    };
    if !parts.iter().all(|c| component_ok(c)) {
        return Err(RULE);
    }
    Ok(ImageRef {
        reference: text.to_owned(),
        registry,
    })
}

/// Whether `name` is an environment variable name (`[A-Za-z_][A-Za-z0-9_]*`).
pub(super) fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Whether `name` is a Docker volume name.
pub fn is_volume_name(name: &str) -> bool {
    name.len() >= 2
        && name.len() <= 255
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

impl ProviderSpec {
    /// Bounds and grammar of the free texts no other rule covers: the informational fields and the
    /// tags (a value is never echoed: it may be 100,000 characters).
    pub(super) fn check_free_text(&self, v: &mut Violations) {
        for (field, text) in [("apiVersion", &self.api_version), ("kind", &self.kind)] {
            if text.chars().count() > MAX_INFO_CHARS || has_control(text) {
                v.add(
                    field,
                    format!(
                        "must be at most {MAX_INFO_CHARS} characters without control characters"
                    ),
                );
            }
        }
        if self.tags.len() > MAX_TAGS {
            v.add("tags", format!("must have at most {MAX_TAGS} entries"));
        }
        for (key, value) in &self.tags {
            if key.chars().count() > MAX_TAG_KEY_CHARS || key.is_empty() || has_control(key) {
                v.add(
                    "tags",
                    format!("a key must be 1 to {MAX_TAG_KEY_CHARS} characters without control characters"),
                );
            } else if value.chars().count() > MAX_TAG_VALUE_CHARS || has_control(value) {
                v.add(
                    &format!("tags[{key}]"),
                    format!("must be at most {MAX_TAG_VALUE_CHARS} characters without control characters"),
                );
            }
        }
    }

    /// `command`, `args` and `env`: bounded, without control characters, every name a
    /// variable's.
    pub(super) fn check_process(&self, v: &mut Violations) {
        // Berth's own limits, in characters (what a document's maxLength counts).
        for (field, list) in [("command", &self.command), ("args", &self.args)] {
            if list.len() > 256 {
                v.add(field, "must have at most 256 entries");
            }
            for (i, s) in list.iter().enumerate() {
                if s.chars().count() > MAX_ARG_CHARS || has_control(s) {
                    v.add(
                        &format!("{field}[{i}]"),
                        "must be at most 4096 characters without control characters (C0, DEL or C1)",
                    );
                }
            }
        }
        if self.command.first().is_some_and(String::is_empty) {
            v.add("command[0]", "must not be empty");
        }
        if self.env.len() > 256 {
            v.add("env", "must have at most 256 entries");
        }
        for (name, value) in &self.env {
            if name.chars().count() > 256 {
                v.add(
                    "env",
                    "a variable name is longer than 256 characters; at most 256",
                );
            } else if !is_env_name(name) {
                v.add(
                    "env",
                    format!("{name:?} is not a variable name: letters, digits and '_', not starting with a digit"),
                );
            }
            if value.chars().count() > MAX_ENV_VALUE_CHARS || has_control(value) {
                v.add(
                    &format!("env[{name}]"),
                    "must be at most 32768 characters without control characters (C0, DEL or C1)",
                );
            }
        }
    }

    /// `labels`: bounded, each key a label key outside the reserved prefixes.
    pub(super) fn check_labels(&self, v: &mut Violations) {
        if self.labels.len() > 64 {
            v.add("labels", "must have at most 64 entries");
        }
        for (key, value) in &self.labels {
            if key.chars().count() > MAX_TAG_KEY_CHARS {
                v.add(
                    "labels",
                    format!("a key is longer than {MAX_TAG_KEY_CHARS} characters; at most {MAX_TAG_KEY_CHARS}"),
                );
                continue;
            }
            if let Err(e) = names::validate_label_key("labels key", key) {
                v.add("labels", e.message.trim_start_matches("labels key: "));
            } else if let Some(prefix) = reserved_prefix(key) {
                v.add(
                    &format!("labels[{key}]"),
                    if prefix == RESERVED_LABEL_PREFIX {
                        format!("keys under {RESERVED_LABEL_PREFIX} are the driver's own")
                    } else {
                        format!("keys under {prefix} are reserved: the Docker tools read them as instructions")
                    },
                );
            }
            if value.chars().count() > MAX_LABEL_VALUE_CHARS || has_control(value) {
                v.add(
                    &format!("labels[{key}]"),
                    "must be at most 1024 characters without control characters",
                );
            }
        }
    }
}
