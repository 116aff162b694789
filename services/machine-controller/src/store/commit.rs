//! Group commit: every write the store makes runs on one writing connection, driven by a thread of
//! its own, and the writes that queue while one commit is on its way to the disk share the next
//! commit.
//!
//! Why: each write must be durable before it is answered (`synchronous = FULL`; a machine recorded
//! as Creating is what keeps a VM from being made twice or forgotten), and on this kind of disk a
//! commit's fsync costs about a millisecond. When every write was its own transaction under a
//! lock, a scale-up of 100 machines spent most of its time waiting for ~550 fsyncs one after the
//! other (BENCHMARKS.md, "Machine controller"). Here a batch of up to [`MAX_BATCH`] writes is one
//! `BEGIN IMMEDIATE … COMMIT`, so one fsync; storage-ops' writer does the same for volumes.
//!
//! Once commits were shared, the writer itself was the bottleneck: it is one sequence, and each
//! statement is a trip to the connection's thread and back. So the writer spends as few trips as a
//! write needs ([`Session`]):
//! - it runs on a thread of its own, not as a task among the reconcilers', so each trip's answer is
//!   taken up at once rather than after whatever task a runtime worker is busy with;
//! - it knows the rows it has read or written (every write goes through it, so what it knows is
//!   what the database holds), and an edit starts from that instead of reading the row again;
//! - it hands out each namespace's resourceVersions from memory and stores where each sequence is
//!   once per batch, in that batch;
//! - a write of one statement needs no savepoint: SQLite undoes a failed statement alone.
//!
//! A write of several statements runs inside its own savepoint, so a write that fails (a name
//! taken, a stale resourceVersion, a database error in one statement) is undone alone and the
//! others of its batch still commit. Every write is answered only after the batch's `COMMIT`, and
//! its changes reach the feed then, in the order the writes ran, so watches still see versions in
//! order. Reads do not come here: they use the pool's other connections and see what is
//! committed.
//!
//! This holds while this writer is the database's only one: the controller runs as one replica (one
//! StatefulSet pod), and the store takes a lock beside the database (`open`) that a second writer,
//! in this process or another, waits for or is refused by.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use sqlx::{Connection as _, SqliteConnection};
use tokio::sync::{mpsc, oneshot};

use service_kit::watch::Feed;

use domain::resources::Kind;

use super::feed::Change;
use super::rows::fetch_object;
use super::{Store, StoreError, Stored};

/// The most writes one transaction carries: enough that a burst shares few fsyncs, few enough
/// that the first of them is not kept long from its answer.
pub(super) const MAX_BATCH: usize = 128;

/// The most rows the writer keeps in memory; past it, it forgets the oldest half and reads them
/// again when they are next written.
const KNOWN_ROWS: usize = 8192;

/// What a write does on the writing connection: its result and the changes it publishes.
type Work<T> = Result<(T, Vec<Change>), StoreError>;

/// An object's place: kind, namespace, name.
type RowKey = (Kind, String, String);

/// The writing connection and what the writer knows beside it.
pub(super) struct Session {
    /// The writing connection, inside the batch's transaction while a write runs.
    pub conn: SqliteConnection,
    /// Committed rows, as the writer last read or wrote them; `None`: known absent.
    known: HashMap<RowKey, Option<Stored>>,
    /// In the order they were inserted, to forget the oldest first.
    known_order: std::collections::VecDeque<RowKey>,
    /// This batch's rows, newest last: what `known` becomes if the batch commits.
    staged: Vec<(RowKey, Option<Stored>)>,
    /// Where each namespace's sequence is, this batch's versions included.
    versions: HashMap<String, u64>,
    /// Where every sequence starts above (versions issued before namespaces had their own).
    floor: u64,
    /// The namespaces whose sequence this batch moved.
    moved: BTreeSet<String>,
    /// Set when a write failed in a way that may have ended the batch's transaction (see
    /// [`ends_transaction`]): the batch runs nothing more and is undone whole.
    broken: Option<Arc<StoreError>>,
}

impl Session {
    /// The object at `(kind, namespace, name)` as this batch sees it: from memory, else read.
    pub(super) async fn current(
        &mut self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Stored>, StoreError> {
        if let Some(row) = self.remembered(kind, namespace, name) {
            return Ok(row.cloned());
        }
        let key = (kind, namespace.to_string(), name.to_string());
        let row = fetch_object(&mut self.conn, kind, namespace, name).await?;
        // Read inside the batch, so possibly this batch's: staged, known only once committed.
        self.staged.push((key, row.clone()));
        Ok(row)
    }

    /// What the writer remembers of the object, without reading: `None` when it does not know,
    /// `Some(None)` when it knows it absent.
    pub(super) fn remembered(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Option<Option<&Stored>> {
        let key = (kind, namespace.to_string(), name.to_string());
        match self.staged.iter().rev().find(|(k, _)| *k == key) {
            Some((_, row)) => Some(row.as_ref()),
            None => self.known.get(&key).map(Option::as_ref),
        }
    }

    /// Records what this batch wrote at `(kind, namespace, name)` (`None`: removed).
    pub(super) fn stage(&mut self, kind: Kind, namespace: &str, name: &str, row: Option<Stored>) {
        let key = (kind, namespace.to_string(), name.to_string());
        self.staged.push((key, row));
    }

    /// Forgets every row: a write changed rows in a way the writer does not follow (a reseal).
    pub(super) fn forget_rows(&mut self) {
        self.known.clear();
        self.known_order.clear();
        self.staged.clear();
    }

    /// The next resourceVersion of `namespace`'s own sequence, which starts above the store's
    /// floor (one sequence for all let a tenant learn from its own versions how much the others
    /// wrote). A version handed to a write that is then undone is never used again: a gap, which
    /// a resourceVersion may have.
    pub(super) fn next_version(&mut self, namespace: &str) -> u64 {
        let floor = self.floor;
        let v = self.versions.entry(namespace.to_string()).or_insert(floor);
        *v += 1;
        self.moved.insert(namespace.to_string());
        *v
    }

    /// Stores where the sequences this batch moved are, in the batch.
    async fn store_versions(&mut self) -> Result<(), StoreError> {
        for namespace in std::mem::take(&mut self.moved) {
            let version = self.versions.get(&namespace).copied().unwrap_or(self.floor);
            sqlx::query(
                "INSERT INTO namespace_versions (namespace, version) VALUES (?, ?) \
                 ON CONFLICT (namespace) DO UPDATE SET version = excluded.version",
            )
            .bind(&namespace)
            .bind(version as i64)
            .execute(&mut self.conn)
            .await?;
        }
        Ok(())
    }

    /// The batch committed: what it wrote is what the database holds.
    fn committed(&mut self) {
        for (key, row) in std::mem::take(&mut self.staged) {
            if self.known.insert(key.clone(), row).is_none() {
                self.known_order.push_back(key);
            }
        }
        if self.known.len() > KNOWN_ROWS {
            while self.known.len() > KNOWN_ROWS / 2 {
                let Some(oldest) = self.known_order.pop_front() else {
                    break;
                };
                self.known.remove(&oldest);
            }
        }
    }

    /// The batch did not commit: nothing it wrote holds.
    fn undone(&mut self) {
        self.staged.clear();
        self.moved.clear();
    }

    /// Marks the batch as one to undo whole, for `e`; the error its writes are answered with.
    fn break_batch(&mut self, e: StoreError) -> StoreError {
        let shared = Arc::new(e);
        self.broken = Some(shared.clone());
        StoreError::Batch(shared)
    }

    /// Undoes the write in progress back to its savepoint; false when that failed.
    async fn roll_back_write(&mut self) -> bool {
        self.run("ROLLBACK TO write").await.is_ok() && self.run("RELEASE write").await.is_ok()
    }

    async fn run(&mut self, sql: &'static str) -> Result<(), StoreError> {
        sqlx::query(sql).execute(&mut self.conn).await?;
        Ok(())
    }
}

/// A queued write: run in the next batch, or refused when that batch cannot begin.
pub(super) trait Job: Send {
    /// Runs the write (inside its own savepoint when it has several statements); says what to
    /// do after `COMMIT`.
    fn run<'c>(self: Box<Self>, session: &'c mut Session) -> BoxFuture<'c, Ran>;
    /// Answers the caller with the batch's failure, unrun.
    fn refuse(self: Box<Self>, error: Arc<StoreError>);
}

/// A write that ran: the changes to publish once committed, and how to answer its caller with
/// the commit's outcome.
pub(super) struct Ran {
    changes: Vec<Change>,
    answer: Box<dyn FnOnce(Result<(), Arc<StoreError>>) + Send>,
}

/// The sending end of the writer's queue.
pub(super) type Jobs = mpsc::Sender<Box<dyn Job>>;

/// Starts the writer on `conn`, its sequences where `versions` (by namespace) and `floor` say,
/// holding `lock` (the database's writer lock) while it runs; it ends when every [`Store`] clone is
/// gone and the writes queued before are done.
pub(super) fn spawn(
    conn: SqliteConnection,
    lock: std::fs::File,
    versions: HashMap<String, u64>,
    floor: u64,
    feed: Arc<Feed<Kind>>,
) -> Result<Jobs, std::io::Error> {
    let (jobs, queue) = mpsc::channel(MAX_BATCH * 4);
    let session = Session {
        conn,
        known: HashMap::new(),
        known_order: Default::default(),
        staged: Vec::new(),
        versions,
        floor,
        moved: BTreeSet::new(),
        broken: None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("store-writer".into())
        .spawn(move || {
            runtime.block_on(write_loop(session, queue, feed));
            // Only once the connection is closed may another writer start.
            drop(lock);
        })?;
    Ok(jobs)
}

async fn write_loop(
    mut session: Session,
    mut queue: mpsc::Receiver<Box<dyn Job>>,
    feed: Arc<Feed<Kind>>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
        if let Err(e) = session.run("BEGIN IMMEDIATE").await {
            let e = Arc::new(e);
            tracing::warn!(error = %e, writes = batch.len(), "a batch of writes could not begin");
            for job in batch.drain(..) {
                job.refuse(e.clone());
            }
            continue;
        }
        let mut ran = Vec::with_capacity(batch.len());
        let mut jobs = batch.drain(..);
        for job in jobs.by_ref() {
            ran.push(job.run(&mut session).await);
            if session.broken.is_some() {
                break;
            }
        }
        let unrun: Vec<_> = jobs.collect();
        let committed = match session.broken.take() {
            Some(e) => {
                for job in unrun {
                    job.refuse(e.clone());
                }
                Err(e)
            }
            None => match session.store_versions().await {
                Ok(()) => session.run("COMMIT").await.map_err(Arc::new),
                Err(e) => Err(Arc::new(e)),
            },
        };
        match committed {
            Ok(()) => {
                session.committed();
                for r in ran {
                    for change in r.changes {
                        feed.publish(change);
                    }
                    (r.answer)(Ok(()));
                }
            }
            Err(e) => {
                // Whatever is left of the transaction goes; an error here means none is left.
                let _ = session.run("ROLLBACK").await;
                session.undone();
                tracing::warn!(error = %e, writes = ran.len(), "a batch of writes did not commit");
                for r in ran {
                    (r.answer)(Err(e.clone()));
                }
            }
        }
    }
    // Closed before the writer lock goes (`spawn`), so the next writer never overlaps this one.
    let _ = session.conn.close().await;
}

/// Whether a write's failure may have ended the batch's whole transaction, not only its own
/// statement. SQLite may roll a transaction back by itself on a full disk, an I/O error, running
/// out of memory or a busy lock; after that, later statements would each commit on their own and
/// the batch's `COMMIT` would fail, so writes that landed would be answered as failed and the
/// writer's memory would no longer be what the database holds. A failure of the connection itself
/// counts too. What cannot end it: a constraint, a refusal, a missing object, a stale version.
fn ends_transaction(e: &StoreError) -> bool {
    match e {
        StoreError::Busy(_) | StoreError::WriterGone => true,
        StoreError::Db(sqlx::Error::Database(db)) => {
            let primary = db
                .code()
                .and_then(|c| c.parse::<u32>().ok())
                .map(|c| c & 0xff);
            // SQLITE_NOMEM, SQLITE_INTERRUPT, SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_FULL; unknown.
            primary.is_none_or(|c| matches!(c, 7 | 9 | 10 | 11 | 13))
        }
        StoreError::Db(_) => true,
        StoreError::Batch(inner) => ends_transaction(inner),
        StoreError::Refused(_)
        | StoreError::NotFound { .. }
        | StoreError::Exists { .. }
        | StoreError::Conflict { .. }
        | StoreError::Corrupt { .. } => false,
    }
}

/// One caller's write and where its answer goes.
struct Pending<T, F> {
    work: F,
    /// Whether the write has several statements, so needs a savepoint to be undone alone.
    savepoint: bool,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Job for Pending<T, F>
where
    T: Send + 'static,
    F: for<'c> FnOnce(&'c mut Session) -> BoxFuture<'c, Work<T>> + Send + 'static,
{
    fn run<'c>(self: Box<Self>, session: &'c mut Session) -> BoxFuture<'c, Ran> {
        let Pending {
            work,
            savepoint,
            reply,
        } = *self;
        Box::pin(async move {
            let done = run_write(session, work, savepoint).await;
            match done {
                Ok((value, changes)) => Ran {
                    changes,
                    answer: Box::new(move |committed| {
                        // The caller may have gone (its request was cancelled); the write stands
                        // either way.
                        let _ = reply.send(committed.map(|()| value).map_err(StoreError::Batch));
                    }),
                },
                Err(e) => Ran {
                    changes: Vec::new(),
                    answer: Box::new(move |_| {
                        let _ = reply.send(Err(e));
                    }),
                },
            }
        })
    }

    fn refuse(self: Box<Self>, error: Arc<StoreError>) {
        let _ = self.reply.send(Err(StoreError::Batch(error)));
    }
}

/// Runs one write; a write that fails is undone alone when it can be, else with its whole batch
/// (`session.broken`).
async fn run_write<T, F>(session: &mut Session, work: F, savepoint: bool) -> Work<T>
where
    F: for<'c> FnOnce(&'c mut Session) -> BoxFuture<'c, Work<T>>,
{
    let mark = session.staged.len();
    if savepoint && let Err(e) = session.run("SAVEPOINT write").await {
        return Err(session.break_batch(e));
    }
    // A panic in a write (an edit closure's) must not end the writer, which every later write
    // waits on.
    let outcome = std::panic::AssertUnwindSafe(work(session))
        .catch_unwind()
        .await;
    let failure = match outcome {
        Ok(Ok(done)) if !savepoint => return Ok(done),
        Ok(Ok(done)) => {
            return match session.run("RELEASE write").await {
                Ok(()) => Ok(done),
                Err(e) => Err(session.break_batch(e)),
            };
        }
        Ok(Err(e)) => e,
        Err(_) => {
            session.staged.truncate(mark);
            let e = StoreError::Corrupt {
                what: "a write".into(),
                why: "it panicked; it was undone".into(),
            };
            // Without a savepoint its statement may have run: only undoing the batch undoes it.
            return Err(if savepoint && session.roll_back_write().await {
                e
            } else {
                session.break_batch(e)
            });
        }
    };
    session.staged.truncate(mark);
    // A one-statement write that failed was undone by SQLite, unless the failure took the
    // transaction with it.
    if ends_transaction(&failure) || (savepoint && !session.roll_back_write().await) {
        return Err(session.break_batch(failure));
    }
    Err(failure)
}

impl Store {
    /// Runs `work` on the writing connection, inside a savepoint of the next batch, and answers
    /// once that batch is committed (after its changes are published).
    pub(super) async fn commit<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut Session) -> BoxFuture<'c, Work<T>> + Send + 'static,
    {
        self.queue(work, true).await
    }

    /// [`Store::commit`] for a write that changes the database in at most one statement, which
    /// needs no savepoint to be undone alone.
    pub(super) async fn commit_one_statement<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut Session) -> BoxFuture<'c, Work<T>> + Send + 'static,
    {
        self.queue(work, false).await
    }

    async fn queue<T, F>(&self, work: F, savepoint: bool) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut Session) -> BoxFuture<'c, Work<T>> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(Pending {
            work,
            savepoint,
            reply,
        });
        self.jobs
            .send(job)
            .await
            .map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }
}
