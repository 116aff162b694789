//! What the store holds and says: a volume's row and its wire form, the changes callers ask of it,
//! the errors a write can meet, and how a row is read out of SQLite (`columns!` and `row_from`).
//!
//! Apart from the store itself so that its parts (the writer thread, the readers, the copy) share
//! this vocabulary without importing the store that owns them, and the arrow to the backends runs
//! one way: a row says what a backend needs of it ([`VolumeRow::object_ref`]); a backend knows
//! nothing of rows.

use std::collections::BTreeMap;
use std::sync::Arc;

use domain::volume::{VolumeMeta, VolumeSpecView, VolumeStatus};
use domain::{Condition, Labels, OrchestratorKind, Volume, VolumePhase};

use crate::backend::{BackendError, ObjectRef};

/// A volume as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeRow {
    /// Unique id, never reused.
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name, unique in the namespace.
    pub name: String,
    /// The orchestrator it was made on.
    pub orchestrator: String,
    /// That orchestrator's kind.
    pub kind: OrchestratorKind,
    /// That orchestrator's config when the volume was made.
    pub backend_config: serde_json::Value,
    /// The capacity in canonical quantity form.
    pub capacity: String,
    /// The capacity in bytes.
    pub capacity_bytes: u64,
    /// Replicas.
    pub replicas: u32,
    /// Labels.
    pub labels: Labels,
    /// Parameters.
    pub parameters: BTreeMap<String, String>,
    /// The hash of the normalised spec (see `ops::spec_hash`).
    pub spec_hash: String,
    /// Phase.
    pub phase: VolumePhase,
    /// One-word reason for the phase.
    pub reason: String,
    /// A sentence for people.
    pub message: String,
    /// Where the backend put it.
    pub location: String,
    /// RFC 3339 creation time.
    pub created_at: String,
    /// RFC 3339 time its phase last changed: the Ready condition's `lastTransitionTime`, so a label
    /// patch or a status written again with the same phase leaves it (it is when the condition
    /// changed, not when the row did).
    pub updated_at: String,
    /// Bumped on every write, monotonic across the whole store.
    pub resource_version: i64,
}

impl VolumeRow {
    /// The backend's view of this volume.
    pub fn object_ref(&self) -> ObjectRef {
        ObjectRef {
            uid: self.uid.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            capacity_bytes: self.capacity_bytes,
            file: self
                .parameters
                .get(domain::volume::params::FORMAT)
                .is_some_and(|f| f == "file"),
        }
    }
}

/// The wire form of a stored volume.
pub fn to_volume(row: &VolumeRow) -> Volume {
    let ready = match row.phase {
        VolumePhase::Ready => "True",
        VolumePhase::Failed | VolumePhase::Deleting => "False",
        VolumePhase::Pending | VolumePhase::Provisioning => "Unknown",
    };
    Volume {
        api_version: domain::resources::API_VERSION.to_string(),
        kind: domain::volume::VOLUME_KIND.to_string(),
        metadata: VolumeMeta {
            name: row.name.clone(),
            namespace: row.namespace.clone(),
            uid: row.uid.clone(),
            labels: row.labels.clone(),
            creation_timestamp: row.created_at.clone(),
            resource_version: row.resource_version.to_string(),
        },
        spec: VolumeSpecView {
            orchestrator: row.orchestrator.clone(),
            capacity: row.capacity.clone(),
            capacity_bytes: row.capacity_bytes,
            replicas: row.replicas,
            parameters: row.parameters.clone(),
        },
        status: VolumeStatus {
            phase: row.phase,
            reason: row.reason.clone(),
            message: row.message.clone(),
            location: row.location.clone(),
            conditions: vec![Condition {
                kind: "Ready".into(),
                status: ready.into(),
                reason: row.reason.clone(),
                message: row.message.clone(),
                last_transition_time: Some(row.updated_at.clone()),
            }],
        },
    }
}

/// A change of phase (and maybe location).
#[derive(Debug, Clone)]
pub struct StatusUpdate {
    /// The new phase.
    pub phase: VolumePhase,
    /// Why.
    pub reason: String,
    /// For people.
    pub message: String,
    /// The backend's location, when it is now known.
    pub location: Option<String>,
}

/// A patch's change of a volume (`PATCH /v1/volumes/{namespace}/{name}`): its labels and capacity
/// as they are to be, and the hash of the spec they make.
#[derive(Debug, Clone)]
pub struct VolumeChange {
    /// The volume.
    pub uid: String,
    /// The version the caller read (`metadata.resourceVersion` in the patch), when it gave one.
    pub expected_version: Option<i64>,
    /// The labels after the patch.
    pub labels: Labels,
    /// The capacity after the patch, in canonical form.
    pub capacity: String,
    /// The same in bytes.
    pub capacity_bytes: u64,
    /// The hash of the spec after the patch.
    pub spec_hash: String,
}

/// Why a write did not happen.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// A volume with this namespace and name exists already.
    #[error("volume {0}/{1} already exists")]
    Exists(String, String),
    /// The orchestrator's capacity would be exceeded. The message never says how much is taken:
    /// an orchestrator is shared by every namespace, and its use is theirs (the operator's
    /// figures are in storage-ops' metrics).
    #[error(
        "orchestrator {orchestrator:?} (a capacity of {}) has no room for {} more; ask for less, or name another orchestrator",
        figure(*limit, "bytes"),
        figure(*asked, "bytes")
    )]
    CapacityExhausted {
        /// The orchestrator.
        orchestrator: String,
        /// Its capacity.
        limit: u64,
        /// What its volumes take.
        used: u64,
        /// What was asked.
        asked: u64,
    },
    /// The database failed.
    #[error("database: {0}")]
    Db(Arc<dyn std::error::Error + Send + Sync>),
    /// The directory whose fsync makes a new object durable could not be synced (the caller knows
    /// which; a path never goes into an error a client may read).
    #[error("syncing a directory: {cause}")]
    DirectorySync {
        /// Which directory.
        dir: std::path::PathBuf,
        /// Why it could not be synced.
        cause: Arc<std::io::Error>,
    },
    /// The namespace's volumes would exceed an operator's quota (`BERTH_QUOTA_VOLUMES` or
    /// `BERTH_QUOTA_VOLUME_BYTES`).
    #[error(
        "namespace {namespace:?} is at its quota {quota}={}: {} in use, {} more asked",
        figure(*limit, unit),
        amount(*used, unit),
        figure(*asked, unit)
    )]
    QuotaExceeded {
        /// The setting that sets the quota.
        quota: &'static str,
        /// The namespace.
        namespace: String,
        /// Its quota.
        limit: u64,
        /// What its volumes hold now.
        used: u64,
        /// What the new volume adds.
        asked: u64,
        /// `volumes` or `bytes`.
        unit: &'static str,
    },
    /// The backend could not make the new row's object (no row is written).
    #[error("{0}")]
    Backend(BackendError),
    /// The writer is gone (the service is stopping).
    #[error("the store is closed")]
    Closed,
    /// A patch's `metadata.resourceVersion` is not the volume's version any more.
    #[error(
        "metadata.resourceVersion: the volume is at resourceVersion {current}, not the one the patch names; read it again and retry"
    )]
    Stale {
        /// The volume's version.
        current: i64,
    },
}

/// A figure as a setting writes it: bytes as a quantity (`5Gi`, as a capacity is written), a count
/// as a number.
fn figure(n: u64, unit: &str) -> String {
    if unit == "bytes" {
        domain::quantity::Quantity::from_bytes(n).to_string()
    } else {
        n.to_string()
    }
}

/// An amount in use: bytes as a quantity (`4Mi`), a count with its unit (`3 volumes`).
fn amount(n: u64, unit: &str) -> String {
    if unit == "bytes" {
        figure(n, unit)
    } else {
        format!("{n} {unit}")
    }
}

impl StoreError {
    pub(crate) fn db(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        StoreError::Db(Arc::new(e))
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::db(e)
    }
}

/// What one namespace's volumes may hold, set by the operator; `None` is unlimited. Every recorded
/// volume counts (Failed and Deleting ones too, until they are gone), as for an orchestrator's
/// capacity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NamespaceQuota {
    /// Volumes per namespace (`BERTH_QUOTA_VOLUMES`).
    pub volumes: Option<u64>,
    /// Summed capacity per namespace, in bytes (`BERTH_QUOTA_VOLUME_BYTES`).
    pub bytes: Option<u64>,
}

/// The columns of `volumes`, in [`row_from`]'s order.
macro_rules! columns {
    () => {
        "uid, namespace, name, orchestrator, kind, backend_config, capacity, capacity_bytes, replicas, \
         labels, parameters, spec_hash, phase, reason, message, location, created_at, updated_at, \
         resource_version"
    };
}
pub(crate) use columns;

/// A stored value that does not decode (the `index`th column).
pub(crate) fn bad_column(
    index: usize,
    e: impl std::error::Error + Send + Sync + 'static,
) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, Box::new(e))
}

/// A row of [`columns!`].
pub(crate) fn row_from(r: &rusqlite::Row<'_>) -> rusqlite::Result<VolumeRow> {
    fn json<T: serde::de::DeserializeOwned>(
        r: &rusqlite::Row<'_>,
        i: usize,
    ) -> rusqlite::Result<T> {
        serde_json::from_str(&r.get::<_, String>(i)?).map_err(|e| bad_column(i, e))
    }
    let kind: String = r.get(4)?;
    let phase: String = r.get(12)?;
    let capacity_bytes: i64 = r.get(7)?;
    let replicas: i64 = r.get(8)?;
    Ok(VolumeRow {
        uid: r.get(0)?,
        namespace: r.get(1)?,
        name: r.get(2)?,
        orchestrator: r.get(3)?,
        kind: OrchestratorKind::parse_field("kind", &kind)
            .map_err(|e| bad_column(4, std::io::Error::other(e.message)))?,
        backend_config: json(r, 5)?,
        capacity: r.get(6)?,
        capacity_bytes: u64::try_from(capacity_bytes).map_err(|e| bad_column(7, e))?,
        replicas: u32::try_from(replicas).map_err(|e| bad_column(8, e))?,
        labels: json(r, 9)?,
        parameters: json(r, 10)?,
        spec_hash: r.get(11)?,
        phase: VolumePhase::parse(&phase)
            .ok_or_else(|| bad_column(12, std::io::Error::other(format!("phase {phase:?}"))))?,
        reason: r.get(13)?,
        message: r.get(14)?,
        location: r.get(15)?,
        created_at: r.get(16)?,
        updated_at: r.get(17)?,
        resource_version: r.get(18)?,
    })
}

/// RFC 3339 UTC, to the millisecond.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
