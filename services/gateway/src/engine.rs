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
//! Measured with `bench/gateway.sh`, moving from axum's server and hyper-util's pooled client on
//! tokio's multi-threaded runtime to this layout took the gateway from about 62% of nginx's
//! requests/s to about 95%, at the same upstream; the in-task upstream client
//! ([`crate::client`]), per-thread metrics, per-connection timers and token memory, and fat LTO
//! then took it to about 105%.
//!
//! A caller's connection that stalls (no request head completed and no answer written for the idle
//! timeout, with no call of it being answered) is closed: that covers idle keep-alive connections and
//! slow-loris heads alike, with one timer per connection instead of one per request ([`stalled`]).
//!
//! Shutdown: the acceptor stops, each worker asks its connections to finish (hyper's graceful
//! shutdown: answers in flight complete, idle keep-alive connections close), and the engine returns
//! once every worker has drained.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use service_kit::middleware::Stack;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tower::ServiceExt;

use crate::Gateway;
use crate::proxy::ConnectionPool;
use crate::routes::{UpstreamId, classify};

/// How the engine runs.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Worker threads (at least one).
    pub workers: usize,
    /// How long a caller's connection may go without progress while none of its calls is being
    /// answered (see [`stalled`]).
    pub idle_timeout: Duration,
}

/// What every worker shares.
struct Shared {
    gateway: Arc<Gateway>,
    /// The gateway's own routes, already wrapped in the stack.
    router: Router,
    /// The stack proxied calls run in.
    stack: Arc<Stack>,
    idle_timeout: Duration,
}

/// The engine for [`service_kit::server::Application::with_engine`].
pub fn engine(
    gateway: Arc<Gateway>,
    stack: Arc<Stack>,
    settings: Settings,
) -> service_kit::server::Engine {
    Box::new(move |router, listener, shutdown| {
        let shared = Arc::new(Shared {
            gateway,
            router,
            stack,
            idle_timeout: settings.idle_timeout,
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
        let worker = Worker {
            shared: shared.clone(),
            pools: UpstreamId::ALL.map(|_| ConnectionPool::new()),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name(format!("gateway-worker-{index}"))
            .spawn(move || {
                runtime.block_on(Arc::new(worker).run(connections));
                // The runtime is dropped here, on its own thread, with every connection task done.
                drop(runtime);
                let _ = done.send(());
            })?;
        inboxes.push(inbox);
        finished.push(done_rx);
    }
    tokio::pin!(shutdown);
    let mut next = 0;
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
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
                Err(e) => {
                    // Out of file descriptors, usually: wait a moment rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
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

/// One worker thread's state: the shared parts, and its own upstream connections.
struct Worker {
    shared: Arc<Shared>,
    /// One pool per upstream, indexed by [`UpstreamId::index`].
    pools: [Arc<ConnectionPool>; 3],
}

impl Worker {
    async fn run(
        self: Arc<Self>,
        mut connections: mpsc::UnboundedReceiver<(std::net::TcpStream, SocketAddr)>,
    ) {
        let tracker = tokio_util::task::TaskTracker::new();
        let stop = Arc::new(Stop::default());
        // Ends when the acceptor drops its sender, at shutdown.
        while let Some((stream, peer)) = connections.recv().await {
            match TcpStream::from_std(stream) {
                Ok(stream) => {
                    tracker.spawn(self.clone().connection(stream, peer, stop.clone()));
                }
                Err(e) => tracing::warn!(error = %e, "could not take a connection over"),
            }
        }
        stop.trigger();
        tracker.close();
        tracker.wait().await;
    }

    async fn connection(self: Arc<Self>, stream: TcpStream, peer: SocketAddr, stop: Arc<Stop>) {
        // The caller's address as `x-forwarded-for` wants it, made once per connection.
        let peer_ip = HeaderValue::from_str(&peer.ip().to_string()).ok();
        let caller = Arc::new(CallerState::default());
        let idle_timeout = self.shared.idle_timeout;
        let service = {
            let caller = caller.clone();
            service_fn(move |request: hyper::Request<Incoming>| {
                self.clone()
                    .answer(request, peer, peer_ip.clone(), Busy::enter(&caller))
            })
        };
        let io = Watched {
            stream,
            caller: caller.clone(),
        };
        let connection = hyper::server::conn::http1::Builder::new()
            // Answers here are mostly small: one buffer (head and body copied together) costs less
            // than a vectored write of two, as measured with bench/gateway.sh.
            .writev(false)
            .serve_connection(TokioIo::new(io), service);
        tokio::pin!(connection);
        tokio::select! {
            // In this order, without drawing a random one on every wake.
            biased;
            _ = connection.as_mut() => return,
            () = stalled(&caller, idle_timeout) => {
                tracing::debug!(%peer, "closing a stalled connection");
                return;
            }
            () = stop.stopped() => connection.as_mut().graceful_shutdown(),
        }
        // Answers in flight finish; a connection that stalls (an answer nobody reads) must not hold
        // the shutdown up.
        tokio::select! {
            biased;
            _ = connection.as_mut() => {}
            () = stalled(&caller, idle_timeout) => {}
        }
    }

    /// The answer to one request, as one future: the request moves into it once (each `async fn`
    /// layer would copy it, and the future it awaits, again).
    fn answer(
        self: Arc<Self>,
        request: hyper::Request<Incoming>,
        peer: SocketAddr,
        peer_ip: Option<HeaderValue>,
        busy: Busy,
    ) -> impl Future<Output = Result<Response, Infallible>> + Send + 'static {
        let mut request = request.map(Body::new);
        let route = classify(request.method(), request.uri().path());
        async move {
            let response = match route {
                None => {
                    request.extensions_mut().insert(ConnectInfo(peer));
                    match self.shared.router.clone().oneshot(request).await {
                        Ok(response) => response,
                        Err(never) => match never {},
                    }
                }
                Some(route) => {
                    let gateway = &self.shared.gateway;
                    let caller = &busy.0;
                    let pool = &self.pools[route.upstream.index()];
                    self.shared
                        .stack
                        .handle(request, route.template, |request| async move {
                            let admitted = {
                                let mut memory = caller.token.lock().expect("token memory lock");
                                crate::admit(gateway, &request, route, &mut memory)
                            };
                            if let Err(refusal) = admitted {
                                return refusal.into_response();
                            }
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
                                Ok(response) => response,
                                Err(e) => e.into_response(),
                            }
                        })
                        .await
                }
            };
            drop(busy);
            Ok(response)
        }
    }
}

/// What the engine keeps per caller connection: what shows it is alive (request heads received and
/// answer bytes written, and how many of its calls are being answered), and the token it last
/// presented. Written only by the connection's own task, so never contended; atomics and a lock
/// only because the task must be `Send`.
#[derive(Default)]
struct CallerState {
    progress: AtomicU64,
    busy: AtomicU64,
    /// A connection's calls nearly always carry the same token: remembering it spares hashing it
    /// on every call ([`crate::auth::TokenStore::authenticate_remembering`]).
    token: std::sync::Mutex<Option<crate::auth::Remembered>>,
    /// The timer bounding its calls' upstream time ([`crate::proxy::CallTimer`]).
    timer: std::sync::Mutex<crate::proxy::CallTimer>,
}

/// One call being answered; counts as progress when it starts and when it ends.
struct Busy(Arc<CallerState>);

impl Busy {
    fn enter(caller: &Arc<CallerState>) -> Self {
        caller.progress.fetch_add(1, Ordering::Relaxed);
        caller.busy.fetch_add(1, Ordering::Relaxed);
        Busy(caller.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.progress.fetch_add(1, Ordering::Relaxed);
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Resolves once the connection has made no progress for a whole `period` while none of its calls
/// was being answered: a caller that went quiet, or one sending a request head too slowly to finish
/// (slow loris). Such a connection is closed between `period` and twice that after it stalled.
///
/// This replaces hyper's header-read timeout, which arms a timer of its own for every request (an
/// allocation, and an entry added to and removed from the runtime's timer wheel); here one timer per
/// connection fires once a period.
async fn stalled(caller: &CallerState, period: Duration) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen = caller.progress.load(Ordering::Relaxed);
    loop {
        ticks.tick().await;
        let now = caller.progress.load(Ordering::Relaxed);
        if now == seen && caller.busy.load(Ordering::Relaxed) == 0 {
            return;
        }
        seen = now;
    }
}

/// The caller's connection, counting each write of answer bytes as progress: a long answer read
/// slowly is still alive.
struct Watched {
    stream: TcpStream,
    caller: Arc<CallerState>,
}

impl Watched {
    fn wrote(&self, written: &Poll<std::io::Result<usize>>) {
        if matches!(written, Poll::Ready(Ok(n)) if *n > 0) {
            self.caller.progress.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.wrote(&written);
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.wrote(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// One worker's shutdown signal to its connections. Each connection's task polls it on every wake
/// (it is a branch of the connection's `select!`), so a poll is one atomic load, and a lock only
/// when the task's waker changes. A `watch` channel shared by every worker took a lock shared by
/// every worker on each of those polls.
#[derive(Default)]
struct Stop {
    stopped: std::sync::atomic::AtomicBool,
    /// The wakers of the connections waiting for it, by id.
    waiting: std::sync::Mutex<(u64, std::collections::HashMap<u64, std::task::Waker>)>,
}

impl Stop {
    /// Tells every connection to finish.
    fn trigger(&self) {
        self.stopped.store(true, Ordering::Release);
        let waiting = std::mem::take(&mut self.waiting.lock().expect("stop lock").1);
        for waker in waiting.into_values() {
            waker.wake();
        }
    }

    /// Resolves once the worker stops.
    fn stopped(&self) -> Stopped<'_> {
        Stopped {
            stop: self,
            registered: None,
        }
    }
}

/// [`Stop::stopped`]'s future.
struct Stopped<'a> {
    stop: &'a Stop,
    /// Its id and the waker it left, once it has waited.
    registered: Option<(u64, std::task::Waker)>,
}

impl Future for Stopped<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.stop.stopped.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        if self
            .registered
            .as_ref()
            .is_some_and(|(_, waker)| waker.will_wake(cx.waker()))
        {
            return Poll::Pending;
        }
        let mut waiting = self.stop.waiting.lock().expect("stop lock");
        let id = match &self.registered {
            Some((id, _)) => *id,
            None => {
                waiting.0 += 1;
                waiting.0
            }
        };
        waiting.1.insert(id, cx.waker().clone());
        drop(waiting);
        self.registered = Some((id, cx.waker().clone()));
        // A trigger between the first check and the registration has found nothing to wake.
        if self.stop.stopped.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        if let Some((id, _)) = &self.registered {
            self.stop.waiting.lock().expect("stop lock").1.remove(id);
        }
    }
}
