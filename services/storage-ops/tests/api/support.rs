//! The shared helpers: the registry and storage-ops in-process on port 0, clients, profiles,
//! and reading answers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use client::{ClientError, ClientOptions, ServiceClient};
use domain::orchestrator::RegisterOrchestrator;
use domain::{Code, OrchestratorKind, VolumeProvisionerProfile};
use serde_json::{Value, json};
use service_kit::Env;
use storage_ops::env_vars;

pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// The operator's allow-lists these tests run with: anything under the test's directory, and the
/// local Docker socket (plus one in the test's directory that nothing serves).
pub(crate) fn allowed(dir: &Path) -> [(&'static str, String); 2] {
    [
        ("BERTH_LOCAL_ROOTS", dir.display().to_string()),
        (
            "BERTH_DOCKER_ENDPOINTS",
            format!(
                "{},unix://{}",
                domain::orchestrator::DEFAULT_DOCKER_HOST,
                dir.join("no-engine.sock").display()
            ),
        ),
    ]
}

/// The registry, faked in-process on port 0 (`dir` is where the real one would keep its state).
pub(crate) async fn spawn_registry(_dir: &Path) -> String {
    crate::fake_registry::spawn().await
}

/// storage-ops, served in-process on port 0.
pub(crate) async fn spawn_storage(db: &Path, registry_url: &str, extra: &[(&str, &str)]) -> String {
    service_kit::testing::init_test_logging();
    let mut env = Env::default();
    for (k, v) in allowed(db.parent().unwrap()) {
        env = env.with(k, v);
    }
    let mut env = env
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with(env_vars::STORAGE_OPS_DB, db.display().to_string())
        .with(env_vars::REGISTRY_URL, registry_url)
        .with(env_vars::RECONCILE_INTERVAL, "1h");
    for (k, v) in extra {
        env = env.with(k, *v);
    }
    let app = storage_ops::build(storage_ops::Config::from_env(&env).unwrap())
        .await
        .unwrap();
    let url = format!("http://{}", app.local_addr());
    tokio::spawn(app.run_until(std::future::pending()));
    url
}

pub(crate) struct TestApp {
    pub(crate) url: String,
    pub(crate) http: reqwest::Client,
    pub(crate) storage: client::storage::Client,
    pub(crate) registry: client::registry::Client,
    /// The `disk` orchestrator's base path.
    pub(crate) base: PathBuf,
    pub(crate) tmp: tempfile::TempDir,
}

pub(crate) fn storage_client(url: &str) -> client::storage::Client {
    client::storage::Client::new(ServiceClient::new(url, ClientOptions::default()))
}

pub(crate) fn registry_client(url: &str) -> client::registry::Client {
    client::registry::Client::new(ServiceClient::new(url, ClientOptions::default()))
}

/// A registry with a default `local` orchestrator `disk` at `<tmp>/vols`, and storage-ops over it.
pub(crate) async fn spawn_app() -> TestApp {
    spawn_app_with(&[]).await
}

pub(crate) async fn spawn_app_with(extra: &[(&str, &str)]) -> TestApp {
    let tmp = tempfile::tempdir().unwrap();
    let registry_url = spawn_registry(tmp.path()).await;
    let registry = registry_client(&registry_url);
    let base = tmp.path().join("vols");
    register_local(&registry, "disk", &base, None, true).await;
    let url = spawn_storage(&tmp.path().join("storage.db"), &registry_url, extra).await;
    TestApp {
        http: reqwest::Client::new(),
        storage: storage_client(&url),
        registry,
        url,
        base,
        tmp,
    }
}

pub(crate) async fn register_local(
    registry: &client::registry::Client,
    name: &str,
    base: &Path,
    capacity: Option<&str>,
    default: bool,
) {
    let mut config = json!({ "basePath": base.display().to_string() });
    if let Some(c) = capacity {
        config["capacity"] = json!(c);
    }
    registry
        .register(
            name,
            &RegisterOrchestrator {
                config: Some(config),
                default: Some(default),
                ..RegisterOrchestrator::new(OrchestratorKind::Local)
            },
        )
        .await
        .unwrap();
}

pub(crate) fn profile(name: &str, capacity: &str) -> VolumeProvisionerProfile {
    VolumeProvisionerProfile {
        name: name.into(),
        namespace: Some("team".into()),
        capacity: capacity.into(),
        ..Default::default()
    }
}

impl TestApp {
    pub(crate) async fn post_raw(&self, body: &Value) -> reqwest::Response {
        self.http
            .post(format!("{}/v1/volumes", self.url))
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// The backend objects (directories or files) under the `disk` base path for `ns`.
    pub(crate) fn objects(&self, ns: &str) -> Vec<String> {
        objects_under(&self.base, ns)
    }
}

pub(crate) fn objects_under(base: &Path, ns: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(base.join(ns))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

pub(crate) async fn problem(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    (status, response.json().await.unwrap())
}

/// Sends `method path` exactly as written (no client-side dot resolution) and returns the status.
pub(crate) async fn raw_status(method: &str, url: &str, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer}"))
}

pub(crate) fn code(e: &ClientError) -> Code {
    e.code()
}

/// Whether a Docker Engine answers; skips (or, with BERTH_REQUIRE_DOCKER=1, fails) when none does.
pub(crate) async fn docker_or_skip(test: &str) -> bool {
    let answered = match bollard::Docker::connect_with_unix_defaults() {
        Ok(d) => tokio::time::timeout(Duration::from_secs(3), d.ping())
            .await
            .is_ok_and(|r| r.is_ok()),
        Err(_) => false,
    };
    if !answered {
        assert!(
            std::env::var("BERTH_REQUIRE_DOCKER").as_deref() != Ok("1"),
            "{test}: BERTH_REQUIRE_DOCKER=1 but no Docker Engine answers at unix:///var/run/docker.sock"
        );
        eprintln!("SKIPPED {test}: no Docker Engine answers at unix:///var/run/docker.sock");
    }
    answered
}

/// Removes every Docker volume labelled with namespace `ns` when dropped (even on a failed test).
pub(crate) struct DockerSweep(pub(crate) String);

impl DockerSweep {
    pub(crate) fn volumes(&self) -> Vec<String> {
        let out = std::process::Command::new("docker")
            .args(["volume", "ls", "-q", "--filter"])
            .arg(format!("label=io.berth.namespace={}", self.0))
            .output();
        match out {
            Ok(o) => String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_string)
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

impl Drop for DockerSweep {
    fn drop(&mut self) {
        let left = self.volumes();
        if !left.is_empty() {
            let _ = std::process::Command::new("docker")
                .args(["volume", "rm", "-f"])
                .args(&left)
                .output();
        }
    }
}

pub(crate) fn test_namespace(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}
