//! The volume store: SQLite, one writer thread with group commit, a pool of readers through sqlx.
//!
//! Every write goes through one thread that owns the only writing connection (see `writer`), so
//! writes never contend for SQLite's lock and never see `SQLITE_BUSY`. The thread takes whatever
//! commands are queued (up to [`MAX_BATCH`]) and runs them in one transaction, answering each
//! caller only after the `COMMIT` that made its change durable: under load many changes share one
//! commit and its `fsync` (group commit), with no caller ever told "done" before the disk has it.
//! Reads go to a small pool of other connections; WAL lets them run beside the writer and see every
//! committed change, so a read after an acknowledged write always sees it.
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
//! as they share the commit (see `writer`).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use domain::{Labels, OrchestratorKind, VolumePhase};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Connection, Row, SqliteConnection};
use tokio::sync::{mpsc, oneshot};

use writer::{Command, Outcome};

mod writer;

/// The most commands one transaction carries.
pub const MAX_BATCH: usize = 256;

/// How long a connection waits for a lock before giving up (only readers can wait: there is one
/// writer, but a checkpoint or an external `sqlite3` may hold the lock briefly).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The connection settings every storage-ops connection (and the benchmark's raw baseline) uses.
pub fn connect_options(path: &Path) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // FULL: an acknowledged change survives power loss too (see the module docs).
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(BUSY_TIMEOUT)
        .foreign_keys(true)
}

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

/// Why a write did not happen.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// A volume with this namespace and name exists already.
    #[error("volume {0}/{1} already exists")]
    Exists(String, String),
    /// The orchestrator's capacity would be exceeded.
    #[error(
        "orchestrator {orchestrator:?} has a capacity of {limit} bytes, {used} of them taken; {asked} more do not fit"
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
    #[error("syncing a directory: {0}")]
    DirectorySync(Arc<std::io::Error>),
    /// The writer is gone (the service is stopping).
    #[error("the store is closed")]
    Closed,
}

impl StoreError {
    fn db(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        StoreError::Db(Arc::new(e))
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::db(e)
    }
}

/// The store. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    read: SqlitePool,
    writes: mpsc::Sender<Command>,
    instance: String,
    continue_key: Vec<u8>,
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
        let options = connect_options(path);
        let mut writer = SqliteConnection::connect_with(&options).await?;
        sqlx::migrate!("./migrations").run(&mut writer).await?;
        sqlx::query("INSERT OR IGNORE INTO meta (key, value) VALUES ('instance', ?1)")
            .bind(uuid::Uuid::new_v4().to_string())
            .execute(&mut writer)
            .await?;
        let instance: String = sqlx::query_scalar("SELECT value FROM meta WHERE key = 'instance'")
            .fetch_one(&mut writer)
            .await?;
        // The key that signs `continue` tokens: made once, kept with the data, so a restart keeps
        // accepting the tokens it issued before.
        sqlx::query("INSERT OR IGNORE INTO meta (key, value) VALUES ('continue_key', ?1)")
            .bind(hex::encode(rand::random::<[u8; 32]>()))
            .execute(&mut writer)
            .await?;
        let continue_key: String =
            sqlx::query_scalar("SELECT value FROM meta WHERE key = 'continue_key'")
                .fetch_one(&mut writer)
                .await?;
        let continue_key = hex::decode(continue_key)?;
        let rv: String =
            sqlx::query_scalar("SELECT value FROM meta WHERE key = 'resource_version'")
                .fetch_one(&mut writer)
                .await?;
        let rv: i64 = rv.parse()?;
        // Readers are opened when reads come and closed after a minute idle: an idle service keeps
        // none (each held its own page cache and C heap; storage-ops idled above its 12 MB budget).
        let read = SqlitePoolOptions::new()
            .min_connections(0)
            .max_connections(4)
            .idle_timeout(Duration::from_secs(60))
            .connect_with(options)
            .await?;
        writer.close().await?;
        // The writing connection is rusqlite's, on a thread of its own (see `writer`).
        let writer = open_writer(path)?;
        let (writes, queue) = mpsc::channel(4 * MAX_BATCH);
        writer::spawn(writer, queue, rv)?;
        Ok(Store {
            inner: Arc::new(Inner {
                read,
                writes,
                instance,
                continue_key,
            }),
        })
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
    /// inserts cannot both squeeze in).
    pub async fn insert(
        &self,
        row: VolumeRow,
        capacity_limit: Option<u64>,
    ) -> Result<VolumeRow, StoreError> {
        self.insert_row(row, capacity_limit, None).await
    }

    /// [`Store::insert`] for a volume whose new backend object becomes durable with an fsync of
    /// `dir`: the writer syncs it before the commit that records the row, so the row is never on disk
    /// without its object. [`StoreError::DirectorySync`] when that fsync fails (no row is written).
    pub async fn insert_after_syncing(
        &self,
        row: VolumeRow,
        capacity_limit: Option<u64>,
        dir: PathBuf,
    ) -> Result<VolumeRow, StoreError> {
        self.insert_row(row, capacity_limit, Some(dir)).await
    }

    async fn insert_row(
        &self,
        row: VolumeRow,
        capacity_limit: Option<u64>,
        sync_dir: Option<PathBuf>,
    ) -> Result<VolumeRow, StoreError> {
        match self
            .send(|reply| Command::Insert {
                row: Box::new(row),
                capacity_limit,
                sync_dir,
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
            Outcome::Removed(b) => Ok(b),
            _ => unreachable!("remove answers a bool"),
        }
    }

    /// The volume `namespace/name`.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Option<VolumeRow>, StoreError> {
        let row = sqlx::query(concat!(
            "SELECT ",
            columns!(),
            " FROM volumes WHERE namespace = ?1 AND name = ?2"
        ))
        .bind(namespace)
        .bind(name)
        .fetch_optional(&self.inner.read)
        .await?;
        Ok(row.as_ref().map(row_from).transpose()?)
    }

    /// The volume with this uid.
    pub async fn get_uid(&self, uid: &str) -> Result<Option<VolumeRow>, StoreError> {
        let row = sqlx::query(concat!(
            "SELECT ",
            columns!(),
            " FROM volumes WHERE uid = ?1"
        ))
        .bind(uid)
        .fetch_optional(&self.inner.read)
        .await?;
        Ok(row.as_ref().map(row_from).transpose()?)
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
        let rows = match (namespace, after) {
            (None, None) => {
                sqlx::query(concat!(
                    "SELECT ",
                    columns!(),
                    " FROM volumes ORDER BY namespace, name LIMIT ?1"
                ))
                .bind(limit)
                .fetch_all(&self.inner.read)
                .await?
            }
            (None, Some((ns, name))) => sqlx::query(concat!(
                "SELECT ",
                columns!(),
                " FROM volumes WHERE (namespace, name) > (?1, ?2) ORDER BY namespace, name LIMIT ?3"
            ))
            .bind(ns)
            .bind(name)
            .bind(limit)
            .fetch_all(&self.inner.read)
            .await?,
            (Some(ns), None) => {
                sqlx::query(concat!(
                    "SELECT ",
                    columns!(),
                    " FROM volumes WHERE namespace = ?1 ORDER BY namespace, name LIMIT ?2"
                ))
                .bind(ns)
                .bind(limit)
                .fetch_all(&self.inner.read)
                .await?
            }
            (Some(ns), Some((_, after_name))) => sqlx::query(concat!(
                "SELECT ",
                columns!(),
                " FROM volumes WHERE namespace = ?1 AND name > ?2 ORDER BY namespace, name LIMIT ?3"
            ))
            .bind(ns)
            .bind(after_name)
            .bind(limit)
            .fetch_all(&self.inner.read)
            .await?,
        };
        Ok(rows.iter().map(row_from).collect::<Result<_, _>>()?)
    }

    /// Volumes a crash (or a cancelled request) left half-done: `Pending`, `Provisioning`, `Deleting`.
    pub async fn unfinished(&self) -> Result<Vec<VolumeRow>, StoreError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            columns!(),
            " FROM volumes WHERE phase IN ('Pending', 'Provisioning', 'Deleting')"
        ))
        .fetch_all(&self.inner.read)
        .await?;
        Ok(rows.iter().map(row_from).collect::<Result<_, _>>()?)
    }

    /// Every uid that owns a backend object: live volumes and retained ones.
    pub async fn owner_uids(&self) -> Result<HashSet<String>, StoreError> {
        let uids: Vec<String> =
            sqlx::query_scalar("SELECT uid FROM volumes UNION ALL SELECT uid FROM retained")
                .fetch_all(&self.inner.read)
                .await?;
        Ok(uids.into_iter().collect())
    }

    /// Whether `uid` owns a backend object.
    pub async fn owns(&self, uid: &str) -> Result<bool, StoreError> {
        let n: i64 = sqlx::query_scalar(
            "SELECT (SELECT COUNT(*) FROM volumes WHERE uid = ?1) + (SELECT COUNT(*) FROM retained WHERE uid = ?1)",
        )
        .bind(uid)
        .fetch_one(&self.inner.read)
        .await?;
        Ok(n > 0)
    }

    /// The distinct (orchestrator, kind, config) the stored volumes were made on.
    pub async fn backend_targets(
        &self,
    ) -> Result<Vec<(String, OrchestratorKind, serde_json::Value)>, StoreError> {
        let rows = sqlx::query("SELECT DISTINCT orchestrator, kind, backend_config FROM volumes")
            .fetch_all(&self.inner.read)
            .await?;
        rows.iter()
            .map(|r| {
                let kind: String = r.try_get("kind")?;
                let config: String = r.try_get("backend_config")?;
                Ok((
                    r.try_get("orchestrator")?,
                    parse_kind(&kind)?,
                    serde_json::from_str(&config).map_err(decode)?,
                ))
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }

    /// Whether the database answers and the writer is there to take changes (readiness): a writer
    /// thread that has ended would refuse every change, so the service must not look ready.
    pub async fn ping(&self) -> Result<(), StoreError> {
        if self.inner.writes.is_closed() {
            return Err(StoreError::Closed);
        }
        sqlx::query("SELECT 1").execute(&self.inner.read).await?;
        Ok(())
    }
}

/// The writing connection, with the settings of [`connect_options`].
fn open_writer(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // FULL: an acknowledged change survives power loss too (see the module docs). The journal mode
    // is the file's, set to WAL when the database was made.
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;",
    )?;
    Ok(conn)
}

/// A row of [`columns!`] as rusqlite reads it (the writer's `RETURNING`).
fn row_from_sqlite(r: &rusqlite::Row<'_>) -> rusqlite::Result<VolumeRow> {
    fn bad(index: usize, e: impl std::error::Error + Send + Sync + 'static) -> rusqlite::Error {
        rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, Box::new(e))
    }
    fn json<T: serde::de::DeserializeOwned>(
        r: &rusqlite::Row<'_>,
        i: usize,
    ) -> rusqlite::Result<T> {
        serde_json::from_str(&r.get::<_, String>(i)?).map_err(|e| bad(i, e))
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
            .map_err(|e| bad(4, std::io::Error::other(e.message)))?,
        backend_config: json(r, 5)?,
        capacity: r.get(6)?,
        capacity_bytes: u64::try_from(capacity_bytes).map_err(|e| bad(7, e))?,
        replicas: u32::try_from(replicas).map_err(|e| bad(8, e))?,
        labels: json(r, 9)?,
        parameters: json(r, 10)?,
        spec_hash: r.get(11)?,
        phase: VolumePhase::parse(&phase)
            .ok_or_else(|| bad(12, std::io::Error::other(format!("phase {phase:?}"))))?,
        reason: r.get(13)?,
        message: r.get(14)?,
        location: r.get(15)?,
        created_at: r.get(16)?,
        updated_at: r.get(17)?,
        resource_version: r.get(18)?,
    })
}

fn decode(e: impl std::error::Error + Send + Sync + 'static) -> sqlx::Error {
    sqlx::Error::Decode(Box::new(e))
}

fn parse_kind(s: &str) -> Result<OrchestratorKind, sqlx::Error> {
    OrchestratorKind::parse_field("kind", s).map_err(|e| decode(std::io::Error::other(e.message)))
}

fn row_from(r: &SqliteRow) -> Result<VolumeRow, sqlx::Error> {
    let json = |col: &str| -> Result<String, sqlx::Error> { r.try_get(col) };
    let phase: String = r.try_get("phase")?;
    let kind: String = r.try_get("kind")?;
    let capacity_bytes: i64 = r.try_get("capacity_bytes")?;
    let replicas: i64 = r.try_get("replicas")?;
    Ok(VolumeRow {
        uid: r.try_get("uid")?,
        namespace: r.try_get("namespace")?,
        name: r.try_get("name")?,
        orchestrator: r.try_get("orchestrator")?,
        kind: parse_kind(&kind)?,
        backend_config: serde_json::from_str(&json("backend_config")?).map_err(decode)?,
        capacity: r.try_get("capacity")?,
        capacity_bytes: u64::try_from(capacity_bytes).map_err(decode)?,
        replicas: u32::try_from(replicas).map_err(decode)?,
        labels: serde_json::from_str(&json("labels")?).map_err(decode)?,
        parameters: serde_json::from_str(&json("parameters")?).map_err(decode)?,
        spec_hash: r.try_get("spec_hash")?,
        phase: VolumePhase::parse(&phase)
            .ok_or_else(|| decode(std::io::Error::other(format!("phase {phase:?}"))))?,
        reason: r.try_get("reason")?,
        message: r.try_get("message")?,
        location: r.try_get("location")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
        resource_version: r.try_get("resource_version")?,
    })
}

/// RFC 3339 UTC, to the millisecond.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Inserts that name a directory have it synced before their commit; one that cannot be synced
    /// gets no row and says why, and the rest of its batch commits.
    #[tokio::test]
    async fn inserts_after_a_directory_sync_commit_only_when_it_is_synced() {
        let (dir, store) = open().await;
        let missing = dir.path().join("gone");
        let inserts = (0..8).map(|i| {
            let store = store.clone();
            let sync = if i % 2 == 0 {
                dir.path().to_path_buf()
            } else {
                missing.clone()
            };
            async move {
                store
                    .insert_after_syncing(row("ns", &format!("v{i}"), "o", 1), None, sync)
                    .await
            }
        });
        let results = futures::future::join_all(inserts).await;
        for (i, result) in results.iter().enumerate() {
            let stored = store.get("ns", &format!("v{i}")).await.unwrap();
            if i % 2 == 0 {
                assert!(result.is_ok(), "{result:?}");
                assert!(stored.is_some());
            } else {
                let Err(StoreError::DirectorySync(why)) = result else {
                    panic!("{result:?}");
                };
                assert_eq!(why.kind(), std::io::ErrorKind::NotFound);
                assert!(stored.is_none());
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

        let mut conn = store.inner.read.acquire().await.unwrap();
        for sql in [
            "EXPLAIN QUERY PLAN SELECT uid FROM volumes WHERE (namespace, name) > ('a', 'b') ORDER BY namespace, name LIMIT 10",
            "EXPLAIN QUERY PLAN SELECT uid FROM volumes WHERE namespace = 'a' AND name > 'b' ORDER BY namespace, name LIMIT 10",
        ] {
            let rows = sqlx::query(sql).fetch_all(&mut *conn).await.unwrap();
            let detail: Vec<String> = rows.iter().map(|r| r.get::<String, _>("detail")).collect();
            let detail = detail.join("; ");
            assert!(
                detail.contains("USING INDEX volumes_by_key"),
                "{sql}: {detail}"
            );
            assert!(!detail.contains("TEMP B-TREE"), "{sql}: {detail}");
        }
    }
}
