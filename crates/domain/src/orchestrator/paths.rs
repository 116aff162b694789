//! The rules of the paths and Docker Engine addresses a config may name, and the JSON Schema
//! patterns that describe them. Apart because they are text rules with no kind of their own:
//! the configs, the limits and storage-ops all apply them, and their tests pin the patterns to the
//! validators.

use crate::code::Status;

/// What [`normalize_base_path`] accepts, as a JSON Schema pattern (a little narrower: no `.`
/// components and no control characters, which it would drop or keep): `/`-separated, at least one
/// component, none of them `..`.
pub const BASE_PATH_PATTERN: &str = "^(/+([^/\\x00-\\x1f\\x7f-\\x9f.][^/\\x00-\\x1f\\x7f-\\x9f]*|\\.[^/\\x00-\\x1f\\x7f-\\x9f.][^/\\x00-\\x1f\\x7f-\\x9f]*|\\.\\.[^/\\x00-\\x1f\\x7f-\\x9f]+))+/*$";

/// What [`validate_docker_host`] accepts, as a JSON Schema pattern (a little narrower: an
/// unbracketed tcp host of letters, digits, `.` and `-`, a port without leading zeros). No control
/// characters, C1 included, as the validator refuses them.
pub const DOCKER_HOST_PATTERN: &str = concat!(
    "^(unix://(/+([^/\\x00-\\x1f\\x7f-\\x9f.][^/\\x00-\\x1f\\x7f-\\x9f]*|\\.[^/\\x00-\\x1f\\x7f-\\x9f.][^/\\x00-\\x1f\\x7f-\\x9f]*|\\.\\.[^/\\x00-\\x1f\\x7f-\\x9f]+))+/*",
    "|tcp://([A-Za-z0-9.-]+|\\[[A-Za-z0-9.:-]+\\]):(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})/?)$"
);

/// The longest `basePath` or `host` accepted (PATH_MAX on Linux).
pub(super) const MAX_PATH_LEN: usize = 4096;

/// Normalises an absolute directory path: `//a/./b/` becomes `/a/b`. Refuses relative paths, `..`
/// (a base path must say where it is without climbing), control characters (NUL among them), and `/` itself (volumes would be made in
/// the root of the host's file system).
pub fn normalize_base_path(field: &str, text: &str) -> Result<String, Status> {
    if !text.starts_with('/') {
        return Err(Status::invalid(
            field,
            format!("{text:?} must be an absolute path (starting with '/')"),
        ));
    }
    if text.len() > MAX_PATH_LEN {
        return Err(Status::invalid(
            field,
            format!("is {} bytes long; at most {MAX_PATH_LEN}", text.len()),
        ));
    }
    // A control byte in a path ends up in logs, error messages and terminals as-is.
    if text.chars().any(char::is_control) {
        return Err(Status::invalid(
            field,
            "must not contain control characters (C0, DEL or C1)",
        ));
    }
    let mut parts = Vec::new();
    for part in text.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(Status::invalid(
                    field,
                    format!("{text:?} must not contain '..' components"),
                ));
            }
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err(Status::invalid(
            field,
            format!("{text:?} must not be the root directory '/'"),
        ));
    }
    Ok(format!("/{}", parts.join("/")))
}

/// The component of `path` that names a Berth volume's own object, `<name>-<uid>` as the local
/// backend names them (a volume name, `-`, a lower-case hyphenated UUID), if any. A local
/// orchestrator's base path must not be inside a volume: deleting that volume removes its directory
/// with everything in it, other volumes too. Checked on the text at registration and again by
/// storage-ops on the path as it resolves (links followed).
pub fn volume_object_in(path: &str) -> Option<&str> {
    path.split('/').find(|part| is_volume_object_name(part))
}

fn is_volume_object_name(part: &str) -> bool {
    const UUID_LEN: usize = 36;
    let bytes = part.as_bytes();
    if bytes.len() < UUID_LEN + 2 || bytes[bytes.len() - UUID_LEN - 1] != b'-' {
        return false;
    }
    let uid = &bytes[bytes.len() - UUID_LEN..];
    let uuid_shaped = uid.iter().enumerate().all(|(i, b)| match i {
        8 | 13 | 18 | 23 => *b == b'-',
        _ => b.is_ascii_digit() || (b'a'..=b'f').contains(b),
    });
    // The byte before the uid is '-' (ASCII), so the name ends on a character boundary.
    uuid_shaped
        && crate::names::validate_volume_name("name", &part[..bytes.len() - UUID_LEN - 1]).is_ok()
}

/// Checks a Docker Engine address: `unix://` followed by an absolute socket path, or `tcp://host:port`.
/// Returns it with a trailing `/` removed.
pub fn validate_docker_host(field: &str, text: &str) -> Result<String, Status> {
    const RULE: &str = "must be unix:///absolute/socket/path or tcp://host:port";
    if text.len() > MAX_PATH_LEN || text.chars().any(char::is_control) {
        return Err(Status::invalid(field, RULE));
    }
    if let Some(path) = text.strip_prefix("unix://") {
        let path = normalize_base_path(field, path)
            .map_err(|_| Status::invalid(field, format!("{text:?} {RULE}")))?;
        return Ok(format!("unix://{path}"));
    }
    if let Some(rest) = text.strip_prefix("tcp://") {
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        let valid = match authority.rsplit_once(':') {
            Some((host, port)) => {
                let host = host
                    .strip_prefix('[')
                    .and_then(|h| h.strip_suffix(']'))
                    .unwrap_or(host);
                !host.is_empty()
                    && host
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'))
                    && port.parse::<u16>().is_ok_and(|p| p > 0)
            }
            None => false,
        };
        return if valid {
            Ok(format!("tcp://{authority}"))
        } else {
            Err(Status::invalid(field, format!("{text:?} {RULE}")))
        };
    }
    Err(Status::invalid(field, format!("{text:?} {RULE}")))
}
