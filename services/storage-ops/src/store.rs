//! The volume store: SQLite through rusqlite, one writer thread with group commit, a few readers.
//!
//! Every write goes through one thread that owns the only writing connection (see `writer`), so
//! writes never contend for SQLite's lock and never see `SQLITE_BUSY`. The thread takes whatever
//! commands are queued (up to [`MAX_BATCH`]) and runs them in one transaction, answering each
//! caller only after the `COMMIT` that made its change durable: under load many changes share one
//! commit and its `fsync` (group commit), with no caller ever told "done" before the disk has it.
//! Reads go to a small pool of other connections (see `readers`); WAL lets them run beside the
//! writer and see every committed change, so a read after an acknowledged write always sees it.
//!
//! The schema is `migrations/`, applied in order at open and counted in SQLite's `user_version`. A
//! database an earlier storage-ops made through sqlx's migrator (its `_sqlx_migrations` table, no
//! `user_version`) already has the first migration's tables and is adopted as it is.
//!
//! ## Durability: `synchronous = FULL`
//!
//! In WAL mode, `NORMAL` survives a crash of the process (the WAL is in the OS cache) but may lose the
//! last commits on power loss or a kernel crash; `FULL` syncs the WAL at every commit so an
//! acknowledged AddStorage or DeleteStorage survives both. A lost row after the backend made its object
//! would turn an acknowledged volume into an orphan, so storage-ops takes `FULL`, and pays for it with
//! group commit (one `fsync` per batch, not per request) instead of weakening it, and with fewer
//! commits: AddStorage on the local backend writes its row once, already Ready, after the object is
//! made (see `ops::add` for why that is crash-safe), so one add is one commit, not two. The fsync of
//! the object's directory is the writer's too, right before that commit, so concurrent adds share it
//! as they share the commit; so are making the object and clearing its mark (see `writer`).

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use domain::volume::{VolumeMeta, VolumeSpecView, VolumeStatus};
use domain::{Condition, Labels, OrchestratorKind, Volume, VolumePhase};
use rusqlite::{OptionalExtension, params};
use service_kit::watch::Feed;
use tokio::sync::{mpsc, oneshot};

use crate::backend::NewObject;
use readers::Readers;
use writer::{Command, Outcome};

mod copy;
mod readers;
mod writer;

pub use copy::{CopyError, CopyMade, make_copy_own};

/// The most commands one transaction carries.
pub const MAX_BATCH: usize = 256;

/// How long a connection waits for a lock before giving up (only readers can wait: there is one
/// writer, but a checkpoint or an external `sqlite3` may hold the lock briefly).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The schema's migrations, in order: the database's `user_version` is how many it has applied.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_volumes.sql"),
    include_str!("../migrations/0002_namespace_versions.sql"),
];

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
    /// RFC 3339 time of the last change.
    pub updated_at: String,
    /// Bumped on every write, monotonic across the whole store.
    pub resource_version: i64,
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
        "orchestrator {orchestrator:?} (a capacity of {limit} bytes) has no room for {asked} more; ask for less, or name another orchestrator"
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
        "namespace {namespace:?} is at its quota {quota}={limit}: {used} {unit} in use, {asked} more asked"
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
    Backend(crate::backend::BackendError),
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

impl StoreError {
    fn db(e: impl std::error::Error + Send + Sync + 'static) -> Self {
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

/// The store. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    read: Readers,
    feed: Arc<Feed<()>>,
    /// The version every namespace's own sequence starts above.
    floor: i64,
    writes: mpsc::Sender<Command>,
    instance: String,
    continue_key: Vec<u8>,
    quota: NamespaceQuota,
}

/// The columns of `volumes`, in [`row_from`]'s order.
macro_rules! columns {
    () => {
        "uid, namespace, name, orchestrator, kind, backend_config, capacity, capacity_bytes, replicas, \
         labels, parameters, spec_hash, phase, reason, message, location, created_at, updated_at, \
         resource_version"
    };
}
use columns;

impl Store {
    /// Opens (creating if needed) the database at `path`, runs the migrations, starts the writer.
    pub async fn open(path: &Path) -> Result<Store, Box<dyn std::error::Error + Send + Sync>> {
        Store::open_with_quota(path, NamespaceQuota::default()).await
    }

    /// [`Store::open`], with every insert held to `quota` in the same transaction as the insert.
    pub async fn open_with_quota(
        path: &Path,
        quota: NamespaceQuota,
    ) -> Result<Store, Box<dyn std::error::Error + Send + Sync>> {
        let owned = path.to_path_buf();
        // Opening and migrating touch the disk: not on an async thread.
        let opened = tokio::task::spawn_blocking(move || open_blocking(&owned)).await??;
        let (writes, queue) = mpsc::channel(4 * MAX_BATCH);
        let feed = Feed::new(
            FEED_CAPACITY,
            u64::try_from(opened.resource_version).unwrap_or(0),
            opened.namespace_versions,
        );
        writer::spawn(opened.writer, queue, opened.resource_version, feed.clone())?;
        Ok(Store {
            inner: Arc::new(Inner {
                read: Readers::new(path),
                feed,
                floor: opened.resource_version,
                writes,
                instance: opened.instance,
                continue_key: opened.continue_key,
                quota,
            }),
        })
    }

    /// The change feed a watch of volumes follows; its scopes are namespaces, each with its own
    /// sequence of versions.
    pub fn feed(&self) -> &Arc<Feed<()>> {
        &self.inner.feed
    }

    /// The version `namespace` is at: the last its own sequence issued, or the floor every
    /// namespace's sequence starts above when it has none yet.
    pub async fn namespace_version(&self, namespace: &str) -> Result<u64, StoreError> {
        let (namespace, floor) = (namespace.to_owned(), self.inner.floor);
        self.inner
            .read
            .read(move |c| namespace_version(c, &namespace, floor))
            .await
    }

    /// Every volume of `namespace` and the version they are at, read in one transaction (what a
    /// watch without a version starts with). A namespace's volumes are bounded by its quota.
    pub async fn snapshot(&self, namespace: &str) -> Result<(Vec<VolumeRow>, u64), StoreError> {
        let (namespace, floor) = (namespace.to_owned(), self.inner.floor);
        self.inner
            .read
            .read(move |c| {
                let tx = c.unchecked_transaction()?;
                let version = namespace_version(&tx, &namespace, floor)?;
                let rows = tx
                    .prepare_cached(concat!(
                        "SELECT ",
                        columns!(),
                        " FROM volumes WHERE namespace = ?1 ORDER BY name"
                    ))?
                    .query_map([&namespace], row_from)?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                tx.commit()?;
                Ok((rows, version))
            })
            .await
    }

    /// This database's id (labels Docker volumes as this store's).
    pub fn instance(&self) -> &str {
        &self.inner.instance
    }

    /// The secret key that signs ListStorage's `continue` tokens, kept in the database.
    pub fn continue_key(&self) -> &[u8] {
        &self.inner.continue_key
    }

    async fn send(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<Outcome, StoreError>>) -> Command,
    ) -> Result<Outcome, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .writes
            .send(make(tx))
            .await
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Inserts a new volume; [`StoreError::Exists`] when the key is taken, and
    /// [`StoreError::CapacityExhausted`] when `capacity_limit` is set and the orchestrator's volumes
    /// (in any phase) plus this one would exceed it (checked in the same transaction, so two concurrent
    /// inserts cannot both squeeze in); [`StoreError::QuotaExceeded`] likewise for the namespace's
    /// quota.
    pub async fn insert(
        &self,
        row: VolumeRow,
        capacity_limit: Option<u64>,
    ) -> Result<VolumeRow, StoreError> {
        self.insert_row(row, capacity_limit, None).await
    }

    /// [`Store::insert`] for a volume with a new backend object, which the writer makes (marked
    /// uncommitted), makes durable with an fsync of its directory, records in the row (its location)
    /// by the commit, and marks committed, in that order, before answering: so the row is never on
    /// disk without its object. [`StoreError::Backend`] when the object cannot be made and
    /// [`StoreError::DirectorySync`] when its directory cannot be synced (no row is written either
    /// way); on every other error the object is left uncommitted, for the caller or the reconciler to
    /// take back.
    pub async fn insert_with_object(
        &self,
        row: VolumeRow,
        capacity_limit: Option<u64>,
        object: Box<dyn NewObject>,
    ) -> Result<VolumeRow, StoreError> {
        self.insert_row(row, capacity_limit, Some(object)).await
    }

    async fn insert_row(
        &self,
        row: VolumeRow,
        capacity_limit: Option<u64>,
        object: Option<Box<dyn NewObject>>,
    ) -> Result<VolumeRow, StoreError> {
        match self
            .send(|reply| Command::Insert {
                row: Box::new(row),
                capacity_limit,
                quota: self.inner.quota,
                object,
                reply,
            })
            .await?
        {
            Outcome::Row(row) => Ok(*row),
            _ => unreachable!("insert answers a row"),
        }
    }

    /// Changes a volume's phase; `None` when the uid is gone.
    pub async fn set_status(
        &self,
        uid: &str,
        update: StatusUpdate,
    ) -> Result<Option<VolumeRow>, StoreError> {
        match self
            .send(|reply| Command::SetStatus {
                uid: uid.to_string(),
                update,
                reply,
            })
            .await?
        {
            Outcome::MaybeRow(row) => Ok(row.map(|r| *r)),
            _ => unreachable!("set_status answers a row or none"),
        }
    }

    /// Changes a volume's labels and capacity ([`VolumeChange`]); `None` when it is gone.
    pub async fn update(
        &self,
        change: VolumeChange,
        capacity_limit: Option<u64>,
    ) -> Result<Option<VolumeRow>, StoreError> {
        match self
            .send(|reply| Command::Update {
                change: Box::new(change),
                capacity_limit,
                quota: self.inner.quota,
                reply,
            })
            .await?
        {
            Outcome::Changed(changed) => Ok(changed.map(|(row, _)| *row)),
            _ => unreachable!("update answers a changed row or none"),
        }
    }

    /// Removes a volume; with `retain`, records its backend object as kept on purpose. Whether it was
    /// there.
    pub async fn remove(&self, uid: &str, retain: bool) -> Result<bool, StoreError> {
        match self
            .send(|reply| Command::Remove {
                uid: uid.to_string(),
                retain,
                reply,
            })
            .await?
        {
            Outcome::Removed(row) => Ok(row.is_some()),
            _ => unreachable!("remove answers what it removed"),
        }
    }

    /// The volume `namespace/name`.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Option<VolumeRow>, StoreError> {
        let (namespace, name) = (namespace.to_owned(), name.to_owned());
        self.inner
            .read
            .read(move |c| {
                c.prepare_cached(concat!(
                    "SELECT ",
                    columns!(),
                    " FROM volumes WHERE namespace = ?1 AND name = ?2"
                ))?
                .query_row([namespace, name], row_from)
                .optional()
            })
            .await
    }

    /// The volume with this uid.
    pub async fn get_uid(&self, uid: &str) -> Result<Option<VolumeRow>, StoreError> {
        let uid = uid.to_owned();
        self.inner
            .read
            .read(move |c| {
                c.prepare_cached(concat!(
                    "SELECT ",
                    columns!(),
                    " FROM volumes WHERE uid = ?1"
                ))?
                .query_row([uid], row_from)
                .optional()
            })
            .await
    }

    /// Up to `limit` volumes in (namespace, name) order after `after`, in `namespace` when given. One
    /// range scan of `volumes_by_key`: the cost depends on `limit`, not on the table's size.
    pub async fn page(
        &self,
        namespace: Option<&str>,
        after: Option<(&str, &str)>,
        limit: u32,
    ) -> Result<Vec<VolumeRow>, StoreError> {
        let limit = i64::from(limit);
        // Within one namespace the position reduces to a name, which keeps the scan a range of the
        // index (a row-value comparison there makes SQLite walk the namespace from its start). A
        // position before the namespace starts at its beginning; one after it has nothing left.
        let after = match (namespace, after) {
            (Some(ns), Some((after_ns, _))) if after_ns < ns => None,
            (Some(ns), Some((after_ns, _))) if after_ns > ns => return Ok(Vec::new()),
            (_, after) => after,
        };
        let namespace = namespace.map(str::to_owned);
        let after = after.map(|(ns, name)| (ns.to_owned(), name.to_owned()));
        self.inner
            .read
            .read(move |c| {
                let query = |sql: &str, params: &[&dyn rusqlite::ToSql]| {
                    c.prepare_cached(sql)?
                        .query_map(params, row_from)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                };
                match (&namespace, &after) {
                    (None, None) => query(
                        concat!(
                            "SELECT ",
                            columns!(),
                            " FROM volumes ORDER BY namespace, name LIMIT ?1"
                        ),
                        params![limit],
                    ),
                    (None, Some((ns, name))) => query(
                        concat!(
                            "SELECT ",
                            columns!(),
                            " FROM volumes WHERE (namespace, name) > (?1, ?2) ORDER BY namespace, name LIMIT ?3"
                        ),
                        params![ns, name, limit],
                    ),
                    (Some(ns), None) => query(
                        concat!(
                            "SELECT ",
                            columns!(),
                            " FROM volumes WHERE namespace = ?1 ORDER BY namespace, name LIMIT ?2"
                        ),
                        params![ns, limit],
                    ),
                    (Some(ns), Some((_, after_name))) => query(
                        concat!(
                            "SELECT ",
                            columns!(),
                            " FROM volumes WHERE namespace = ?1 AND name > ?2 ORDER BY namespace, name LIMIT ?3"
                        ),
                        params![ns, after_name, limit],
                    ),
                }
            })
            .await
    }

    /// Volumes a crash (or a cancelled request) left half-done: `Pending`, `Provisioning`, `Deleting`.
    pub async fn unfinished(&self) -> Result<Vec<VolumeRow>, StoreError> {
        self.inner
            .read
            .read(|c| {
                c.prepare_cached(concat!(
                    "SELECT ",
                    columns!(),
                    " FROM volumes WHERE phase IN ('Pending', 'Provisioning', 'Deleting')"
                ))?
                .query_map([], row_from)?
                .collect()
            })
            .await
    }

    /// Ready volumes on orchestrators of `kind`: those whose backend observes its objects, for the
    /// reconciler to see whether each is still there.
    pub async fn ready_of_kind(
        &self,
        kind: OrchestratorKind,
    ) -> Result<Vec<VolumeRow>, StoreError> {
        let kind = kind.as_str();
        self.inner
            .read
            .read(move |c| {
                c.prepare_cached(concat!(
                    "SELECT ",
                    columns!(),
                    " FROM volumes WHERE phase = 'Ready' AND kind = ?1"
                ))?
                .query_map([kind], row_from)?
                .collect()
            })
            .await
    }

    /// How many volumes each orchestrator holds in each phase (for the metrics page).
    pub async fn volume_counts(&self) -> Result<Vec<(String, String, u64)>, StoreError> {
        self.inner
            .read
            .read(|c| {
                c.prepare_cached(
                    "SELECT orchestrator, phase, COUNT(*) FROM volumes GROUP BY orchestrator, phase",
                )?
                .query_map([], |r| {
                    let n: i64 = r.get(2)?;
                    Ok((r.get(0)?, r.get(1)?, n.unsigned_abs()))
                })?
                .collect()
            })
            .await
    }

    /// Every uid that owns a backend object: live volumes and retained ones.
    pub async fn owner_uids(&self) -> Result<HashSet<String>, StoreError> {
        self.inner
            .read
            .read(|c| {
                c.prepare_cached("SELECT uid FROM volumes UNION ALL SELECT uid FROM retained")?
                    .query_map([], |r| r.get(0))?
                    .collect()
            })
            .await
    }

    /// Whether `uid` owns a backend object.
    pub async fn owns(&self, uid: &str) -> Result<bool, StoreError> {
        let uid = uid.to_owned();
        self.inner
            .read
            .read(move |c| {
                c.prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM volumes WHERE uid = ?1) OR EXISTS (SELECT 1 FROM retained WHERE uid = ?1)",
                )?
                .query_row([uid], |r| r.get(0))
            })
            .await
    }

    /// The distinct (orchestrator, kind, config) the stored volumes were made on.
    pub async fn backend_targets(
        &self,
    ) -> Result<Vec<(String, OrchestratorKind, serde_json::Value)>, StoreError> {
        self.inner
            .read
            .read(|c| {
                c.prepare_cached("SELECT DISTINCT orchestrator, kind, backend_config FROM volumes")?
                    .query_map([], |r| {
                        let kind: String = r.get(1)?;
                        let config: String = r.get(2)?;
                        Ok((
                            r.get(0)?,
                            OrchestratorKind::parse_field("kind", &kind)
                                .map_err(|e| bad_column(1, std::io::Error::other(e.message)))?,
                            serde_json::from_str(&config).map_err(|e| bad_column(2, e))?,
                        ))
                    })?
                    .collect()
            })
            .await
    }

    /// Whether the database answers and the writer is there to take changes (readiness): a writer
    /// thread that has ended would refuse every change, so the service must not look ready.
    pub async fn ping(&self) -> Result<(), StoreError> {
        if self.inner.writes.is_closed() {
            return Err(StoreError::Closed);
        }
        self.inner
            .read
            .read(|c| c.query_row("SELECT 1", [], |_| Ok(())))
            .await
    }
}

/// How many changes the feed remembers for resuming watches.
const FEED_CAPACITY: usize = 4096;

fn namespace_version(
    c: &rusqlite::Connection,
    namespace: &str,
    floor: i64,
) -> rusqlite::Result<u64> {
    let version: Option<i64> = c
        .prepare_cached("SELECT version FROM namespace_versions WHERE namespace = ?1")?
        .query_row([namespace], |r| r.get(0))
        .optional()?;
    Ok(u64::try_from(version.unwrap_or(floor)).unwrap_or(0))
}

/// What opening a database finds: the writing connection, migrated, and the `meta` values.
struct Opened {
    writer: rusqlite::Connection,
    instance: String,
    continue_key: Vec<u8>,
    resource_version: i64,
    /// Where each namespace's sequence is (a watch of one cannot resume from before it).
    namespace_versions: Vec<(String, u64)>,
}

fn open_blocking(path: &Path) -> Result<Opened, Box<dyn std::error::Error + Send + Sync>> {
    let mut conn = open_writer(path)?;
    migrate(&mut conn)?;
    conn.execute(
        "INSERT OR IGNORE INTO meta (key, value) VALUES ('instance', ?1)",
        [uuid::Uuid::new_v4().to_string()],
    )?;
    // The key that signs `continue` tokens: made once, kept with the data, so a restart keeps
    // accepting the tokens it issued before.
    conn.execute(
        "INSERT OR IGNORE INTO meta (key, value) VALUES ('continue_key', ?1)",
        [hex::encode(rand::random::<[u8; 32]>())],
    )?;
    let meta = |key: &str| {
        conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| {
            r.get::<_, String>(0)
        })
    };
    let instance = meta("instance")?;
    let continue_key = hex::decode(meta("continue_key")?)?;
    let resource_version = meta("resource_version")?.parse()?;
    let namespace_versions = conn
        .prepare("SELECT namespace, version FROM namespace_versions")?
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(Opened {
        writer: conn,
        instance,
        continue_key,
        resource_version,
        namespace_versions,
    })
}

/// Applies the migrations the database has not had, in one transaction with the new
/// `user_version`; refuses a database a newer storage-ops has migrated further.
fn migrate(
    conn: &mut rusqlite::Connection,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let version: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let mut applied = usize::try_from(version).unwrap_or(usize::MAX);
    if applied > MIGRATIONS.len() {
        return Err(format!(
            "its schema is at version {version}, newer than the {} this storage-ops knows; run the storage-ops that made it",
            MIGRATIONS.len()
        )
        .into());
    }
    // Made by sqlx's migrator, which kept its own table and left `user_version` at 0: sqlx
    // applies each migration in a transaction, so a `volumes` table means the first one is whole.
    let made_by_sqlx: bool = tx.query_row(
        "SELECT COUNT(*) = 2 FROM sqlite_master WHERE type = 'table' AND name IN ('_sqlx_migrations', 'volumes')",
        [],
        |r| r.get(0),
    )?;
    if applied == 0 && made_by_sqlx {
        applied = 1;
    }
    for sql in &MIGRATIONS[applied..] {
        tx.execute_batch(sql)?;
    }
    tx.pragma_update(None, "user_version", MIGRATIONS.len() as i64)?;
    tx.commit()?;
    Ok(())
}

/// The writing connection. WAL (set in the file, so this makes a new database WAL and any reader
/// opened later finds it), `synchronous = FULL` (an acknowledged change survives power loss too; see
/// the module docs).
fn open_writer(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;",
    )?;
    Ok(conn)
}

/// A stored value that does not decode (the `index`th column).
fn bad_column(index: usize, e: impl std::error::Error + Send + Sync + 'static) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, Box::new(e))
}

/// A row of [`columns!`].
fn row_from(r: &rusqlite::Row<'_>) -> rusqlite::Result<VolumeRow> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Uncommitted;
    use std::path::PathBuf;

    pub(crate) fn row(ns: &str, name: &str, orchestrator: &str, bytes: u64) -> VolumeRow {
        VolumeRow {
            uid: uuid::Uuid::new_v4().to_string(),
            namespace: ns.into(),
            name: name.into(),
            orchestrator: orchestrator.into(),
            kind: OrchestratorKind::Local,
            backend_config: serde_json::json!({"basePath": "/tmp/x"}),
            capacity: bytes.to_string(),
            capacity_bytes: bytes,
            replicas: 1,
            labels: Labels::new(),
            parameters: BTreeMap::new(),
            spec_hash: "h".into(),
            phase: VolumePhase::Provisioning,
            reason: String::new(),
            message: String::new(),
            location: String::new(),
            created_at: now(),
            updated_at: now(),
            resource_version: 0,
        }
    }

    async fn open() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).await.unwrap();
        (dir, store)
    }

    #[tokio::test]
    async fn insert_conflict_update_remove_and_versions_only_grow() {
        let (_dir, store) = open().await;
        let a = store.insert(row("ns", "a", "o", 10), None).await.unwrap();
        let e = store
            .insert(row("ns", "a", "o", 10), None)
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::Exists(..)), "{e}");
        let b = store.insert(row("ns", "b", "o", 10), None).await.unwrap();
        assert!(b.resource_version > a.resource_version);
        let ready = store
            .set_status(
                &a.uid,
                StatusUpdate {
                    phase: VolumePhase::Ready,
                    reason: "Provisioned".into(),
                    message: String::new(),
                    location: Some("/x".into()),
                },
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ready.location, "/x");
        assert!(ready.resource_version > b.resource_version);
        assert_eq!(store.get("ns", "a").await.unwrap().unwrap(), ready);
        assert!(store.remove(&b.uid, true).await.unwrap());
        assert!(!store.remove(&b.uid, false).await.unwrap());
        assert!(
            store.owns(&b.uid).await.unwrap(),
            "retained uids stay owned"
        );
        let c = store.insert(row("ns", "b", "o", 10), None).await.unwrap();
        assert!(c.resource_version > ready.resource_version);
    }

    /// Each namespace has its own resourceVersion sequence: another namespace's writes do not move
    /// it, so a tenant cannot watch it to learn how much the others write (a break-it finding).
    #[tokio::test]
    async fn a_namespaces_versions_do_not_move_with_anothers_writes() {
        let (_dir, store) = open().await;
        let first = store
            .insert(row("team-b", "x", "o", 1), None)
            .await
            .unwrap();
        for i in 0..5 {
            let theirs = store
                .insert(row("team-a", &format!("a{i}"), "o", 1), None)
                .await
                .unwrap();
            store
                .set_status(
                    &theirs.uid,
                    StatusUpdate {
                        phase: VolumePhase::Ready,
                        reason: "Provisioned".into(),
                        message: String::new(),
                        location: None,
                    },
                )
                .await
                .unwrap();
        }
        let second = store
            .insert(row("team-b", "y", "o", 1), None)
            .await
            .unwrap();
        assert_eq!(second.resource_version, first.resource_version + 1);
    }

    /// A database an earlier storage-ops made through sqlx's migrator is adopted with its rows; one a
    /// newer storage-ops migrated further is refused, and left as it was.
    #[tokio::test]
    async fn databases_made_by_sqlx_are_adopted_and_newer_ones_refused() {
        use sqlx::Connection;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
        let mut old = sqlx::SqliteConnection::connect_with(&options)
            .await
            .unwrap();
        sqlx::migrate!("./migrations").run(&mut old).await.unwrap();
        old.close().await.unwrap();
        let store = Store::open(&path).await.unwrap();
        let kept = store.insert(row("ns", "a", "o", 1), None).await.unwrap();
        drop(store);
        let store = Store::open(&path).await.unwrap();
        assert_eq!(store.get("ns", "a").await.unwrap(), Some(kept));
        drop(store);

        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", 7).unwrap();
        drop(conn);
        let e = Store::open(&path).await.err().unwrap().to_string();
        assert!(e.contains("version 7"), "{e}");
        let conn = rusqlite::Connection::open(&path).unwrap();
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, 7);
    }

    /// A stand-in backend object: what it did goes to `log`, in order; `make` fails when `refuse`
    /// is set, and says its directory is `sync_dir`.
    struct Probe {
        name: String,
        sync_dir: PathBuf,
        refuse: bool,
        log: Arc<std::sync::Mutex<Vec<String>>>,
    }

    impl NewObject for Probe {
        fn make(&mut self) -> Result<Uncommitted, crate::backend::BackendError> {
            self.log.lock().unwrap().push(format!("make {}", self.name));
            if self.refuse {
                return Err(crate::backend::BackendError::new(
                    domain::Code::ResourceExhausted,
                    "no room",
                ));
            }
            Ok(Uncommitted {
                location: format!("/at/{}", self.name),
                sync_dir: self.sync_dir.clone(),
            })
        }

        fn mark_committed(&mut self) -> Result<(), crate::backend::BackendError> {
            self.log.lock().unwrap().push(format!("mark {}", self.name));
            Ok(())
        }
    }

    /// The writer makes each insert's object, syncs its directory and commits the row recording
    /// where it is, then marks it; an insert whose object cannot be made, or whose directory cannot
    /// be synced, gets no row (and no mark) and says why, and the rest of its batch commits.
    #[tokio::test]
    async fn inserts_with_an_object_commit_only_once_it_is_made_and_synced() {
        let (dir, store) = open().await;
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let inserts = (0..9).map(|i| {
            let store = store.clone();
            let probe = Probe {
                name: format!("v{i}"),
                sync_dir: if i % 3 == 1 {
                    dir.path().join("gone")
                } else {
                    dir.path().to_path_buf()
                },
                refuse: i % 3 == 2,
                log: log.clone(),
            };
            async move {
                store
                    .insert_with_object(row("ns", &format!("v{i}"), "o", 1), None, Box::new(probe))
                    .await
            }
        });
        let results = futures::future::join_all(inserts).await;
        let log = log.lock().unwrap().clone();
        for (i, result) in results.iter().enumerate() {
            let stored = store.get("ns", &format!("v{i}")).await.unwrap();
            let (made, marked) = (
                log.iter().position(|l| *l == format!("make v{i}")),
                log.iter().position(|l| *l == format!("mark v{i}")),
            );
            assert!(made.is_some(), "{log:?}");
            match i % 3 {
                0 => {
                    assert_eq!(result.as_ref().unwrap().location, format!("/at/v{i}"));
                    assert_eq!(stored.unwrap().location, format!("/at/v{i}"));
                    assert!(marked > made, "{log:?}");
                }
                1 => {
                    let Err(StoreError::DirectorySync { dir: at, cause }) = result else {
                        panic!("{result:?}");
                    };
                    assert_eq!(cause.kind(), std::io::ErrorKind::NotFound);
                    assert_eq!(*at, dir.path().join("gone"));
                    assert!(stored.is_none());
                    assert!(marked.is_none(), "{log:?}");
                }
                _ => {
                    let Err(StoreError::Backend(why)) = result else {
                        panic!("{result:?}");
                    };
                    assert_eq!(why.code, domain::Code::ResourceExhausted);
                    assert!(stored.is_none());
                    assert!(marked.is_none(), "{log:?}");
                }
            }
        }
    }

    #[tokio::test]
    async fn capacity_is_checked_inside_the_writer() {
        let (_dir, store) = open().await;
        let inserts = (0..10).map(|i| {
            let store = store.clone();
            async move {
                store
                    .insert(row("ns", &format!("v{i}"), "o", 4), Some(10))
                    .await
            }
        });
        let results = futures::future::join_all(inserts).await;
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 2);
        assert!(
            results
                .iter()
                .filter_map(|r| r.as_ref().err())
                .all(|e| matches!(e, StoreError::CapacityExhausted { .. }))
        );
        // Another orchestrator has its own budget.
        store
            .insert(row("ns", "w", "p", 10), Some(10))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn pages_follow_the_key_order_and_use_the_index() {
        let (_dir, store) = open().await;
        for (ns, name) in [("b", "x"), ("a", "z"), ("a", "y"), ("c", "a")] {
            store.insert(row(ns, name, "o", 1), None).await.unwrap();
        }
        let page = store.page(None, None, 2).await.unwrap();
        let keys: Vec<_> = page
            .iter()
            .map(|r| (r.namespace.as_str(), r.name.as_str()))
            .collect();
        assert_eq!(keys, [("a", "y"), ("a", "z")]);
        let page = store.page(None, Some(("a", "z")), 10).await.unwrap();
        let keys: Vec<_> = page
            .iter()
            .map(|r| (r.namespace.as_str(), r.name.as_str()))
            .collect();
        assert_eq!(keys, [("b", "x"), ("c", "a")]);
        let page = store.page(Some("a"), Some(("a", "y")), 10).await.unwrap();
        assert_eq!(page.len(), 1);
        // A token from another namespace: before it starts at its beginning, after it is empty.
        assert_eq!(
            store
                .page(Some("b"), Some(("a", "z")), 10)
                .await
                .unwrap()
                .len(),
            1
        );
        assert!(
            store
                .page(Some("a"), Some(("b", "a")), 10)
                .await
                .unwrap()
                .is_empty()
        );

        for sql in [
            "EXPLAIN QUERY PLAN SELECT uid FROM volumes WHERE (namespace, name) > ('a', 'b') ORDER BY namespace, name LIMIT 10",
            "EXPLAIN QUERY PLAN SELECT uid FROM volumes WHERE namespace = 'a' AND name > 'b' ORDER BY namespace, name LIMIT 10",
        ] {
            let detail: Vec<String> = store
                .inner
                .read
                .read(move |c| {
                    c.prepare(sql)?
                        .query_map([], |r| r.get("detail"))?
                        .collect()
                })
                .await
                .unwrap();
            let detail = detail.join("; ");
            assert!(
                detail.contains("USING INDEX volumes_by_key"),
                "{sql}: {detail}"
            );
            assert!(!detail.contains("TEMP B-TREE"), "{sql}: {detail}");
        }
    }
}
