//! The cap on a listener's connections, one mechanism for every Berth server (the services' and the
//! gateway's proxy engine).
//!
//! Under `berth up` every service shares one process, so one file-descriptor table: a listener that
//! holds connections without bound (idle ones from a caller with no token, say) starves every other
//! listener of descriptors, the gateway's included. So each listener counts its connections against
//! a cap; over it, the oldest idle connection is asked to close to make room, or, with none idle,
//! the new one is answered 503 ([`over_capacity_answer`]) and closed.
//!
//! What counts as idle is the connection's [`Activity`]: how many of its calls are being answered.
//! The registry is touched when a connection opens and closes, never per request.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// File descriptors kept back from the connection caps: listeners, log and database files,
/// connections the process opens itself.
pub const RESERVED_FILES: usize = 128;

/// The largest default cap: beyond it, memory rather than descriptors is what runs out.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16_384;

/// What shows a connection is alive: progress (request heads received, answer bytes written) and how
/// many of its calls are being answered. Written only by the connection's own task, so never
/// contended; atomics only because the task must be `Send`.
#[derive(Debug, Default)]
pub struct Activity {
    progress: AtomicU64,
    busy: AtomicU64,
}

impl Activity {
    /// Counts one step of progress (answer bytes written, say).
    pub fn progressed(&self) {
        self.progress.fetch_add(1, Ordering::Relaxed);
    }

    /// No call of the connection is being answered.
    pub fn is_idle(&self) -> bool {
        self.busy.load(Ordering::Relaxed) == 0
    }

    /// Resolves once the connection has made no progress for a whole `period` while none of its
    /// calls was being answered: a caller that went quiet, or one sending a request head too slowly
    /// to finish (slow loris). Such a connection is closed between `period` and twice that after it
    /// stalled. One timer, firing once a period, rather than one per request; held in the future
    /// itself (an interval would box its own), so making one costs no allocation.
    pub async fn stalled(&self, period: Duration) {
        let tick = tokio::time::sleep(period);
        tokio::pin!(tick);
        let mut seen = self.progress.load(Ordering::Relaxed);
        loop {
            tick.as_mut().await;
            let now = self.progress.load(Ordering::Relaxed);
            if now == seen && self.is_idle() {
                return;
            }
            seen = now;
            // A late tick delays the next one rather than bunching them up.
            tick.as_mut().reset(tokio::time::Instant::now() + period);
        }
    }
}

/// One call being answered on a connection whose state is a `T` (which holds an [`Activity`]);
/// counts as progress when it starts and when it ends.
pub struct Busy<T: AsRef<Activity>>(pub Arc<T>);

impl<T: AsRef<Activity>> Busy<T> {
    /// A call of `connection` starts.
    pub fn enter(connection: &Arc<T>) -> Self {
        let activity = (**connection).as_ref();
        activity.progress.fetch_add(1, Ordering::Relaxed);
        activity.busy.fetch_add(1, Ordering::Relaxed);
        Busy(connection.clone())
    }
}

impl<T: AsRef<Activity>> Drop for Busy<T> {
    fn drop(&mut self) {
        let activity = (*self.0).as_ref();
        activity.progress.fetch_add(1, Ordering::Relaxed);
        activity.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

impl AsRef<Activity> for Activity {
    fn as_ref(&self) -> &Activity {
        self
    }
}

/// What the cap needs of a connection: whether it is idle, and a way to ask it to close.
pub trait Closer: Send + Sync {
    /// What shows the connection is alive.
    fn activity(&self) -> &Activity;
    /// Asks the connection to close (it closes at once when no call of it is being answered).
    fn close(&self);
    /// Whether it was asked already.
    fn is_closing(&self) -> bool;
}

/// The closer of a connection served by one task: its activity, and the token that task watches.
pub struct TokenCloser {
    /// The connection's activity.
    pub activity: Activity,
    /// Cancelled to ask the task to close the connection.
    pub closing: CancellationToken,
}

impl Closer for TokenCloser {
    fn activity(&self) -> &Activity {
        &self.activity
    }
    fn close(&self) {
        self.closing.cancel();
    }
    fn is_closing(&self) -> bool {
        self.closing.is_cancelled()
    }
}

impl AsRef<Activity> for TokenCloser {
    fn as_ref(&self) -> &Activity {
        &self.activity
    }
}

type Entry = Arc<dyn Closer>;

/// A listener's connections, oldest first, for its cap.
pub struct Connections {
    cap: usize,
    live: AtomicUsize,
    next_id: AtomicU64,
    /// By age: what it takes to find the oldest idle one and ask it to close.
    open: Mutex<BTreeMap<u64, Entry>>,
}

impl Connections {
    /// Connections capped at `cap` (at least one).
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(Connections {
            cap: cap.max(1),
            live: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            open: Mutex::new(BTreeMap::new()),
        })
    }

    /// The cap.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Connections held now.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Makes room for one more connection: `false` when the cap is reached and none is idle. The
    /// oldest idle connection's token is cancelled; its task closes it.
    pub fn make_room(&self) -> bool {
        if self.live.load(Ordering::Relaxed) < self.cap {
            return true;
        }
        let open = self.open.lock().expect("connections lock");
        let oldest_idle = open
            .values()
            .find(|c| c.activity().is_idle() && !c.is_closing());
        match oldest_idle {
            Some(c) => {
                c.close();
                true
            }
            None => false,
        }
    }

    /// Counts a connection against the cap until the guard is dropped; it is asked to close
    /// ([`Closer::close`]) when it must make room.
    pub fn register(self: &Arc<Self>, connection: Arc<dyn Closer>) -> Registered {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.live.fetch_add(1, Ordering::Relaxed);
        self.open
            .lock()
            .expect("connections lock")
            .insert(id, connection);
        Registered {
            connections: self.clone(),
            id,
        }
    }
}

/// A connection counted against the cap until dropped.
pub struct Registered {
    connections: Arc<Connections>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.connections.live.fetch_sub(1, Ordering::Relaxed);
        self.connections
            .open
            .lock()
            .expect("connections lock")
            .remove(&self.id);
    }
}

/// The soft file limit, raised to the hard one where allowed (once per process is enough; raising
/// again is harmless).
pub fn file_limit() -> usize {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let soft = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(_) => soft,
        },
        Ok((soft, _)) => soft,
        Err(_) => 1024,
    };
    usize::try_from(soft).unwrap_or(usize::MAX)
}

/// The default cap of a listener that has `share` of the file descriptors left after
/// [`RESERVED_FILES`] (1 when it is alone in its process) and spends `files_per_connection` on each
/// connection (the gateway 2: the caller's and an upstream one).
pub fn default_cap(share: f64, files_per_connection: usize) -> usize {
    let left = file_limit().saturating_sub(RESERVED_FILES) as f64 * share.clamp(0.0, 1.0);
    ((left as usize) / files_per_connection.max(1)).clamp(16, DEFAULT_MAX_CONNECTIONS)
}

/// What a connection over the cap is told before it is closed: 503, problem+json, retry shortly.
pub fn over_capacity_answer() -> Vec<u8> {
    let body = br#"{"type":"about:blank","title":"Unavailable","status":503,"detail":"the server holds as many connections as it may; retry shortly","code":14,"requestId":""}"#;
    let mut out = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_idle_connection_makes_room_and_busy_ones_do_not() {
        let connections = Connections::new(2);
        let closer = |closing: &CancellationToken| {
            Arc::new(TokenCloser {
                activity: Activity::default(),
                closing: closing.clone(),
            })
        };
        let (close_a, close_b) = (CancellationToken::new(), CancellationToken::new());
        let (a, b) = (closer(&close_a), closer(&close_b));
        let _ra = connections.register(a.clone());
        let _rb = connections.register(b.clone());
        let busy_a = Busy::enter(&a);
        assert!(connections.make_room());
        assert!(!close_a.is_cancelled(), "a busy connection was closed");
        assert!(close_b.is_cancelled());
        let _busy_b = Busy::enter(&b);
        drop(busy_a);
        assert!(connections.make_room());
        assert!(close_a.is_cancelled());
    }
}
