//! The wire types of registered orchestrators: an orchestrator as answered, the body that
//! registers one, the list, and a kind as `GET /v1/kinds` lists it. Apart because they are shapes
//! on the wire, read by clients and the registry alike, while the rest of the module is rules.

use serde::{Deserialize, Serialize};

use super::OrchestratorKind;

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
