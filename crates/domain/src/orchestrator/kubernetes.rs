//! A `kubernetes` orchestrator's config: which API server, which namespace the claims go in, and
//! what claims to ask for. The registry validates a registration with it and storage-ops reads the
//! stored config back with it, so both hold the same rules.
//!
//! `server` absent means in-cluster (the pod's service account). A server is `https://` anywhere
//! and `http://` only on a loopback address, where a test's stand-in API server listens: a claim's
//! bearer token must never cross a network in clear. Credentials never come from the config (a
//! caller's words): they are the operator's, in the pod or in the kubeconfig file it names.

use serde_json::{Map, Value, json};

use super::{OrchestratorKind, refuse_unknown_keys};
use crate::code::Status;
use crate::names::{validate_dns1123_label, validate_dns1123_subdomain};

/// The access modes a claim may ask for (core/v1 PersistentVolumeAccessMode).
pub const ACCESS_MODES: [&str; 4] = [
    "ReadWriteOnce",
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOncePod",
];

/// The volume modes a claim may ask for (core/v1 PersistentVolumeMode).
pub const VOLUME_MODES: [&str; 2] = ["Filesystem", "Block"];

/// The longest `server` accepted: a URL, not a document.
const MAX_SERVER_LEN: usize = 2048;

/// The pattern of `server`, for the kind's schema: http(s), an authority without user info, an
/// optional path; no query, fragment, space or control character.
pub const SERVER_PATTERN: &str = "^https?://[A-Za-z0-9.\\-\\[\\]:]+(/[A-Za-z0-9._~\\-/]*)?$";

/// A `kubernetes` orchestrator's config, normalised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesConfig {
    /// The API server's URL without a trailing `/`; `None`: in-cluster.
    pub server: Option<String>,
    /// The Kubernetes namespace Berth's claims are made in.
    pub namespace: String,
    /// The claims' `storageClassName`; `None`: the cluster's default class.
    pub storage_class_name: Option<String>,
    /// The claims' `accessModes`, in the order given, without repeats.
    pub access_modes: Vec<String>,
    /// The claims' `volumeMode`.
    pub volume_mode: String,
}

impl KubernetesConfig {
    /// The config's keys.
    pub const KEYS: [&'static str; 5] = [
        "server",
        "namespace",
        "storageClassName",
        "accessModes",
        "volumeMode",
    ];

    /// Reads (and validates) a registered `kubernetes` orchestrator's config.
    pub fn from_config(config: &Value) -> Result<Self, Status> {
        match config {
            Value::Object(map) => KubernetesConfig::from_map(map),
            _ => Err(Status::invalid("config", "must be a JSON object")),
        }
    }

    pub(super) fn from_map(map: &Map<String, Value>) -> Result<Self, Status> {
        refuse_unknown_keys(OrchestratorKind::Kubernetes, map, &Self::KEYS)?;
        let text = |key: &str| -> Result<Option<&str>, Status> {
            match map.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.as_str())),
                Some(_) => Err(Status::invalid(
                    &format!("config.{key}"),
                    "must be a string",
                )),
            }
        };
        let server = text("server")?
            .map(|s| validate_server("config.server", s))
            .transpose()?;
        let namespace = text("namespace")?.ok_or_else(|| {
            Status::invalid(
                "config.namespace",
                "is required: the Kubernetes namespace Berth makes its claims in (a DNS-1123 label, such as berth-volumes)",
            )
        })?;
        validate_dns1123_label("config.namespace", namespace)?;
        let storage_class_name = text("storageClassName")?;
        if let Some(class) = storage_class_name {
            validate_dns1123_subdomain("config.storageClassName", class, 253)?;
        }
        let access_modes = match map.get("accessModes") {
            None | Some(Value::Null) => vec!["ReadWriteOnce".to_string()],
            Some(Value::Array(items)) => {
                if items.is_empty() {
                    return Err(Status::invalid(
                        "config.accessModes",
                        "must name at least one access mode (or be absent for ReadWriteOnce)",
                    ));
                }
                let mut modes: Vec<String> = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    let field = format!("config.accessModes[{i}]");
                    let mode = item
                        .as_str()
                        .filter(|m| ACCESS_MODES.contains(m))
                        .ok_or_else(|| {
                            Status::invalid(
                                &field,
                                format!("must be one of {}", ACCESS_MODES.join(", ")),
                            )
                        })?;
                    if modes.iter().any(|m| m == mode) {
                        return Err(Status::invalid(&field, format!("{mode} is given twice")));
                    }
                    modes.push(mode.to_string());
                }
                modes
            }
            Some(_) => {
                return Err(Status::invalid(
                    "config.accessModes",
                    "must be a list of access modes",
                ));
            }
        };
        let volume_mode = match text("volumeMode")? {
            None => "Filesystem",
            Some(mode) if VOLUME_MODES.contains(&mode) => mode,
            Some(_) => {
                return Err(Status::invalid(
                    "config.volumeMode",
                    format!("must be one of {}", VOLUME_MODES.join(", ")),
                ));
            }
        };
        Ok(KubernetesConfig {
            server,
            namespace: namespace.to_string(),
            storage_class_name: storage_class_name.map(str::to_string),
            access_modes,
            volume_mode: volume_mode.to_string(),
        })
    }

    /// The config as stored and answered: every default written out, so two configs that mean the
    /// same compare equal.
    pub fn to_config(&self) -> Value {
        let mut map = Map::new();
        if let Some(server) = &self.server {
            map.insert("server".into(), Value::String(server.clone()));
        }
        map.insert("namespace".into(), Value::String(self.namespace.clone()));
        if let Some(class) = &self.storage_class_name {
            map.insert("storageClassName".into(), Value::String(class.clone()));
        }
        map.insert("accessModes".into(), json!(self.access_modes));
        map.insert("volumeMode".into(), Value::String(self.volume_mode.clone()));
        Value::Object(map)
    }

    /// The kind's config schema's properties.
    pub fn schema_properties() -> Value {
        json!({
            "server": {
                "type": ["string", "null"],
                "description": "The API server: https://host[:port][/path], or http:// on a loopback address only. Absent: in-cluster (the pod's service account). It must be one the operator allows (BERTH_KUBERNETES_SERVERS).",
                "pattern": SERVER_PATTERN,
                "maxLength": MAX_SERVER_LEN,
            },
            "namespace": {
                "type": "string",
                "description": "The Kubernetes namespace Berth makes its PersistentVolumeClaims in (a DNS-1123 label).",
                "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                "maxLength": 63,
            },
            "storageClassName": {
                "type": ["string", "null"],
                "description": "The claims' StorageClass; absent: the cluster's default class.",
                "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                "maxLength": 253,
            },
            "accessModes": {
                "type": ["array", "null"],
                "description": "The claims' access modes (default [ReadWriteOnce]).",
                "items": {"type": "string", "enum": ACCESS_MODES},
                "minItems": 1,
                "uniqueItems": true,
            },
            "volumeMode": {
                "type": ["string", "null"],
                "description": "Filesystem (default) or Block.",
                "enum": ["Filesystem", "Block", null],
            },
        })
    }
}

/// Checks an API server URL and returns it without a trailing `/`: `https://` anywhere, `http://`
/// only on a loopback host (`localhost`, `127.0.0.0/8`, `[::1]`); no user info, query or fragment.
pub fn validate_server(field: &str, text: &str) -> Result<String, Status> {
    const RULE: &str = "must be https://host[:port][/path] (http:// only on a loopback address), with no user, query or fragment";
    if text.len() > MAX_SERVER_LEN || text.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(Status::invalid(field, RULE));
    }
    // Schemes are case-insensitive (RFC 3986 §3.1); stored lower case.
    let scheme_of = |prefix: &str| {
        text.get(..prefix.len())
            .filter(|p| p.eq_ignore_ascii_case(prefix))
            .map(|_| &text[prefix.len()..])
    };
    let (secure, rest) = if let Some(rest) = scheme_of("https://") {
        (true, rest)
    } else if let Some(rest) = scheme_of("http://") {
        (false, rest)
    } else {
        return Err(Status::invalid(field, format!("{text:?} {RULE}")));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let path_ok = path
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '~' | '-' | '/'))
        && !path.split('/').any(|segment| segment == "..");
    let host = host_of(authority);
    if !path_ok || host.is_none() {
        return Err(Status::invalid(field, format!("{text:?} {RULE}")));
    }
    let host = host.unwrap_or_default();
    if !secure && !is_loopback(host) {
        return Err(Status::invalid(
            field,
            format!(
                "{text:?}: http:// is allowed only on a loopback address (a test's stand-in); a real API server is reached over https://"
            ),
        ));
    }
    let path = path.trim_end_matches('/');
    let scheme = if secure { "https" } else { "http" };
    Ok(format!(
        "{scheme}://{}{path}",
        authority.to_ascii_lowercase()
    ))
}

/// The host of `host[:port]` or `[v6][:port]`, when the authority is well formed.
fn host_of(authority: &str) -> Option<&str> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?),
        };
        (host, port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'));
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0));
    (host_ok && port_ok).then_some(host)
}

/// Whether `host` names this machine's loopback interface.
fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_is_normalised_with_its_defaults() {
        let c = KubernetesConfig::from_config(&json!({"namespace": "berth-volumes"})).unwrap();
        assert_eq!(c.server, None);
        assert_eq!(
            c.to_config(),
            json!({"namespace": "berth-volumes", "accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"})
        );
        // Schemes are case-insensitive, and stored lower case.
        let c = KubernetesConfig::from_config(&json!({"server": "HTTPS://h:1", "namespace": "v"}))
            .unwrap();
        assert_eq!(c.server.as_deref(), Some("https://h:1"));
        let c = KubernetesConfig::from_config(&json!({
            "server": "https://API.Example.com:6443/", "namespace": "v",
            "storageClassName": "fast.ssd", "accessModes": ["ReadWriteMany", "ReadOnlyMany"],
            "volumeMode": "Block"}))
        .unwrap();
        assert_eq!(c.server.as_deref(), Some("https://api.example.com:6443"));
        assert_eq!(c.access_modes, ["ReadWriteMany", "ReadOnlyMany"]);
        assert_eq!(
            KubernetesConfig::from_config(&c.to_config()).unwrap(),
            c,
            "what is stored reads back the same"
        );
    }

    #[test]
    fn every_bad_field_is_named_with_its_rule() {
        for (config, field) in [
            (json!({}), "config.namespace: is required"),
            (json!({"namespace": "Berth"}), "config.namespace:"),
            (
                json!({"namespace": 5}),
                "config.namespace: must be a string",
            ),
            (json!({"namespace": "v", "token": "x"}), "config.token:"),
            (
                json!({"namespace": "v", "server": "http://10.0.0.1:8080"}),
                "loopback",
            ),
            (
                json!({"namespace": "v", "server": "ftp://h"}),
                "config.server:",
            ),
            (
                json!({"namespace": "v", "server": "https://u:p@h"}),
                "config.server:",
            ),
            (
                json!({"namespace": "v", "server": "https://h?x=1"}),
                "config.server:",
            ),
            (
                json!({"namespace": "v", "server": "https://h/a/../b"}),
                "config.server:",
            ),
            (
                json!({"namespace": "v", "server": "https://h:0"}),
                "config.server:",
            ),
            (
                json!({"namespace": "v", "server": "https://h\n"}),
                "config.server:",
            ),
            (
                json!({"namespace": "v", "accessModes": []}),
                "config.accessModes:",
            ),
            (
                json!({"namespace": "v", "accessModes": ["ReadWriteOnce", "ReadWriteOnce"]}),
                "config.accessModes[1]: ReadWriteOnce is given twice",
            ),
            (
                json!({"namespace": "v", "accessModes": ["rwo"]}),
                "config.accessModes[0]:",
            ),
            (
                json!({"namespace": "v", "volumeMode": "Raw"}),
                "config.volumeMode:",
            ),
            (
                json!({"namespace": "v", "storageClassName": "Fast"}),
                "config.storageClassName:",
            ),
        ] {
            let e = KubernetesConfig::from_config(&config).unwrap_err();
            assert!(e.message.contains(field), "{config}: {}", e.message);
        }
        for loopback in [
            "http://127.0.0.1:6443",
            "http://localhost:1",
            "http://[::1]:6443",
            "http://127.1.2.3",
        ] {
            let c = json!({"namespace": "v", "server": loopback});
            assert!(KubernetesConfig::from_config(&c).is_ok(), "{loopback}");
        }
    }
}
