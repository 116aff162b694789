//! StorageOps: AddStorage, DeleteStorage, ReadStorage, ListStorage, stats, orphans and the reconcile
//! pass, on top of the store, the registry and the backends.
//!
//! The order of writes is what makes a crash harmless. A new volume's object is made before its row
//! only on a backend that marks it uncommitted until the row is committed (one commit per add; see
//! `add`); elsewhere a row is written (`Provisioning`) before the backend makes anything. A row is
//! removed only after the backend has removed its object (`Deleting` in between). So an object
//! without a row is either marked uncommitted (an add not yet committed, or one a crash stopped: the
//! reconciler takes it back, under the volume's lock) or something Berth cannot account for, which
//! the orphan scan reports; a row left half-way is finished by [`Ops::reconcile_once`]. Work on one
//! volume holds that volume's lock, and runs in its own task, so a caller that hangs up cannot stop
//! it half-way.
//!
//! # Layout
//! - this module: [`Ops`] (the store, the registry, the backends and the per-volume locks), the
//!   orchestrator look-ups AddStorage and DeleteStorage share, [`to_volume`] and the [`reasons`].
//! - `add`: AddStorage, and [`spec_hash`]/[`differences`] that make it idempotent.
//! - `delete`: DeleteStorage.
//! - `patch`: PatchStorage, a merge patch of a volume's labels and capacity.
//! - `list`: ReadStorage, ListStorage with its signed [`ContinueTokens`], and stats.
//! - `reconcile`: the orphan scan and the reconcile pass, under an [`OrphanPolicy`].
//! - `error`: [`OpsError`], what all of these fail with; the API layer maps it to HTTP.

use std::sync::Arc;

use domain::{Code, Orchestrator, Status};

use crate::backend::{Backend, Backends};
use crate::locks::KeyLocks;
use crate::store::{Store, VolumeRow};

mod add;
mod delete;
mod error;
mod list;
mod patch;
mod reconcile;

pub use add::{differences, spec_hash};
pub use error::OpsError;
pub use list::{ContinueTokens, ListRequest, MAX_SCAN, list_query};
pub use patch::VolumePatch;
pub use reconcile::OrphanPolicy;

/// Reasons written into `status.reason`.
pub mod reasons {
    /// The backend is making it.
    pub const PROVISIONING: &str = "Provisioning";
    /// The backend made it.
    pub const PROVISIONED: &str = "Provisioned";
    /// The backend failed; `message` has its words.
    pub const BACKEND_ERROR: &str = "BackendError";
    /// Being deleted, backend object too.
    pub const DELETING: &str = "Deleting";
    /// Being deleted, backend object kept (`reclaimPolicy: Retain`).
    pub const RETAINING: &str = "Retaining";
    /// Made, waiting for the orchestrator to bind it (a Kubernetes claim not yet Bound).
    pub const BINDING: &str = "Binding";
}

/// The service's logic.
pub struct Ops {
    store: Store,
    tokens: ContinueTokens,
    registry: client::registry::Client,
    backends: Backends,
    locks: KeyLocks,
    orphan_policy: OrphanPolicy,
}

pub use crate::store::to_volume;

impl Ops {
    /// The logic over `store`, resolving orchestrators through `registry` and using only the
    /// backends `limits` allows.
    pub fn new(
        store: Store,
        registry: client::registry::Client,
        orphan_policy: OrphanPolicy,
        limits: domain::orchestrator::OrchestratorLimits,
    ) -> Self {
        let backends = Backends::new(store.instance(), limits);
        Ops {
            tokens: ContinueTokens::new(store.continue_key()),
            store,
            registry,
            backends,
            locks: KeyLocks::default(),
            orphan_policy,
        }
    }

    /// Credentials for named Kubernetes API servers (`BERTH_KUBECONFIG`).
    pub fn with_kubeconfig(mut self, path: Option<std::path::PathBuf>) -> Self {
        self.backends = self.backends.with_kubeconfig(path);
        self
    }

    /// The `continue` token for the position after `namespace/name` in the list `list`
    /// ([`list_query`]).
    pub fn encode_continue(&self, namespace: &str, name: &str, list: &str) -> String {
        self.tokens.encode(namespace, name, list)
    }

    /// The position of a `continue` token this service issued for the list `list`; any other is a
    /// 400.
    pub fn decode_continue(&self, token: &str, list: &str) -> Result<(String, String), Status> {
        self.tokens.decode(token, list)
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The registry client.
    pub fn registry(&self) -> &client::registry::Client {
        &self.registry
    }

    /// The orchestrator `name`, or `None` when it is not registered; [`OpsError::RegistryDown`] when
    /// the registry fails.
    async fn lookup(&self, name: &str) -> Result<Option<Orchestrator>, OpsError> {
        match self.registry.get(name).await {
            Ok(o) => Ok(Some(o)),
            Err(e) if e.code() == Code::NotFound => Ok(None),
            Err(e) => Err(OpsError::RegistryDown(e)),
        }
    }

    /// The orchestrator a profile names, or the registry's default.
    async fn resolve(&self, name: Option<&str>) -> Result<Orchestrator, OpsError> {
        match name {
            Some(name) => self
                .lookup(name)
                .await?
                .ok_or_else(|| OpsError::UnknownOrchestrator(name.to_string())),
            None => match self.registry.default_orchestrator().await {
                Ok(o) => Ok(o),
                Err(e) if e.code() == Code::NotFound => Err(OpsError::NoDefaultOrchestrator),
                Err(e) => Err(OpsError::RegistryDown(e)),
            },
        }
    }

    fn stored_backend(&self, row: &VolumeRow) -> Result<Arc<dyn Backend>, OpsError> {
        self.backends
            .for_orchestrator(&row.orchestrator, row.kind, &row.backend_config)
            .map_err(OpsError::BackendRefused)
    }
}
