//! Serving a router until shutdown, and the `healthcheck` probe binaries run in `FROM scratch` images.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;

/// Serves `router` on `listener` until `shutdown` completes, then lets in-flight requests finish.
pub async fn serve(
    router: Router,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
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
