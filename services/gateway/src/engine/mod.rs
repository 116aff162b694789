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
//!
//! # Layout, in the order a connection meets it
//! - this file: the [`engine`], its [`Settings`], and the acceptor that hands connections to the
//!   workers.
//! - `worker`: a [`Worker`] thread and the life of each connection it serves: parked, served in
//!   spells of hyper, handed to the cold table.
//! - `answer`: the answer to one request: routed, admitted, forwarded.
//! - `cold`: connections idle past [`COLD_AFTER`], watched by the worker's own epoll.
//! - `caller`: what the engine keeps and counts per caller connection.
//! - `watched`: the caller's socket as hyper sees it, which lets an idle connection park.
//!
//! [`Closer`]: service_kit::connections::Closer
//! [`Activity::stalled`]: service_kit::connections::Activity::stalled

mod answer;
mod caller;
mod cold;
mod watched;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use futures::future::BoxFuture;
use service_kit::connections::Connections;
use service_kit::middleware::Stack;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use crate::admission::Gateway;

use self::worker::Worker;

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

/// The largest request head a caller may send, in bytes (see [`MAX_CALLER_HEADERS`]).
const MAX_CALLER_HEAD: usize = 256 * 1024;

/// How the engine runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Worker threads (at least one).
    pub(crate) workers: usize,
    /// How long a caller's connection may go without progress while none of its calls is being
    /// answered (see [`Activity::stalled`]).
    ///
    /// [`Activity::stalled`]: service_kit::connections::Activity::stalled
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpStream;

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
