//! Spawn_app and one helper per endpoint.

use std::path::PathBuf;
use std::sync::Arc;

use client::registry::Client as RegistryClient;
use client::{ClientOptions, ServiceClient};
use orchestrator_registry::detect::FixedProbe;
use reqwest::StatusCode;
use serde_json::{Value, json};
use service_kit::Env;
use service_kit::testing::init_test_logging;
use tempfile::TempDir;
use tokio::sync::oneshot;

/// A running registry on 127.0.0.1:0 over a temporary data directory.
pub(crate) struct TestApp {
    pub(crate) url: String,
    pub(crate) http: reqwest::Client,
    pub(crate) registry: RegistryClient,
    pub(crate) dir: TempDir,
    pub(crate) stop: oneshot::Sender<()>,
    pub(crate) task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// The answer of one call: status, headers and the JSON body (`Value::Null` when there is none).
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: reqwest::header::HeaderMap,
    pub(crate) body: Value,
}

impl Answer {
    pub(crate) fn detail(&self) -> &str {
        self.body["detail"].as_str().unwrap_or_default()
    }

    pub(crate) fn etag(&self) -> &str {
        self.headers
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// A problem+json 400 with code 3 whose detail starts with `field: `.
    pub(crate) fn assert_invalid(&self, field: &str) {
        self.assert_refused(400, 3, field);
    }

    /// A problem+json 412 with code 9 (the operator's settings refuse a well-formed value) whose
    /// detail starts with `field: `.
    pub(crate) fn assert_not_allowed(&self, field: &str) {
        self.assert_refused(412, 9, field);
    }

    fn assert_refused(&self, status: u16, code: u32, field: &str) {
        assert_eq!(self.status, status, "{field}: {}", self.body);
        assert_eq!(self.body["code"], code, "{}", self.body);
        assert_eq!(
            self.headers["content-type"], "application/problem+json",
            "{field}"
        );
        assert!(
            self.detail().starts_with(&format!("{field}: ")),
            "expected a detail naming {field:?}, got {:?}",
            self.detail()
        );
    }
}

/// The default test app: no detection variables, no Docker Engine, so a first start registers `local`.
pub(crate) async fn spawn_app() -> TestApp {
    spawn_app_with(Env::default(), false, None).await
}

/// An app started with extra `env`, a Docker probe answering `docker_up`, on `dir` (a fresh temporary
/// directory when `None`, else the same directory, i.e. the same database file, again).
pub(crate) async fn spawn_app_with(env: Env, docker_up: bool, dir: Option<TempDir>) -> TestApp {
    init_test_logging();
    let dir = dir.unwrap_or_else(|| tempfile::tempdir().expect("temp dir"));
    // Registrations in these tests live under /srv or the test's own directory, unless a test
    // says otherwise.
    let env = if env.is_set("BERTH_LOCAL_ROOTS") {
        env
    } else {
        let mut roots = format!("/srv,{}", dir.path().display());
        if let Some(base) = env.get("BERTH_LOCAL_BASE_PATH") {
            roots = format!("{roots},{base}");
        }
        env.with("BERTH_LOCAL_ROOTS", roots)
    };
    let env = env
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with("BERTH_DATA_DIR", dir.path().display().to_string());
    let mut config = orchestrator_registry::Config::from_env(&env).expect("config");
    config.docker_probe = Arc::new(FixedProbe(docker_up));
    let app = orchestrator_registry::build(config).await.expect("build");
    let url = format!("http://{}", app.local_addr());
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(app.run_until(async move {
        let _ = stopped.await;
    }));
    let registry = RegistryClient::new(ServiceClient::new(&url, ClientOptions::default()));
    TestApp {
        url,
        http: reqwest::Client::new(),
        registry,
        dir,
        stop,
        task,
    }
}

impl TestApp {
    /// Stops serving and hands back the data directory for a restart.
    pub(crate) async fn stop(self) -> TempDir {
        let _ = self.stop.send(());
        let _ = self.task.await;
        self.dir
    }

    pub(crate) fn db_path(&self) -> PathBuf {
        self.dir.path().join("registry.db")
    }

    pub(crate) async fn send(&self, request: reqwest::RequestBuilder) -> Answer {
        let response = request.send().await.expect("request");
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.expect("body");
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Answer {
            status,
            headers,
            body,
        }
    }

    pub(crate) fn item(&self, name: &str) -> String {
        format!("{}/v1/orchestrators/{name}", self.url)
    }

    pub(crate) async fn put(&self, name: &str, body: Value) -> Answer {
        self.send(self.http.put(self.item(name)).json(&body)).await
    }

    pub(crate) async fn put_if_match(&self, name: &str, body: Value, if_match: &str) -> Answer {
        self.send(
            self.http
                .put(self.item(name))
                .header("if-match", if_match)
                .json(&body),
        )
        .await
    }

    pub(crate) async fn get(&self, name: &str) -> Answer {
        self.send(self.http.get(self.item(name))).await
    }

    pub(crate) async fn head(&self, name: &str) -> Answer {
        self.send(self.http.head(self.item(name))).await
    }

    pub(crate) async fn delete(&self, name: &str) -> Answer {
        self.send(self.http.delete(self.item(name))).await
    }

    pub(crate) async fn list(&self) -> Answer {
        self.send(self.http.get(format!("{}/v1/orchestrators", self.url)))
            .await
    }

    pub(crate) async fn kinds(&self) -> Answer {
        self.send(self.http.get(format!("{}/v1/kinds", self.url)))
            .await
    }

    pub(crate) async fn detect(&self) -> Answer {
        self.send(
            self.http
                .get(format!("{}/v1/orchestrators:detect", self.url)),
        )
        .await
    }

    pub(crate) async fn default_orchestrator(&self) -> Answer {
        self.send(
            self.http
                .get(format!("{}/v1/orchestrators:default", self.url)),
        )
        .await
    }

    /// The names of the orchestrators flagged default, per the list.
    pub(crate) async fn defaults(&self) -> Vec<String> {
        let list = self.list().await;
        assert_eq!(list.status, 200);
        list.body["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter(|o| o["default"] == true)
            .map(|o| o["name"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Deregisters everything (the first start's detected default included).
    pub(crate) async fn clear(&self) {
        for o in self.registry.list().await.unwrap().items {
            self.registry.deregister(&o.name).await.unwrap();
        }
    }
}

pub(crate) fn local(base: &str) -> Value {
    json!({"kind": "local", "config": {"basePath": base}})
}
