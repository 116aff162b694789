//! Serving a router until shutdown, and the `healthcheck` probe binaries run in `FROM scratch` images.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use futures::future::BoxFuture;
use tokio::net::TcpListener;

/// Serves `router` on `listener` until `shutdown` completes, then lets in-flight requests finish.
pub async fn serve(
    router: Router,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    // hyper's own answers to requests it cannot parse come out as problem+json too. Answers are small
    // and written whole: Nagle's algorithm would only hold them back.
    let listener = crate::protocol::ProblemListener(listener).tap_io(|io| {
        let _ = io.get_ref().set_nodelay(true);
    });
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
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
    let url = format!("http://{addr}/healthz");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build();
    match client {
        Ok(c) => matches!(c.get(url).send().await, Ok(r) if r.status().is_success()),
        Err(_) => false,
    }
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
    /// Work that runs beside the server (reconcilers, refreshers); aborted when serving ends.
    pub background: Vec<tokio::task::JoinHandle<()>>,
    /// Serves in place of [`serve`] when set.
    pub engine: Option<Engine>,
}

impl Application {
    /// An application with no background work.
    pub fn new(router: Router, listener: TcpListener) -> Self {
        Application {
            router,
            listener,
            background: Vec::new(),
            engine: None,
        }
    }

    /// The same application, served by `engine` instead of axum's server.
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
            None => serve(self.router, self.listener, shutdown).await,
        };
        for task in self.background {
            task.abort();
        }
        result
    }
}

/// The whole `main` of a service binary: `healthcheck` subcommand, telemetry, build, serve until
/// SIGINT/SIGTERM. `build` gets the process's `BERTH_*` variables.
pub async fn run_binary<F, Fut>(
    name: &'static str,
    default_port: u16,
    build: F,
) -> std::process::ExitCode
where
    F: FnOnce(crate::Env) -> Fut,
    Fut: Future<Output = Result<Application, Box<dyn std::error::Error + Send + Sync>>>,
{
    use std::process::ExitCode;
    let env = crate::Env::from_process();
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
        return if healthcheck(probe).await {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let _telemetry = match crate::telemetry::init(name, &env) {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("{name}: telemetry setup failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let app = match build(env).await {
        Ok(app) => app,
        Err(e) => {
            tracing::error!(error = %e, "{name} failed to start");
            eprintln!("{name}: {e}");
            return ExitCode::FAILURE;
        }
    };
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
