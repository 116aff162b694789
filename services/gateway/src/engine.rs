//! The proxy engine: how the gateway serves its listener.
//!
//! A proxy's own work per call is small next to the system calls it makes, so what decides its
//! throughput is the overhead around them. The engine keeps that low the way nginx does, with one
//! worker per core:
//! - an acceptor (on the caller's runtime) hands each new connection to the workers in turn;
//! - each worker is a thread with a single-threaded tokio runtime, which serves its connections with
//!   hyper and keeps its own pool of upstream connections, so a call never wakes another thread or
//!   waits on another thread's lock;
//! - proxied calls go straight from hyper to [`Stack::handle`] (the same service-kit stack every
//!   service runs) and the forwarder; only the gateway's own routes (`/healthz`, `/readyz`, `/metrics`,
//!   `/openapi.json`) and unknown paths go through the axum router.
//!
//! Keep this layout rather than axum's server and hyper-util's pooled client on tokio's
//! multi-threaded runtime: measured with `bench/gateway.sh` at the same upstream, the move to it is
//! what brought the gateway close to nginx's requests/s (BENCHMARKS.md, “Gateway: direct vs Berth
//! vs nginx vs HAProxy”). Upstream calls go over hyper's own HTTP/1.1 client
//! connections (`hyper::client::conn::http1`), whose connection tasks run on the worker's runtime too.
//!
//! Connections are capped ([`Settings::max_connections`], by default well under the file limit,
//! which is raised to its hard limit at start where allowed) by the one mechanism every Berth
//! listener uses ([`service_kit::connections`]): over the cap the oldest idle connection is closed
//! to make room, or, with none idle, the new one is answered 503 and closed. Accept errors (out of
//! file descriptors, usually) back off instead of spinning.
//!
//! An idle keep-alive connection holds no buffers ([`Worker::connection`]): once its answers are
//! written and flushed and nothing more has come in, the connection's hyper state (its read and write
//! buffers, the dispatcher) is dropped and the socket is only watched for readiness; the next bytes
//! make a fresh hyper connection on the same socket. Keep-alive and pipelining are unchanged for the
//! caller. Measured with `bench/connections.sh`, this is most of what an idle connection no longer
//! holds in the gateway's resident memory (before and after: BENCHMARKS.md, “Connection memory:
//! idle keep-alive and slow-loris connections, the gateway vs nginx”).
//!
//! A parked connection's task holds only the socket, its bookkeeping and one wait over readiness,
//! the close signals and a deadline; what a served spell needs (hyper's connection, the service, the
//! stall timer) lives in the spell's own boxed future and is freed with it.
//!
//! A connection parked for [`COLD_AFTER`] goes cold ([`Worker::go_cold`]): its task ends, its socket
//! leaves tokio's reactor for one epoll of the worker's own (`mio`), and its call timer is freed, so
//! what it holds is an entry in the worker's cold table and its shared state. One task per worker
//! ([`Worker::cold_watch`]) waits on that epoll for all of them, serves a connection again with a
//! new task when its caller speaks, and sweeps the table for idle timeouts. The cap reaches a cold
//! connection through its shared state ([`Closer`]): a close shuts its socket down, which the epoll
//! reports. Measured with `bench/connections.sh`, this is what took an idle connection to the figure
//! BENCHMARKS.md, “Connection memory: …”, gives beside nginx's; a pause between calls shorter than
//! [`COLD_AFTER`] never pays for the move (four `epoll_ctl` calls and a task).
//!
//! A caller's connection that stalls (no request head completed and no answer written for the idle
//! timeout, with no call of it being answered) is closed: that covers idle keep-alive connections and
//! slow-loris heads alike. Served, one timer per spell, not per request ([`Activity::stalled`]);
//! parked, the connection's call timer, idle between calls, is set to the idle timeout.
//!
//! Requests hyper cannot parse get problem+json answers ([`service_kit::protocol::ProblemIo`]), and
//! a caller may send fewer header fields than an upstream takes, leaving room for those the gateway
//! adds ([`MAX_CALLER_HEADERS`]).
//!
//! Shutdown: the acceptor stops, each worker cancels its connections' token (hyper's graceful
//! shutdown: answers in flight complete, idle keep-alive connections close), and the engine returns
//! once every worker has drained.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use domain::Code;
use futures::future::BoxFuture;
use hyper::body::{Body as _, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use service_kit::ApiError;
use service_kit::connections::{Activity, Closer, Connections, Registered};
use service_kit::middleware::Stack;
use service_kit::protocol::ProblemIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::admission::Gateway;
use crate::proxy::ConnectionPool;
use crate::routes::{Classified, Scope, UpstreamId, check_path, classify};

/// The gateway's own metrics page, which only a cluster-wide `metrics:read` token reads.
const METRICS_PATH: &str = "/metrics";

/// Header fields a caller may send. The services take hyper's default of 100, and the gateway adds
/// up to seven to what it forwards (`host` and `authorization` replaced, `x-forwarded-for`,
/// `-proto`, `-host`, `x-request-id`, `traceparent`, `tracestate`, a `content-length`): so whatever
/// the gateway accepts, the upstream accepts too.
pub(crate) const MAX_CALLER_HEADERS: usize = 92;

/// How long a connection stays parked with its task before it goes cold: then it has no task, no
/// place in tokio's reactor and no timer of its own, only an entry in its worker's cold table
/// ([`Worker::cold_watch`]). Short, so that a burst of new connections holds few tasks at once (what
/// the allocator keeps after they end shows in the resident memory); a caller that pauses longer
/// than this between calls pays four `epoll_ctl` calls and a task for the move back, little next to
/// the pause.
const COLD_AFTER: Duration = Duration::from_millis(250);

/// The bounds of how often a worker sweeps its cold connections for their idle timeouts (an
/// eighth of the timeout, within these): a cold connection closes at most this late.
const COLD_SWEEP_MIN: Duration = Duration::from_millis(100);
const COLD_SWEEP_MAX: Duration = Duration::from_secs(5);

/// The largest request head a caller may send, in bytes (see [`MAX_CALLER_HEADERS`]).
const MAX_CALLER_HEAD: usize = 256 * 1024;

/// How the engine runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Worker threads (at least one).
    pub(crate) workers: usize,
    /// How long a caller's connection may go without progress while none of its calls is being
    /// answered (see [`Activity::stalled`]).
    pub(crate) idle_timeout: Duration,
    /// Callers' connections held at once; `None` for a default from the file limit.
    pub(crate) max_connections: Option<usize>,
}

/// What every worker shares.
struct Shared {
    gateway: Arc<Gateway>,
    /// The gateway's own routes, already wrapped in the stack.
    router: Router,
    /// The stack proxied calls run in.
    stack: Arc<Stack>,
    idle_timeout: Duration,
    connections: Arc<Connections>,
    /// hyper's settings for callers' connections, made once.
    http1: hyper::server::conn::http1::Builder,
}

/// hyper's settings for callers' connections.
fn caller_http1() -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        // Answers here are mostly small: one buffer (head and body copied together) costs less
        // than a vectored write of two, as measured with bench/gateway.sh.
        .writev(false)
        .max_headers(MAX_CALLER_HEADERS)
        // A request head larger than this is refused (431) here: the services take hyper's
        // default (about 400 KiB), and the gateway's own headers must still fit beside it.
        .max_buf_size(MAX_CALLER_HEAD);
    builder
}

/// The engine for [`service_kit::server::Application::with_engine`].
pub(crate) fn engine(
    gateway: Arc<Gateway>,
    stack: Arc<Stack>,
    settings: Settings,
) -> service_kit::server::Engine {
    Box::new(move |router, listener, shutdown| {
        // Each caller's connection may hold one upstream connection besides its own.
        let cap = settings
            .max_connections
            .unwrap_or_else(|| service_kit::connections::default_cap(1.0, 2));
        tracing::debug!(cap, "connection cap");
        let shared = Arc::new(Shared {
            gateway,
            router,
            stack,
            idle_timeout: settings.idle_timeout,
            connections: Connections::new(cap),
            http1: caller_http1(),
        });
        Box::pin(serve(shared, listener, shutdown, settings.workers.max(1)))
    })
}

async fn serve(
    shared: Arc<Shared>,
    listener: TcpListener,
    shutdown: BoxFuture<'static, ()>,
    workers: usize,
) -> std::io::Result<()> {
    let mut inboxes = Vec::with_capacity(workers);
    let mut finished = Vec::with_capacity(workers);
    for index in 0..workers {
        let (inbox, connections) = mpsc::unbounded_channel();
        let (done, done_rx) = oneshot::channel::<()>();
        let poll = mio::Poll::new()?;
        let worker = Worker::new(shared.clone(), &poll)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name(format!("gateway-worker-{index}"))
            .spawn(move || {
                runtime.block_on(Arc::new(worker).run(poll, connections));
                // The runtime is dropped here, on its own thread, with every connection task done.
                drop(runtime);
                let _ = done.send(());
            })?;
        inboxes.push(inbox);
        finished.push(done_rx);
    }
    tokio::pin!(shutdown);
    let mut next = 0;
    let mut backoff = AcceptBackoff::default();
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    backoff.reset();
                    if !shared.connections.make_room() {
                        // Best effort: the answer fits any socket buffer, and the caller is told why.
                        let _ = stream.try_write(&service_kit::connections::over_capacity_answer());
                        continue;
                    }
                    // Answers are small and written whole: Nagle's algorithm would only hold them back.
                    let _ = stream.set_nodelay(true);
                    // Deregistered here, registered again with the worker's own reactor.
                    match stream.into_std() {
                        Ok(stream) => {
                            let _ = inboxes[next].send((stream, peer));
                            next = (next + 1) % workers;
                        }
                        Err(e) => tracing::warn!(error = %e, "could not hand a connection over"),
                    }
                }
                Err(e) => backoff.wait(&e).await,
            },
        }
    }
    drop(listener);
    drop(inboxes);
    for done in finished {
        let _ = done.await;
    }
    Ok(())
}

/// Waiting after failed accepts: out of file descriptors, usually, which only time (connections
/// closing) cures. The wait doubles up to a second, and the log says so once per streak, not once
/// per attempt.
#[derive(Default)]
struct AcceptBackoff {
    failures: u32,
}

impl AcceptBackoff {
    fn reset(&mut self) {
        if self.failures > 0 {
            tracing::info!(failures = self.failures, "accepting connections again");
        }
        self.failures = 0;
    }

    async fn wait(&mut self, error: &std::io::Error) {
        if self.failures == 0 {
            tracing::warn!(%error, "accept failed; backing off");
        }
        self.failures += 1;
        let wait = Duration::from_millis(5 << self.failures.min(8)).min(Duration::from_secs(1));
        tokio::time::sleep(wait).await;
    }
}

/// One worker thread's state: the shared parts, its own upstream connections, and its cold
/// connections.
struct Worker {
    shared: Arc<Shared>,
    /// One pool per upstream, indexed by [`UpstreamId::index`].
    pools: [Arc<ConnectionPool>; 4],
    /// Cancelled when the worker stops: every connection of it closes.
    stop: CancellationToken,
    /// Connections idle for longer than [`COLD_AFTER`], without a task ([`Worker::cold_watch`]).
    cold: Mutex<ColdTable>,
    /// Spawns the worker's connection tasks, and waits for them at shutdown.
    tracker: tokio_util::task::TaskTracker,
}

impl Worker {
    /// A worker whose cold connections are watched by `poll` (see [`Worker::cold_watch`]).
    fn new(shared: Arc<Shared>, poll: &mio::Poll) -> std::io::Result<Self> {
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

    async fn run(
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
    fn connection(
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
    fn served(
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

    /// Moves a connection idle for [`COLD_AFTER`] into the cold table: its task ends, its socket
    /// leaves tokio's reactor for the worker's own poll, and its call timer is freed.
    fn go_cold(&self, io: Watched, registered: Registered, peer: SocketAddr) {
        let caller = io.caller;
        *caller.timer.lock().expect("timer lock") = crate::proxy::CallTimer::default();
        // The waker the task left to be told of a close holds the task's memory (512 bytes)
        // for as long as it is kept.
        drop(caller.close_waker.take());
        let Ok(stream) = io.stream.into_inner().into_std() else {
            return;
        };
        let deadline =
            tokio::time::Instant::now() + self.shared.idle_timeout.saturating_sub(COLD_AFTER);
        {
            let mut table = self.cold.lock().expect("cold table lock");
            let key = table.next_key;
            table.next_key = table.next_key.wrapping_add(1);
            let fd = stream.as_raw_fd();
            if let Err(e) = table.registry.register(
                &mut mio::unix::SourceFd(&fd),
                mio::Token(key),
                mio::Interest::READABLE,
            ) {
                tracing::debug!(%peer, error = %e, "could not watch a cold connection; closing it");
                return;
            }
            *caller.cold.lock().expect("cold socket lock") = Some(stream);
            table.entries.insert(
                key,
                ColdEntry {
                    registered,
                    caller: caller.clone(),
                    peer,
                    deadline,
                },
            );
        }
        // A close asked while the socket was on its way found none to shut down: shut it now, so
        // the cold watch wakes for it.
        if caller.closing.load(Ordering::SeqCst) {
            caller.shut_cold();
        }
    }

    /// Watches the worker's cold connections: one readiness wait over all of them (the worker's
    /// own `poll`), and one sweep for their idle timeouts, instead of a task, a reactor record and
    /// a timer each. A cold connection that gets bytes (or its caller's close, or a close to make
    /// room, which shuts its socket down) is served again by a new task.
    async fn cold_watch(self: Arc<Self>, poll: mio::Poll) {
        // `AsyncFd::new` is deprecated as unsound for a `T` whose descriptor can be closed under
        // it; a `mio::Poll` owns its epoll descriptor until it is dropped, which only the
        // `AsyncFd` can do. Its replacement is an `unsafe fn`, which this workspace forbids.
        #[allow(deprecated)]
        let poll = tokio::io::unix::AsyncFd::new(poll);
        let mut poll = match poll {
            Ok(poll) => poll,
            Err(e) => {
                tracing::error!(error = %e, "cannot watch cold connections");
                return;
            }
        };
        let mut events = mio::Events::with_capacity(256);
        let period = (self.shared.idle_timeout / 8).clamp(COLD_SWEEP_MIN, COLD_SWEEP_MAX);
        let mut sweep = tokio::time::interval(period);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = self.stop.cancelled() => break,
                ready = poll.readable_mut() => {
                    let Ok(mut ready) = ready else { break };
                    loop {
                        events.clear();
                        if ready.get_inner_mut().poll(&mut events, Some(Duration::ZERO)).is_err() {
                            break;
                        }
                        if events.is_empty() {
                            ready.clear_ready();
                            break;
                        }
                        for event in events.iter() {
                            self.warm(event.token().0);
                        }
                    }
                }
                _ = sweep.tick() => self.sweep_cold(),
            }
        }
        // The worker stops: every cold connection closes.
        let entries: Vec<ColdEntry> = {
            let mut table = self.cold.lock().expect("cold table lock");
            table.entries.drain().map(|(_, entry)| entry).collect()
        };
        for entry in entries {
            drop(entry.caller.cold.lock().expect("cold socket lock").take());
        }
    }

    /// A cold connection with something to read: served again by a new task, unless it was asked
    /// to close.
    fn warm(self: &Arc<Self>, key: usize) {
        let Some((entry, stream)) = self.take_cold(key) else {
            return;
        };
        if entry.caller.closing.load(Ordering::SeqCst) {
            return;
        }
        match TcpStream::from_std(stream) {
            Ok(stream) => {
                let io = Watched::new(ProblemIo::new(stream), entry.caller);
                self.tracker
                    .spawn(self.clone().served(io, entry.registered, entry.peer));
            }
            Err(e) => tracing::debug!(error = %e, "could not serve a cold connection again"),
        }
    }

    /// Takes a cold connection out of the table and the worker's poll, with its socket.
    fn take_cold(&self, key: usize) -> Option<(ColdEntry, std::net::TcpStream)> {
        let mut table = self.cold.lock().expect("cold table lock");
        let entry = table.entries.remove(&key)?;
        let stream = entry.caller.cold.lock().expect("cold socket lock").take()?;
        let _ = table
            .registry
            .deregister(&mut mio::unix::SourceFd(&stream.as_raw_fd()));
        Some((entry, stream))
    }

    /// Closes the cold connections past their idle timeout, or asked to close.
    fn sweep_cold(&self) {
        let now = tokio::time::Instant::now();
        let due: Vec<usize> = {
            let table = self.cold.lock().expect("cold table lock");
            table
                .entries
                .iter()
                .filter(|(_, e)| e.deadline <= now || e.caller.closing.load(Ordering::SeqCst))
                .map(|(key, _)| *key)
                .collect()
        };
        for key in due {
            // Dropped here, out of the table's lock: the registration's drop takes the cap's.
            drop(self.take_cold(key));
        }
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

    /// The answer to one request, as one future: the request moves into it once (each `async fn`
    /// layer would copy it, and the future it awaits, again).
    fn answer(
        self: Arc<Self>,
        request: hyper::Request<Incoming>,
        peer: SocketAddr,
        peer_ip: Option<HeaderValue>,
        busy: Busy,
    ) -> impl Future<Output = Result<Response<Answered>, Infallible>> + Send + 'static {
        let answering = Answering::start(&busy.0);
        let mut request = request.map(|body| {
            if body.is_end_stream() {
                Body::new(body)
            } else {
                Body::new(Reading::start(body, &busy.0))
            }
        });
        let path = request.uri().path();
        let route = match check_path(path) {
            Ok(()) => classify(request.method(), path),
            Err(rule) => Classified::Refused(rule),
        };
        // The gateway's counts are every namespace's calls together: a tenant's token must not read
        // them, so the page needs metrics:read on a cluster-wide token (issue 30).
        let own_metrics = path == METRICS_PATH;
        async move {
            let response = match route {
                Classified::NotProxied if own_metrics => {
                    let admitted = {
                        let mut memory = busy.0.token.lock().expect("token memory lock");
                        self.shared.gateway.admit(
                            &request,
                            (Scope::MetricsRead, METRICS_PATH),
                            peer.ip(),
                            &mut memory,
                        )
                    };
                    match admitted {
                        Ok((_identity, _in_flight)) => {
                            request.extensions_mut().insert(ConnectInfo(peer));
                            match self.shared.router.clone().oneshot(request).await {
                                Ok(response) => response,
                                Err(never) => match never {},
                            }
                        }
                        Err(refusal) => {
                            self.shared
                                .stack
                                .handle(request, METRICS_PATH, |_| async move {
                                    refusal.into_response()
                                })
                                .await
                        }
                    }
                }
                Classified::NotProxied => {
                    request.extensions_mut().insert(ConnectInfo(peer));
                    match self.shared.router.clone().oneshot(request).await {
                        Ok(response) => response,
                        Err(never) => match never {},
                    }
                }
                Classified::Refused(rule) => {
                    self.shared
                        .stack
                        .handle(request, "unmatched", |_| async move {
                            ApiError::from_code(Code::InvalidArgument, rule).into_response()
                        })
                        .await
                }
                Classified::MethodNotAllowed { template, allow } => {
                    self.shared
                        .stack
                        .handle(request, template, |_| async move {
                            let mut refusal = ApiError::from_code(
                                Code::InvalidArgument,
                                format!("{template} takes only {allow}"),
                            )
                            .with_http_status(StatusCode::METHOD_NOT_ALLOWED)
                            .into_response();
                            refusal
                                .headers_mut()
                                .insert(header::ALLOW, HeaderValue::from_static(allow));
                            refusal
                        })
                        .await
                }
                Classified::Route(route) => {
                    let gateway = &self.shared.gateway;
                    let caller = &busy.0;
                    let pool = &self.pools[route.upstream.index()];
                    let stopping = self.stop.clone();
                    self.shared
                        .stack
                        .handle(request, route.template, |mut request| async move {
                            let admitted = {
                                let mut memory = caller.token.lock().expect("token memory lock");
                                gateway.admit(
                                    &request,
                                    (route.scope, route.template),
                                    peer.ip(),
                                    &mut memory,
                                )
                            };
                            // Held until the upstream has answered: a call counts against its
                            // token's calls in flight while its body is being sent; a watch's
                            // for as long as its answer streams.
                            let watching = request
                                .uri()
                                .query()
                                .is_some_and(|q| q.split('&').any(|p| p == "watch=true"));
                            let in_flight = match admitted {
                                Ok((identity, in_flight)) => {
                                    request.extensions_mut().insert(identity);
                                    in_flight
                                }
                                Err(refusal) => return refusal.into_response(),
                            };
                            // The connection's timer is taken for the call and put back after
                            // it; its calls come one at a time, so nobody waits for it.
                            let mut timer =
                                std::mem::take(&mut *caller.timer.lock().expect("timer lock"));
                            let forwarded = gateway
                                .forwarder
                                .forward(
                                    gateway.upstream(route.upstream),
                                    pool,
                                    request,
                                    peer_ip,
                                    &mut timer,
                                )
                                .await;
                            *caller.timer.lock().expect("timer lock") = timer;
                            match forwarded {
                                Ok(response) if watching => crate::limits::streamed_until_stopping(
                                    response, in_flight, stopping,
                                ),
                                Ok(response) => response,
                                Err(e) => e.into_response(),
                            }
                        })
                        .await
                }
            };
            drop(busy);
            Ok(response.map(|body| Answered { body, answering }))
        }
    }
}

/// What the engine keeps per caller connection: what shows it is alive (its [`Activity`]), and the
/// token it last presented. Written only by the connection's own task, so never contended; locks
/// only because the task must be `Send`.
#[derive(Default)]
struct CallerState {
    activity: Activity,
    /// Answers hyper has not finished writing ([`Answered`]).
    answering: AtomicU32,
    /// Request bodies not read to their end ([`Reading`]); one dropped unfinished stays counted,
    /// since hyper may still be draining it.
    reading: AtomicU32,
    /// Bytes were read since the last request head was complete: hyper may hold part of a head.
    heard: AtomicBool,
    /// A connection's calls nearly always carry the same token: remembering it spares hashing it
    /// on every call ([`crate::auth::TokenStore::authenticate_remembering`]).
    token: std::sync::Mutex<Option<crate::auth::Remembered>>,
    /// The timer bounding its calls' upstream time ([`crate::proxy::CallTimer`]).
    timer: std::sync::Mutex<crate::proxy::CallTimer>,
    /// Asked to close, to make room under the cap ([`Closer::close`]); with the task to wake.
    closing: AtomicBool,
    close_waker: futures::task::AtomicWaker,
    /// Its socket while it is cold ([`Worker::go_cold`]): here, so a close can shut it down.
    cold: std::sync::Mutex<Option<std::net::TcpStream>>,
}

impl CallerState {
    /// Whether the connection was asked to close; if not, `cx` is woken when it is.
    fn asked_to_close(&self, cx: &mut Context<'_>) -> bool {
        self.close_waker.register(cx.waker());
        self.closing.load(Ordering::SeqCst)
    }

    /// Shuts a cold connection's socket down: its caller sees the close, and the worker's poll
    /// wakes for it, which drops it.
    fn shut_cold(&self) {
        if let Some(stream) = self.cold.lock().expect("cold socket lock").as_ref() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Closer for CallerState {
    fn activity(&self) -> &Activity {
        &self.activity
    }

    fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.close_waker.wake();
        self.shut_cold();
    }

    fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
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

/// A worker's cold connections, by their key in its poll.
struct ColdTable {
    registry: mio::Registry,
    entries: HashMap<usize, ColdEntry>,
    next_key: usize,
}

/// A cold connection: what it takes to serve it again. Its socket is in its caller state.
struct ColdEntry {
    registered: Registered,
    caller: Arc<CallerState>,
    peer: SocketAddr,
    /// When its idle timeout is up.
    deadline: tokio::time::Instant,
}

impl AsRef<Activity> for CallerState {
    fn as_ref(&self) -> &Activity {
        &self.activity
    }
}

type Busy = service_kit::connections::Busy<CallerState>;

/// An answer hyper is writing, counted in [`CallerState::answering`] until hyper drops its body.
struct Answering(Arc<CallerState>);

impl Answering {
    fn start(caller: &Arc<CallerState>) -> Self {
        caller.answering.fetch_add(1, Ordering::Relaxed);
        Answering(caller.clone())
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.answering.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An answer's body, with what counts it as being written.
struct Answered {
    body: Body,
    #[allow(dead_code)] // Held for its drop.
    answering: Answering,
}

impl hyper::body::Body for Answered {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// A request body being read, counted in [`CallerState::reading`] until its end is read.
struct Reading {
    body: Incoming,
    caller: Option<Arc<CallerState>>,
}

impl Reading {
    fn start(body: Incoming, caller: &Arc<CallerState>) -> Self {
        caller.reading.fetch_add(1, Ordering::Relaxed);
        Reading {
            body,
            caller: Some(caller.clone()),
        }
    }

    fn finished(&mut self) {
        if let Some(caller) = self.caller.take() {
            caller.reading.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl hyper::body::Body for Reading {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, hyper::Error>>> {
        let frame = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(frame, Poll::Ready(None)) || self.body.is_end_stream() {
            self.finished();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// The caller's connection as hyper sees it: it counts each write of answer bytes as progress (a
/// long answer read slowly is still alive), and it ends hyper's connection when the caller is idle
/// (see [`Watched::may_park`]) by reading as if the caller had closed, so the connection can be
/// parked without hyper's buffers.
struct Watched {
    stream: ProblemIo<TcpStream>,
    caller: Arc<CallerState>,
    /// Bytes were handed over since the last flush that completed: hyper may hold some unwritten.
    unflushed: bool,
    /// The end hyper saw was this one's, not the caller's: the socket goes on.
    parked: bool,
    /// hyper was woken once to read after its last answer (see `poll_flush`).
    nudged: bool,
    /// What an earlier hyper connection had read and not used, to be read first.
    unread: Bytes,
}

impl Watched {
    fn new(stream: ProblemIo<TcpStream>, caller: Arc<CallerState>) -> Self {
        Watched {
            stream,
            caller,
            unflushed: false,
            parked: false,
            nudged: false,
            unread: Bytes::new(),
        }
    }

    fn wrote(&self, written: &Poll<std::io::Result<usize>>) {
        if matches!(written, Poll::Ready(Ok(n)) if *n > 0) {
            self.caller.activity.progressed();
        }
    }

    /// Whether hyper may be ended here: every call answered, every answer written and flushed,
    /// every request body read, and no part of a head read since the last whole one. Then hyper is
    /// idle between requests, and an end read now closes it with nothing lost.
    fn may_park(&self) -> bool {
        let caller = &self.caller;
        !self.unflushed
            && caller.activity.is_idle()
            && caller.answering.load(Ordering::Relaxed) == 0
            && caller.reading.load(Ordering::Relaxed) == 0
            && !caller.heard.load(Ordering::Relaxed)
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if !this.unread.is_empty() {
            // Left over from the hyper connection before: part of a head, which must not be
            // parked again before the rest of it comes.
            let n = this.unread.len().min(buf.remaining());
            buf.put_slice(&this.unread.split_to(n));
            this.caller.heard.store(true, Ordering::Relaxed);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Pending if this.may_park() => {
                // Nothing filled: hyper takes it for the caller's close between requests.
                this.parked = true;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                this.nudged = false;
                // Bytes of a request body being read are not part of a head.
                if this.caller.reading.load(Ordering::Relaxed) == 0 {
                    this.caller.heard.store(true, Ordering::Relaxed);
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.unflushed = true;
        let written = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.wrote(&written);
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.unflushed = true;
        let written = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.wrote(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        // hyper flushes the socket only once its own buffer is written out.
        let flushed = Pin::new(&mut self.stream).poll_flush(cx);
        if matches!(flushed, Poll::Ready(Ok(()))) {
            self.unflushed = false;
            // hyper asked for the caller's next bytes before this answer was out, and will not
            // ask again until they come: have it ask now, once, so the idle connection is parked.
            if !self.nudged && self.may_park() {
                self.nudged = true;
                cx.waker().wake_by_ref();
            }
        }
        flushed
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.parked {
            // The caller did not close: the socket stays as it is.
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a parked connection costs is mostly its task's future, held for as long as the caller
    /// stays connected: it must not carry a served spell's state (hyper's connection, the service,
    /// the stall timer's interval, nested readiness futures, the `async fn`'s own copies of its
    /// arguments). With them it was more than twice the bound this test sets (the sizes before and
    /// after: BENCHMARKS.md, “Connection memory: …”).
    #[tokio::test]
    async fn a_parked_connections_task_holds_only_the_parked_state() {
        let dir = tempfile::tempdir().unwrap();
        let env = service_kit::Env::default().with(
            crate::env_vars::TOKENS_FILE,
            dir.path().join("tokens").to_str().unwrap(),
        );
        let config = crate::Config::from_env(&env).unwrap();
        let (gateway, router) = crate::assemble(&config).unwrap();
        let shared = Arc::new(Shared {
            gateway,
            router,
            stack: Stack::forwarding(crate::NAME, &config.http),
            idle_timeout: config.idle_timeout,
            connections: Connections::new(16),
            http1: caller_http1(),
        });
        let poll = mio::Poll::new().unwrap();
        let worker = Arc::new(Worker::new(shared, &poll).unwrap());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let caller = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (stream, peer) = listener.accept().await.unwrap();
        let task = worker.connection(stream, peer);
        let size = std::mem::size_of_val(&task);
        assert!(size <= 400, "a parked connection's future is {size} bytes");
        drop((task, caller));
    }
}
