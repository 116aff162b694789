//! The volume store: SQLite through sqlx, one writer with group commit, a pool of readers.
//!
//! Every write goes through one task that owns the only writing connection, so writes never contend
//! for SQLite's lock and never see `SQLITE_BUSY`. The task takes whatever commands are queued (up to
//! [`MAX_BATCH`]) and runs them in one transaction, answering each caller only after the `COMMIT` that
//! made its change durable: under load many changes share one commit and its `fsync` (group commit),
//! with no caller ever told "done" before the disk has it. Reads go to a small pool of other
//! connections; WAL lets them run beside the writer and see every committed change, so a read after an
//! acknowledged write always sees it.
//!
//! ## Durability: `synchronous = FULL`
//!
//! In WAL mode, `NORMAL` survives a crash of the process (the WAL is in the OS cache) but may lose the
//! last commits on power loss or a kernel crash; `FULL` syncs the WAL at every commit so an
//! acknowledged AddStorage or DeleteStorage survives both. A lost row after the backend made its object
//! would turn an acknowledged volume into an orphan, so storage-ops takes `FULL`, and pays for it with
//! group commit (one `fsync` per batch, not per request) instead of weakening it, and with fewer
//! commits: AddStorage on the local backend writes its row once, already Ready, after the object is
//! made and synced (see `ops::add` for why that is crash-safe), so one add is one commit, not two.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use domain::{Labels, OrchestratorKind, VolumePhase};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Connection, Executor, Row, SqliteConnection};
use tokio::sync::{mpsc, oneshot};

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
    Db(Arc<sqlx::Error>),
    /// The writer is gone (the service is stopping).
    #[error("the store is closed")]
    Closed,
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Db(Arc::new(e))
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

enum Command {
    Insert {
        row: Box<VolumeRow>,
        capacity_limit: Option<u64>,
        reply: oneshot::Sender<Result<Outcome, StoreError>>,
    },
    SetStatus {
        uid: String,
        update: StatusUpdate,
        reply: oneshot::Sender<Result<Outcome, StoreError>>,
    },
    Remove {
        uid: String,
        retain: bool,
        reply: oneshot::Sender<Result<Outcome, StoreError>>,
    },
}

impl Command {
    fn reply(self, result: Result<Outcome, StoreError>) {
        let reply = match self {
            Command::Insert { reply, .. }
            | Command::SetStatus { reply, .. }
            | Command::Remove { reply, .. } => reply,
        };
        // The caller may have gone (its request was cancelled); the change stands either way.
        let _ = reply.send(result);
    }
}

enum Outcome {
    Row(Box<VolumeRow>),
    MaybeRow(Option<Box<VolumeRow>>),
    Removed(bool),
}

/// The columns of `volumes`, in [`row_from`]'s order.
macro_rules! columns {
    () => {
        "uid, namespace, name, orchestrator, kind, backend_config, capacity, capacity_bytes, replicas, \
         labels, parameters, spec_hash, phase, reason, message, location, created_at, updated_at, \
         resource_version"
    };
}

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
        let (writes, queue) = mpsc::channel(4 * MAX_BATCH);
        tokio::spawn(write_loop(writer, queue, rv));
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
        match self
            .send(|reply| Command::Insert {
                row: Box::new(row),
                capacity_limit,
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

    /// Whether the database answers (readiness).
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.inner.read).await?;
        Ok(())
    }
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

/// The writer: drains the queue into one transaction per batch until every sender is gone.
async fn write_loop(mut conn: SqliteConnection, mut queue: mpsc::Receiver<Command>, mut rv: i64) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = queue.recv().await {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        run_batch(&mut conn, &mut batch, &mut rv).await;
    }
}

/// Why one command failed: refused (the transaction goes on) or fatal (the batch is rolled back).
enum Failure {
    Refused(StoreError),
    Fatal(Arc<sqlx::Error>),
}

impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Self {
        Failure::Fatal(Arc::new(e))
    }
}

async fn run_batch(conn: &mut SqliteConnection, batch: &mut Vec<Command>, rv: &mut i64) {
    // BEGIN IMMEDIATE takes the write lock now, so nothing in the batch can fail on it halfway.
    if let Err(e) = conn.execute("BEGIN IMMEDIATE").await {
        let e = Arc::new(e);
        for cmd in batch.drain(..) {
            cmd.reply(Err(StoreError::Db(e.clone())));
        }
        return;
    }
    let mut results = Vec::with_capacity(batch.len());
    let mut fatal = None;
    for cmd in batch.iter() {
        match apply(conn, cmd, rv).await {
            Ok(outcome) => results.push(Ok(outcome)),
            Err(Failure::Refused(e)) => results.push(Err(e)),
            Err(Failure::Fatal(e)) => {
                fatal = Some(e);
                break;
            }
        }
    }
    if fatal.is_none() {
        let committed = async {
            sqlx::query("UPDATE meta SET value = ?1 WHERE key = 'resource_version'")
                .bind(rv.to_string())
                .execute(&mut *conn)
                .await?;
            conn.execute("COMMIT").await
        }
        .await;
        if let Err(e) = committed {
            fatal = Some(Arc::new(e));
        }
    }
    if let Some(e) = fatal {
        // Some errors (disk full, I/O) end the transaction themselves; the ROLLBACK's own error is moot.
        let _ = conn.execute("ROLLBACK").await;
        tracing::error!(error = %e, commands = batch.len(), "a write batch failed and was rolled back");
        for cmd in batch.drain(..) {
            cmd.reply(Err(StoreError::Db(e.clone())));
        }
        return;
    }
    for (cmd, result) in batch.drain(..).zip(results) {
        cmd.reply(result);
    }
}

async fn apply(
    conn: &mut SqliteConnection,
    cmd: &Command,
    rv: &mut i64,
) -> Result<Outcome, Failure> {
    match cmd {
        Command::Insert {
            row,
            capacity_limit,
            ..
        } => {
            if let Some(limit) = *capacity_limit {
                // Every recorded volume counts, Failed ones too: a Failed volume is retried by the
                // same AddStorage without a second check, so it keeps its share until deleted.
                let used: i64 = sqlx::query_scalar(
                    "SELECT COALESCE(SUM(capacity_bytes), 0) FROM volumes WHERE orchestrator = ?1",
                )
                .bind(&row.orchestrator)
                .fetch_one(&mut *conn)
                .await?;
                let used = u64::try_from(used).unwrap_or(0);
                if used.saturating_add(row.capacity_bytes) > limit {
                    return Err(Failure::Refused(StoreError::CapacityExhausted {
                        orchestrator: row.orchestrator.clone(),
                        limit,
                        used,
                        asked: row.capacity_bytes,
                    }));
                }
            }
            *rv += 1;
            let mut row = row.as_ref().clone();
            row.resource_version = *rv;
            let inserted = sqlx::query(
                "INSERT INTO volumes (uid, namespace, name, orchestrator, kind, backend_config, capacity, \
                 capacity_bytes, replicas, labels, parameters, spec_hash, phase, reason, message, location, \
                 created_at, updated_at, resource_version) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
            )
            .bind(&row.uid)
            .bind(&row.namespace)
            .bind(&row.name)
            .bind(&row.orchestrator)
            .bind(row.kind.as_str())
            .bind(row.backend_config.to_string())
            .bind(&row.capacity)
            .bind(i64::try_from(row.capacity_bytes).unwrap_or(i64::MAX))
            .bind(i64::from(row.replicas))
            .bind(serde_json::to_string(&row.labels).unwrap_or_default())
            .bind(serde_json::to_string(&row.parameters).unwrap_or_default())
            .bind(&row.spec_hash)
            .bind(row.phase.as_str())
            .bind(&row.reason)
            .bind(&row.message)
            .bind(&row.location)
            .bind(&row.created_at)
            .bind(&row.updated_at)
            .bind(row.resource_version)
            .execute(&mut *conn)
            .await;
            match inserted {
                Ok(_) => Ok(Outcome::Row(Box::new(row))),
                // A constraint failure aborts only its statement; the batch's transaction goes on.
                Err(sqlx::Error::Database(db)) if db.is_unique_violation() => Err(
                    Failure::Refused(StoreError::Exists(row.namespace.clone(), row.name.clone())),
                ),
                Err(e @ sqlx::Error::Database(_)) => {
                    Err(Failure::Refused(StoreError::Db(Arc::new(e))))
                }
                Err(e) => Err(e.into()),
            }
        }
        Command::SetStatus { uid, update, .. } => {
            *rv += 1;
            let row = sqlx::query(concat!(
                "UPDATE volumes SET phase = ?1, reason = ?2, message = ?3, location = COALESCE(?4, location), \
                 updated_at = ?5, resource_version = ?6 WHERE uid = ?7 RETURNING ",
                columns!()
            ))
            .bind(update.phase.as_str())
            .bind(&update.reason)
            .bind(&update.message)
            .bind(update.location.as_deref())
            .bind(now())
            .bind(*rv)
            .bind(uid)
            .fetch_optional(&mut *conn)
            .await?;
            Ok(Outcome::MaybeRow(
                row.as_ref().map(row_from).transpose()?.map(Box::new),
            ))
        }
        Command::Remove { uid, retain, .. } => {
            if *retain {
                sqlx::query(
                    "INSERT OR REPLACE INTO retained (uid, namespace, name, orchestrator, kind, location, released_at) \
                     SELECT uid, namespace, name, orchestrator, kind, location, ?2 FROM volumes WHERE uid = ?1",
                )
                .bind(uid)
                .bind(now())
                .execute(&mut *conn)
                .await?;
            }
            let done = sqlx::query("DELETE FROM volumes WHERE uid = ?1")
                .bind(uid)
                .execute(&mut *conn)
                .await?;
            Ok(Outcome::Removed(done.rows_affected() > 0))
        }
    }
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
