//! Orchestrator kinds (the registry's factories) and registered orchestrators.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::code::Status;

/// A kind of orchestrator the registry knows how to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum OrchestratorKind {
    /// Directories (or sparse files) under a base path on this host.
    Local,
    /// Docker Engine volumes.
    Docker,
    /// Kubernetes (StorageOps not yet implemented).
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
        matches!(self, OrchestratorKind::Local | OrchestratorKind::Docker)
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
    /// Changes whenever the registration changes.
    #[serde(default)]
    pub resource_version: u64,
}

/// RegisterOrchestrator's body (`PUT /v1/orchestrators/{name}`; the name is in the path).
///
/// Registering the same body again changes nothing; a different body replaces the registration and bumps
/// its `resourceVersion`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RegisterOrchestrator {
    /// Which kind to build.
    pub kind: OrchestratorKind,
    /// A free label (maya's `Label()`); empty when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The region it serves; empty when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
