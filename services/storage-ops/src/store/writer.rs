//! The one writing connection, on a thread of its own, with group commit and group directory sync.
//!
//! The thread owns the only writing connection, takes a whole batch from the queue, runs it with
//! cached statements and answers each caller after the `COMMIT`: one hand-over between threads per
//! batch, not one per statement (sqlx, which storage-ops used before, sent each statement to its
//! connection's thread and back, and a batch is four statements at least; in the storage bench that
//! was most of the gap between the store's single-row commit and SQLite's own).
//!
//! An insert may bring a new backend object ([`NewObject`]). After `BEGIN` the writer makes each
//! such object of the batch (marked uncommitted), then syncs every directory they name (each once,
//! however many objects are in it), then runs the inserts and commits, then clears the objects'
//! marks, and only then answers: so a committed row's object is always on disk, under load many adds
//! share one directory fsync as they share one commit, and one add hands its work to another
//! thread once, here, rather than also to the blocking pool to make its object and to mark it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use rusqlite::{Connection, ErrorCode, OptionalExtension, params};
use tokio::sync::{mpsc, oneshot};

use service_kit::watch::{Change, EventType, Feed};

use crate::backend::{BackendError, NewObject};

use domain::Labels;

use super::row::{
    NamespaceQuota, StatusUpdate, StoreError, VolumeChange, VolumeRow, columns, now, row_from,
    to_volume,
};

/// The most commands one transaction carries.
pub const MAX_BATCH: usize = 256;

/// A change the writer makes, with where to send its outcome.
pub(super) enum Command {
    Insert {
        row: Box<VolumeRow>,
        capacity_limit: Option<u64>,
        quota: NamespaceQuota,
        object: Option<Box<dyn NewObject>>,
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
    Update {
        change: Box<VolumeChange>,
        capacity_limit: Option<u64>,
        quota: NamespaceQuota,
        reply: oneshot::Sender<Result<Outcome, StoreError>>,
    },
}

impl Command {
    fn reply(self, result: Result<Outcome, StoreError>) {
        let reply = match self {
            Command::Insert { reply, .. }
            | Command::SetStatus { reply, .. }
            | Command::Remove { reply, .. }
            | Command::Update { reply, .. } => reply,
        };
        // The caller may have gone (its request was cancelled); the change stands either way.
        let _ = reply.send(result);
    }
}

/// What a command did.
pub(super) enum Outcome {
    Row(Box<VolumeRow>),
    MaybeRow(Option<Box<VolumeRow>>),
    /// The removed volume's last state, at the version its removal took.
    Removed(Option<Box<VolumeRow>>),
    /// The changed volume, and its labels before the change.
    Changed(Option<(Box<VolumeRow>, Labels)>),
}

impl Outcome {
    /// The change a watch sees, if the command changed anything, with the labels before a change
    /// of labels (a watch with a selector sees a volume leave or enter it).
    fn change(&self) -> Option<(EventType, &VolumeRow, Option<serde_json::Value>)> {
        match self {
            Outcome::Row(row) => Some((EventType::Added, row, None)),
            Outcome::MaybeRow(row) => Some((EventType::Modified, row.as_deref()?, None)),
            Outcome::Removed(row) => Some((EventType::Deleted, row.as_deref()?, None)),
            Outcome::Changed(changed) => {
                let (row, before) = changed.as_ref()?;
                let previous = (*before != row.labels)
                    .then(|| serde_json::to_value(before).unwrap_or_default());
                Some((EventType::Modified, row, previous))
            }
        }
    }
}

/// Starts the writer thread on `conn` (already migrated); it ends when every sender is gone.
pub(super) fn spawn(
    conn: Connection,
    queue: mpsc::Receiver<Command>,
    rv: i64,
    feed: Arc<Feed<()>>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("store-writer".into())
        .spawn(move || write_loop(conn, queue, rv, &feed))
        .map(|_| ())
}

fn write_loop(conn: Connection, mut queue: mpsc::Receiver<Command>, mut rv: i64, feed: &Feed<()>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = queue.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        run_batch(&conn, &mut batch, &mut rv, feed);
    }
}

/// Why one command failed: refused (the transaction goes on) or fatal (the batch is rolled back).
enum Failure {
    Refused(StoreError),
    Fatal(Arc<rusqlite::Error>),
}

impl From<rusqlite::Error> for Failure {
    fn from(e: rusqlite::Error) -> Self {
        Failure::Fatal(Arc::new(e))
    }
}

/// Makes the object of each insert of the batch that brings one, recording where it is in the
/// insert's row: by the batch's position, the directory whose fsync makes it durable, or why it
/// could not be made.
fn make_objects(batch: &mut [Command]) -> Vec<Option<Result<PathBuf, BackendError>>> {
    batch
        .iter_mut()
        .map(|cmd| match cmd {
            Command::Insert {
                row,
                object: Some(object),
                ..
            } => Some(object.make().map(|made| {
                row.location = made.location;
                made.sync_dir
            })),
            _ => None,
        })
        .collect()
}

/// Syncs each directory the made objects name, once: what failed, by directory.
fn sync_dirs(
    made: &[Option<Result<PathBuf, BackendError>>],
) -> HashMap<&PathBuf, Arc<std::io::Error>> {
    let mut synced: HashMap<&PathBuf, Option<Arc<std::io::Error>>> = HashMap::new();
    for dir in made.iter().flatten().flatten() {
        synced.entry(dir).or_insert_with(|| {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .err()
                .map(Arc::new)
        });
    }
    synced
        .into_iter()
        .filter_map(|(dir, failed)| Some((dir, failed?)))
        .collect()
}

/// Clears the marks of the objects whose rows the batch committed. A failure is not the caller's:
/// the volume is made and recorded, and the reconciler clears a mark that is still there.
fn mark_committed(batch: &mut [Command], results: &[Result<Outcome, StoreError>]) {
    for (cmd, result) in batch.iter_mut().zip(results) {
        if let (
            Command::Insert {
                row,
                object: Some(object),
                ..
            },
            Ok(_),
        ) = (cmd, result)
            && let Err(e) = object.mark_committed()
        {
            tracing::warn!(namespace = %row.namespace, name = %row.name, uid = %row.uid, error = %e, "a made volume's object is still marked uncommitted; the reconciler will retry");
        }
    }
}

fn run_batch(conn: &Connection, batch: &mut Vec<Command>, rv: &mut i64, feed: &Feed<()>) {
    // BEGIN IMMEDIATE takes the write lock now, so nothing in the batch can fail on it halfway.
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        let e = StoreError::db(e);
        for cmd in batch.drain(..) {
            cmd.reply(Err(e.clone()));
        }
        return;
    }
    let start_rv = *rv;
    let mut results = Vec::with_capacity(batch.len());
    let mut fatal = None;
    let made = make_objects(batch);
    let unsynced = sync_dirs(&made);
    for (cmd, made) in batch.iter().zip(&made) {
        if fatal.is_some() {
            break;
        }
        match made {
            // Nothing was made (the backend took back what it had begun): no row for it.
            Some(Err(e)) => {
                results.push(Err(StoreError::Backend(e.clone())));
                continue;
            }
            Some(Ok(dir)) => {
                if let Some(failed) = unsynced.get(dir) {
                    // Its object is not durable: no row for it (the caller takes the object back).
                    results.push(Err(StoreError::DirectorySync {
                        dir: dir.clone(),
                        cause: failed.clone(),
                    }));
                    continue;
                }
            }
            None => {}
        }
        match apply(conn, cmd, *rv) {
            Ok(outcome) => results.push(Ok(outcome)),
            Err(Failure::Refused(e)) => results.push(Err(e)),
            Err(Failure::Fatal(e)) => fatal = Some(e),
        }
    }
    if fatal.is_none() {
        let committed = conn
            .prepare_cached("UPDATE meta SET value = ?1 WHERE key = 'resource_version'")
            .and_then(|mut update| update.execute([rv.to_string()]))
            .and_then(|_| conn.execute_batch("COMMIT"));
        if let Err(e) = committed {
            fatal = Some(Arc::new(e));
        }
    }
    if let Some(e) = fatal {
        // Some errors (disk full, I/O) end the transaction themselves; the ROLLBACK's own error is moot.
        let _ = conn.execute_batch("ROLLBACK");
        *rv = start_rv;
        tracing::error!(error = %e, commands = batch.len(), "a write batch failed and was rolled back");
        let e = StoreError::Db(e);
        for cmd in batch.drain(..) {
            cmd.reply(Err(e.clone()));
        }
        return;
    }
    mark_committed(batch, &results);
    // Published by the one writer, after the commit and in the batch's order: each namespace's
    // versions reach watchers in their order.
    for (event, row, previous_labels) in results.iter().flatten().filter_map(Outcome::change) {
        feed.publish(Change {
            event,
            kind: (),
            scope: row.namespace.clone(),
            resource_version: u64::try_from(row.resource_version).unwrap_or(0),
            object: serde_json::to_value(to_volume(row)).unwrap_or_default(),
            status_only: false,
            previous_labels,
        });
    }
    for (cmd, result) in batch.drain(..).zip(results) {
        cmd.reply(result);
    }
}

/// The next resourceVersion of `namespace`'s own sequence, which starts above `floor` (every
/// version issued before namespaces had sequences of their own): one sequence for all let a tenant
/// watch it to learn how much the others wrote.
fn next_version(conn: &Connection, namespace: &str, floor: i64) -> rusqlite::Result<i64> {
    conn.prepare_cached(
        "INSERT INTO namespace_versions (namespace, version) VALUES (?1, ?2 + 1) \
         ON CONFLICT (namespace) DO UPDATE SET version = version + 1 RETURNING version",
    )?
    .query_row(params![namespace, floor], |r| r.get(0))
}

fn apply(conn: &Connection, cmd: &Command, floor: i64) -> Result<Outcome, Failure> {
    match cmd {
        Command::Insert {
            row,
            capacity_limit,
            quota,
            ..
        } => {
            // Checked here, on the one writer, in the insert's transaction: concurrent adds in one
            // namespace are counted one after another, so none squeezes past the quota. The count
            // is a range of the key index, linear in the namespace's volumes, as the orchestrator's
            // capacity sum below is in its volumes (both measured at 10,000: BENCHMARKS.md,
            // “Storage: AddStorage vs raw SQLite, ListStorage pages”); a volume-count quota bounds
            // that itself, and with no quota set nothing is read.
            if *quota != NamespaceQuota::default() {
                let count: i64 = conn
                    .prepare_cached("SELECT COUNT(*) FROM volumes WHERE namespace = ?1")?
                    .query_row([&row.namespace], |r| r.get(0))?;
                let count = u64::try_from(count).unwrap_or(0);
                let bytes = capacity_sum(conn, Summed::Namespace, &row.namespace)?;
                let exceeded = |setting, limit, used, asked, unit| {
                    Err(Failure::Refused(StoreError::QuotaExceeded {
                        quota: setting,
                        namespace: row.namespace.clone(),
                        limit,
                        used,
                        asked,
                        unit,
                    }))
                };
                if let Some(limit) = quota.volumes
                    && count.saturating_add(1) > limit
                {
                    return exceeded(crate::env_vars::QUOTA_VOLUMES, limit, count, 1, "volumes");
                }
                if let Some(limit) = quota.bytes
                    && bytes.saturating_add(row.capacity_bytes) > limit
                {
                    return exceeded(
                        crate::env_vars::QUOTA_VOLUME_BYTES,
                        limit,
                        bytes,
                        row.capacity_bytes,
                        "bytes",
                    );
                }
            }
            if let Some(limit) = *capacity_limit {
                // Every recorded volume counts, Failed ones too: a Failed volume is retried by the
                // same AddStorage without a second check, so it keeps its share until deleted.
                let used = capacity_sum(conn, Summed::Orchestrator, &row.orchestrator)?;
                if used.saturating_add(row.capacity_bytes) > limit {
                    return Err(Failure::Refused(StoreError::CapacityExhausted {
                        orchestrator: row.orchestrator.clone(),
                        limit,
                        used,
                        asked: row.capacity_bytes,
                    }));
                }
            }
            let mut row = row.as_ref().clone();
            row.resource_version = next_version(conn, &row.namespace, floor)?;
            let inserted = conn
                .prepare_cached(
                    "INSERT INTO volumes (uid, namespace, name, orchestrator, kind, backend_config, capacity, \
                     capacity_bytes, replicas, labels, parameters, spec_hash, phase, reason, message, location, \
                     created_at, updated_at, resource_version) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
                )?
                .execute(params![
                    row.uid,
                    row.namespace,
                    row.name,
                    row.orchestrator,
                    row.kind.as_str(),
                    row.backend_config.to_string(),
                    row.capacity,
                    i64::try_from(row.capacity_bytes).unwrap_or(i64::MAX),
                    i64::from(row.replicas),
                    serde_json::to_string(&row.labels).unwrap_or_default(),
                    serde_json::to_string(&row.parameters).unwrap_or_default(),
                    row.spec_hash,
                    row.phase.as_str(),
                    row.reason,
                    row.message,
                    row.location,
                    row.created_at,
                    row.updated_at,
                    row.resource_version,
                ]);
            match inserted {
                Ok(_) => {}
                // A constraint failure aborts only its statement; the batch's transaction goes on.
                Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => {
                    let unique = matches!(
                        &e,
                        rusqlite::Error::SqliteFailure(f, _)
                            if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                                || f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
                    );
                    return Err(Failure::Refused(if unique {
                        StoreError::Exists(row.namespace.clone(), row.name.clone())
                    } else {
                        StoreError::db(e)
                    }));
                }
                Err(e) => return Err(e.into()),
            }
            Ok(Outcome::Row(Box::new(row)))
        }
        Command::Update {
            change,
            capacity_limit,
            quota,
            ..
        } => update(conn, change, *capacity_limit, *quota, floor),
        Command::SetStatus { uid, update, .. } => {
            let namespace: Option<String> = conn
                .prepare_cached("SELECT namespace FROM volumes WHERE uid = ?1")?
                .query_row([uid], |r| r.get(0))
                .optional()?;
            let Some(namespace) = namespace else {
                return Ok(Outcome::MaybeRow(None));
            };
            let version = next_version(conn, &namespace, floor)?;
            let row = conn
                .prepare_cached(concat!(
                    "UPDATE volumes SET phase = ?1, reason = ?2, message = ?3, location = COALESCE(?4, location), \
                     updated_at = CASE WHEN phase = ?1 THEN updated_at ELSE ?5 END, resource_version = ?6 \
                     WHERE uid = ?7 RETURNING ",
                    columns!()
                ))?
                .query_row(
                    params![
                        update.phase.as_str(),
                        update.reason,
                        update.message,
                        update.location,
                        now(),
                        version,
                        uid,
                    ],
                    row_from,
                )
                .optional()?;
            Ok(Outcome::MaybeRow(row.map(Box::new)))
        }
        Command::Remove { uid, retain, .. } => {
            if *retain {
                conn.prepare_cached(
                    "INSERT OR REPLACE INTO retained (uid, namespace, name, orchestrator, kind, location, released_at) \
                     SELECT uid, namespace, name, orchestrator, kind, location, ?2 FROM volumes WHERE uid = ?1",
                )?
                .execute(params![uid, now()])?;
            }
            let removed = conn
                .prepare_cached(concat!(
                    "DELETE FROM volumes WHERE uid = ?1 RETURNING ",
                    columns!()
                ))?
                .query_row([uid], row_from)
                .optional()?;
            let Some(mut removed) = removed else {
                return Ok(Outcome::Removed(None));
            };
            // A removal takes a version of its own, as Kubernetes' delete does, so a watch of the
            // namespace resumes past it.
            removed.resource_version = next_version(conn, &removed.namespace, floor)?;
            Ok(Outcome::Removed(Some(Box::new(removed))))
        }
    }
}

/// A patch's change of a volume's labels and capacity: refused when the volume moved past the
/// version the caller read, or when the growth does not fit the namespace's quota or the
/// orchestrator's capacity (checked here, on the one writer, as an add's are).
fn update(
    conn: &Connection,
    change: &VolumeChange,
    capacity_limit: Option<u64>,
    quota: NamespaceQuota,
    floor: i64,
) -> Result<Outcome, Failure> {
    let current: Option<(String, i64, i64, String, String)> = conn
        .prepare_cached(
            "SELECT namespace, resource_version, capacity_bytes, orchestrator, labels FROM volumes WHERE uid = ?1",
        )?
        .query_row([&change.uid], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .optional()?;
    let Some((namespace, version, bytes, orchestrator, labels)) = current else {
        return Ok(Outcome::Changed(None));
    };
    if let Some(expected) = change.expected_version
        && expected != version
    {
        return Err(Failure::Refused(StoreError::Stale { current: version }));
    }
    let before: Labels = serde_json::from_str(&labels).unwrap_or_default();
    let grown = change
        .capacity_bytes
        .saturating_sub(u64::try_from(bytes).unwrap_or(0));
    if grown > 0 {
        if let Some(limit) = quota.bytes {
            let used = capacity_sum(conn, Summed::Namespace, &namespace)?;
            if used.saturating_add(grown) > limit {
                return Err(Failure::Refused(StoreError::QuotaExceeded {
                    quota: crate::env_vars::QUOTA_VOLUME_BYTES,
                    namespace,
                    limit,
                    used,
                    asked: grown,
                    unit: "bytes",
                }));
            }
        }
        if let Some(limit) = capacity_limit {
            let used = capacity_sum(conn, Summed::Orchestrator, &orchestrator)?;
            if used.saturating_add(grown) > limit {
                return Err(Failure::Refused(StoreError::CapacityExhausted {
                    orchestrator,
                    limit,
                    used,
                    asked: grown,
                }));
            }
        }
    }
    let version = next_version(conn, &namespace, floor)?;
    let row = conn
        .prepare_cached(concat!(
            "UPDATE volumes SET labels = ?1, capacity = ?2, capacity_bytes = ?3, spec_hash = ?4, \
             resource_version = ?5 WHERE uid = ?6 RETURNING ",
            columns!()
        ))?
        .query_row(
            params![
                serde_json::to_string(&change.labels).unwrap_or_default(),
                change.capacity,
                i64::try_from(change.capacity_bytes).unwrap_or(i64::MAX),
                change.spec_hash,
                version,
                change.uid,
            ],
            row_from,
        )?;
    Ok(Outcome::Changed(Some((Box::new(row), before))))
}

/// Whose volumes [`capacity_sum`] adds up.
#[derive(Clone, Copy)]
enum Summed {
    Namespace,
    Orchestrator,
}

/// The capacity the volumes of one namespace or orchestrator hold, in bytes (at most `u64::MAX`).
/// Each volume is valid alone (below 8 EiB), but SQLite's `SUM` of two such is past its 64-bit
/// integers and fails ("integer overflow"), which blocked every later add and resize of the
/// namespace or orchestrator with a 500. So the sum is taken in two halves that cannot overflow
/// (the mebibytes, each below 2^43, and the remainders, each below 2^20, short of 2^20 volumes at
/// the largest size) and added here in 128 bits.
fn capacity_sum(conn: &Connection, whose: Summed, name: &str) -> rusqlite::Result<u64> {
    let sql = match whose {
        Summed::Namespace => {
            "SELECT COALESCE(SUM(capacity_bytes >> 20), 0), COALESCE(SUM(capacity_bytes & 1048575), 0) \
             FROM volumes WHERE namespace = ?1"
        }
        Summed::Orchestrator => {
            "SELECT COALESCE(SUM(capacity_bytes >> 20), 0), COALESCE(SUM(capacity_bytes & 1048575), 0) \
             FROM volumes WHERE orchestrator = ?1"
        }
    };
    let (mebibytes, rest): (i64, i64) = conn
        .prepare_cached(sql)?
        .query_row([name], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let bytes = (u128::try_from(mebibytes).unwrap_or(0) << 20) + u128::try_from(rest).unwrap_or(0);
    Ok(u64::try_from(bytes).unwrap_or(u64::MAX))
}
