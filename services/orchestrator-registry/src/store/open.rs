//! Opening the database (its durability settings, the migrations, the feed's starting version)
//! and readiness: apart because it runs once per process, before any request.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use service_kit::watch::Feed;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::{Store, StoreError};

/// How long a writer waits for another writer's lock before the request is answered 503.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How many changes the feed remembers for resuming watches (orchestrators change rarely).
const FEED_CAPACITY: usize = 1024;

impl Store {
    /// Opens (creating if needed) the database at `path` and runs the embedded migrations.
    pub async fn open(path: &Path) -> Result<Store, Box<dyn std::error::Error + Send + Sync>> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                format!(
                    "cannot create the registry database directory {}: {e}",
                    dir.display()
                )
            })?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL, not NORMAL: writes here are rare (registrations), and an acknowledged registration
            // is what storage-ops resolves every volume against, so it must survive a power cut too.
            // Reads, the hot path, do not sync at all.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await
            .map_err(|e| format!("cannot open the registry database {}: {e}", path.display()))?;
        sqlx::migrate!("./migrations")
            .run(&pool)
            .await
            .map_err(|e| {
                format!(
                    "cannot migrate the registry database {}: {e}",
                    path.display()
                )
            })?;
        let current: i64 =
            sqlx::query_scalar("SELECT value FROM registry_meta WHERE key = 'resource_version'")
                .fetch_one(&pool)
                .await?;
        Ok(Store {
            pool,
            write_lock: Arc::new(tokio::sync::Mutex::new(())),
            feed: Feed::new(FEED_CAPACITY, u64::try_from(current).unwrap_or(0), []),
        })
    }

    /// Closes the database's connections (waiting for them), for a caller that moves the file next.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The change feed (orchestrators are cluster-wide: its one scope is `""`).
    pub fn feed(&self) -> &Arc<Feed<()>> {
        &self.feed
    }

    /// `SELECT 1`, for readiness.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}
