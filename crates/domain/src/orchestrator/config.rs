//! The configs of `local` and `docker` orchestrators, read and validated. Apart because each is
//! what one kind accepts, which the registry checks at registration and storage-ops reads back
//! with the same code; the `kubernetes` kind's is in `kubernetes`.

use serde_json::{Map, Value, json};

use super::paths::{normalize_base_path, validate_docker_host, volume_object_in};
use super::{OrchestratorKind, refuse_unknown_keys};
use crate::code::Status;
use crate::quantity::Quantity;

/// The Docker Engine a `docker` orchestrator talks to when its config names none.
pub const DEFAULT_DOCKER_HOST: &str = "unix:///var/run/docker.sock";

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

    pub(super) fn from_map(map: &Map<String, Value>) -> Result<Self, Status> {
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

    pub(super) fn from_map(map: &Map<String, Value>) -> Result<Self, Status> {
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
