//! The orchestrator-registry over real HTTP: every route, every error, concurrency of the default flag,
//! restarts on the same database file, and detection from an injected environment.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use client::registry::Client as RegistryClient;
use client::{ClientOptions, ServiceClient};
use domain::Code;
use domain::orchestrator::{DEFAULT_DOCKER_HOST, DetectionRule, RegisterOrchestrator};
use domain::{Orchestrator, OrchestratorKind};
use orchestrator_registry::detect::FixedProbe;
use reqwest::StatusCode;
use serde_json::{Value, json};
use service_kit::Env;
use service_kit::testing::{eventually, init_test_logging};
use tempfile::TempDir;
use tokio::sync::oneshot;

// ---------------------------------------------------------------------------------------------------
// spawn_app and one helper per endpoint

/// A running registry on 127.0.0.1:0 over a temporary data directory.
struct TestApp {
    url: String,
    http: reqwest::Client,
    registry: RegistryClient,
    dir: TempDir,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// The answer of one call: status, headers and the JSON body (`Value::Null` when there is none).
struct Answer {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    body: Value,
}

impl Answer {
    fn detail(&self) -> &str {
        self.body["detail"].as_str().unwrap_or_default()
    }

    fn etag(&self) -> &str {
        self.headers
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// A problem+json 400 with code 3 whose detail starts with `field: `.
    fn assert_invalid(&self, field: &str) {
        assert_eq!(self.status, 400, "{field}: {}", self.body);
        assert_eq!(self.body["code"], 3, "{}", self.body);
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
async fn spawn_app() -> TestApp {
    spawn_app_with(Env::default(), false, None).await
}

/// An app started with extra `env`, a Docker probe answering `docker_up`, on `dir` (a fresh temporary
/// directory when `None`, else the same directory, i.e. the same database file, again).
async fn spawn_app_with(env: Env, docker_up: bool, dir: Option<TempDir>) -> TestApp {
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
    async fn stop(self) -> TempDir {
        let _ = self.stop.send(());
        let _ = self.task.await;
        self.dir
    }

    fn db_path(&self) -> PathBuf {
        self.dir.path().join("registry.db")
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Answer {
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

    fn item(&self, name: &str) -> String {
        format!("{}/v1/orchestrators/{name}", self.url)
    }

    async fn put(&self, name: &str, body: Value) -> Answer {
        self.send(self.http.put(self.item(name)).json(&body)).await
    }

    async fn put_if_match(&self, name: &str, body: Value, if_match: &str) -> Answer {
        self.send(
            self.http
                .put(self.item(name))
                .header("if-match", if_match)
                .json(&body),
        )
        .await
    }

    async fn get(&self, name: &str) -> Answer {
        self.send(self.http.get(self.item(name))).await
    }

    async fn head(&self, name: &str) -> Answer {
        self.send(self.http.head(self.item(name))).await
    }

    async fn delete(&self, name: &str) -> Answer {
        self.send(self.http.delete(self.item(name))).await
    }

    async fn list(&self) -> Answer {
        self.send(self.http.get(format!("{}/v1/orchestrators", self.url)))
            .await
    }

    async fn kinds(&self) -> Answer {
        self.send(self.http.get(format!("{}/v1/kinds", self.url)))
            .await
    }

    async fn detect(&self) -> Answer {
        self.send(
            self.http
                .get(format!("{}/v1/orchestrators:detect", self.url)),
        )
        .await
    }

    async fn default_orchestrator(&self) -> Answer {
        self.send(
            self.http
                .get(format!("{}/v1/orchestrators:default", self.url)),
        )
        .await
    }

    /// The names of the orchestrators flagged default, per the list.
    async fn defaults(&self) -> Vec<String> {
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
    async fn clear(&self) {
        for o in self.registry.list().await.unwrap().items {
            self.registry.deregister(&o.name).await.unwrap();
        }
    }
}

fn local(base: &str) -> Value {
    json!({"kind": "local", "config": {"basePath": base}})
}

// ---------------------------------------------------------------------------------------------------
// standard routes and the OpenAPI document

#[tokio::test]
async fn standard_routes_answer_and_every_route_is_in_the_openapi_document() {
    let app = spawn_app().await;
    for path in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
        let r = app.send(app.http.get(format!("{}{path}", app.url))).await;
        assert_eq!(r.status, 200, "{path}");
    }
    let doc = app
        .send(app.http.get(format!("{}/openapi.json", app.url)))
        .await
        .body;
    assert_eq!(doc["info"]["title"], "berth orchestrator-registry");
    for (path, methods) in [
        (
            "/v1/orchestrators/{name}",
            &["get", "head", "put", "delete"][..],
        ),
        ("/v1/orchestrators", &["get"][..]),
        ("/v1/orchestrators:detect", &["get"][..]),
        ("/v1/orchestrators:default", &["get"][..]),
        ("/v1/kinds", &["get"][..]),
    ] {
        for m in methods {
            assert!(doc["paths"][path][m].is_object(), "{m} {path} missing");
        }
    }
    let put_params = doc["paths"]["/v1/orchestrators/{name}"]["put"]["parameters"]
        .as_array()
        .unwrap();
    assert!(
        put_params
            .iter()
            .any(|p| p["name"] == "If-Match" && p["in"] == "header")
    );
    for schema in [
        "Orchestrator",
        "RegisterOrchestrator",
        "OrchestratorList",
        "KindInfo",
        "Detection",
        "Problem",
    ] {
        assert!(doc["components"]["schemas"][schema].is_object(), "{schema}");
    }
}

// ---------------------------------------------------------------------------------------------------
// kinds

#[tokio::test]
async fn kinds_lists_the_four_factories_with_their_config_schemas() {
    let app = spawn_app().await;
    let r = app.kinds().await;
    assert_eq!(r.status, 200);
    let kinds = r.body.as_array().unwrap();
    let by_kind = |k: &str| kinds.iter().find(|i| i["kind"] == k).unwrap().clone();
    assert_eq!(kinds.len(), 4);
    assert_eq!(by_kind("local")["storageOps"], true);
    assert_eq!(by_kind("docker")["storageOps"], true);
    assert_eq!(by_kind("kubernetes")["storageOps"], false);
    assert_eq!(by_kind("nomad")["storageOps"], false);
    assert!(by_kind("local")["configSchema"]["properties"]["basePath"].is_object());
    assert_eq!(
        by_kind("local")["configSchema"]["required"],
        json!(["basePath"])
    );
    assert_eq!(
        by_kind("docker")["configSchema"]["properties"]["host"]["default"],
        DEFAULT_DOCKER_HOST
    );
    // The typed client reads the same answer.
    let typed = app.registry.kinds().await.unwrap();
    assert_eq!(typed.len(), 4);
    assert!(typed.iter().all(|k| !k.description.is_empty()));
}

// ---------------------------------------------------------------------------------------------------
// register, get, has, list, deregister

#[tokio::test]
async fn register_get_has_list_and_deregister_through_the_typed_client() {
    let app = spawn_app().await;
    app.clear().await;
    let c = &app.registry;
    let mut req = RegisterOrchestrator::new(OrchestratorKind::Docker);
    req.label = Some("ci".into());
    req.region = Some("eu-west".into());
    let made = c.register("engine", &req).await.unwrap();
    assert_eq!(made.name, "engine");
    assert_eq!(made.kind, OrchestratorKind::Docker);
    assert_eq!(made.label, "ci");
    assert_eq!(made.region, "eu-west");
    assert_eq!(made.config, json!({"host": DEFAULT_DOCKER_HOST}));
    assert!(made.storage_ops);
    assert!(!made.default);
    assert!(made.resource_version > 0);
    assert_eq!(c.get("engine").await.unwrap(), made);
    assert!(c.has("engine").await.unwrap());
    assert!(!c.has("absent").await.unwrap());

    let mut k8s = RegisterOrchestrator::new(OrchestratorKind::Kubernetes);
    k8s.default = Some(true);
    let k = c.register("a-cluster", &k8s).await.unwrap();
    assert!(
        !k.storage_ops,
        "kubernetes StorageOps are reported honestly"
    );
    assert!(k.default);
    assert_eq!(c.default_orchestrator().await.unwrap().name, "a-cluster");

    let names: Vec<String> = c
        .list()
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| o.name)
        .collect();
    assert_eq!(names, ["a-cluster", "engine"], "sorted by name");

    c.deregister("engine").await.unwrap();
    assert!(!c.has("engine").await.unwrap());
    assert!(!c.deregister_reporting("engine").await.unwrap());
    let e = c.get("engine").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
}

#[tokio::test]
async fn list_is_sorted_and_items_is_an_empty_array_when_none_is_registered() {
    let app = spawn_app().await;
    app.clear().await;
    let r = app.list().await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, json!({"items": []}));
    for name in ["zeta", "alpha", "mid-1", "mid-0"] {
        assert_eq!(app.put(name, json!({"kind": "nomad"})).await.status, 201);
    }
    let list = app.list().await.body;
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "mid-0", "mid-1", "zeta"]);
}

#[tokio::test]
async fn register_is_idempotent_and_a_different_body_replaces_and_bumps_the_version() {
    let app = spawn_app().await;
    let body = json!({"kind": "local", "label": "fast", "config": {"basePath": "/srv/vols", "capacity": "10Gi"}});
    let first = app.put("disks", body.clone()).await;
    assert_eq!(first.status, 201, "{}", first.body);
    assert_eq!(first.headers["location"], "/v1/orchestrators/disks");
    let v1 = first.body["resourceVersion"].as_u64().unwrap();
    assert_eq!(first.etag(), format!("\"{v1}\""));

    let again = app.put("disks", body.clone()).await;
    assert_eq!(again.status, 200);
    assert_eq!(
        again.body, first.body,
        "the same body again changes nothing"
    );

    // The same meaning written differently is still the same registration.
    let same = app
        .put(
            "disks",
            json!({"kind": "local", "label": "fast", "config": {"basePath": "//srv/./vols/", "capacity": "10240Mi"}}),
        )
        .await;
    assert_eq!(same.body["resourceVersion"].as_u64().unwrap(), v1);

    let changed = app
        .put(
            "disks",
            json!({"kind": "local", "label": "slow", "config": {"basePath": "/srv/vols"}}),
        )
        .await;
    assert_eq!(changed.status, 200);
    let v2 = changed.body["resourceVersion"].as_u64().unwrap();
    assert!(v2 > v1);
    assert_eq!(changed.body["label"], "slow");
    assert_eq!(changed.body["config"], json!({"basePath": "/srv/vols"}));
    assert_eq!(app.get("disks").await.body, changed.body);
    assert_eq!(app.get("disks").await.etag(), format!("\"{v2}\""));

    // A different kind under the same name replaces it too.
    let other = app.put("disks", json!({"kind": "docker"})).await;
    assert_eq!(other.status, 200);
    assert_eq!(other.body["kind"], "docker");
    assert!(other.body["resourceVersion"].as_u64().unwrap() > v2);
}

#[tokio::test]
async fn if_match_with_a_stale_version_is_412_with_code_9() {
    let app = spawn_app().await;
    let made = app.put("pinned", json!({"kind": "nomad"})).await;
    let v1 = made.body["resourceVersion"].as_u64().unwrap();

    let ok = app
        .put_if_match(
            "pinned",
            json!({"kind": "nomad", "label": "a"}),
            &format!("\"{v1}\""),
        )
        .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let v2 = ok.body["resourceVersion"].as_u64().unwrap();

    let stale = app
        .put_if_match(
            "pinned",
            json!({"kind": "nomad", "label": "b"}),
            &format!("\"{v1}\""),
        )
        .await;
    assert_eq!(stale.status, 412);
    assert_eq!(stale.body["code"], 9);
    assert!(
        stale.detail().contains(&format!("at resourceVersion {v2}")),
        "{}",
        stale.detail()
    );
    assert_eq!(
        app.get("pinned").await.body["label"],
        "a",
        "nothing changed"
    );

    let any = app
        .put_if_match("pinned", json!({"kind": "nomad", "label": "c"}), "*")
        .await;
    assert_eq!(any.status, 200);
    let missing = app
        .put_if_match("nobody", json!({"kind": "nomad"}), "*")
        .await;
    assert_eq!(missing.status, 412);
    assert_eq!(missing.body["code"], 9);
    assert_eq!(app.get("nobody").await.status, 404, "nothing was created");

    app.put_if_match("pinned", json!({"kind": "nomad"}), "soon")
        .await
        .assert_invalid("If-Match");
}

#[tokio::test]
async fn unknown_names_are_404_with_the_maya_message_and_head_has_no_body() {
    let app = spawn_app().await;
    let r = app.get("ghost").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["code"], 5);
    assert_eq!(
        r.detail(),
        "'ghost' is not a registered orchestration provider"
    );
    assert_eq!(r.headers["content-type"], "application/problem+json");

    let h = app.head("ghost").await;
    assert_eq!(h.status, 404);
    assert_eq!(h.body, Value::Null);
    app.put("real", json!({"kind": "nomad"})).await;
    let h = app.head("real").await;
    assert_eq!(h.status, 200);
    assert_eq!(h.body, Value::Null);
    assert!(!h.etag().is_empty());

    let e = app.registry.get("ghost").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert_eq!(e.http_status, Some(404));
    assert_eq!(
        e.status.message,
        "'ghost' is not a registered orchestration provider"
    );
}

#[tokio::test]
async fn deregister_is_idempotent_and_says_whether_it_existed() {
    let app = spawn_app().await;
    app.put("short-lived", json!({"kind": "nomad"})).await;
    let first = app.delete("short-lived").await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body, json!({"deleted": true}));
    let second = app.delete("short-lived").await;
    assert_eq!(second.status, 200);
    assert_eq!(second.body, json!({"deleted": false}));
    assert_eq!(app.get("short-lived").await.status, 404);
}

// ---------------------------------------------------------------------------------------------------
// bad input: 400 problem+json naming the field

#[tokio::test]
async fn invalid_names_are_400_naming_the_name_on_every_route() {
    let app = spawn_app().await;
    let long = "a".repeat(64);
    for bad in [
        "Upper",
        "under_score",
        "-lead",
        "trail-",
        long.as_str(),
        "dots.in.it",
    ] {
        app.put(bad, json!({"kind": "nomad"}))
            .await
            .assert_invalid("name");
        app.get(bad).await.assert_invalid("name");
        app.delete(bad).await.assert_invalid("name");
        assert_eq!(app.head(bad).await.status, 400, "{bad}");
    }
    // The longest label is fine.
    let max = "a".repeat(63);
    assert_eq!(app.put(&max, json!({"kind": "nomad"})).await.status, 201);
}

#[tokio::test]
async fn invalid_kinds_are_400_naming_the_kind() {
    let app = spawn_app().await;
    app.put("x", json!({"kind": "swarm"}))
        .await
        .assert_invalid("kind");
    app.put("x", json!({"kind": "Docker"}))
        .await
        .assert_invalid("kind");
    app.put("x", json!({"label": "no kind"}))
        .await
        .assert_invalid("kind");
    app.put("x", json!({"kind": 7}))
        .await
        .assert_invalid("kind");
    let r = app.put("x", json!({"kind": "swarm"})).await;
    assert!(
        r.detail().contains("local, docker, kubernetes, nomad"),
        "{}",
        r.detail()
    );
    assert_eq!(app.get("x").await.status, 404, "nothing half-made");
}

#[tokio::test]
async fn invalid_configs_and_fields_are_400_naming_the_field() {
    let app = spawn_app().await;
    for (body, field) in [
        (json!({"kind": "local"}), "config.basePath"),
        (local("relative/dir"), "config.basePath"),
        (local("/"), "config.basePath"),
        (local("/srv/../etc"), "config.basePath"),
        (
            json!({"kind": "local", "config": {"basePath": 3}}),
            "config.basePath",
        ),
        (
            json!({"kind": "local", "config": {"basePath": "/srv", "capacity": "a lot"}}),
            "config.capacity",
        ),
        (
            json!({"kind": "local", "config": {"basePath": "/srv", "capacity": "-1Gi"}}),
            "config.capacity",
        ),
        (
            json!({"kind": "local", "config": {"basePath": "/srv", "sise": "1Gi"}}),
            "config.sise",
        ),
        (
            json!({"kind": "docker", "config": {"host": "http://engine:2375"}}),
            "config.host",
        ),
        (
            json!({"kind": "docker", "config": {"host": "unix://docker.sock"}}),
            "config.host",
        ),
        (
            json!({"kind": "docker", "config": {"host": "tcp://engine"}}),
            "config.host",
        ),
        (
            json!({"kind": "docker", "config": {"basePath": "/srv"}}),
            "config.basePath",
        ),
        (
            json!({"kind": "kubernetes", "config": {"context": "prod"}}),
            "config.context",
        ),
        (json!({"kind": "nomad", "config": "yes"}), "config"),
        (json!({"kind": "nomad", "colour": "blue"}), "colour"),
        (json!({"kind": "nomad", "label": 1}), "label"),
        (json!({"kind": "nomad", "label": "l".repeat(254)}), "label"),
        (json!({"kind": "nomad", "region": "r".repeat(64)}), "region"),
        (json!({"kind": "nomad", "region": "eu\nwest"}), "region"),
        (json!({"kind": "nomad", "default": "yes"}), "default"),
        (json!(["kind", "nomad"]), "body"),
    ] {
        app.put("bad-input", body).await.assert_invalid(field);
    }
    // Not JSON at all.
    let r = app
        .send(
            app.http
                .put(app.item("bad-input"))
                .header("content-type", "application/json")
                .body("{kind:"),
        )
        .await;
    r.assert_invalid("body");
    assert_eq!(app.get("bad-input").await.status, 404, "nothing half-made");
}

#[tokio::test]
async fn orchestrators_may_point_only_where_the_operator_allows() {
    // The defaults: volumes under the data directory's volumes/, the local Docker socket.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    let roots = data.join("volumes").display().to_string();
    let app = spawn_app_with(
        Env::default().with("BERTH_LOCAL_ROOTS", roots.as_str()),
        false,
        Some(dir),
    )
    .await;
    std::fs::create_dir_all(data.join("volumes")).unwrap();
    std::fs::create_dir_all(data.join("outside")).unwrap();
    std::os::unix::fs::symlink(data.join("outside"), data.join("volumes/escape")).unwrap();
    let at = |rel: &str| format!("{}/{rel}", data.display());
    for (i, (body, field, setting)) in [
        (local("/etc/berth"), "config.basePath", "BERTH_LOCAL_ROOTS"),
        (local("/"), "config.basePath", ""),
        (local(&at("volumes/../../etc")), "config.basePath", ""),
        (
            local(&at("volumes2")),
            "config.basePath",
            "BERTH_LOCAL_ROOTS",
        ),
        (
            local(&data.display().to_string()),
            "config.basePath",
            "BERTH_LOCAL_ROOTS",
        ),
        (
            local(&at("volumes/escape")),
            "config.basePath",
            "symbolic link",
        ),
        (
            local(&at("volumes/escape/deeper")),
            "config.basePath",
            "symbolic link",
        ),
        (
            json!({"kind": "docker", "config": {"host": "tcp://10.0.0.1:2375"}}),
            "config.host",
            "BERTH_DOCKER_ENDPOINTS",
        ),
        (
            json!({"kind": "docker", "config": {"host": "unix:///run/user/1000/docker.sock"}}),
            "config.host",
            "BERTH_DOCKER_ENDPOINTS",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("refused-{i}");
        let r = app.put(&name, body.clone()).await;
        r.assert_invalid(field);
        assert!(r.detail().contains(setting), "{body}: {}", r.detail());
        assert_names_no_resolved_path(r.detail(), &data);
        assert_eq!(
            app.get(&name).await.status,
            404,
            "{body}: nothing registered"
        );
    }
    for (name, body) in [
        ("root", local(&roots)),
        ("under", local(&at("volumes/team/./fast"))),
        ("engine", json!({"kind": "docker"})),
    ] {
        let r = app.put(name, body.clone()).await;
        assert_eq!(r.status, 201, "{body}: {}", r.body);
    }
    // An operator allows more, and only what they name.
    let other = tempfile::tempdir().unwrap();
    let other_roots = other.path().join("volumes").display().to_string();
    let app = spawn_app_with(
        Env::default()
            .with("BERTH_LOCAL_ROOTS", format!("{other_roots},/srv/berth"))
            .with("BERTH_DOCKER_ENDPOINTS", "tcp://10.0.0.1:2375"),
        false,
        Some(other),
    )
    .await;
    assert_eq!(app.put("srv", local("/srv/berth/v")).await.status, 201);
    let docker = json!({"kind": "docker", "config": {"host": "tcp://10.0.0.1:2375/"}});
    assert_eq!(app.put("remote", docker).await.status, 201);
    app.put("socket", json!({"kind": "docker"}))
        .await
        .assert_invalid("config.host");
}

/// A refusal says a link leads outside, not where (the resolved path is the host's business).
fn assert_names_no_resolved_path(detail: &str, data: &Path) {
    let outside = data.join("outside").display().to_string();
    assert!(!detail.contains(&outside), "{detail}");
}

#[tokio::test]
async fn every_route_refuses_query_parameters_it_does_not_declare() {
    let app = spawn_app().await;
    app.put("q", json!({"kind": "nomad"})).await;
    let url = |path: &str| format!("{}{path}", app.url);
    for (request, name, route) in [
        (
            app.http.get(url("/v1/orchestrators?bogus=1")),
            "bogus",
            "GET /v1/orchestrators",
        ),
        (
            app.http.get(url("/v1/orchestrators/q?verbose=1")),
            "verbose",
            "GET /v1/orchestrators/{name}",
        ),
        (
            app.http
                .put(url("/v1/orchestrators/q?dryRun=1"))
                .json(&json!({"kind": "nomad", "label": "changed"})),
            "dryRun",
            "PUT /v1/orchestrators/{name}",
        ),
        (
            app.http.delete(url("/v1/orchestrators/q?force=1")),
            "force",
            "DELETE /v1/orchestrators/{name}",
        ),
        (
            app.http.get(url("/v1/orchestrators:detect?x=1")),
            "x",
            "GET /v1/orchestrators:detect",
        ),
        (
            app.http.get(url("/v1/orchestrators:default?x=1")),
            "x",
            "GET /v1/orchestrators:default",
        ),
        (
            app.http.get(url("/v1/kinds?kind=local")),
            "kind",
            "GET /v1/kinds",
        ),
    ] {
        let r = app.send(request).await;
        r.assert_invalid(name);
        assert_eq!(
            r.detail(),
            format!("{name}: is not a query parameter of {route}; it takes none")
        );
    }
    let head = app
        .http
        .head(url("/v1/orchestrators/q?verbose=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 400);
    // The refused calls changed nothing.
    let now = app.get("q").await;
    assert_eq!(now.status, 200);
    assert_eq!(now.body["label"], "");
}

// ---------------------------------------------------------------------------------------------------
// the default flag

#[tokio::test]
async fn making_one_default_clears_the_other_in_the_same_change() {
    let app = spawn_app().await;
    app.clear().await;
    let e = app.registry.default_orchestrator().await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert_eq!(app.default_orchestrator().await.status, 404);

    let a = app
        .put("a", json!({"kind": "nomad", "default": true}))
        .await;
    assert_eq!(a.body["default"], true);
    let a_version = app.get("a").await.body["resourceVersion"].as_u64().unwrap();
    let b = app
        .put("b", json!({"kind": "nomad", "default": true}))
        .await;
    assert_eq!(b.body["default"], true);
    assert_eq!(app.defaults().await, ["b"]);
    let a_now = app.get("a").await.body;
    assert_eq!(a_now["default"], false);
    assert!(
        a_now["resourceVersion"].as_u64().unwrap() > a_version,
        "a changed, so its version moved"
    );
    assert_eq!(app.default_orchestrator().await.body["name"], "b");

    // Omitting `default` keeps it; `false` clears it.
    let kept = app.put("b", json!({"kind": "nomad", "label": "x"})).await;
    assert_eq!(kept.body["default"], true);
    let cleared = app
        .put(
            "b",
            json!({"kind": "nomad", "label": "x", "default": false}),
        )
        .await;
    assert_eq!(cleared.body["default"], false);
    assert!(app.defaults().await.is_empty());

    // Deregistering the default leaves none.
    app.put("c", json!({"kind": "nomad", "default": true}))
        .await;
    app.delete("c").await;
    assert_eq!(app.default_orchestrator().await.status, 404);
}

#[tokio::test]
async fn fifty_concurrent_registrations_and_fifty_concurrent_default_switches_leave_exactly_one_default()
 {
    let app = spawn_app().await;
    for i in 0..10 {
        assert_eq!(
            app.put(&format!("seed-{i}"), json!({"kind": "nomad"}))
                .await
                .status,
            201
        );
    }
    let app = Arc::new(app);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..50 {
        let one = app.clone();
        let other = app.clone();
        tasks.spawn(async move {
            let app = one;
            // New names, every other one asking to be the default.
            app.put(
                &format!("new-{i}"),
                json!({"kind": "local", "config": {"basePath": format!("/srv/{i}")}, "default": i % 2 == 0}),
            )
            .await
            .status
        });
        tasks.spawn(async move {
            let app = other;
            // Switches among the existing names.
            app.put(
                &format!("seed-{}", i % 10),
                json!({"kind": "nomad", "default": true}),
            )
            .await
            .status
        });
    }
    while let Some(status) = tasks.join_next().await {
        let status = status.unwrap();
        assert!(status == 200 || status == 201, "{status}");
    }
    let list = app.registry.list().await.unwrap();
    assert_eq!(
        list.items.len(),
        1 + 10 + 50,
        "the detected default, the seeds, the new ones"
    );
    let defaults: Vec<&Orchestrator> = list.items.iter().filter(|o| o.default).collect();
    assert_eq!(defaults.len(), 1, "{defaults:?}");
    assert_eq!(
        app.registry.default_orchestrator().await.unwrap().name,
        defaults[0].name
    );
}

// ---------------------------------------------------------------------------------------------------
// persistence

#[tokio::test]
async fn a_restart_on_the_same_database_keeps_every_registration() {
    let app = spawn_app().await;
    for i in 0..5 {
        app.put(&format!("keep-{i}"), local(&format!("/srv/k{i}")))
            .await;
    }
    app.put(
        "keeper",
        json!({"kind": "docker", "label": "l", "region": "r", "default": true}),
    )
    .await;
    let before = app.list().await.body;
    let dir = app.stop().await;

    let again = spawn_app_with(Env::default(), true, Some(dir)).await;
    assert_eq!(
        again.list().await.body,
        before,
        "everything, versions included"
    );
    assert_eq!(again.default_orchestrator().await.body["name"], "keeper");
    // Versions keep counting up after the restart.
    let next = again.put("keep-0", local("/srv/other")).await;
    let max_before = before["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["resourceVersion"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(next.body["resourceVersion"].as_u64().unwrap() > max_before);
}

#[tokio::test]
async fn a_new_process_after_a_kill_on_the_same_database_file_keeps_every_registration() {
    init_test_logging();
    let dir = tempfile::tempdir().unwrap();
    let start = |dir: &Path| {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_orchestrator-registry"))
            .env_clear()
            .env("BERTH_LISTEN", format!("127.0.0.1:{port}"))
            .env("BERTH_DATA_DIR", dir)
            // An address where no Engine answers, so the first start deterministically detects local.
            .env("DOCKER_HOST", "tcp://127.0.0.1:9")
            .env("BERTH_LOG", "warn")
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the binary");
        (child, format!("http://127.0.0.1:{port}"))
    };
    let wait_ready = |url: String| async move {
        let c = RegistryClient::new(ServiceClient::new(&url, ClientOptions::default()));
        eventually("the registry is ready", Duration::from_secs(20), || {
            let c = c.clone();
            async move { c.service().ready().await.ok() }
        })
        .await;
        c
    };

    let (mut first, url) = start(dir.path());
    let c = wait_ready(url).await;
    let detected = c.default_orchestrator().await.unwrap();
    assert_eq!(detected.kind, OrchestratorKind::Local);
    assert_eq!(
        detected.config["basePath"],
        dir.path().join("volumes").display().to_string()
    );
    for i in 0..5 {
        let mut req = RegisterOrchestrator::new(OrchestratorKind::Nomad);
        req.region = Some(format!("r{i}"));
        req.default = Some(i == 3);
        c.register(&format!("proc-{i}"), &req).await.unwrap();
    }
    let before = c.list().await.unwrap();
    // No graceful shutdown: whatever was acknowledged must be on disk already.
    first.kill().await.unwrap();

    let (_second, url) = start(dir.path());
    let c = wait_ready(url).await;
    assert_eq!(c.list().await.unwrap(), before);
    assert_eq!(c.default_orchestrator().await.unwrap().name, "proc-3");
}

// ---------------------------------------------------------------------------------------------------
// detection, from an injected environment

#[tokio::test]
async fn detection_follows_each_variable_and_the_first_start_registers_a_default_that_serves_volumes()
 {
    struct Case {
        env: Env,
        docker_up: bool,
        kind: OrchestratorKind,
        rule: DetectionRule,
        /// The first start's default: the detected kind when it can serve volumes, else local.
        registers: OrchestratorKind,
        config: fn(&Path) -> Value,
    }
    let cases = [
        Case {
            env: Env::default().with("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            docker_up: true,
            kind: OrchestratorKind::Kubernetes,
            rule: DetectionRule::KubernetesServiceHost,
            registers: OrchestratorKind::Local,
            config: |dir| json!({"basePath": dir.join("volumes").display().to_string()}),
        },
        Case {
            env: Env::default().with("NOMAD_ADDR", "http://127.0.0.1:4646"),
            docker_up: true,
            kind: OrchestratorKind::Nomad,
            rule: DetectionRule::NomadAddr,
            registers: OrchestratorKind::Local,
            config: |dir| json!({"basePath": dir.join("volumes").display().to_string()}),
        },
        Case {
            env: Env::default().with("DOCKER_HOST", "tcp://engine:2376"),
            docker_up: true,
            kind: OrchestratorKind::Docker,
            rule: DetectionRule::DockerEngine,
            registers: OrchestratorKind::Docker,
            config: |_| json!({"host": "tcp://engine:2376"}),
        },
        Case {
            env: Env::default(),
            docker_up: true,
            kind: OrchestratorKind::Docker,
            rule: DetectionRule::DockerEngine,
            registers: OrchestratorKind::Docker,
            config: |_| json!({"host": DEFAULT_DOCKER_HOST}),
        },
        Case {
            env: Env::default().with("DOCKER_HOST", "tcp://engine:2376"),
            docker_up: false,
            kind: OrchestratorKind::Local,
            rule: DetectionRule::Fallback,
            registers: OrchestratorKind::Local,
            config: |dir| json!({"basePath": dir.join("volumes").display().to_string()}),
        },
        Case {
            env: Env::default().with("BERTH_LOCAL_BASE_PATH", "/var/lib/berth/vols/"),
            docker_up: false,
            kind: OrchestratorKind::Local,
            rule: DetectionRule::Fallback,
            registers: OrchestratorKind::Local,
            config: |_| json!({"basePath": "/var/lib/berth/vols"}),
        },
        // Kubernetes wins over Nomad; an empty variable counts as unset.
        Case {
            env: Env::default()
                .with("NOMAD_ADDR", "http://n:4646")
                .with("KUBERNETES_SERVICE_HOST", "k"),
            docker_up: false,
            kind: OrchestratorKind::Kubernetes,
            rule: DetectionRule::KubernetesServiceHost,
            registers: OrchestratorKind::Local,
            config: |dir| json!({"basePath": dir.join("volumes").display().to_string()}),
        },
        Case {
            env: Env::default().with("KUBERNETES_SERVICE_HOST", ""),
            docker_up: false,
            kind: OrchestratorKind::Local,
            rule: DetectionRule::Fallback,
            registers: OrchestratorKind::Local,
            config: |dir| json!({"basePath": dir.join("volumes").display().to_string()}),
        },
    ];
    for case in cases {
        let app = spawn_app_with(case.env.clone(), case.docker_up, None).await;
        let what = format!("{:?}", case.env);
        let d = app.registry.detect().await.unwrap();
        assert_eq!((d.kind, d.rule), (case.kind, case.rule), "{what}");
        assert!(!d.reason.is_empty());
        let raw = app.detect().await;
        assert_eq!(raw.body["kind"], case.kind.as_str());

        let default = app.registry.default_orchestrator().await.unwrap();
        assert_eq!(default.name, case.registers.as_str(), "{what}");
        assert_eq!(default.kind, case.registers, "{what}");
        assert!(default.storage_ops, "{what}: the default can serve volumes");
        assert_eq!(default.config, (case.config)(app.dir.path()), "{what}");
        assert_eq!(app.registry.list().await.unwrap().items.len(), 1, "{what}");
    }
}

#[tokio::test]
async fn the_detected_default_is_registered_only_on_the_very_first_start() {
    let app = spawn_app().await;
    assert_eq!(
        app.registry.default_orchestrator().await.unwrap().name,
        "local"
    );
    app.clear().await;
    let db = app.db_path();
    let dir = app.stop().await;
    assert!(db.exists());

    // A later start, even one whose environment now implies another kind, leaves the operator's
    // (empty) registry alone.
    let again = spawn_app_with(
        Env::default().with("KUBERNETES_SERVICE_HOST", "k"),
        false,
        Some(dir),
    )
    .await;
    assert_eq!(again.list().await.body, json!({"items": []}));
    assert_eq!(
        again.detect().await.body["kind"],
        "kubernetes",
        "detection itself is live"
    );
}
