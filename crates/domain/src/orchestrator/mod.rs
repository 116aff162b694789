//! Orchestrator kinds (the registry's factories) and registered orchestrators.
//!
//! Besides the wire types, this holds each kind's config rules ([`OrchestratorKind::validate_config`],
//! [`LocalConfig`], [`DockerConfig`]) so the registry validates a registration and storage-ops reads it
//! back with the same code.
//!
//! # Layout
//! This file holds the kinds themselves ([`OrchestratorKind`]: names, descriptions, config schemas
//! and [`OrchestratorKind::validate_config`]) and the rule every kind's config shares (no unknown
//! keys). The rest is apart, a file per concern:
//! - `registration`: the wire types of registered orchestrators and of `GET /v1/kinds`.
//! - `detection`: what `GET /v1/orchestrators:detect` answers.
//! - `config`: [`LocalConfig`] and [`DockerConfig`] (the `kubernetes` one is in [`kubernetes`]).
//! - `paths`: the path and Docker Engine address rules those configs use, and their patterns.
//! - `limits`: [`OrchestratorLimits`], where the operator lets orchestrators point.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::code::Status;

mod config;
mod detection;
pub mod kubernetes;
mod limits;
mod paths;
mod registration;

pub use config::{DEFAULT_DOCKER_HOST, DockerConfig, LocalConfig};
pub use detection::{Detection, DetectionRule};
pub use kubernetes::{KubernetesConfig, validate_server as validate_kubernetes_server};
pub use limits::{
    DOCKER_ENDPOINTS_SETTING, KUBERNETES_SERVERS_SETTING, LOCAL_ROOTS_SETTING,
    NESTED_BASE_PATH_RULE, OrchestratorLimits, base_paths_nest, is_within,
};
use paths::MAX_PATH_LEN;
pub use paths::{
    BASE_PATH_PATTERN, DOCKER_HOST_PATTERN, normalize_base_path, validate_docker_host,
    volume_object_in,
};
pub use registration::{KindInfo, Orchestrator, OrchestratorList, RegisterOrchestrator};

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

#[cfg(test)]
mod tests;
