//! The harness the gateway's API tests share: stand-in upstreams that record what reaches them, and a
//! gateway in front of them with a tokens file.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request;
use axum::http::HeaderMap;
use axum::routing::any;
use gateway::auth::tokens_file_line;
use gateway::routes::Scope;
use service_kit::Env;
use service_kit::testing::{TestServer, spawn};

/// What a stand-in upstream saw: method, path and headers of every call.
pub type Seen = Arc<Mutex<Vec<(String, String, HeaderMap)>>>;

/// A stand-in upstream answering 200 `{"upstream": name}` to anything, or sleeping first when the
/// path says `slow`.
pub async fn upstream(name: &'static str) -> (TestServer, Seen) {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let router = axum::Router::new().fallback(any(move |request: Request| {
        let record = record.clone();
        async move {
            let path = request.uri().path().to_string();
            record.lock().unwrap().push((
                request.method().to_string(),
                path.clone(),
                request.headers().clone(),
            ));
            // Read the whole body, as a real service does, and report its size.
            let size = axum::body::to_bytes(request.into_body(), usize::MAX)
                .await
                .map(|b| b.len())
                .unwrap_or(0);
            if path.contains("slow") {
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
            if path.contains("pause") {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            axum::Json(serde_json::json!({"upstream": name, "received": size}))
        }
    }));
    (spawn(router).await, seen)
}

pub struct Harness {
    pub url: String,
    pub seen: [Seen; 4],
    pub upstreams: Vec<TestServer>,
    /// Starts the gateway's shutdown.
    pub stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// The gateway's serving, which ends once it has drained.
    pub served: tokio::task::JoinHandle<std::io::Result<()>>,
    pub dir: tempfile::TempDir,
}

pub const TOKENS: [(&str, &[Scope]); 5] = [
    (
        "reader",
        &[
            Scope::MachinesRead,
            Scope::VolumesRead,
            Scope::OrchestratorsRead,
        ],
    ),
    (
        "writer",
        &[
            Scope::MachinesWrite,
            Scope::VolumesWrite,
            Scope::OrchestratorsWrite,
        ],
    ),
    ("root", &[Scope::Admin]),
    ("volumes-only", &[Scope::VolumesRead]),
    ("scraper", &[Scope::MetricsRead]),
];

pub async fn spawn_gateway(extra: &[(&str, &str)]) -> Harness {
    spawn_gateway_with(extra, &[], None).await
}

/// A gateway with `extra` settings, the tokens of [`TOKENS`] plus `more_tokens` lines, and
/// storage-ops' URL replaced by `storage_ops` when given.
pub async fn spawn_gateway_with(
    extra: &[(&str, &str)],
    more_tokens: &[String],
    storage_ops: Option<String>,
) -> Harness {
    let (md, md_seen) = upstream("machine-driver").await;
    let (reg, reg_seen) = upstream("orchestrator-registry").await;
    let (so, so_seen) = upstream("storage-ops").await;
    let (mc, mc_seen) = upstream("machine-controller").await;
    let dir = tempfile::tempdir().unwrap();
    let mut tokens: Vec<String> = TOKENS
        .iter()
        .map(|(name, scopes)| tokens_file_line(name, &format!("tok-{name}"), scopes))
        .collect();
    tokens.extend_from_slice(more_tokens);
    std::fs::write(dir.path().join("tokens"), tokens.join("\n")).unwrap();
    let mut env = Env::default()
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with("BERTH_DATA_DIR", dir.path().display().to_string())
        .with("BERTH_INTERNAL_TOKEN", "internal-cred")
        .with("BERTH_MACHINE_DRIVER_URL", md.url.clone())
        .with("BERTH_REGISTRY_URL", reg.url.clone())
        .with(
            "BERTH_STORAGE_OPS_URL",
            storage_ops.unwrap_or_else(|| so.url.clone()),
        )
        .with("BERTH_MACHINE_CONTROLLER_URL", mc.url.clone())
        .with("BERTH_UPSTREAM_TIMEOUT", "300ms")
        .with("BERTH_MACHINE_DRIVER_TIMEOUT", "300ms")
        .with("BERTH_RATE_LIMIT_RPS", "0")
        .with("BERTH_AUTH_FAILURE_RPS", "0");
    for (k, v) in extra {
        env = env.with(k, *v);
    }
    let app = gateway::build(gateway::Config::from_env(&env).unwrap())
        .await
        .unwrap();
    let url = format!("http://{}", app.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(app.run_until(async move {
        let _ = stopped.await;
    }));
    Harness {
        url,
        seen: [md_seen, reg_seen, so_seen, mc_seen],
        upstreams: vec![md, reg, so, mc],
        stop: Some(stop),
        served,
        dir,
    }
}

/// Keeps a stopped upstream's address bound but not listening: connections to it are refused, as to
/// a dead service, and no server another test binds on port 0 can be handed the freed port while
/// the socket is held.
pub fn hold_dead(addr: SocketAddr) -> tokio::net::TcpSocket {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_reuseaddr(true).unwrap();
    socket.bind(addr).unwrap();
    socket
}

pub async fn call(url: &str, method: &str, path: &str, token: Option<&str>) -> reqwest::Response {
    let mut r = reqwest::Client::new().request(method.parse().unwrap(), format!("{url}{path}"));
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    if method == "POST" || method == "PUT" {
        r = r.json(&serde_json::json!({}));
    }
    r.send().await.unwrap()
}

/// The gateway's `/metrics` page, read with the scraper's cluster-wide `metrics:read` token.
pub async fn metrics_page(url: &str) -> String {
    call(url, "GET", "/metrics", Some("tok-scraper"))
        .await
        .text()
        .await
        .unwrap()
}

/// Waits until `GET /v1/kinds` through the gateway at `url` answers 200 again (the registry's
/// breaker has closed), failing after `within`.
pub async fn until_the_registry_answers(url: &str, within: Duration) {
    service_kit::testing::eventually("the breaker closes", within, || async move {
        (call(url, "GET", "/v1/kinds", Some("tok-reader"))
            .await
            .status()
            == 200)
            .then_some(())
    })
    .await;
}
