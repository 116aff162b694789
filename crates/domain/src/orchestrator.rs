//! Orchestrator kinds (the registry's factories) and registered orchestrators.
//!
//! Besides the wire types, this holds each kind's config rules ([`OrchestratorKind::validate_config`],
//! [`LocalConfig`], [`DockerConfig`]) so the registry validates a registration and storage-ops reads it
//! back with the same code.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::code::{Code, Status};
use crate::quantity::Quantity;

pub mod kubernetes;
pub use kubernetes::{KubernetesConfig, validate_server as validate_kubernetes_server};

/// A kind of orchestrator the registry knows how to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum OrchestratorKind {
    /// Directories (or sparse files) under a base path on this host.
    Local,
    /// Docker Engine volumes.
    Docker,
    /// Kubernetes: volumes are PersistentVolumeClaims.
    Kubernetes,
    /// Nomad (StorageOps not yet implemented).
    Nomad,
}

impl OrchestratorKind {
    /// Every kind.
    pub const ALL: [OrchestratorKind; 4] = [
        OrchestratorKind::Local,
        OrchestratorKind::Docker,
        OrchestratorKind::Kubernetes,
        OrchestratorKind::Nomad,
    ];

    /// The kind's name (`local`, `docker`, `kubernetes`, `nomad`).
    pub fn as_str(self) -> &'static str {
        match self {
            OrchestratorKind::Local => "local",
            OrchestratorKind::Docker => "docker",
            OrchestratorKind::Kubernetes => "kubernetes",
            OrchestratorKind::Nomad => "nomad",
        }
    }

    /// Parses a kind name; `field` names the input in the error.
    pub fn parse_field(field: &str, s: &str) -> Result<Self, Status> {
        OrchestratorKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                Status::invalid(
                    field,
                    format!("{s:?} is not a known orchestrator kind; the kinds are local, docker, kubernetes, nomad"),
                )
            })
    }

    /// Whether Berth implements StorageOps for this kind.
    pub fn supports_storage_ops(self) -> bool {
        matches!(
            self,
            OrchestratorKind::Local | OrchestratorKind::Docker | OrchestratorKind::Kubernetes
        )
    }
}

impl fmt::Display for OrchestratorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A registered orchestrator: a named instance of a kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Orchestrator {
    /// The name (a DNS-1123 label).
    pub name: String,
    /// The kind.
    pub kind: OrchestratorKind,
    /// A free label (maya's `Label()`).
    #[serde(default)]
    pub label: String,
    /// The region it serves.
    #[serde(default)]
    pub region: String,
    /// Kind-specific configuration (`basePath`, `capacity`, `host`).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub config: serde_json::Value,
    /// Whether StorageOps are supported (maya's `StorageOps()` returning ok).
    pub storage_ops: bool,
    /// Whether this is the default orchestrator.
    #[serde(default)]
    pub default: bool,
    /// Changes whenever the registration changes. On the wire a string of digits, as every other
    /// object's is (and Kubernetes'): opaque to a client, compared only for equality; a number is
    /// still read, as older Berths sent it.
    #[serde(default, with = "version_string")]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = String, pattern = "^(0|[1-9][0-9]{0,19})$", example = "7")
    )]
    pub resource_version: u64,
}

/// A resourceVersion kept as a number and written as a string of digits.
mod version_string {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(version: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(version)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Number(u64),
            Text(String),
        }
        match Either::deserialize(d)? {
            Either::Number(n) => Ok(n),
            Either::Text(t) => t
                .parse::<u64>()
                .ok()
                .filter(|n| t == n.to_string())
                .ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        "resourceVersion: must be a string of digits without a leading zero, got {t:?}"
                    ))
                }),
        }
    }
}

/// RegisterOrchestrator's body (`PUT /v1/orchestrators/{name}`; the name is in the path).
///
/// Registering the same body again changes nothing; a different body replaces the registration and bumps
/// its `resourceVersion`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegisterOrchestrator {
    /// Which kind to build.
    pub kind: OrchestratorKind,
    /// A free label (maya's `Label()`), at most 253 characters, no control characters (U+0000 to
    /// U+001F, U+007F to U+009F); empty when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(max_length = 253, pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*$")
    )]
    pub label: Option<String>,
    /// The region it serves, at most 63 characters, no control characters (U+0000 to U+001F, U+007F
    /// to U+009F); empty when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(max_length = 63, pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*$")
    )]
    pub region: Option<String>,
    /// Kind-specific configuration, validated by the kind (see `GET /v1/kinds`); `{}` when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub config: Option<serde_json::Value>,
    /// `true` makes this the default orchestrator (clearing the previous one); `false` clears it; omitted
    /// keeps whatever it was (a new registration is not the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<bool>,
}

impl RegisterOrchestrator {
    /// A registration of `kind` with no label, region or config.
    pub fn new(kind: OrchestratorKind) -> Self {
        RegisterOrchestrator {
            kind,
            label: None,
            region: None,
            config: None,
            default: None,
        }
    }
}

/// `GET /v1/orchestrators`: every registered orchestrator, sorted by name.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct OrchestratorList {
    /// The version the list was read at: `watch=true&resourceVersion=` it streams what came after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<crate::resources::ListMeta>,
    /// The orchestrators; `[]` when none is registered.
    pub items: Vec<Orchestrator>,
}

/// `GET /v1/kinds`: one kind the registry can build (one of the seed's factories).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct KindInfo {
    /// The kind.
    pub kind: OrchestratorKind,
    /// Whether Berth implements StorageOps for it.
    pub storage_ops: bool,
    /// What it is, for a person.
    pub description: String,
    /// A JSON Schema of the `config` it accepts.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub config_schema: serde_json::Value,
}

/// Which detection rule decided the kind (checked in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub enum DetectionRule {
    /// `KUBERNETES_SERVICE_HOST` is set (and not empty).
    KubernetesServiceHost,
    /// `NOMAD_ADDR` is set (and not empty).
    NomadAddr,
    /// A Docker Engine answered `GET /_ping` (at `DOCKER_HOST`, else the local socket).
    DockerEngine,
    /// Nothing else matched.
    Fallback,
}

/// `GET /v1/orchestrators:detect`: the kind the registry's environment implies (maya's
/// `DetectOrchProviderFromEnv`) and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Detection {
    /// The detected kind.
    pub kind: OrchestratorKind,
    /// The rule that fired.
    pub rule: DetectionRule,
    /// The rule in words (`KUBERNETES_SERVICE_HOST is set`).
    pub reason: String,
}

/// The Docker Engine a `docker` orchestrator talks to when its config names none.
pub const DEFAULT_DOCKER_HOST: &str = "unix:///var/run/docker.sock";

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
const MAX_PATH_LEN: usize = 4096;

impl OrchestratorKind {
    /// What the kind is, for a person.
    pub fn description(self) -> &'static str {
        match self {
            OrchestratorKind::Local => {
                "Volumes are directories under basePath on the registry's host (hostpath, as OpenEBS LocalPV)."
            }
            OrchestratorKind::Docker => "Volumes are Docker Engine volumes on the Engine at host.",
            OrchestratorKind::Kubernetes => {
                "Volumes are PersistentVolumeClaims in one namespace of a Kubernetes cluster, which pods mount by claimName."
            }
            OrchestratorKind::Nomad => {
                "Nomad; registered and detected, but StorageOps are not implemented yet."
            }
        }
    }

    /// A JSON Schema of the `config` the kind accepts (no other keys are allowed).
    pub fn config_schema(self) -> Value {
        let properties = match self {
            OrchestratorKind::Local => json!({
                "basePath": {
                    "type": "string",
                    "description": "Absolute directory the volumes live under; not '/', no '..'; stored normalised.",
                    "pattern": BASE_PATH_PATTERN,
                    "maxLength": MAX_PATH_LEN,
                },
                "capacity": {
                    "type": ["string", "null"],
                    "description": "Optional total capacity as a quantity (10Gi, 500G, 1.5Ti), more than 0 and less than 8Ei; stored in canonical form. The pattern lists the forms that are always whole bytes; other fractional and exponent forms (1.125Ki, 1000m, 1.5e3) are accepted too when they come to whole bytes.",
                    "pattern": crate::quantity::CAPACITY_PATTERN,
                },
            }),
            OrchestratorKind::Docker => json!({
                "host": {
                    "type": ["string", "null"],
                    "description": "The Engine: unix:///absolute/path or tcp://host:port.",
                    "default": DEFAULT_DOCKER_HOST,
                    "pattern": DOCKER_HOST_PATTERN,
                    "maxLength": MAX_PATH_LEN,
                },
            }),
            OrchestratorKind::Kubernetes => KubernetesConfig::schema_properties(),
            OrchestratorKind::Nomad => json!({}),
        };
        let required: &[&str] = match self {
            OrchestratorKind::Local => &["basePath"],
            OrchestratorKind::Kubernetes => &["namespace"],
            _ => &[],
        };
        json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        })
    }

    /// The kind as `GET /v1/kinds` lists it.
    pub fn info(self) -> KindInfo {
        KindInfo {
            kind: self,
            storage_ops: self.supports_storage_ops(),
            description: self.description().to_string(),
            config_schema: self.config_schema(),
        }
    }

    /// Checks `config` against the kind's rules and returns it normalised (defaults filled in, paths
    /// and quantities in canonical form), so that two configs that mean the same compare equal.
    /// Errors name the field (`config.basePath`) and the rule.
    pub fn validate_config(self, config: Option<&Value>) -> Result<Value, Status> {
        let empty = Map::new();
        let map = match config {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(map)) => map,
            Some(_) => return Err(Status::invalid("config", "must be a JSON object")),
        };
        match self {
            OrchestratorKind::Local => LocalConfig::from_map(map).map(|c| c.to_config()),
            OrchestratorKind::Docker => DockerConfig::from_map(map).map(|c| c.to_config()),
            OrchestratorKind::Kubernetes => KubernetesConfig::from_map(map).map(|c| c.to_config()),
            OrchestratorKind::Nomad => {
                refuse_unknown_keys(self, map, &[])?;
                Ok(Value::Object(Map::new()))
            }
        }
    }
}

/// A `local` orchestrator's config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalConfig {
    /// The normalised absolute directory volumes live under.
    pub base_path: String,
    /// The total capacity, when limited.
    pub capacity: Option<Quantity>,
}

impl LocalConfig {
    /// Reads (and validates) a registered `local` orchestrator's config.
    pub fn from_config(config: &Value) -> Result<Self, Status> {
        match config {
            Value::Object(map) => LocalConfig::from_map(map),
            _ => Err(Status::invalid("config", "must be a JSON object")),
        }
    }

    fn from_map(map: &Map<String, Value>) -> Result<Self, Status> {
        refuse_unknown_keys(OrchestratorKind::Local, map, &["basePath", "capacity"])?;
        let base_path = match map.get("basePath") {
            None | Some(Value::Null) => {
                return Err(Status::invalid(
                    "config.basePath",
                    "is required for a local orchestrator: the absolute directory volumes live under",
                ));
            }
            Some(Value::String(s)) => normalize_base_path("config.basePath", s)?,
            Some(_) => return Err(Status::invalid("config.basePath", "must be a string")),
        };
        if let Some(volume) = volume_object_in(&base_path) {
            return Err(Status::invalid(
                "config.basePath",
                format!(
                    "{base_path:?} is inside the directory of a Berth volume ({volume:?}): deleting that volume would delete every volume made here; choose a directory outside every volume"
                ),
            ));
        }
        let capacity = match map.get("capacity") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => {
                let capacity = Quantity::parse_field("config.capacity", s)?;
                // A limit of nothing would refuse every volume forever (429), never what was meant.
                if capacity.bytes() == 0 {
                    return Err(Status::invalid(
                        "config.capacity",
                        format!("{s:?} must be more than 0 bytes (or absent for no limit)"),
                    ));
                }
                Some(capacity)
            }
            Some(_) => {
                return Err(Status::invalid(
                    "config.capacity",
                    "must be a quantity such as \"10Gi\"",
                ));
            }
        };
        Ok(LocalConfig {
            base_path,
            capacity,
        })
    }

    /// The config as stored and answered.
    pub fn to_config(&self) -> Value {
        let mut map = Map::new();
        map.insert("basePath".into(), Value::String(self.base_path.clone()));
        if let Some(q) = self.capacity {
            map.insert("capacity".into(), Value::String(q.to_string()));
        }
        Value::Object(map)
    }
}

/// A `docker` orchestrator's config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerConfig {
    /// The Engine's address: `unix:///path` or `tcp://host:port`.
    pub host: String,
}

impl DockerConfig {
    /// Reads (and validates) a registered `docker` orchestrator's config.
    pub fn from_config(config: &Value) -> Result<Self, Status> {
        match config {
            Value::Object(map) => DockerConfig::from_map(map),
            _ => Err(Status::invalid("config", "must be a JSON object")),
        }
    }

    fn from_map(map: &Map<String, Value>) -> Result<Self, Status> {
        refuse_unknown_keys(OrchestratorKind::Docker, map, &["host"])?;
        let host = match map.get("host") {
            None | Some(Value::Null) => DEFAULT_DOCKER_HOST.to_string(),
            Some(Value::String(s)) => validate_docker_host("config.host", s)?,
            Some(_) => return Err(Status::invalid("config.host", "must be a string")),
        };
        Ok(DockerConfig { host })
    }

    /// The config as stored and answered.
    pub fn to_config(&self) -> Value {
        json!({ "host": self.host })
    }
}

fn refuse_unknown_keys(
    kind: OrchestratorKind,
    map: &Map<String, Value>,
    known: &[&str],
) -> Result<(), Status> {
    match map.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(key) => {
            let allowed = if known.is_empty() {
                "it takes no config keys".to_string()
            } else {
                format!("its keys are {}", known.join(", "))
            };
            Err(Status::invalid(
                &format!("config.{key}"),
                format!("is not a config key of a {kind} orchestrator; {allowed}"),
            ))
        }
    }
}

/// The setting that names the directories `local` orchestrators may use.
pub const LOCAL_ROOTS_SETTING: &str = "BERTH_LOCAL_ROOTS";
/// The setting that names the Docker Engines `docker` orchestrators may use.
pub const DOCKER_ENDPOINTS_SETTING: &str = "BERTH_DOCKER_ENDPOINTS";
/// The setting that names the Kubernetes API servers `kubernetes` orchestrators may use.
pub const KUBERNETES_SERVERS_SETTING: &str = "BERTH_KUBERNETES_SERVERS";

/// Where a registered orchestrator may point, as the operator allows it: nothing a caller sends
/// chooses a directory to write into or an Engine to connect to outside these lists.
///
/// The checks here are lexical, on the normalised config (`..` is refused and `.` removed by
/// [`normalize_base_path`], so a path that is under a root by its text stays under it by its
/// components). Symbolic links are a matter of the file system, which the services check where
/// they have one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OrchestratorLimits {
    /// Directories a `local` orchestrator's `basePath` must be, or be under: absolute, normalised.
    pub local_roots: Vec<String>,
    /// The Docker Engine addresses a `docker` orchestrator may name, normalised.
    pub docker_endpoints: Vec<String>,
    /// The API servers a `kubernetes` orchestrator may name, normalised.
    pub kubernetes_servers: Vec<String>,
    /// Whether a `kubernetes` orchestrator may name no server (in-cluster): only in a pod.
    pub in_cluster: bool,
}

impl OrchestratorLimits {
    /// Checks a normalised config of `kind` (as [`OrchestratorKind::validate_config`] returns it);
    /// a refusal names the field and the setting that would allow it. It is a
    /// [`Code::FailedPrecondition`], not an invalid argument: the request is well formed, and what
    /// refuses it is how this host's operator set it up, which no schema a caller reads can know.
    pub fn check(&self, kind: OrchestratorKind, config: &Value) -> Result<(), Status> {
        match kind {
            OrchestratorKind::Local => {
                let config = LocalConfig::from_config(config)?;
                self.check_base_path("config.basePath", &config.base_path)
            }
            OrchestratorKind::Docker => {
                let config = DockerConfig::from_config(config)?;
                self.check_docker_host("config.host", &config.host)
            }
            OrchestratorKind::Kubernetes => {
                let config = KubernetesConfig::from_config(config)?;
                self.check_kubernetes_server("config.server", config.server.as_deref())
            }
            OrchestratorKind::Nomad => Ok(()),
        }
    }

    /// Whether the normalised API server `server` (`None`: in-cluster) may be used.
    pub fn check_kubernetes_server(&self, field: &str, server: Option<&str>) -> Result<(), Status> {
        match server {
            None if self.in_cluster => Ok(()),
            None => Err(not_allowed(
                field,
                "is required here: in-cluster (no server) is allowed only to a Berth running in a Kubernetes pod; name an API server this service may use",
            )),
            Some(server) if self.kubernetes_servers.iter().any(|s| s == server) => Ok(()),
            Some(server) => Err(not_allowed(
                field,
                format!(
                    "{server:?} is not a Kubernetes API server this service may use ({}); an operator allows more with {KUBERNETES_SERVERS_SETTING}",
                    list(&self.kubernetes_servers)
                ),
            )),
        }
    }

    /// Whether the normalised `base_path` is one of the roots or under one.
    pub fn check_base_path(&self, field: &str, base_path: &str) -> Result<(), Status> {
        if self
            .local_roots
            .iter()
            .any(|root| is_within(base_path, root))
        {
            return Ok(());
        }
        Err(not_allowed(
            field,
            format!(
                "{base_path:?} is not under a directory this service may use ({}); an operator allows more with {LOCAL_ROOTS_SETTING}",
                list(&self.local_roots)
            ),
        ))
    }

    /// Whether the normalised Engine address `host` is one of the allowed endpoints.
    pub fn check_docker_host(&self, field: &str, host: &str) -> Result<(), Status> {
        if self.docker_endpoints.iter().any(|e| e == host) {
            return Ok(());
        }
        Err(not_allowed(
            field,
            format!(
                "{host:?} is not a Docker Engine this service may use ({}); an operator allows more with {DOCKER_ENDPOINTS_SETTING}",
                list(&self.docker_endpoints)
            ),
        ))
    }
}

/// A well-formed `field` the operator's settings do not allow: `field: rule`, as
/// [`Status::invalid`] words it, but a precondition on this host's set-up.
fn not_allowed(field: &str, rule: impl fmt::Display) -> Status {
    Status::new(Code::FailedPrecondition, format!("{field}: {rule}"))
}

/// Whether the normalised absolute `path` is `root` or under it, component by component (so
/// `/srv/volumes2` is not under `/srv/volumes`).
pub fn is_within(path: &str, root: &str) -> bool {
    path == root
        || path
            .strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/') || root.ends_with('/'))
}

/// Whether two local orchestrators' normalised base paths nest: one is the other, or inside it.
///
/// The local backend lays a volume out as `<basePath>/<namespace>/<name>-<uid>`, so a base path
/// inside another's tree sits in one of that orchestrator's namespace directories, where its own
/// directories can take a volume's name (a namespace is any DNS label, `<name>-<uid>` among them):
/// deleting that volume deletes the other orchestrator's volumes with it, and each orchestrator's
/// scan for objects without a row sees the other's. Registration refuses such a pair.
pub fn base_paths_nest(a: &str, b: &str) -> bool {
    is_within(a, b) || is_within(b, a)
}

/// Why [`base_paths_nest`] refuses a base path, after the other orchestrator's name and path.
pub const NESTED_BASE_PATH_RULE: &str = "two local orchestrators' base paths must not nest (one the same as the other, or inside it): a volume of one would be made inside the other's directories and deleted with its volume; choose a directory outside it";

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none is allowed".to_string()
    } else {
        format!("allowed: {}", items.join(", "))
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// A capacity of nothing would refuse every volume forever: it is refused at registration, as
    /// the schema's pattern (more than 0) says, naming `config.capacity`.
    #[test]
    fn a_zero_capacity_is_refused() {
        for capacity in ["0", "000", "0Gi", "0.0", "-0", "0e9"] {
            let config = json!({"basePath": "/srv", "capacity": capacity});
            let e = OrchestratorKind::Local
                .validate_config(Some(&config))
                .unwrap_err();
            assert!(
                e.message.starts_with("config.capacity: ")
                    && e.message.contains("must be more than 0 bytes"),
                "{capacity}: {}",
                e.message
            );
        }
        let config = json!({"basePath": "/srv", "capacity": "1.5Gi"});
        let config = OrchestratorKind::Local
            .validate_config(Some(&config))
            .unwrap();
        assert_eq!(config["capacity"], "1536Mi");
        let schema = OrchestratorKind::Local.config_schema();
        assert_eq!(
            schema["properties"]["capacity"]["pattern"],
            crate::quantity::CAPACITY_PATTERN
        );
    }

    #[test]
    fn base_paths_nest_when_one_is_the_other_or_inside_it() {
        assert!(base_paths_nest("/srv/a", "/srv/a"));
        assert!(base_paths_nest("/srv/a", "/srv/a/team/x"));
        assert!(base_paths_nest("/srv/a/team/x", "/srv/a"));
        assert!(!base_paths_nest("/srv/a", "/srv/ab"));
        assert!(!base_paths_nest("/srv/a/b", "/srv/a/c"));
    }

    #[test]
    fn control_characters_in_a_base_path_are_refused_naming_the_field() {
        for bad in [
            "/srv/a\u{1}b",
            "/srv/\n",
            "/srv/a\u{7f}",
            "/srv/\u{85}x",
            "/srv/\u{9b}31m",
            "/a\0",
        ] {
            let e = normalize_base_path("config.basePath", bad).unwrap_err();
            assert!(
                e.message.starts_with("config.basePath: ") && e.message.contains("control"),
                "{bad:?}: {}",
                e.message
            );
            OrchestratorKind::Local
                .validate_config(Some(&json!({"basePath": bad})))
                .unwrap_err();
        }
        normalize_base_path("f", "/srv/caf\u{e9}").unwrap();
    }

    /// A base path inside a volume's own directory (`<name>-<uid>`) is refused, naming the field
    /// and the component; names that only look close are not.
    #[test]
    fn a_base_path_inside_a_volume_is_refused() {
        let uid = "0f8fad5b-d9cb-469f-a165-70867728950e";
        for inside in [
            format!("/srv/vols/team/data-{uid}"),
            format!("/srv/vols/team/data-{uid}/nested"),
            format!("/srv/a-b-{uid}/x"),
        ] {
            let e = OrchestratorKind::Local
                .validate_config(Some(&json!({"basePath": inside})))
                .unwrap_err();
            assert!(
                e.message.starts_with("config.basePath: ")
                    && e.message.contains("inside the directory of a Berth volume"),
                "{inside}: {}",
                e.message
            );
        }
        for fine in [
            "/srv/vols".to_string(),
            format!("/srv/{uid}"),
            format!("/srv/data-{}", uid.to_uppercase()),
            format!("/srv/data_{uid}"),
            format!("/srv/Data-{uid}"),
            format!("/srv/data-{uid}x"),
            format!("/srv/\u{e9}-{uid}"),
        ] {
            assert_eq!(volume_object_in(&fine), None, "{fine}");
            OrchestratorKind::Local
                .validate_config(Some(&json!({"basePath": fine})))
                .unwrap_or_else(|e| panic!("{fine}: {e:?}"));
        }
    }

    #[test]
    fn the_base_path_and_host_patterns_accept_only_what_the_validators_accept() {
        let base_path = regex::Regex::new(BASE_PATH_PATTERN).unwrap();
        for text in [
            "/a",
            "/srv/vols",
            "//a//b/",
            "/a/.b/..c/...",
            "/\u{e9}t\u{e9}",
        ] {
            assert!(base_path.is_match(text), "{text}");
            normalize_base_path("f", text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
        }
        for text in [
            "",
            "/",
            "//",
            "a/b",
            "/a/../b",
            "/..",
            "/a/./b",
            "/a\u{0}b",
            "/a\nb",
            "/a\u{84}b",
        ] {
            assert!(!base_path.is_match(text), "{text}");
        }
        let host = regex::Regex::new(DOCKER_HOST_PATTERN).unwrap();
        for text in [
            "unix:///var/run/docker.sock",
            "tcp://127.0.0.1:2375",
            "tcp://[::1]:2376/",
            "tcp://docker-1.example:65535",
        ] {
            assert!(host.is_match(text), "{text}");
            validate_docker_host("f", text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
        }
        for text in [
            "unix://",
            "unix://relative",
            "unix:///a/../b",
            "unix:///a\u{84}b",
            "tcp://host",
            "tcp://:80",
            "tcp://h:0",
            "tcp://h:65536",
            "http://h:80",
        ] {
            assert!(!host.is_match(text), "{text}");
        }
    }

    #[test]
    fn kinds_parse_and_report_storage_ops() {
        assert_eq!(
            OrchestratorKind::parse_field("kind", "docker").unwrap(),
            OrchestratorKind::Docker
        );
        let e = OrchestratorKind::parse_field("kind", "swarm").unwrap_err();
        assert!(
            e.message
                .starts_with("kind: \"swarm\" is not a known orchestrator kind")
        );
        assert!(OrchestratorKind::Local.supports_storage_ops());
        assert!(!OrchestratorKind::Nomad.supports_storage_ops());
        assert_eq!(
            serde_json::to_string(&OrchestratorKind::Kubernetes).unwrap(),
            "\"kubernetes\""
        );
    }

    #[test]
    fn local_config_is_validated_and_normalised() {
        let k = OrchestratorKind::Local;
        let c = k
            .validate_config(Some(
                &json!({"basePath": "//var/./berth/", "capacity": "1024Mi"}),
            ))
            .unwrap();
        assert_eq!(c, json!({"basePath": "/var/berth", "capacity": "1Gi"}));
        let back = LocalConfig::from_config(&c).unwrap();
        assert_eq!(back.capacity.unwrap().bytes(), 1 << 30);
        for (config, field) in [
            (json!({}), "config.basePath: is required"),
            (
                json!({"basePath": "rel/dir"}),
                "config.basePath: \"rel/dir\" must be an absolute",
            ),
            (
                json!({"basePath": "/"}),
                "config.basePath: \"/\" must not be the root",
            ),
            (
                json!({"basePath": "/a/../etc"}),
                "config.basePath: \"/a/../etc\" must not contain '..'",
            ),
            (json!({"basePath": 7}), "config.basePath: must be a string"),
            (
                json!({"basePath": "/a", "capacity": "lots"}),
                "config.capacity: \"lots\" is not a quantity",
            ),
            (
                json!({"basePath": "/a", "size": "1Gi"}),
                "config.size: is not a config key of a local orchestrator",
            ),
        ] {
            let e = k.validate_config(Some(&config)).unwrap_err();
            assert!(e.message.starts_with(field), "{config}: {}", e.message);
        }
        assert!(k.validate_config(Some(&json!([1]))).is_err());
    }

    #[test]
    fn docker_hosts() {
        let k = OrchestratorKind::Docker;
        assert_eq!(
            k.validate_config(None).unwrap(),
            json!({"host": DEFAULT_DOCKER_HOST})
        );
        for ok in [
            "unix:///run/docker.sock",
            "tcp://10.0.0.1:2375",
            "tcp://docker-engine:2376/",
            "tcp://[::1]:2375",
        ] {
            assert!(validate_docker_host("h", ok).is_ok(), "{ok}");
        }
        assert_eq!(
            validate_docker_host("h", "tcp://e:1/").unwrap(),
            "tcp://e:1"
        );
        for bad in [
            "http://x:1",
            "unix://relative.sock",
            "tcp://host",
            "tcp://:2375",
            "tcp://h:99999",
            "unix:///",
        ] {
            let e = validate_docker_host("config.host", bad).unwrap_err();
            assert!(e.message.starts_with("config.host: "), "{bad}");
        }
        let e = OrchestratorKind::Nomad
            .validate_config(Some(&json!({"address": "x"})))
            .unwrap_err();
        assert!(e.message.starts_with(
            "config.address: is not a config key of a nomad orchestrator; it takes no config keys"
        ));
    }

    #[test]
    fn limits_allow_the_roots_and_what_is_under_them_only() {
        let limits = OrchestratorLimits {
            local_roots: vec!["/srv/volumes".into(), "/mnt/b".into()],
            docker_endpoints: vec![DEFAULT_DOCKER_HOST.into(), "tcp://engine:2376".into()],
            kubernetes_servers: Vec::new(),
            in_cluster: false,
        };
        let local = |base: &str| {
            let config = OrchestratorKind::Local
                .validate_config(Some(&json!({ "basePath": base })))
                .unwrap();
            limits.check(OrchestratorKind::Local, &config)
        };
        for ok in [
            "/srv/volumes",
            "/srv/volumes/a/b",
            "/srv//volumes/./x/",
            "/mnt/b/c",
        ] {
            assert!(local(ok).is_ok(), "{ok}");
        }
        for bad in ["/etc", "/srv", "/srv/volumes2", "/srv/volumesx/a", "/mnt"] {
            let e = local(bad).unwrap_err();
            assert!(
                e.message.starts_with("config.basePath: ")
                    && e.message.contains(LOCAL_ROOTS_SETTING),
                "{bad}: {}",
                e.message
            );
        }
        let docker = |host: &str| {
            let config = OrchestratorKind::Docker
                .validate_config(Some(&json!({ "host": host })))
                .unwrap();
            limits.check(OrchestratorKind::Docker, &config)
        };
        assert!(docker("tcp://engine:2376/").is_ok());
        assert!(docker("unix:///var/run/docker.sock").is_ok());
        let e = docker("tcp://10.0.0.1:2375").unwrap_err();
        assert!(
            e.message.starts_with("config.host: ") && e.message.contains(DOCKER_ENDPOINTS_SETTING),
            "{}",
            e.message
        );
        assert!(docker("unix:///run/other.sock").is_err());
        assert!(limits.check(OrchestratorKind::Nomad, &json!({})).is_ok());
        let none = OrchestratorLimits::default();
        let e = none.check_base_path("config.basePath", "/srv").unwrap_err();
        assert!(e.message.contains("none is allowed"), "{}", e.message);
    }

    #[test]
    fn every_kind_has_a_closed_schema() {
        for k in OrchestratorKind::ALL {
            let info = k.info();
            assert_eq!(info.config_schema["additionalProperties"], false);
            assert_eq!(info.storage_ops, k.supports_storage_ops());
        }
    }
}
