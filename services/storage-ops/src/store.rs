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

//!
//! Its parts: `row` (the row, its wire form, the errors, the row codec), `schema` (opening and
//! migrating), `writer` (the one writing thread), `readers` (the read pool) and `copy` (making a
//! restored copy's database its own).

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use domain::OrchestratorKind;
use rusqlite::{OptionalExtension, params};
use service_kit::watch::Feed;
use tokio::sync::{mpsc, oneshot};

use crate::backend::NewObject;
use readers::Readers;
use row::{bad_column, columns, row_from};
use schema::open_blocking;
use writer::{Command, Outcome};

mod copy;
mod readers;
mod row;
mod schema;
mod writer;

pub use copy::{CopyError, CopyMade, make_copy_own};
pub use row::{NamespaceQuota, StatusUpdate, StoreError, VolumeChange, VolumeRow, now, to_volume};
pub use writer::MAX_BATCH;

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

#[cfg(test)]
mod tests;
