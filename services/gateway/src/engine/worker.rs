//! A worker thread, and the life of each caller connection it serves: taken over from the
//! acceptor, served by hyper in spells, parked between them without hyper's state, and handed to the
//! cold table once idle long enough.
//!
//! Apart from the acceptor because all of it runs on the worker's own runtime, and apart from the
//! answer to a request because it deals in sockets and tasks, not HTTP. What a parked connection's
//! task holds is what every idle connection costs (a test bounds its size), so that state is kept
//! here, where it can be read whole.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::Poll;

use axum::http::HeaderValue;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use service_kit::connections::Registered;
use service_kit::protocol::ProblemIo;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::proxy::ConnectionPool;
use crate::routes::UpstreamId;

use super::caller::{Busy, CallerState};
use super::cold::ColdTable;
use super::watched::Watched;
use super::{COLD_AFTER, Shared};

/// One worker thread's state: the shared parts, its own upstream connections, and its cold
/// connections.
pub(super) struct Worker {
    pub(super) shared: Arc<Shared>,
    /// One pool per upstream, indexed by [`UpstreamId::index`].
    pub(super) pools: [Arc<ConnectionPool>; 4],
    /// Cancelled when the worker stops: every connection of it closes.
    pub(super) stop: CancellationToken,
    /// Connections idle for longer than [`COLD_AFTER`], without a task ([`Worker::cold_watch`]).
    pub(super) cold: Mutex<ColdTable>,
    /// Spawns the worker's connection tasks, and waits for them at shutdown.
    pub(super) tracker: tokio_util::task::TaskTracker,
}

impl Worker {
    /// A worker whose cold connections are watched by `poll` (see [`Worker::cold_watch`]).
    pub(super) fn new(shared: Arc<Shared>, poll: &mio::Poll) -> std::io::Result<Self> {
        Ok(Worker {
            shared,
            pools: UpstreamId::ALL.map(|_| ConnectionPool::new()),
            stop: CancellationToken::new(),
            cold: Mutex::new(ColdTable {
                registry: poll.registry().try_clone()?,
                entries: HashMap::new(),
                next_key: 0,
            }),
            tracker: tokio_util::task::TaskTracker::new(),
        })
    }

    pub(super) async fn run(
        self: Arc<Self>,
        poll: mio::Poll,
        mut connections: mpsc::UnboundedReceiver<(std::net::TcpStream, SocketAddr)>,
    ) {
        self.tracker.spawn(self.clone().cold_watch(poll));
        // Ends when the acceptor drops its sender, at shutdown.
        while let Some((stream, peer)) = connections.recv().await {
            match TcpStream::from_std(stream) {
                Ok(stream) => {
                    self.tracker.spawn(self.clone().connection(stream, peer));
                }
                Err(e) => tracing::warn!(error = %e, "could not take a connection over"),
            }
        }
        self.stop.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }

    /// Serves one caller's connection until it closes, stalls, is asked to make room, or the worker
    /// stops (`closing` is cancelled for the last two).
    ///
    /// While the connection is idle it is parked: no hyper connection exists for it, only the
    /// socket, watched for readiness. When bytes arrive, a hyper connection is made on the socket and
    /// serves until its calls are done and nothing more has come in ([`Watched`] then ends it with
    /// what hyper takes for the caller's close, and hyper hands the socket back untouched, with any
    /// bytes it had read but not used).
    ///
    /// A plain function returning the task's future, not an `async fn`: an `async fn` keeps its
    /// arguments (the socket among them) in its future beside what they were moved into.
    pub(super) fn connection(
        self: Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
    ) -> impl Future<Output = ()> + Send + 'static {
        let caller = Arc::new(CallerState::default());
        let registered = self.shared.connections.register(caller.clone());
        self.served(
            Watched::new(ProblemIo::new(stream), caller),
            registered,
            peer,
        )
    }

    /// The task of a connection from its first bytes or from being cold (see
    /// [`Worker::connection`]): it ends when the connection closes, or goes cold.
    // A plain function returning the task's future, not an `async fn`: an `async fn` keeps its
    // arguments (the socket among them) in its future beside what they are moved into (592 bytes
    // against 376, in a debug build).
    #[allow(clippy::manual_async_fn)]
    pub(super) fn served(
        self: Arc<Self>,
        mut io: Watched,
        registered: Registered,
        peer: SocketAddr,
    ) -> impl Future<Output = ()> + Send + 'static {
        // This future is what a parked connection costs, so it holds only the parked state:
        // everything a served spell needs (hyper's connection, the service, the stall timer) is in
        // the spell's own boxed future, freed when the spell ends.
        async move {
            loop {
                if io.unread.is_empty() {
                    match self.parked(&io).await {
                        Parked::Woken => {}
                        Parked::Close => return,
                        Parked::Cold => {
                            self.go_cold(io, registered, peer);
                            return;
                        }
                    }
                }
                match Box::pin(self.clone().serve(io, peer)).await {
                    Some(back) => io = back,
                    None => return,
                }
            }
        }
    }

    /// Waits, parked, for the caller's next bytes, for up to [`COLD_AFTER`]: then the connection
    /// goes cold, or closes if the idle timeout is that short. It closes too when asked to make
    /// room, or when the worker stops.
    ///
    /// Written as one poll function over the socket's readiness, the close signals and the
    /// deadline, rather than nested futures: its state is part of what every parked connection
    /// holds, and nested readiness and timer futures would each add their own state to it (the
    /// sizes measured: BENCHMARKS.md, “Connection memory: …”). The deadline is the connection's
    /// call timer, idle between calls, so waiting costs no timer of its own.
    async fn parked(&self, io: &Watched) -> Parked {
        let caller = &io.caller;
        let idle = self.shared.idle_timeout;
        let mut timer = std::mem::take(&mut *caller.timer.lock().expect("timer lock"));
        let woken = {
            let stopped = self.stop.cancelled();
            tokio::pin!(stopped);
            let mut deadline = timer.set(tokio::time::Instant::now() + idle.min(COLD_AFTER));
            std::future::poll_fn(|cx| {
                if let Poll::Ready(ready) = io.stream.get_ref().poll_read_ready(cx) {
                    return Poll::Ready(if ready.is_ok() {
                        Parked::Woken
                    } else {
                        Parked::Close
                    });
                }
                if caller.asked_to_close(cx) || stopped.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Parked::Close);
                }
                if deadline.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(if idle > COLD_AFTER {
                        Parked::Cold
                    } else {
                        Parked::Close
                    });
                }
                Poll::Pending
            })
            .await
        };
        *caller.timer.lock().expect("timer lock") = timer;
        woken
    }

    /// One served spell: a hyper connection on the socket, until its calls are done and nothing
    /// more has come in (then the socket comes back, to be parked) or the connection ends (`None`).
    async fn serve(self: Arc<Self>, io: Watched, peer: SocketAddr) -> Option<Watched> {
        let caller = io.caller.clone();
        // The caller's address as `x-forwarded-for` wants it, made once per spell.
        let peer_ip = HeaderValue::from_str(&peer.ip().to_string()).ok();
        let shared = self.shared.clone();
        let stopped = self.stop.clone();
        let service = {
            let caller = caller.clone();
            service_fn(move |request: hyper::Request<Incoming>| {
                // A request head is whole: what hyper read so far is used.
                caller.heard.store(false, Ordering::Relaxed);
                self.clone()
                    .answer(request, peer, peer_ip.clone(), Busy::enter(&caller))
            })
        };
        let stalled = caller.activity.stalled(shared.idle_timeout);
        let asked = caller.clone();
        let cancelled = async move {
            tokio::select! {
                () = stopped.cancelled() => {}
                () = std::future::poll_fn(|cx| {
                    if asked.asked_to_close(cx) { Poll::Ready(()) } else { Poll::Pending }
                }) => {}
            }
        };
        tokio::pin!(stalled, cancelled);
        let mut connection = shared.http1.serve_connection(TokioIo::new(io), service);
        tokio::select! {
            // In this order, without drawing a random one on every wake.
            biased;
            _ = &mut connection => {}
            () = stalled.as_mut() => {
                tracing::debug!(%peer, "closing a stalled connection");
                return None;
            }
            () = cancelled.as_mut() => {
                // With no call being answered (part-way through a head, or between calls) it
                // closes now: a graceful close would wait up to the idle timeout for a slow head,
                // holding the descriptor the cap asked back (issue 30, point 5).
                if caller.activity.is_idle() && caller.answering.load(Ordering::Relaxed) == 0 {
                    return None;
                }
                Pin::new(&mut connection).graceful_shutdown();
                // Answers in flight finish; a connection that stalls (an answer nobody reads)
                // must not hold the shutdown up.
                tokio::select! {
                    biased;
                    _ = &mut connection => {}
                    () = stalled.as_mut() => {}
                }
                return None;
            }
        }
        let parts = connection.into_parts();
        let mut io = parts.io.into_inner();
        if !io.parked {
            // The caller closed, or hyper did (an error, `connection: close`): the end.
            return None;
        }
        io.parked = false;
        // Copied: hyper's leftover is a view of its whole read buffer, which must go.
        io.unread = if parts.read_buf.is_empty() {
            Bytes::new()
        } else {
            Bytes::copy_from_slice(&parts.read_buf)
        };
        Some(io)
    }
}

/// What [`Worker::parked`] ended with.
enum Parked {
    /// Bytes came: serve them.
    Woken,
    /// Close the connection.
    Close,
    /// Idle for [`COLD_AFTER`]: move it to the cold table.
    Cold,
}
