//! The reading connections: a few rusqlite connections, opened when reads come and closed once idle.
//!
//! A read runs on tokio's blocking pool with a connection taken from the idle list (or opened, up to
//! [`MAX_READERS`]), and gives it back after. WAL lets readers run beside the writer and see every
//! committed change. An idle service keeps no reader for long: each holds its own page cache and C
//! heap, and storage-ops idles against a 12 MB budget, so connections unused for [`IDLE_CLOSE`] are
//! closed by a sweep that ends with the store.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};
use tokio::sync::Semaphore;

use super::row::StoreError;
use super::schema::BUSY_TIMEOUT;

/// The most reading connections open at once; more readers wait for one.
pub(super) const MAX_READERS: usize = 4;

/// How long a reader may sit unused before it is closed.
const IDLE_CLOSE: Duration = Duration::from_secs(60);

/// The pool. Cheap to clone.
#[derive(Clone)]
pub(super) struct Readers {
    inner: Arc<Pool>,
}

struct Pool {
    path: PathBuf,
    /// Connections not in use, each with when it was given back.
    idle: Mutex<Vec<(Connection, Instant)>>,
    /// One permit per connection that may be in use, held by the blocking task that uses it (so a
    /// read whose caller went away still counts until it ends).
    permits: Arc<Semaphore>,
}

impl Readers {
    /// A pool over the database at `path` (made and migrated already); no connection is opened yet.
    pub(super) fn new(path: &Path) -> Readers {
        let readers = Readers {
            inner: Arc::new(Pool {
                path: path.to_path_buf(),
                idle: Mutex::new(Vec::new()),
                permits: Arc::new(Semaphore::new(MAX_READERS)),
            }),
        };
        // Outside a runtime (a plain unit test) nothing would sweep, and nothing needs to.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(sweep(Arc::downgrade(&readers.inner)));
        }
        readers
    }

    /// Runs `read` on a reading connection, off the async threads.
    pub(super) async fn read<T, F>(&self, read: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let pool = self.inner.clone();
        // The semaphore is never closed.
        let permit = self
            .inner
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Closed)?;
        let result = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let taken = pool.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let conn = match taken {
                Some((conn, _)) => conn,
                None => open_reader(&pool.path)?,
            };
            let out = read(&conn);
            pool.idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((conn, Instant::now()));
            out
        })
        .await;
        match result {
            Ok(out) => out.map_err(StoreError::db),
            // The read panicked: a bug, reported as the database's failure rather than taking the
            // request's task down.
            Err(e) => Err(StoreError::db(std::io::Error::other(e.to_string()))),
        }
    }
}

/// A reading connection: `query_only`, so a bug cannot write around the writer.
fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.execute_batch("PRAGMA query_only = ON;")?;
    Ok(conn)
}

/// Closes readers idle for [`IDLE_CLOSE`], until the pool is dropped.
async fn sweep(pool: Weak<Pool>) {
    let mut every = tokio::time::interval(IDLE_CLOSE / 2);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(pool) = pool.upgrade() else { return };
        let stale: Vec<(Connection, Instant)> = {
            let mut idle = pool.idle.lock().unwrap_or_else(|p| p.into_inner());
            let (stale, fresh) = std::mem::take(&mut *idle)
                .into_iter()
                .partition(|(_, since)| since.elapsed() >= IDLE_CLOSE);
            *idle = fresh;
            stale
        };
        // Closing may touch the disk (the last connection checkpoints the WAL): not on an async
        // thread.
        if !stale.is_empty() {
            tokio::task::spawn_blocking(move || drop(stale));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn readers_are_reused_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (x INTEGER);")
            .unwrap();
        let readers = Readers::new(&path);
        let reads = (0..32).map(|_| {
            readers.read(|c| {
                std::thread::sleep(Duration::from_millis(2));
                c.query_row("SELECT COUNT(*) FROM t", [], |r| r.get::<_, i64>(0))
            })
        });
        for n in futures::future::join_all(reads).await {
            assert_eq!(n.unwrap(), 0);
        }
        let open = readers.inner.idle.lock().unwrap().len();
        assert!((1..=MAX_READERS).contains(&open), "{open} readers");
        // A reader cannot write.
        let e = readers
            .read(|c| c.execute("INSERT INTO t VALUES (1)", []))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("readonly"), "{e}");
    }
}
