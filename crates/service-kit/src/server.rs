//! Serving a router until shutdown, and the `healthcheck` probe binaries run in `FROM scratch` images.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use futures::future::BoxFuture;
use tokio::net::TcpListener;

/// How long a connection may take to send a request head, idle keep-alive time included, unless
/// `BERTH_IDLE_TIMEOUT` says otherwise (hyper's own default, once it has a timer to keep it).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `router` on `listener` until `shutdown` completes, then lets in-flight requests finish;
/// [`serve_with`] the [`DEFAULT_IDLE_TIMEOUT`].
pub async fn serve(
    router: Router,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(router, listener, shutdown, DEFAULT_IDLE_TIMEOUT).await
}

/// How [`serve_limited`] bounds its connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How long a connection may take to send a request head, idle keep-alive time included.
    pub idle_timeout: Duration,
    /// Connections held at once (`BERTH_MAX_CONNECTIONS`); `None` for
    /// [`crate::connections::default_cap`] with the whole file limit.
    pub max_connections: Option<usize>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: None,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then lets in-flight requests finish;
/// [`serve_limited`] with `idle_timeout` and the default connection cap.
pub async fn serve_with(
    router: Router,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    idle_timeout: Duration,
) -> std::io::Result<()> {
    let limits = Limits {
        idle_timeout,
        max_connections: None,
    };
    serve_limited(router, listener, shutdown, limits).await
}

/// Serves `router` on `listener` until `shutdown` completes, then lets in-flight requests finish.
///
/// HTTP/1.1 on hyper's connection builder rather than `axum::serve`, for what axum does not give:
/// - a connection that has not sent a whole request head within `idle_timeout` (idle between
///   requests included) is closed. Without it a slow-loris caller holds a connection, and a file
///   descriptor, for as long as it trickles bytes (the hostile-input suite held 64 per service open);
/// - connections are capped ([`crate::connections`]): over the cap the oldest idle one is closed to
///   make room, or with none idle the new one is answered 503, so one listener cannot take every
///   descriptor of a process it shares (`berth up`);
/// - a request refused before its body was read (413) is answered so that a caller still sending
///   the body reads it ([`crate::protocol::ProblemIo`]'s lingering close).
pub async fn serve_limited(
    router: Router,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: Limits,
) -> std::io::Result<()> {
    use crate::connections::{Activity, Busy, Connections, TokenCloser};
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower::ServiceExt as _;

    let idle_timeout = limits.idle_timeout;
    let cap = limits
        .max_connections
        .unwrap_or_else(|| crate::connections::default_cap(1.0, 1));
    tracing::debug!(cap, "connection cap");
    let capped = Connections::new(cap);
    let stopping = tokio_util::sync::CancellationToken::new();
    let connections = tokio_util::task::TaskTracker::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut accept_failures = 0u32;
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    accept_failures = 0;
                    accepted
                }
                Err(e) => {
                    // Out of descriptors or memory: wait for connections to end rather than spin,
                    // longer each time, and say so once per streak.
                    if accept_failures == 0 {
                        tracing::warn!(error = %e, "cannot accept connections; backing off");
                    }
                    accept_failures = accept_failures.saturating_add(1);
                    let pause = Duration::from_millis(10 << accept_failures.min(7));
                    tokio::time::sleep(pause).await;
                    continue;
                }
            },
        };
        if !capped.make_room() {
            // Best effort: the answer fits any socket buffer, and the caller is told why.
            let _ = stream.try_write(&crate::connections::over_capacity_answer());
            continue;
        }
        let closing = stopping.child_token();
        let state = std::sync::Arc::new(TokenCloser {
            activity: Activity::default(),
            closing: closing.clone(),
        });
        let registered = capped.register(state.clone());
        // Answers are small and written whole: Nagle's algorithm would only hold them back.
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let activity = state.clone();
        let closing_for_calls = closing.clone();
        connections.spawn(async move {
            let _registered = registered;
            let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                // A watch ends when the server starts to drain, rather than holding the drain.
                request
                    .extensions_mut()
                    .insert(crate::watch::Draining(closing_for_calls.clone()));
                let busy = Busy::enter(&activity);
                let answer = router.clone().oneshot(request);
                async move {
                    // A call is being answered until its body is sent whole: a drain must not cut
                    // a streaming answer (a watch) as if the connection were idle; the answer
                    // ends itself when the server drains ([`crate::watch::Draining`]).
                    answer.await.map(|response| {
                        response.map(|body| {
                            use http_body_util::BodyExt as _;
                            axum::body::Body::new(body.map_frame(move |frame| {
                                let _answering = &busy;
                                frame
                            }))
                        })
                    })
                }
            });
            // hyper's own answers to requests it cannot parse come out as problem+json too.
            let io = TokioIo::new(crate::protocol::ProblemIo::new(stream));
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(idle_timeout)
                .serve_connection(io, service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = closing.cancelled() => {
                    // With no call being answered (idle, or part-way through a head) it closes
                    // now: a graceful close would wait up to the idle timeout for a slow head,
                    // holding the descriptor the cap asked back. Calls being answered finish.
                    if state.activity.is_idle() {
                        return;
                    }
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    stopping.cancel();
    connections.close();
    connections.wait().await;
    Ok(())
}

/// `BERTH_MAX_CONNECTIONS`: `None` (the default from the file limit) when unset or 0.
pub fn max_connections(env: &crate::Env) -> Result<Option<usize>, crate::config::ConfigError> {
    Ok(Some(env.parse_or(crate::config::vars::MAX_CONNECTIONS, 0usize)?).filter(|&n| n > 0))
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("SIGINT received; draining"),
        _ = terminate => tracing::info!("SIGTERM received; draining"),
    }
}

/// Binds `addr`, saying which variable to change when the port is taken.
pub async fn bind(addr: SocketAddr, var: &str) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot listen on {addr} ({e}); set {var} to another address"),
        )
    })
}

/// The container health probe: GETs `http://<addr>/healthz` and says whether it answered 200. Images
/// are `FROM scratch`, with no curl, so every binary carries this as a `healthcheck` subcommand.
pub async fn healthcheck(addr: SocketAddr) -> bool {
    probe(addr).await.is_ok()
}

/// Why the health probe failed, in words for the operator who ran `healthcheck`.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The service answered, but not 200.
    #[error("{url} answered {status}")]
    Answered {
        /// The URL probed.
        url: String,
        /// What it answered.
        status: reqwest::StatusCode,
    },
    /// The service did not answer in time.
    #[error("{url} did not answer within 3s")]
    Timeout {
        /// The URL probed.
        url: String,
    },
    /// Nothing listens there.
    #[error(
        "nothing answers at {addr} (is the service running, and is BERTH_LISTEN the same here?)"
    )]
    Unreachable {
        /// The address probed.
        addr: SocketAddr,
    },
    /// Any other transport failure.
    #[error("{url} failed: {source}")]
    Failed {
        /// The URL probed.
        url: String,
        /// What reqwest said.
        source: reqwest::Error,
    },
}

/// [`healthcheck`], saying what went wrong when it fails.
pub async fn probe(addr: SocketAddr) -> Result<(), ProbeError> {
    let url = format!("http://{addr}/healthz");
    // The one way to build an outbound client (crate `client`): for a plain http:// URL it loads no
    // certificate store, which a FROM-scratch image running its own healthcheck does not have.
    let client = client::pooled_http_client_for(&url, Duration::from_secs(3));
    match client.get(&url).send().await {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(ProbeError::Answered {
            url,
            status: r.status(),
        }),
        Err(e) if e.is_timeout() => Err(ProbeError::Timeout { url }),
        Err(e) if e.is_connect() => Err(ProbeError::Unreachable { addr }),
        Err(source) => Err(ProbeError::Failed { url, source }),
    }
}

/// What a service binary does with its arguments.
enum Invocation {
    Serve,
    Healthcheck,
    Help,
    Version,
    Unknown(String),
}

fn invocation(mut args: impl Iterator<Item = String>) -> Invocation {
    let Some(first) = args.next() else {
        return Invocation::Serve;
    };
    let invocation = match first.as_str() {
        "healthcheck" => Invocation::Healthcheck,
        "-h" | "--help" | "help" => Invocation::Help,
        "-V" | "--version" | "version" => Invocation::Version,
        _ => return Invocation::Unknown(first),
    };
    match args.next() {
        Some(extra) => Invocation::Unknown(extra),
        None => invocation,
    }
}

fn usage(name: &str, default_port: u16) -> String {
    format!(
        "{name} {version}: one of Berth's services.

Usage:
  {name}               serve until SIGINT or SIGTERM (then drain in-flight requests and exit 0)
  {name} healthcheck   probe a running {name}'s /healthz; exit 0 if it answers 200, else say why and exit 1
  {name} --help        print this
  {name} --version     print the version

Settings come from environment variables; docs/configuration.md lists every one. Those of
every service:
  BERTH_LISTEN            where to listen (default 127.0.0.1:{default_port})
  BERTH_DATA_DIR          where state lives (default ./berth-data)
  BERTH_INTERNAL_TOKEN    the credential the gateway sends; when set, calls without it are refused
  BERTH_INTERNAL_TOKEN_FILE  a file holding it instead (created with a random one when missing)
  BERTH_REQUEST_TIMEOUT   per-request limit (default 30s)
  BERTH_MAX_CONNECTIONS   connections held at once (default from the file limit; oldest idle closed first)
  BERTH_BODY_LIMIT        largest request body (default 1Mi)
  BERTH_LOG               log filter (default info); BERTH_LOG_FORMAT=json for JSON lines
A BERTH_* variable {name} does not read, or one set to the empty string, stops it with exit code 2
(Berth's tools' own, like BERTH_URL and BERTH_REQUIRE_*, aside).
",
        version = env!("CARGO_PKG_VERSION"),
    )
}

/// A server other than [`serve`]: given the router, the listener and the shutdown signal, it serves
/// until the signal, drains, and returns. The gateway's proxy engine is one.
pub type Engine = Box<
    dyn FnOnce(
            Router,
            TcpListener,
            BoxFuture<'static, ()>,
        ) -> BoxFuture<'static, std::io::Result<()>>
        + Send,
>;

/// A service ready to run: its router and the listener it is bound to, plus background tasks that
/// stop with it. Building binds the listener, so a test can build on port 0 and read the port.
pub struct Application {
    /// The finished router.
    pub router: Router,
    /// The bound listener.
    pub listener: TcpListener,
    /// Work that runs beside the server (reconcilers, refreshers); aborted when serving ends, or
    /// when the application is dropped unserved.
    pub background: Background,
    /// Serves in place of [`serve`] when set.
    pub engine: Option<Engine>,
    /// How long [`serve`] lets a connection take to send a request head (`BERTH_IDLE_TIMEOUT`).
    pub idle_timeout: Duration,
    /// Connections [`serve_limited`] holds at once (`BERTH_MAX_CONNECTIONS`); `None` for the
    /// default from the file limit.
    pub max_connections: Option<usize>,
}

impl Application {
    /// An application with no background work.
    pub fn new(router: Router, listener: TcpListener) -> Self {
        Application {
            router,
            listener,
            background: Background::default(),
            engine: None,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: None,
        }
    }

    /// The same application, served by `engine` instead of [`serve_with`].
    pub fn with_engine(mut self, engine: Engine) -> Self {
        self.engine = Some(engine);
        self
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves until `shutdown`, drains, then stops the background work.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let result = match self.engine {
            Some(engine) => engine(self.router, self.listener, Box::pin(shutdown)).await,
            None => {
                let limits = Limits {
                    idle_timeout: self.idle_timeout,
                    max_connections: self.max_connections,
                };
                serve_limited(self.router, self.listener, shutdown, limits).await
            }
        };
        drop(self.background);
        result
    }
}

/// Tasks that run beside a server and end with it: each is aborted when this is dropped. (A
/// `JoinHandle` dropped only detaches its task, which would then keep what it holds, such as a
/// store whose writer must end before the database is opened again.)
#[derive(Debug, Default)]
pub struct Background(Vec<tokio::task::JoinHandle<()>>);

impl Background {
    /// Adds a task.
    pub fn push(&mut self, task: tokio::task::JoinHandle<()>) {
        self.0.push(task);
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// The whole `main` of a service binary: `healthcheck` subcommand, the check of the variables'
/// names, telemetry, build, serve until SIGINT/SIGTERM. `reads` are the variables the service reads
/// besides the kit's [`vars::EVERY_SERVICE`](crate::config::vars::EVERY_SERVICE) (its `VARS`,
/// other programs' like `DOCKER_HOST` included) and `renamed` the names it retires (its `RENAMED`):
/// any other `BERTH_*` variable stops it with exit code 2 ([`crate::config::check_names`]), and
/// `build` gets the variables with the renames applied.
pub async fn run_binary<F, Fut>(
    name: &'static str,
    default_port: u16,
    reads: &[&str],
    renamed: &[crate::config::Renamed],
    build: F,
) -> std::process::ExitCode
where
    F: FnOnce(crate::Env) -> Fut,
    Fut: Future<Output = Result<Application, Box<dyn std::error::Error + Send + Sync>>>,
{
    use std::process::ExitCode;
    crate::memory::limit_footprint();
    let reads: Vec<&str> = crate::config::vars::EVERY_SERVICE
        .iter()
        .chain(reads)
        .copied()
        .collect();
    let env = crate::Env::from_process(&reads);
    match invocation(std::env::args().skip(1)) {
        Invocation::Serve | Invocation::Healthcheck => {}
        Invocation::Help => {
            print!("{}", usage(name, default_port));
            return ExitCode::SUCCESS;
        }
        Invocation::Version => {
            println!("{name} {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Invocation::Unknown(argument) => {
            eprintln!("{name}: unknown argument {argument:?}; `{name} --help` says what it takes");
            return ExitCode::from(2);
        }
    }
    match crate::config::check_names(&env, &reads, renamed) {
        Ok(warnings) => warnings
            .iter()
            .for_each(|w| eprintln!("{name}: warning: {w}")),
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::from(2);
        }
    }
    if std::env::args().nth(1).as_deref() == Some("healthcheck") {
        let addr = match crate::config::listen_addr(&env, default_port) {
            Ok(a) => a,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        };
        // A wildcard listen address is probed on loopback.
        let probe = if addr.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], addr.port()))
        } else {
            addr
        };
        return match self::probe(probe).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(why) => {
                eprintln!("{name} healthcheck: {why}");
                ExitCode::FAILURE
            }
        };
    }
    let env = match crate::config::resolve_internal_token_file(env) {
        Ok(env) => env,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let _telemetry = match crate::telemetry::init_or_exit(name, name, &env) {
        Ok(guard) => guard,
        Err(code) => return code,
    };
    let env = match env.migrate(renamed) {
        Ok(env) => env,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::from(2);
        }
    };
    let idle_timeout =
        match env.duration_or(crate::config::vars::IDLE_TIMEOUT, DEFAULT_IDLE_TIMEOUT) {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => {
                eprintln!(
                    "{name}: {} must be more than 0",
                    crate::config::vars::IDLE_TIMEOUT
                );
                return ExitCode::from(2);
            }
            Err(e) => {
                eprintln!("{name}: {e}");
                return ExitCode::from(2);
            }
        };
    let max_connections = match max_connections(&env) {
        Ok(cap) => cap,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut app = match build(env).await {
        Ok(app) => app,
        // A value the configuration refuses is a mistake in how the binary was started, as an
        // unknown name is: the same exit code, 2.
        Err(e) if e.is::<crate::config::ConfigError>() => {
            eprintln!("{name}: {e}");
            return ExitCode::from(2);
        }
        Err(e) => {
            tracing::error!(error = %e, "{name} failed to start");
            eprintln!("{name}: {e}");
            return ExitCode::FAILURE;
        }
    };
    app.idle_timeout = idle_timeout;
    app.max_connections = max_connections;
    tracing::info!(addr = %app.local_addr(), "{name} listening");
    match app.run_until(shutdown_signal()).await {
        Ok(()) => {
            tracing::info!("{name} stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = %e, "{name} failed");
            ExitCode::FAILURE
        }
    }
}
