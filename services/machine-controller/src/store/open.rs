//! Opening the database: its file, its SQLite settings, the embedded migrations, and the feed
//! started where the stored sequences are. Apart because it runs once, before anything else, and
//! is where the durability settings are chosen.

use std::path::Path;
use std::time::Duration;

use sqlx::ConnectOptions as _;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use service_kit::watch::Feed;

use super::{FEED_CAPACITY, Store, StoreError};

/// How long a writer waits for SQLite's lock before the request is answered 503.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an open waits for the writer of a store opened before it on the same file (in this
/// process, one being dropped that still finishes its queued writes) to end.
const WRITER_LOCK_WAIT: Duration = Duration::from_secs(10);

impl Store {
    /// Opens (creating if needed) the database at `path` and runs the embedded migrations.
    pub async fn open(path: &Path) -> Result<Store, Box<dyn std::error::Error + Send + Sync>> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create the directory of {}: {e}", path.display()))?;
        }
        let writer_lock = lock_writer(path).await?;
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: an acknowledged machine, or a machine the controller recorded before it asked
            // the driver for its VM, survives a power cut; that record is what keeps a VM from
            // being made twice or forgotten.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            // A connection to a local file does not go stale the way a network one does; testing
            // it before every read was one more trip to its thread per read.
            .test_before_acquire(false)
            .connect_with(options.clone())
            .await
            .map_err(|e| format!("cannot open the database {}: {e}", path.display()))?;
        sqlx::migrate!("./migrations")
            .run(&pool)
            .await
            .map_err(|e| format!("cannot migrate the database {}: {e}", path.display()))?;
        let current: i64 =
            sqlx::query_scalar("SELECT value FROM controller_meta WHERE key = 'resource_version'")
                .fetch_one(&pool)
                .await?;
        // A watch of a namespace cannot resume from before where its sequence is now.
        let namespaces: Vec<(String, i64)> =
            sqlx::query_as("SELECT namespace, version FROM namespace_versions")
                .fetch_all(&pool)
                .await?;
        let versions: std::collections::HashMap<String, u64> = namespaces
            .into_iter()
            .map(|(ns, v)| (ns, v.max(0) as u64))
            .collect();
        let floor = current.max(0) as u64;
        let feed = Feed::new(
            FEED_CAPACITY,
            floor,
            versions.iter().map(|(ns, v)| (ns.clone(), *v)),
        );
        // The one connection that writes (the pool's only read), so writes can share commits.
        let writing = options
            .connect()
            .await
            .map_err(|e| format!("cannot open the database {}: {e}", path.display()))?;
        let jobs = super::commit::spawn(writing, writer_lock, versions, floor, feed.clone())
            .map_err(|e| format!("cannot start the store's writer: {e}"))?;
        Ok(Store { pool, jobs, feed })
    }

    /// `SELECT 1`, for readiness.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}

/// Takes the lock that makes this store the database's only writer, which its writer's memory of
/// rows and sequences relies on (`commit`). It is the operating system's (`flock`) on a file beside
/// the database, held by the writer's thread, so it goes with that thread or the process however
/// they end. A second controller on the same database is refused; a store of this process still
/// finishing its queued writes is waited for.
async fn lock_writer(db: &Path) -> Result<std::fs::File, String> {
    let mut path = db.as_os_str().to_owned();
    path.push(".writer.lock");
    let path = std::path::PathBuf::from(path);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let started = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < WRITER_LOCK_WAIT => {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(format!(
                    "another machine controller writes the database {} (it holds {}): one \
                     controller per database; stop the other first",
                    db.display(),
                    path.display()
                ));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(format!("cannot lock {}: {e}", path.display()));
            }
        }
    }
}
