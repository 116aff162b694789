//! Group commit: every write the store makes runs on one writing connection, in a task of its own,
//! and the writes that queue while one commit is on its way to the disk share the next commit.
//!
//! Why: each write must be durable before it is answered (`synchronous = FULL`; a machine recorded
//! as Creating is what keeps a VM from being made twice or forgotten), and on this kind of disk a
//! commit's fsync costs about a millisecond. When every write was its own transaction under a
//! lock, a scale-up of 100 machines spent most of its time waiting for ~550 fsyncs one after the
//! other (BENCHMARKS.md, "Machine controller"). Here a batch of up to [`MAX_BATCH`] writes is one
//! `BEGIN IMMEDIATE … COMMIT`, so one fsync; storage-ops' writer does the same for volumes.
//!
//! Each write runs inside its own savepoint, so a write that fails (a name taken, a stale
//! resourceVersion, a database error in one statement) is undone alone and the others of its batch
//! still commit. Every write is answered only after the batch's `COMMIT`, and its changes reach
//! the feed then, in the order the writes ran, so watches still see versions in order. Reads do not
//! come here: they use the pool's other connections and see what is committed.

use std::sync::Arc;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use sqlx::{Connection as _, SqliteConnection};
use tokio::sync::{mpsc, oneshot};

use service_kit::watch::Feed;

use domain::resources::Kind;

use super::feed::Change;
use super::{Store, StoreError};

/// The most writes one transaction carries: enough that a burst shares few fsyncs, few enough
/// that the first of them is not kept long from its answer.
pub(super) const MAX_BATCH: usize = 128;

/// What a write does on the writing connection: its result and the changes it publishes.
type Work<T> = Result<(T, Vec<Change>), StoreError>;

/// A queued write: run in the next batch, or refused when that batch cannot begin.
pub(super) trait Job: Send {
    /// Runs the write inside its own savepoint; says what to do after `COMMIT`.
    fn run<'c>(self: Box<Self>, conn: &'c mut SqliteConnection) -> BoxFuture<'c, Ran>;
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

/// Starts the writer task on `conn`; it ends when every [`Store`] clone is gone.
pub(super) fn spawn(conn: SqliteConnection, feed: Arc<Feed<Kind>>) -> Jobs {
    let (jobs, queue) = mpsc::channel(MAX_BATCH * 4);
    tokio::spawn(write_loop(conn, queue, feed));
    jobs
}

async fn write_loop(
    mut conn: SqliteConnection,
    mut queue: mpsc::Receiver<Box<dyn Job>>,
    feed: Arc<Feed<Kind>>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let mut tx = match conn.begin_with("BEGIN IMMEDIATE").await {
            Ok(tx) => tx,
            Err(e) => {
                let e = Arc::new(StoreError::from(e));
                tracing::warn!(error = %e, writes = batch.len(), "a batch of writes could not begin");
                for job in batch.drain(..) {
                    job.refuse(e.clone());
                }
                continue;
            }
        };
        let mut ran = Vec::with_capacity(batch.len());
        for job in batch.drain(..) {
            ran.push(job.run(&mut tx).await);
        }
        match tx.commit().await {
            Ok(()) => {
                for r in ran {
                    for change in r.changes {
                        feed.publish(change);
                    }
                    (r.answer)(Ok(()));
                }
            }
            Err(e) => {
                let e = Arc::new(StoreError::from(e));
                tracing::warn!(error = %e, writes = ran.len(), "a batch of writes did not commit");
                for r in ran {
                    (r.answer)(Err(e.clone()));
                }
            }
        }
    }
}

/// One caller's write and where its answer goes.
struct Pending<T, F> {
    work: F,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Job for Pending<T, F>
where
    T: Send + 'static,
    F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, Work<T>> + Send + 'static,
{
    fn run<'c>(self: Box<Self>, conn: &'c mut SqliteConnection) -> BoxFuture<'c, Ran> {
        let Pending { work, reply } = *self;
        Box::pin(async move {
            let done = match conn.begin().await {
                Ok(mut savepoint) => {
                    // A panic in a write (an edit closure's) must not end the writer, which every
                    // later write waits on: it fails that write alone.
                    let outcome = std::panic::AssertUnwindSafe(work(&mut savepoint))
                        .catch_unwind()
                        .await
                        .unwrap_or_else(|_| {
                            Err(StoreError::Corrupt {
                                what: "a write".into(),
                                why: "it panicked; it was undone".into(),
                            })
                        });
                    match outcome {
                        Ok(done) => savepoint.commit().await.map(|()| done).map_err(Into::into),
                        Err(e) => {
                            // Undone alone; a failure to undo it fails the whole batch at COMMIT.
                            let _ = savepoint.rollback().await;
                            Err(e)
                        }
                    }
                }
                Err(e) => Err(e.into()),
            };
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

impl Store {
    /// Runs `work` on the writing connection, inside a savepoint of the next batch, and answers
    /// once that batch is committed (after its changes are published).
    pub(super) async fn commit<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, Work<T>> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(Pending { work, reply });
        self.jobs
            .send(job)
            .await
            .map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }
}
