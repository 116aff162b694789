//! Opening the database: the writing connection's settings, the migrations, and what a database
//! already holds (its instance, its continue key, where its versions are).

use std::path::Path;
use std::time::Duration;

/// How long a connection waits for a lock before giving up (only readers can wait: there is one
/// writer, but a checkpoint or an external `sqlite3` may hold the lock briefly).
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The schema's migrations, in order: the database's `user_version` is how many it has applied.
const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/0001_volumes.sql"),
    include_str!("../../migrations/0002_namespace_versions.sql"),
];

/// What opening a database finds: the writing connection, migrated, and the `meta` values.
pub(super) struct Opened {
    pub(super) writer: rusqlite::Connection,
    pub(super) instance: String,
    pub(super) continue_key: Vec<u8>,
    pub(super) resource_version: i64,
    /// Where each namespace's sequence is (a watch of one cannot resume from before it).
    pub(super) namespace_versions: Vec<(String, u64)>,
}

pub(super) fn open_blocking(
    path: &Path,
) -> Result<Opened, Box<dyn std::error::Error + Send + Sync>> {
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
pub(super) fn migrate(
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
pub(super) fn open_writer(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;",
    )?;
    Ok(conn)
}
