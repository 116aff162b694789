//! Backends: where a volume's bytes actually live, chosen by the orchestrator's kind.
//!
//! A [`Backend`] does the low-level work maya delegated to its orchestrators: make the object for a
//! volume, remove it, measure it, and list every object it holds that Berth made (so the reconciler can
//! find orphans). Every operation is idempotent by the volume's uid: making an object that is already
//! there, or removing one that is already gone, succeeds.
//!
//! A backend that can mark an object *uncommitted* durably and for free (the `local` one: by its
//! mode, set by the very `mkdir` or `open` that makes it) lets AddStorage make the object before the
//! volume's row exists ([`Backend::new_object`], which the store's writer makes right before the
//! commit that records the row), so a create costs one database commit instead of two. The mark is what keeps that safe: an object without a row is then either
//! uncommitted (an add that has not committed yet, or one a crash interrupted: never acknowledged,
//! never handed to anyone, so the reconciler removes it whatever the orphan policy) or a true orphan
//! (reported, or removed only under `BERTH_ORPHAN_POLICY=delete`), and the two are never confused.
//!
//! # Layout
//! - [`local`]: a directory (or sparse file) per volume under the orchestrator's `basePath`.
//! - [`docker`]: a Docker Engine volume per Berth volume, labelled with its uid.
//! - [`kubernetes`]: a PersistentVolumeClaim per Berth volume, which the cluster binds in its own
//!   time: the one backend that [`Backend::observe`]s.
//! - [`Backends`]: builds the backend for an orchestrator's kind and config (Nomad is
//!   Unimplemented).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use domain::orchestrator::{DockerConfig, KubernetesConfig, LocalConfig, OrchestratorLimits};
use domain::{Code, OrchestratorKind, Status};
use futures::future::BoxFuture;

pub mod docker;
pub mod kubernetes;
pub mod local;

/// A failed backend operation: the machine code it maps to, the backend's words for the caller, and
/// where it happened, for the log.
///
/// The two are kept apart because callers see `message` (in the answer, and in the volume's
/// `status.message`) while a host, port, socket or file-system path must never reach them: those go in
/// `detail`, which `Display` (and so every log line) includes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}{}", if detail.is_empty() { String::new() } else { format!(" ({detail})") })]
pub struct BackendError {
    /// What kind of failure.
    pub code: Code,
    /// What failed and why, for the caller: no host, port or path.
    pub message: String,
    /// Where it failed (a path, an Engine's address) and the raw cause: for the log only.
    pub detail: String,
}

impl BackendError {
    /// A failure with this code; `message` is shown to callers.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        BackendError {
            code,
            message: message.into(),
            detail: String::new(),
        }
    }

    /// Adds where it happened, for the log only.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    /// A file-system failure while doing `what` (said without the path) at `path`.
    pub fn io(what: &str, path: &std::path::Path, e: &std::io::Error) -> Self {
        let code = match e.kind() {
            std::io::ErrorKind::PermissionDenied => Code::FailedPrecondition,
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                Code::ResourceExhausted
            }
            _ => Code::Internal,
        };
        // An io::Error made by the standard library's file functions does not name the path.
        BackendError::new(code, format!("{what}: {e}"))
            .with_detail(format!("at {}", path.display()))
    }
}

impl From<BackendError> for Status {
    fn from(e: BackendError) -> Self {
        Status::new(e.code, e.message)
    }
}

/// What a backend needs to know about a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    /// The volume's uid (the object's identity).
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Capacity in bytes.
    pub capacity_bytes: u64,
    /// `parameters.format: file`: a sparse file instead of a directory.
    pub file: bool,
}

/// What a volume uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Usage {
    /// Bytes used, when known.
    pub used_bytes: Option<u64>,
    /// Bytes free on the holding file system, when known.
    pub available_bytes: Option<u64>,
    /// How it was measured (`walk`, `file`, `docker`, `unavailable`).
    pub source: &'static str,
}

/// An object a backend holds that Berth made, as found by a scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The uid it was made for.
    pub uid: String,
    /// The namespace it was made for.
    pub namespace: String,
    /// The name it was made for.
    pub name: String,
    /// Where it is.
    pub location: String,
    /// Made by [`Backend::create_uncommitted`] and not marked committed since (see the module docs).
    pub uncommitted: bool,
}

/// What a backend whose objects become usable in their own time ([`Backend::observes`]) says of
/// one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// Usable, at `location`; `message` says what it is bound to.
    Ready {
        /// Where it is.
        location: String,
        /// What it is (a claim bound to a PersistentVolume, with what was granted).
        message: String,
    },
    /// Made, not usable yet; `message` says what it waits for.
    Pending {
        /// What it waits for.
        message: String,
    },
    /// Will not become usable: `reason` in one word, `message` for people.
    Failed {
        /// One word.
        reason: &'static str,
        /// A sentence.
        message: String,
    },
}

/// A new object [`Backend::create_uncommitted`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uncommitted {
    /// Where it is.
    pub location: String,
    /// The directory whose fsync makes it durable.
    pub sync_dir: std::path::PathBuf,
}

/// Runs blocking file-system work off the async threads; a task that panicked is Internal.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, BackendError> + Send + 'static,
) -> Result<T, BackendError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(BackendError::new(
            Code::Internal,
            format!("file-system task: {e}"),
        ))
    })
}

/// A new volume's object, made uncommitted and then marked committed by the store's writer around
/// the commit that records the volume's row: [`NewObject::make`] right before the batch's directory
/// syncs, [`NewObject::mark_committed`] right after its `COMMIT`, both before the writer answers.
///
/// Why the writer and not the add's own task: on the blocking pool the two steps were two more
/// hand-overs to another thread (to make, to mark) around the one to the writer, and on a two-core
/// machine a hand-over to an idle thread cost more than the `mkdir` it carried (see the storage
/// bench's breakdown of an add).
pub trait NewObject: Send {
    /// Makes the object, marked uncommitted; where it is and the directory whose fsync makes it
    /// (and its mark) durable. On failure it leaves nothing, or an uncommitted object the
    /// reconciler removes.
    fn make(&mut self) -> Result<Uncommitted, BackendError>;
    /// Clears the mark, once the object's row is committed. Need not be durable: a mark that comes
    /// back after a power loss is on an object a row owns, which the reconciler marks again.
    fn mark_committed(&mut self) -> Result<(), BackendError>;
}

/// The low-level work of one orchestrator.
pub trait Backend: Send + Sync {
    /// Makes the object for `v` (or finds it made, and marks it committed if it was not) and says
    /// where it is. For a volume whose row is already written.
    fn create<'a>(&'a self, v: &'a ObjectRef) -> BoxFuture<'a, Result<String, BackendError>>;
    /// The work of making a new object for `v` marked uncommitted, before `v` has a row, and of
    /// clearing the mark once the row is committed: `None` where this backend cannot mark objects.
    /// AddStorage gives it to the store's writer, which runs it around the commit that records the
    /// row (see [`NewObject`]).
    fn new_object(&self, v: &ObjectRef) -> Option<Box<dyn NewObject>> {
        let _ = v;
        None
    }
    /// [`NewObject::make`] of [`Backend::new_object`], on the blocking pool: for making an
    /// uncommitted object outside the store's writer (the reconciler's tests, the benchmark's
    /// breakdown of an add).
    fn create_uncommitted<'a>(
        &'a self,
        v: &'a ObjectRef,
    ) -> BoxFuture<'a, Result<Uncommitted, BackendError>> {
        let Some(mut object) = self.new_object(v) else {
            return Box::pin(std::future::ready(Err(BackendError::new(
                Code::Unimplemented,
                format!("{} cannot make uncommitted objects", self.identity()),
            ))));
        };
        Box::pin(blocking(move || object.make()))
    }
    /// Clears the uncommitted mark of `v`'s object, once its row is committed. Need not be durable:
    /// a mark that comes back after a power loss is on an object a row owns, which the reconciler
    /// marks committed again.
    fn mark_committed<'a>(&'a self, v: &'a ObjectRef) -> BoxFuture<'a, Result<(), BackendError>> {
        let _ = v;
        Box::pin(std::future::ready(Ok(())))
    }
    /// Whether an object this backend made becomes usable in its own time (a claim the cluster
    /// binds), so a volume stays Pending after [`Backend::create`] until [`Backend::observe`] says
    /// otherwise. Backends whose objects are usable once made say no.
    fn observes(&self) -> bool {
        false
    }
    /// Where the object of `v` is in its life, for a backend that [`Backend::observes`].
    fn observe<'a>(&'a self, v: &'a ObjectRef) -> BoxFuture<'a, Result<Observed, BackendError>> {
        let _ = v;
        Box::pin(std::future::ready(Err(BackendError::new(
            Code::Unimplemented,
            format!("{} has nothing to observe", self.identity()),
        ))))
    }
    /// Removes the object for `v`; an object already gone is success.
    fn delete<'a>(&'a self, v: &'a ObjectRef) -> BoxFuture<'a, Result<(), BackendError>>;
    /// Lets the object for `v` go without removing it (`reclaimPolicy: Retain`): what marks it as
    /// Berth's is taken off, so the orphan scan does not report it. Nothing to do for a backend
    /// whose objects carry no such mark outside Berth's store.
    fn release<'a>(&'a self, v: &'a ObjectRef) -> BoxFuture<'a, Result<(), BackendError>> {
        let _ = v;
        Box::pin(std::future::ready(Ok(())))
    }
    /// Grows the object for `v` to `bytes` (more than `v.capacity_bytes`). A backend whose objects
    /// cannot grow says so: FailedPrecondition, naming why.
    fn grow<'a>(&'a self, v: &'a ObjectRef, bytes: u64) -> BoxFuture<'a, Result<(), BackendError>> {
        let _ = (v, bytes);
        Box::pin(std::future::ready(Err(BackendError::new(
            Code::FailedPrecondition,
            format!("{} cannot grow a volume", self.identity()),
        ))))
    }
    /// Measures the object for `v`.
    fn usage<'a>(&'a self, v: &'a ObjectRef) -> BoxFuture<'a, Result<Usage, BackendError>>;
    /// Every object this backend holds that Berth made.
    fn scan(&self) -> BoxFuture<'_, Result<Vec<Found>, BackendError>>;
    /// Removes an object a scan found. One found uncommitted is removed only if it still is, and is
    /// empty (nobody was ever told where it is, so nothing may be in it).
    fn remove_found<'a>(&'a self, f: &'a Found) -> BoxFuture<'a, Result<(), BackendError>>;
    /// What and where it is, for messages and for telling two backends apart (`local:/srv/vols`).
    fn identity(&self) -> String;
}

/// Builds backends from an orchestrator's kind and config, sharing one Docker client per Engine.
#[derive(Clone)]
pub struct Backends {
    instance: String,
    limits: OrchestratorLimits,
    local_roots: Arc<[String]>,
    docker_clients: Arc<Mutex<HashMap<String, docker::SharedClient>>>,
    kubeconfig: Option<std::path::PathBuf>,
    kubernetes_clients: Arc<Mutex<HashMap<Option<String>, kubernetes::SharedClient>>>,
}

impl Backends {
    /// Backends labelling their objects as made by the store `instance`, using only what `limits`
    /// allows.
    pub fn new(instance: &str, limits: OrchestratorLimits) -> Self {
        Backends {
            instance: instance.to_string(),
            local_roots: limits.local_roots.clone().into(),
            limits,
            docker_clients: Arc::default(),
            kubeconfig: None,
            kubernetes_clients: Arc::default(),
        }
    }

    /// Where credentials for named Kubernetes API servers are (`BERTH_KUBECONFIG`): the context
    /// whose cluster's server is the orchestrator's is used.
    pub fn with_kubeconfig(mut self, path: Option<std::path::PathBuf>) -> Self {
        self.kubeconfig = path;
        self
    }

    /// The backend of an orchestrator of `kind` configured with `config`. A config that does not
    /// parse, or points outside what this service's operator allows (the registry may hold
    /// registrations older than its limits, or be configured apart), is the orchestrator's fault,
    /// not the caller's: FailedPrecondition.
    pub fn for_orchestrator(
        &self,
        orchestrator: &str,
        kind: OrchestratorKind,
        config: &serde_json::Value,
    ) -> Result<Arc<dyn Backend>, Status> {
        let bad_config = |e: Status| {
            Status::new(
                Code::FailedPrecondition,
                format!(
                    "orchestrator {orchestrator:?} has a config storage-ops cannot use: {}",
                    e.message
                ),
            )
        };
        // Outside the operator's allow-list: said by field and setting only. The caller may be a
        // tenant that cannot read orchestrators, and the refusal's words (the address, the
        // allowed list) are the operator's (a break-it finding); the log has them.
        let not_allowed = |field: &str, setting: &str, e: Status| {
            tracing::warn!(%orchestrator, refusal = %e.message, "an orchestrator's stored config is outside this service's allow-list");
            Status::new(
                Code::FailedPrecondition,
                format!(
                    "orchestrator {orchestrator:?} has a config storage-ops cannot use: its {field} is not one this service's operator allows ({setting})"
                ),
            )
        };
        match kind {
            OrchestratorKind::Local => {
                let config = LocalConfig::from_config(config).map_err(bad_config)?;
                self.limits
                    .check_base_path("config.basePath", &config.base_path)
                    .map_err(|e| {
                        not_allowed(
                            "config.basePath",
                            domain::orchestrator::LOCAL_ROOTS_SETTING,
                            e,
                        )
                    })?;
                Ok(Arc::new(local::LocalBackend::new(
                    &config.base_path,
                    self.local_roots.clone(),
                )))
            }
            OrchestratorKind::Docker => {
                let config = DockerConfig::from_config(config).map_err(bad_config)?;
                self.limits
                    .check_docker_host("config.host", &config.host)
                    .map_err(|e| {
                        not_allowed(
                            "config.host",
                            domain::orchestrator::DOCKER_ENDPOINTS_SETTING,
                            e,
                        )
                    })?;
                let client = self
                    .docker_clients
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(config.host.clone())
                    .or_default()
                    .clone();
                Ok(Arc::new(docker::DockerBackend::new(
                    &config.host,
                    client,
                    &self.instance,
                )))
            }
            OrchestratorKind::Kubernetes => {
                let config = KubernetesConfig::from_config(config).map_err(bad_config)?;
                self.limits
                    .check_kubernetes_server("config.server", config.server.as_deref())
                    .map_err(|e| {
                        not_allowed(
                            "config.server",
                            domain::orchestrator::KUBERNETES_SERVERS_SETTING,
                            e,
                        )
                    })?;
                let client = self
                    .kubernetes_clients
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(config.server.clone())
                    .or_insert_with(|| {
                        kubernetes::SharedClient::new(
                            config.server.clone(),
                            self.kubeconfig.clone(),
                        )
                    })
                    .clone();
                Ok(Arc::new(kubernetes::KubernetesBackend::new(
                    config,
                    client,
                    &self.instance,
                )))
            }
            OrchestratorKind::Nomad => Err(Status::new(
                Code::Unimplemented,
                format!(
                    "StorageOps on {kind} orchestrators are not implemented yet (orchestrator {orchestrator:?}); use a local or docker orchestrator"
                ),
            )),
        }
    }
}

/// The capacity limit an orchestrator's config sets, if any.
pub fn capacity_limit(kind: OrchestratorKind, config: &serde_json::Value) -> Option<u64> {
    match kind {
        OrchestratorKind::Local => LocalConfig::from_config(config)
            .ok()
            .and_then(|c| c.capacity)
            .map(|q| q.bytes()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> OrchestratorLimits {
        OrchestratorLimits {
            local_roots: vec!["/srv".into()],
            docker_endpoints: vec![domain::orchestrator::DEFAULT_DOCKER_HOST.into()],
            kubernetes_servers: Vec::new(),
            in_cluster: false,
        }
    }

    #[test]
    fn configs_outside_the_limits_are_a_precondition() {
        let backends = Backends::new("test", limits());
        for (kind, config, setting) in [
            (
                OrchestratorKind::Local,
                serde_json::json!({"basePath": "/etc/x"}),
                "BERTH_LOCAL_ROOTS",
            ),
            (
                OrchestratorKind::Docker,
                serde_json::json!({"host": "tcp://10.0.0.1:2375"}),
                "BERTH_DOCKER_ENDPOINTS",
            ),
        ] {
            let e = backends.for_orchestrator("o", kind, &config).err().unwrap();
            assert_eq!(e.code, Code::FailedPrecondition);
            assert!(e.message.contains(setting), "{}", e.message);
        }
        assert!(
            backends
                .for_orchestrator("o", OrchestratorKind::Docker, &serde_json::json!({}))
                .is_ok()
        );
    }

    #[test]
    fn kinds_without_a_backend_are_unimplemented_and_bad_configs_a_precondition() {
        let backends = Backends::new("test", limits());
        let e = backends
            .for_orchestrator("o", OrchestratorKind::Nomad, &serde_json::json!({}))
            .err()
            .unwrap();
        assert_eq!(e.code, Code::Unimplemented);
        assert!(e.message.contains("not implemented"), "{}", e.message);
        let e = backends
            .for_orchestrator(
                "o",
                OrchestratorKind::Local,
                &serde_json::json!({"basePath": "rel"}),
            )
            .err()
            .unwrap();
        assert_eq!(e.code, Code::FailedPrecondition);
        let local = backends
            .for_orchestrator(
                "o",
                OrchestratorKind::Local,
                &serde_json::json!({"basePath": "/srv/v"}),
            )
            .unwrap();
        assert_eq!(local.identity(), "local:/srv/v");
        assert_eq!(
            capacity_limit(
                OrchestratorKind::Local,
                &serde_json::json!({"basePath": "/srv/v", "capacity": "1Ki"})
            ),
            Some(1024)
        );
    }
}
