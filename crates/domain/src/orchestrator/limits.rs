//! Where the operator lets registered orchestrators point: the settings and the checks. Apart
//! because it is the operator's policy on this host, checked after a config is found well formed,
//! and refused as a precondition, not as an invalid argument.

use std::fmt;

use serde_json::Value;

use super::{DockerConfig, KubernetesConfig, LocalConfig, OrchestratorKind};
use crate::code::{Code, Status};

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
/// [`normalize_base_path`](super::normalize_base_path), so a path that is under a root by its
/// text stays under it by its components). Symbolic links are a matter of the file system, which
/// the services check where they have one.
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
