//! storage-ops over real HTTP, against a fake orchestrator registry served in-process
//! (`fake_registry`: the registry's API, in memory), temporary databases and base paths, and (where
//! one answers) the Docker Engine. Tests of storage-ops together with the real registry are in the
//! workspace's `tests/tests/storage_with_registry.rs`.
//!
//! Docker tests skip with a printed reason when no Engine answers, and fail instead when
//! `BERTH_REQUIRE_DOCKER=1`. Every Docker volume a test makes carries the test's own namespace label
//! and is removed when the test ends, even when it fails.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use client::storage::ListParams;
use client::{ClientError, ClientOptions, ServiceClient};
use domain::orchestrator::RegisterOrchestrator;
use domain::volume::ReclaimPolicy;
use domain::{Code, OrchestratorKind, VolumePhase, VolumeProvisionerProfile};
use serde_json::{Value, json};
use service_kit::Env;
use service_kit::testing::eventually;
use storage_ops::env_vars;

const WAIT: Duration = Duration::from_secs(30);

/// The operator's allow-lists these tests run with: anything under the test's directory, and the
/// local Docker socket (plus one in the test's directory that nothing serves).
fn allowed(dir: &Path) -> [(&'static str, String); 2] {
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

mod fake_registry;

/// The registry, faked in-process on port 0 (`dir` is where the real one would keep its state).
async fn spawn_registry(_dir: &Path) -> String {
    fake_registry::spawn().await
}

/// storage-ops, served in-process on port 0.
async fn spawn_storage(db: &Path, registry_url: &str, extra: &[(&str, &str)]) -> String {
    service_kit::testing::init_test_logging();
    let mut env = Env::default();
    for (k, v) in allowed(db.parent().unwrap()) {
        env = env.with(k, v);
    }
    let mut env = env
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with(env_vars::STORAGE_DB, db.display().to_string())
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

struct TestApp {
    url: String,
    http: reqwest::Client,
    storage: client::storage::Client,
    registry: client::registry::Client,
    /// The `disk` orchestrator's base path.
    base: PathBuf,
    tmp: tempfile::TempDir,
}

fn storage_client(url: &str) -> client::storage::Client {
    client::storage::Client::new(ServiceClient::new(url, ClientOptions::default()))
}

fn registry_client(url: &str) -> client::registry::Client {
    client::registry::Client::new(ServiceClient::new(url, ClientOptions::default()))
}

/// A registry with a default `local` orchestrator `disk` at `<tmp>/vols`, and storage-ops over it.
async fn spawn_app() -> TestApp {
    spawn_app_with(&[]).await
}

async fn spawn_app_with(extra: &[(&str, &str)]) -> TestApp {
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

async fn register_local(
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

fn profile(name: &str, capacity: &str) -> VolumeProvisionerProfile {
    VolumeProvisionerProfile {
        name: name.into(),
        namespace: Some("team".into()),
        capacity: capacity.into(),
        ..Default::default()
    }
}

impl TestApp {
    async fn post_raw(&self, body: &Value) -> reqwest::Response {
        self.http
            .post(format!("{}/v1/volumes", self.url))
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// The backend objects (directories or files) under the `disk` base path for `ns`.
    fn objects(&self, ns: &str) -> Vec<String> {
        objects_under(&self.base, ns)
    }
}

fn objects_under(base: &Path, ns: &str) -> Vec<String> {
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

async fn problem(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    (status, response.json().await.unwrap())
}

/// Sends `method path` exactly as written (no client-side dot resolution) and returns the status.
async fn raw_status(method: &str, url: &str, path: &str) -> u16 {
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

fn code(e: &ClientError) -> Code {
    e.code()
}

#[tokio::test]
async fn standard_routes_answer_and_every_route_is_in_the_openapi() {
    let app = spawn_app().await;
    for path in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
        let r = app
            .http
            .get(format!("{}{path}", app.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let doc: Value = app
        .http
        .get(format!("{}/openapi.json", app.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["info"]["title"], "berth storage-ops");
    for (path, method) in [
        ("/v1/volumes", "post"),
        ("/v1/volumes", "get"),
        ("/v1/volumes/{namespace}/{name}", "get"),
        ("/v1/volumes/{namespace}/{name}", "delete"),
        ("/v1/volumes/{namespace}/{name}/stats", "get"),
        ("/v1/orphans", "get"),
    ] {
        assert!(doc["paths"][path][method].is_object(), "{method} {path}");
    }
    for schema in [
        "Volume",
        "VolumeList",
        "VolumeProvisionerProfile",
        "VolumeStats",
        "OrphanList",
        "DeleteResult",
        "Problem",
    ] {
        assert!(doc["components"]["schemas"][schema].is_object(), "{schema}");
    }
}

#[tokio::test]
async fn add_read_list_delete_round_trip() {
    let app = spawn_app().await;
    let mut p = profile("data", "1536Mi");
    p.labels = Some(BTreeMap::from([("app".into(), "db".into())]));
    let response = app.post_raw(&serde_json::to_value(&p).unwrap()).await;
    assert_eq!(response.status(), 201);
    assert_eq!(response.headers()["location"], "/v1/volumes/team/data");
    let created: domain::Volume = response.json().await.unwrap();
    assert_eq!(created.status.phase, VolumePhase::Ready);
    assert_eq!(created.spec.capacity, "1536Mi");
    assert_eq!(created.spec.capacity_bytes, 1536 << 20);
    assert_eq!(created.spec.orchestrator, "disk");
    assert_eq!(created.spec.replicas, 1);
    let uid = created.metadata.uid.clone();
    let dir = app.base.join("team").join(format!("data-{uid}"));
    assert_eq!(created.status.location, dir.display().to_string());
    assert!(dir.is_dir());

    // Read after create sees it, at once.
    let read = app.storage.get("team", "data").await.unwrap();
    assert_eq!(read, created);
    let list = app.storage.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items, vec![created.clone()]);
    assert!(list.continue_token.is_none());

    let gone = app.storage.delete("team", "data").await.unwrap();
    assert!(gone.deleted);
    assert!(!dir.exists());
    let again = app.storage.delete("team", "data").await.unwrap();
    assert!(
        !again.deleted,
        "a repeated delete is a 200 saying there was nothing"
    );
    let e = app.storage.get("team", "data").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound);
    assert_eq!(e.http_status, Some(404));
    let raw = app
        .http
        .get(format!("{}/v1/volumes", app.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(raw, r#"{"items":[]}"#);
}

#[tokio::test]
async fn the_same_spec_again_is_200_and_a_different_one_409_naming_the_fields() {
    let app = spawn_app().await;
    let (first, created) = app.storage.add(&profile("data", "1Gi")).await.unwrap();
    assert!(created);
    // 1024Mi is 1Gi: specs compare by bytes, not by spelling; naming the orchestrator it is on is the same.
    let mut same = profile("data", "1024Mi");
    same.orchestrator = Some("disk".into());
    let (again, created) = app.storage.add(&same).await.unwrap();
    assert!(!created);
    assert_eq!(again, first);

    let mut other = profile("data", "2Gi");
    other.replicas = Some(2);
    let e = app.storage.add(&other).await.unwrap_err();
    assert_eq!(code(&e), Code::AlreadyExists);
    assert_eq!(e.http_status, Some(409));
    assert!(
        e.status.message.contains("capacity is 1Gi (asked 2Gi)"),
        "{}",
        e.status.message
    );
    assert!(
        e.status.message.contains("replicas is 1 (asked 2)"),
        "{}",
        e.status.message
    );
    assert_eq!(app.storage.get("team", "data").await.unwrap(), first);
    assert_eq!(app.objects("team").len(), 1);
}

#[tokio::test]
async fn a_hundred_concurrent_adds_of_one_spec_make_one_directory_and_one_201() {
    let app = spawn_app().await;
    let calls = (0..100).map(|_| {
        let storage = app.storage.clone();
        async move { storage.add(&profile("shared", "1Gi")).await }
    });
    let results = futures::future::join_all(calls).await;
    let mut created = 0;
    let mut uids = HashSet::new();
    for r in results {
        let (v, c) = r.unwrap();
        created += usize::from(c);
        assert_eq!(v.status.phase, VolumePhase::Ready);
        uids.insert(v.metadata.uid);
    }
    assert_eq!(created, 1, "exactly one 201, the rest 200");
    assert_eq!(uids.len(), 1);
    assert_eq!(app.objects("team").len(), 1);
}

#[tokio::test]
async fn a_hundred_concurrent_adds_of_different_specs_conflict_and_leave_the_first_untouched() {
    let app = spawn_app().await;
    let calls = (1..=100).map(|i| {
        let storage = app.storage.clone();
        async move {
            (
                i,
                storage.add(&profile("contested", &format!("{i}Mi"))).await,
            )
        }
    });
    let results = futures::future::join_all(calls).await;
    let winners: Vec<_> = results.iter().filter(|(_, r)| r.is_ok()).collect();
    assert_eq!(winners.len(), 1);
    let (winner_i, winner) = winners[0];
    let (first, created) = winner.as_ref().unwrap();
    assert!(created);
    for (_, r) in &results {
        if let Err(e) = r {
            assert_eq!(code(e), Code::AlreadyExists, "{e}");
        }
    }
    let now = app.storage.get("team", "contested").await.unwrap();
    assert_eq!(&now, first);
    assert_eq!(now.spec.capacity_bytes, (*winner_i as u64) << 20);
    assert_eq!(app.objects("team").len(), 1);
}

#[tokio::test]
async fn a_body_that_is_not_an_object_is_a_400_and_nothing_is_made() {
    let app = spawn_app().await;
    // serde reads a struct from an array by position, so this was a 201 for volume "arrayvol".
    for body in [
        json!(["arrayvol", null, "1Mi"]),
        json!([["arrayvol"]]),
        json!("arrayvol"),
    ] {
        let (status, p) = problem(app.post_raw(&body).await).await;
        assert_eq!(status, 400, "{body}: {p}");
        assert_eq!(p["code"], 3, "{p}");
        let detail = p["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("body: must be a JSON object"),
            "{body}: {detail}"
        );
    }
    assert!(
        app.storage
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(app.objects("default").is_empty());
}

#[tokio::test]
async fn every_route_refuses_query_parameters_it_does_not_declare() {
    let app = spawn_app().await;
    app.storage.add(&profile("data", "1Gi")).await.unwrap();
    for (method, path, name) in [
        ("GET", "/v1/volumes?bogus=1", "bogus"),
        ("GET", "/v1/volumes?limit=5&Namespace=team", "Namespace"),
        ("GET", "/v1/volumes/team/data?bogus=1", "bogus"),
        ("GET", "/v1/volumes/team/data/stats?verbose", "verbose"),
        ("GET", "/v1/orphans?bogus=1", "bogus"),
        ("DELETE", "/v1/volumes/team/data?force=true", "force"),
        ("POST", "/v1/volumes?dryRun=true", "dryRun"),
    ] {
        let request = app
            .http
            .request(method.parse().unwrap(), format!("{}{path}", app.url));
        let request = if method == "POST" {
            request.json(&json!({"name": "other", "capacity": "1Gi"}))
        } else {
            request
        };
        let (status, p) = problem(request.send().await.unwrap()).await;
        assert_eq!(status, 400, "{method} {path}: {p}");
        assert_eq!(p["code"], 3, "{p}");
        let detail = p["detail"].as_str().unwrap();
        assert!(
            detail.starts_with(&format!("{name}: is not a query parameter of {method} ")),
            "{method} {path}: {detail}"
        );
    }
    // Nothing was made or removed by the refused calls; declared parameters still work.
    let page = app
        .storage
        .list(&ListParams {
            namespace: Some("team".into()),
            limit: Some(5),
            ..ListParams::default()
        })
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    let gone = app
        .storage
        .delete_with_policy("team", "data", ReclaimPolicy::Delete)
        .await
        .unwrap();
    assert!(gone.deleted);
}

#[tokio::test]
async fn capacities_have_one_limit_and_one_wording() {
    let app = spawn_app().await;
    const TOO_LARGE: &str =
        "is too large: a quantity must be less than 8Ei (at most 9223372036854775807 bytes)";
    for capacity in [
        "8Ei",
        "16Ei",
        "9223372036854775808",
        "18446744073709551616",
        "1e19",
        "1e400",
        "1e99999",
        "9300P",
    ] {
        let (status, p) = problem(
            app.post_raw(&json!({"name": "big", "capacity": capacity}))
                .await,
        )
        .await;
        assert_eq!(status, 400, "{capacity}: {p}");
        assert_eq!(
            p["detail"],
            format!("capacity: {capacity:?} {TOO_LARGE}"),
            "{capacity}"
        );
    }
    // An exponent and a unit together are not a quantity at all, whatever their size, and say why.
    for capacity in ["1e400Gi", "1e3Gi"] {
        let (status, p) = problem(
            app.post_raw(&json!({"name": "big", "capacity": capacity}))
                .await,
        )
        .await;
        assert_eq!(status, 400, "{capacity}: {p}");
        let detail = p["detail"].as_str().unwrap();
        assert!(
            detail.starts_with(&format!("capacity: {capacity:?} is not a quantity: ")),
            "{detail}"
        );
        assert!(detail.contains("not both"), "{detail}");
    }
    // Just under the limit is a capacity like any other.
    let (v, created) = app
        .storage
        .add(&profile("largest", "9223372036854775807"))
        .await
        .unwrap();
    assert!(created);
    assert_eq!(v.spec.capacity_bytes, i64::MAX as u64);
    assert!(app.storage.add(&profile("big", "7Ei")).await.unwrap().1);
}

#[tokio::test]
async fn bad_input_is_a_400_naming_the_field_and_nothing_is_made() {
    let app = spawn_app().await;
    let long = "a".repeat(64);
    let cases: Vec<(Value, &str)> = vec![
        (json!({"name": "../etc", "capacity": "1Gi"}), "name"),
        (json!({"name": "a/b", "capacity": "1Gi"}), "name"),
        (json!({"name": long, "capacity": "1Gi"}), "name"),
        (
            json!({"name": "ok", "namespace": "..", "capacity": "1Gi"}),
            "namespace",
        ),
        (
            json!({"name": "ok", "namespace": "a".repeat(64), "capacity": "1Gi"}),
            "namespace",
        ),
        (json!({"name": "ok", "capacity": "5Gb"}), "capacity"),
        (json!({"name": "ok", "capacity": "0"}), "capacity"),
        (
            json!({"name": "ok", "capacity": "1Gi", "replicas": 0}),
            "replicas",
        ),
        (
            json!({"name": "ok", "capacity": "1Gi", "labels": {"a": "b c"}}),
            "labels[a]",
        ),
        (
            json!({"name": "ok", "capacity": "1Gi", "parameters": {"format": "zfs"}}),
            "parameters.format",
        ),
        (
            json!({"name": "ok", "capacity": "1Gi", "size": "2"}),
            "size: unknown field `size`",
        ),
        (
            json!({"name": "ok", "capacity": "1Gi", "orchestrator": "nope"}),
            "orchestrator",
        ),
    ];
    for (body, field) in cases {
        let (status, p) = problem(app.post_raw(&body).await).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(p["code"], 3, "{body}");
        let detail = p["detail"].as_str().unwrap();
        assert!(detail.starts_with(field), "{body}: {detail}");
    }
    // Sent byte for byte: an HTTP client library would resolve the dots before they left.
    for path in [
        "/v1/volumes/../x",
        "/v1/volumes/%2E%2E/x",
        "/v1/volumes/team/%2E%2E",
        "/v1/volumes/team/..%2Fetc",
        "/v1/volumes/team/..%2F..%2Fetc/stats",
    ] {
        assert_eq!(raw_status("GET", &app.url, path).await, 400, "GET {path}");
        if !path.ends_with("/stats") {
            let status = raw_status("DELETE", &app.url, path).await;
            assert_eq!(status, 400, "DELETE {path}");
        }
    }
    for path in [
        &format!("/v1/volumes/team/{long}"),
        "/v1/volumes?limit=0",
        "/v1/volumes?limit=1001",
        "/v1/volumes?continue=garbage",
        "/v1/volumes?labelSelector=a%20in%20",
        "/v1/volumes?namespace=Bad",
    ] {
        let (status, p) = problem(
            app.http
                .get(format!("{}{path}", app.url))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!((status, p["code"].as_u64()), (400, Some(3)), "{path}: {p}");
    }
    let (status, p) = problem(
        app.http
            .delete(format!("{}/v1/volumes/team/x?reclaimPolicy=Keep", app.url))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert!(p["detail"].as_str().unwrap().starts_with("reclaimPolicy"));
    assert!(!app.base.exists() || std::fs::read_dir(&app.base).unwrap().count() == 0);
    assert!(
        app.storage
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn capacity_exhaustion_is_a_429_and_leaves_nothing() {
    let app = spawn_app().await;
    let small = app.tmp.path().join("small");
    register_local(&app.registry, "small", &small, Some("10Mi"), false).await;
    let mut p = profile("one", "6Mi");
    p.orchestrator = Some("small".into());
    app.storage.add(&p).await.unwrap();
    let mut q = profile("two", "6Mi");
    q.orchestrator = Some("small".into());
    let e = app.storage.add(&q).await.unwrap_err();
    assert_eq!(code(&e), Code::ResourceExhausted, "{e}");
    assert_eq!(e.http_status, Some(429));
    assert!(e.retry_after.is_some());
    assert!(
        e.status.message.contains("\"small\""),
        "{}",
        e.status.message
    );
    assert_eq!(objects_under(&small, "team").len(), 1);
    assert!(matches!(app.storage.get("team", "two").await, Err(e) if code(&e) == Code::NotFound));
    // Freeing space lets it in.
    app.storage.delete("team", "one").await.unwrap();
    app.storage.add(&q).await.unwrap();
}

#[tokio::test]
async fn orchestrators_that_cannot_serve_are_refused_with_their_reason() {
    let app = spawn_app().await;
    app.registry
        .register(
            "k8s",
            &RegisterOrchestrator::new(OrchestratorKind::Kubernetes),
        )
        .await
        .unwrap();
    let mut p = profile("data", "1Gi");
    p.orchestrator = Some("k8s".into());
    let e = app.storage.add(&p).await.unwrap_err();
    assert_eq!(code(&e), Code::FailedPrecondition, "{e}");
    assert!(
        e.status.message.contains("kubernetes"),
        "{}",
        e.status.message
    );

    p.orchestrator = Some("ghost".into());
    let e = app.storage.add(&p).await.unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument);
    assert!(
        e.status
            .message
            .contains("'ghost' is not a registered orchestration provider")
    );

    // No orchestrator named and no default.
    app.registry
        .register(
            "disk",
            &RegisterOrchestrator {
                config: Some(json!({"basePath": app.base.display().to_string()})),
                default: Some(false),
                ..RegisterOrchestrator::new(OrchestratorKind::Local)
            },
        )
        .await
        .unwrap();
    let e = app.storage.add(&profile("data", "1Gi")).await.unwrap_err();
    assert_eq!(code(&e), Code::FailedPrecondition, "{e}");
    assert!(
        app.storage
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn a_registry_that_is_down_or_failing_is_a_503_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    // Down: nothing listens.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    // Failing: answers 500. Hanging: answers after the registry timeout.
    let failing = service_kit::testing::spawn(
        axum::Router::new()
            .fallback(|| async { (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "boom") }),
    )
    .await;
    let hanging = service_kit::testing::spawn(axum::Router::new().fallback(|| async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        "late"
    }))
    .await;
    for (i, registry) in [closed, failing.url.clone(), hanging.url.clone()]
        .iter()
        .enumerate()
    {
        let db = tmp.path().join(format!("s{i}.db"));
        let url = spawn_storage(
            &db,
            registry,
            &[
                (env_vars::REGISTRY_TIMEOUT, "300ms"),
                ("BERTH_REQUEST_TIMEOUT", "5s"),
            ],
        )
        .await;
        let storage = storage_client(&url);
        let started = std::time::Instant::now();
        let e = storage.add(&profile("data", "1Gi")).await.unwrap_err();
        assert_eq!(code(&e), Code::Unavailable, "{registry}: {e}");
        assert_eq!(e.http_status, Some(503));
        assert!(e.retry_after.is_some(), "Retry-After on 503");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "inside the request timeout"
        );
        assert!(
            storage
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
        );
        let r = reqwest::get(format!("{url}/readyz")).await.unwrap();
        assert_eq!(r.status(), 503, "not ready without the registry");
    }
}

#[tokio::test]
async fn continue_tokens_are_signed_and_outlive_a_restart() {
    use base64::Engine as _;
    let app = spawn_app().await;
    for name in ["a", "b", "c"] {
        app.storage.add(&profile(name, "1Mi")).await.unwrap();
    }
    let first = app
        .storage
        .list(&ListParams {
            limit: Some(1),
            ..ListParams::default()
        })
        .await
        .unwrap();
    let token = first.continue_token.expect("a next page");
    // Forged positions: the old token format (base64url of a JSON pair) of positions this service
    // never issued, and an issued token with its position changed.
    let forge = |pair: Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(pair.to_string().as_bytes())
    };
    let (_, mac) = token.rsplit_once('.').expect("a signed token");
    for forged in [
        forge(json!(["../..", "%"])),
        forge(json!(["team", "a"])),
        format!("{}.{mac}", forge(json!(["team", "b"]))),
        format!("{token}x"),
        "garbage".to_string(),
    ] {
        let (status, p) = problem(
            app.http
                .get(format!("{}/v1/volumes", app.url))
                .query(&[("continue", forged.as_str())])
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 400, "{forged}: {p}");
        assert!(
            p["detail"]
                .as_str()
                .unwrap()
                .starts_with("continue: is not a token this service issued"),
            "{p}"
        );
    }
    // Another process on the same database (a restart) takes the token and goes on from it.
    let again = spawn_storage(
        &app.tmp.path().join("storage.db"),
        app.registry.service().base_url(),
        &[],
    )
    .await;
    let rest = storage_client(&again)
        .list(&ListParams {
            continue_token: Some(token),
            ..ListParams::default()
        })
        .await
        .unwrap();
    let names: Vec<_> = rest
        .items
        .iter()
        .map(|v| v.metadata.name.as_str())
        .collect();
    assert_eq!(names, ["b", "c"]);
}

/// Fails when `text` names any of `internals` (hosts, ports, paths, sockets).
fn assert_names_none(text: &str, internals: &[&str]) {
    for internal in internals {
        assert!(
            !text.contains(internal),
            "{internal:?} leaked into an answer: {text}"
        );
    }
}

#[tokio::test]
async fn no_5xx_names_an_internal_host_port_or_path() {
    let app = spawn_app().await;
    let tmp = app.tmp.path().display().to_string();
    app.storage.add(&profile("kept", "1Gi")).await.unwrap();
    // The registry down, failing with a body that names its own internals, or hanging.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let failing = service_kit::testing::spawn(axum::Router::new().fallback(|| async {
        (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "proxy: upstream http://10.9.8.7:6543/internal/db failed",
        )
    }))
    .await;
    let hanging = service_kit::testing::spawn(axum::Router::new().fallback(|| async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        "late"
    }))
    .await;
    for registry in [
        format!("http://{closed}"),
        failing.url.clone(),
        hanging.url.clone(),
    ] {
        let port = registry.rsplit(':').next().unwrap().to_string();
        let internals = [
            registry.as_str(),
            "127.0.0.1",
            port.as_str(),
            "10.9.8.7",
            "6543",
            "/internal",
            tmp.as_str(),
        ];
        // A second storage-ops on the same database, whose registry is this one.
        let url = spawn_storage(
            &app.tmp.path().join("storage.db"),
            &registry,
            &[(env_vars::REGISTRY_TIMEOUT, "300ms")],
        )
        .await;
        let storage = storage_client(&url);
        for e in [
            storage.add(&profile("new", "1Gi")).await.unwrap_err(),
            storage.delete("team", "kept").await.unwrap_err(),
        ] {
            assert_eq!(e.http_status, Some(503), "{registry}: {e}");
            assert!(
                e.status
                    .message
                    .contains("orchestrator registry is unavailable"),
                "{e}"
            );
            assert_names_none(&e.status.message, &internals);
        }
        let ready = reqwest::get(format!("{url}/readyz")).await.unwrap();
        assert_eq!(ready.status(), 503);
        assert_names_none(&ready.text().await.unwrap(), &internals);
    }
    // A backend that fails: a base path under a file (500), and an Engine socket nobody serves (503).
    let blocked = app.tmp.path().join("blocked");
    std::fs::write(&blocked, b"not a directory").unwrap();
    register_local(&app.registry, "blocked", &blocked.join("vols"), None, false).await;
    let socket = app.tmp.path().join("no-engine.sock");
    app.registry
        .register(
            "engine",
            &RegisterOrchestrator {
                config: Some(json!({"host": format!("unix://{}", socket.display())})),
                ..RegisterOrchestrator::new(OrchestratorKind::Docker)
            },
        )
        .await
        .unwrap();
    for (orchestrator, status) in [("blocked", 500), ("engine", 503)] {
        let mut p = profile(&format!("on-{orchestrator}"), "1Gi");
        p.orchestrator = Some(orchestrator.into());
        let e = app.storage.add(&p).await.unwrap_err();
        assert_eq!(e.http_status, Some(status), "{e}");
        assert_names_none(
            &e.status.message,
            &[tmp.as_str(), "no-engine.sock", "unix://"],
        );
        let v = app.storage.get("team", &p.name).await.unwrap();
        assert_eq!(v.status.phase, VolumePhase::Failed);
        assert_names_none(
            &v.status.message,
            &[tmp.as_str(), "no-engine.sock", "unix://"],
        );
        // Deleting it asks the backend again; that failure is no more telling.
        if let Err(e) = app.storage.delete("team", &p.name).await {
            assert_names_none(&e.status.message, &[tmp.as_str(), "no-engine.sock"]);
        }
    }
}

#[tokio::test]
async fn a_hung_registry_is_a_503_within_the_gateways_upstream_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let hanging = service_kit::testing::spawn(axum::Router::new().fallback(|| async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        "late"
    }))
    .await;
    // The gateway gives storage-ops 2s; nothing sets the registry timeout, so it follows from that.
    let url = spawn_storage(
        &tmp.path().join("storage.db"),
        &hanging.url,
        &[("BERTH_UPSTREAM_TIMEOUT", "2s")],
    )
    .await;
    let started = std::time::Instant::now();
    let e = storage_client(&url)
        .add(&profile("data", "1Gi"))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert_eq!(e.http_status, Some(503), "{e}");
    assert!(e.retry_after.is_some(), "Retry-After on 503");
    assert!(
        took < Duration::from_secs(2),
        "answered after {took:?}: the gateway would have given up first (504, no Retry-After)"
    );
}

#[tokio::test]
async fn pages_are_stable_complete_and_filtered_pages_are_full() {
    let app = spawn_app().await;
    let mut expected = Vec::new();
    for ns in ["alpha", "beta", "gamma"] {
        for i in 0..12 {
            let name = format!("v{i:02}");
            let mut p = profile(&name, "1Mi");
            p.namespace = Some(ns.into());
            if i % 3 == 0 {
                p.labels = Some(BTreeMap::from([("tier".into(), "gold".into())]));
            }
            app.storage.add(&p).await.unwrap();
            expected.push((ns.to_string(), name));
        }
    }
    expected.sort();
    let mut seen = Vec::new();
    let mut params = ListParams {
        limit: Some(10),
        ..Default::default()
    };
    let mut pages = 0;
    loop {
        let page = app.storage.list(&params).await.unwrap();
        pages += 1;
        seen.extend(
            page.items
                .iter()
                .map(|v| (v.metadata.namespace.clone(), v.metadata.name.clone())),
        );
        match page.continue_token {
            Some(t) => {
                assert_eq!(page.items.len(), 10, "only the last page is short");
                params.continue_token = Some(t);
            }
            None => break,
        }
    }
    assert_eq!(pages, 4);
    assert_eq!(seen, expected);

    let beta = app
        .storage
        .list_all(&ListParams {
            namespace: Some("beta".into()),
            limit: Some(5),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(beta.len(), 12);
    assert!(beta.iter().all(|v| v.metadata.namespace == "beta"));

    // 12 gold volumes spread over 36: a page of 4 still comes back full.
    let page = app
        .storage
        .list(&ListParams {
            label_selector: Some("tier=gold".into()),
            limit: Some(4),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(page.items.len(), 4);
    assert!(page.continue_token.is_some());
    let gold = app
        .storage
        .list_all(&ListParams {
            label_selector: Some("tier in (gold)".into()),
            limit: Some(4),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(gold.len(), 12);
    assert!(gold.iter().all(|v| v.metadata.labels["tier"] == "gold"));
    let none = app
        .storage
        .list(&ListParams {
            label_selector: Some("tier=silver".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(none.items.is_empty() && none.continue_token.is_none());
}

#[tokio::test]
async fn sparse_files_and_directories_report_stats() {
    let app = spawn_app().await;
    let mut p = profile("blob", "64Mi");
    p.parameters = Some(BTreeMap::from([("format".into(), "file".into())]));
    let (v, _) = app.storage.add(&p).await.unwrap();
    let meta = std::fs::metadata(&v.status.location).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.len(), 64 << 20);
    let stats = app.storage.stats("team", "blob").await.unwrap();
    assert_eq!(stats.capacity_bytes, 64 << 20);
    assert_eq!(stats.source, "file");
    assert!(stats.used_bytes.unwrap() < 1 << 20, "sparse: {stats:?}");
    assert!(stats.available_bytes.is_some());

    let (d, _) = app.storage.add(&profile("dir", "1Gi")).await.unwrap();
    std::fs::write(Path::new(&d.status.location).join("f"), vec![7u8; 100_000]).unwrap();
    let stats = app.storage.stats("team", "dir").await.unwrap();
    assert_eq!(stats.source, "walk");
    assert!(stats.used_bytes.unwrap() >= 100_000, "{stats:?}");

    let e = app.storage.stats("team", "nope").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound);
    app.storage.delete("team", "blob").await.unwrap();
    assert!(!Path::new(&v.status.location).exists());
}

#[tokio::test]
async fn a_backend_failure_keeps_the_volume_failed_with_its_message_and_a_retry_heals_it() {
    let app = spawn_app().await;
    // A base path that is a file: the backend cannot make directories under it.
    let blocked = app.tmp.path().join("blocked");
    std::fs::write(&blocked, b"not a directory").unwrap();
    register_local(&app.registry, "blocked", &blocked, None, false).await;
    let mut p = profile("data", "1Gi");
    p.orchestrator = Some("blocked".into());
    let e = app.storage.add(&p).await.unwrap_err();
    assert!(
        e.status.message.contains("kept as Failed"),
        "{}",
        e.status.message
    );
    let v = app.storage.get("team", "data").await.unwrap();
    assert_eq!(v.status.phase, VolumePhase::Failed);
    assert_eq!(v.status.reason, "BackendError");
    assert!(
        v.status.message.contains("base path"),
        "{}",
        v.status.message
    );

    std::fs::remove_file(&blocked).unwrap();
    let (healed, created) = app.storage.add(&p).await.unwrap();
    assert!(!created);
    assert_eq!(healed.status.phase, VolumePhase::Ready);
    assert_eq!(healed.metadata.uid, v.metadata.uid);
    assert!(Path::new(&healed.status.location).is_dir());
}

#[tokio::test]
async fn retained_objects_stay_and_are_not_orphans_while_stray_ones_are() {
    let app = spawn_app().await;
    let mut p = profile("keep", "1Gi");
    p.parameters = Some(BTreeMap::from([("reclaimPolicy".into(), "Retain".into())]));
    let (kept, _) = app.storage.add(&p).await.unwrap();
    let (other, _) = app.storage.add(&profile("other", "1Gi")).await.unwrap();
    assert!(app.storage.delete("team", "keep").await.unwrap().deleted);
    assert!(
        app.storage
            .delete_with_policy("team", "other", ReclaimPolicy::Retain)
            .await
            .unwrap()
            .deleted
    );
    assert!(Path::new(&kept.status.location).is_dir());
    assert!(Path::new(&other.status.location).is_dir());
    let stray_uid = uuid::Uuid::new_v4().to_string();
    let stray = app.base.join("team").join(format!("stray-{stray_uid}"));
    std::fs::create_dir_all(&stray).unwrap();
    std::fs::create_dir_all(app.base.join("team").join("not-berths")).unwrap();
    let orphans = app.storage.orphans().await.unwrap();
    assert_eq!(orphans.policy, "report");
    assert_eq!(orphans.items.len(), 1, "{orphans:?}");
    assert_eq!(orphans.items[0].uid, stray_uid);
    assert_eq!(orphans.items[0].orchestrator, "disk");
    assert_eq!(orphans.items[0].location, stray.display().to_string());
    assert!(stray.exists(), "report only");
}

#[tokio::test]
async fn the_delete_policy_removes_orphans_and_nothing_else() {
    let app = spawn_app_with(&[
        (env_vars::ORPHAN_POLICY, "delete"),
        (env_vars::RECONCILE_INTERVAL, "100ms"),
    ])
    .await;
    let (live, _) = app.storage.add(&profile("live", "1Gi")).await.unwrap();
    let stray = app
        .base
        .join("team")
        .join(format!("stray-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&stray).unwrap();
    eventually("the orphan is removed", WAIT, || async {
        (!stray.exists()).then_some(())
    })
    .await;
    assert!(app.storage.orphans().await.unwrap().items.is_empty());
    assert!(Path::new(&live.status.location).is_dir());
    assert_eq!(app.storage.get("team", "live").await.unwrap(), live);
}

#[tokio::test]
async fn a_restart_finishes_rows_a_crash_left_half_done() {
    let tmp = tempfile::tempdir().unwrap();
    let registry_url = spawn_registry(tmp.path()).await;
    let base = tmp.path().join("vols");
    register_local(&registry_client(&registry_url), "disk", &base, None, true).await;
    let db = tmp.path().join("storage.db");
    let config = json!({"basePath": base.display().to_string()});
    let (provisioning, deleting) = {
        let store = storage_ops::store::Store::open(&db).await.unwrap();
        let row = |name: &str, phase: VolumePhase, reason: &str| storage_ops::store::VolumeRow {
            uid: uuid::Uuid::new_v4().to_string(),
            namespace: "team".into(),
            name: name.into(),
            orchestrator: "disk".into(),
            kind: OrchestratorKind::Local,
            backend_config: config.clone(),
            capacity: "1Gi".into(),
            capacity_bytes: 1 << 30,
            replicas: 1,
            labels: BTreeMap::new(),
            parameters: BTreeMap::new(),
            spec_hash: String::new(),
            phase,
            reason: reason.into(),
            message: String::new(),
            location: String::new(),
            created_at: storage_ops::store::now(),
            updated_at: storage_ops::store::now(),
            resource_version: 0,
        };
        let p = store
            .insert(
                row("half-made", VolumePhase::Provisioning, "Provisioning"),
                None,
            )
            .await
            .unwrap();
        let d = store
            .insert(row("half-gone", VolumePhase::Deleting, "Deleting"), None)
            .await
            .unwrap();
        // The half-deleted volume's directory is still there.
        std::fs::create_dir_all(base.join("team").join(format!("half-gone-{}", d.uid))).unwrap();
        (p, d)
    };
    let url = spawn_storage(&db, &registry_url, &[]).await;
    let storage = storage_client(&url);
    let v = eventually("the provisioning row is finished", WAIT, || async {
        storage
            .get("team", "half-made")
            .await
            .ok()
            .filter(|v| v.status.phase == VolumePhase::Ready)
    })
    .await;
    assert_eq!(v.metadata.uid, provisioning.uid);
    assert!(Path::new(&v.status.location).is_dir());
    eventually("the deleting row is finished", WAIT, || async {
        storage
            .get("team", "half-gone")
            .await
            .is_err()
            .then_some(())
    })
    .await;
    assert!(
        !base
            .join("team")
            .join(format!("half-gone-{}", deleting.uid))
            .exists()
    );
}

// ---------------------------------------------------------------------------------------------
// Docker

/// Whether a Docker Engine answers; skips (or, with BERTH_REQUIRE_DOCKER=1, fails) when none does.
async fn docker_or_skip(test: &str) -> bool {
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
struct DockerSweep(String);

impl DockerSweep {
    fn volumes(&self) -> Vec<String> {
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

fn test_namespace(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

#[tokio::test]
async fn docker_volumes_are_made_labelled_measured_and_removed() {
    if !docker_or_skip("docker_volumes_are_made_labelled_measured_and_removed").await {
        return;
    }
    let app = spawn_app().await;
    let ns = test_namespace("dk");
    let sweep = DockerSweep(ns.clone());
    app.registry
        .register("dock", &RegisterOrchestrator::new(OrchestratorKind::Docker))
        .await
        .unwrap();
    let mut p = profile("data", "1Gi");
    p.namespace = Some(ns.clone());
    p.orchestrator = Some("dock".into());
    let (v, created) = app.storage.add(&p).await.unwrap();
    assert!(created);
    assert_eq!(v.status.phase, VolumePhase::Ready);
    let short: String = v.metadata.uid.replace('-', "")[..8].to_string();
    assert_eq!(v.status.location, format!("berth-{ns}-data-{short}"));
    assert_eq!(sweep.volumes(), vec![v.status.location.clone()]);
    let (again, created) = app.storage.add(&p).await.unwrap();
    assert!(!created);
    assert_eq!(again, v);
    let stats = app.storage.stats(&ns, "data").await.unwrap();
    assert_eq!(stats.capacity_bytes, 1 << 30);
    assert!(["docker", "walk", "unavailable"].contains(&stats.source.as_str()));

    // A labelled volume of this Berth that no row owns is an orphan; one of another Berth is not.
    assert!(app.storage.orphans().await.unwrap().items.is_empty());
    assert!(app.storage.delete(&ns, "data").await.unwrap().deleted);
    assert!(sweep.volumes().is_empty());
    assert!(!app.storage.delete(&ns, "data").await.unwrap().deleted);
}

// ---------------------------------------------------------------------------------------------
// Crash

/// Kills the child on drop, so a failed test leaves no service running.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

async fn start_binary(db: &Path, data: &Path, registry_url: &str) -> (Child, String) {
    let addr = free_addr();
    let quiet = std::env::var_os("TEST_LOG").is_none();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_storage-ops"))
        .env("BERTH_LISTEN", &addr)
        .env(env_vars::STORAGE_DB, db)
        .env("BERTH_DATA_DIR", data)
        .env(env_vars::REGISTRY_URL, registry_url)
        .env(env_vars::RECONCILE_INTERVAL, "200ms")
        .envs(allowed(data))
        .env("BERTH_LOG", "warn")
        .stdout(if quiet {
            std::process::Stdio::null()
        } else {
            std::process::Stdio::inherit()
        })
        .stderr(if quiet {
            std::process::Stdio::null()
        } else {
            std::process::Stdio::inherit()
        })
        .spawn()
        .expect("the storage-ops binary starts");
    let url = format!("http://{addr}");
    let probe = reqwest::Client::new();
    eventually("storage-ops answers /healthz", WAIT, || async {
        probe
            .get(format!("{url}/healthz"))
            .send()
            .await
            .ok()
            .filter(|r| r.status() == 200)
            .map(|_| ())
    })
    .await;
    (Child(child), url)
}

#[derive(Debug, Default, Clone)]
struct Fate {
    add_acked: bool,
    delete_sent: bool,
    delete_acked: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_mid_flight_loses_no_acknowledged_change_and_leaves_no_orphan() {
    let docker = docker_or_skip("a_sigkill_... (Docker half; the local half runs)").await;
    let tmp = tempfile::tempdir().unwrap();
    let registry_url = spawn_registry(tmp.path()).await;
    let registry = registry_client(&registry_url);
    let base = tmp.path().join("vols");
    register_local(&registry, "disk", &base, None, true).await;
    if docker {
        registry
            .register("dock", &RegisterOrchestrator::new(OrchestratorKind::Docker))
            .await
            .unwrap();
    }
    let ns = test_namespace("crash");
    let sweep = DockerSweep(ns.clone());
    let db = tmp.path().join("storage.db");
    let (child, url) = start_binary(&db, tmp.path(), &registry_url).await;
    let child = Arc::new(std::sync::Mutex::new(Some(child)));

    // 120 names: the first 80 are added then deleted, the rest only added: 200 calls.
    const NAMES: usize = 120;
    const DELETED: usize = 80;
    let fates = Arc::new(std::sync::Mutex::new(vec![Fate::default(); NAMES]));
    let acked = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(16));
    let storage = client::storage::Client::new(ServiceClient::new(
        &url,
        ClientOptions {
            attempts: 1,
            ..ClientOptions::default()
        },
    ));
    let mut tasks = Vec::new();
    for i in 0..NAMES {
        let (storage, fates, acked, gate, ns) = (
            storage.clone(),
            fates.clone(),
            acked.clone(),
            gate.clone(),
            ns.clone(),
        );
        let orchestrator = if docker && i % 2 == 1 { "dock" } else { "disk" };
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire().await.unwrap();
            let name = format!("v{i:03}");
            let p = VolumeProvisionerProfile {
                name: name.clone(),
                namespace: Some(ns.clone()),
                capacity: "1Mi".into(),
                orchestrator: Some(orchestrator.into()),
                ..Default::default()
            };
            if storage.add(&p).await.is_err() {
                return;
            }
            fates.lock().unwrap()[i].add_acked = true;
            acked.fetch_add(1, Ordering::SeqCst);
            if i < DELETED {
                fates.lock().unwrap()[i].delete_sent = true;
                if storage.delete(&ns, &name).await.is_ok_and(|r| r.deleted) {
                    fates.lock().unwrap()[i].delete_acked = true;
                    acked.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    // SIGKILL once half of the 200 calls are acknowledged, with up to 16 more in flight.
    {
        let acked = acked.clone();
        eventually("half the calls are acknowledged", WAIT, || async {
            (acked.load(Ordering::SeqCst) >= 100).then_some(())
        })
        .await;
    }
    let killed_at = acked.load(Ordering::SeqCst);
    drop(child.lock().unwrap().take()); // Child's drop sends SIGKILL
    for t in tasks {
        t.await.unwrap();
    }
    let fates = fates.lock().unwrap().clone();
    let in_flight = fates
        .iter()
        .filter(|f| f.delete_sent && !f.delete_acked)
        .count();
    eprintln!("killed after {killed_at} acknowledged calls; {in_flight} deletes were unanswered");

    let (_child, url) = start_binary(&db, tmp.path(), &registry_url).await;
    let storage = storage_client(&url);
    let volumes = eventually(
        "reconcile finishes every half-done volume",
        WAIT,
        || async {
            let all = storage
                .list_all(&ListParams {
                    namespace: Some(ns.clone()),
                    ..Default::default()
                })
                .await
                .ok()?;
            all.iter()
                .all(|v| v.status.phase == VolumePhase::Ready)
                .then_some(all)
        },
    )
    .await;
    let rows: HashMap<String, domain::Volume> = volumes
        .into_iter()
        .map(|v| (v.metadata.name.clone(), v))
        .collect();
    for (i, fate) in fates.iter().enumerate() {
        let name = format!("v{i:03}");
        if fate.delete_acked {
            assert!(
                !rows.contains_key(&name),
                "{name}: acknowledged delete came back"
            );
        } else if fate.add_acked && !fate.delete_sent {
            let v = rows
                .get(&name)
                .unwrap_or_else(|| panic!("{name}: acknowledged add lost"));
            assert_eq!(v.status.phase, VolumePhase::Ready, "{name}");
        }
    }
    // No backend object without a row: the file system and the Engine, checked directly.
    let uids: HashSet<String> = rows.values().map(|v| v.metadata.uid.clone()).collect();
    for object in objects_under(&base, &ns) {
        let uid = &object[object.len() - 36..];
        assert!(uids.contains(uid), "directory {object} has no row");
    }
    let local_rows = rows
        .values()
        .filter(|v| v.spec.orchestrator == "disk")
        .count();
    assert_eq!(
        objects_under(&base, &ns).len(),
        local_rows,
        "one directory per local row"
    );
    if docker {
        let docker_rows: HashSet<String> = rows
            .values()
            .filter(|v| v.spec.orchestrator == "dock")
            .map(|v| v.status.location.clone())
            .collect();
        let on_engine: HashSet<String> = sweep.volumes().into_iter().collect();
        assert_eq!(on_engine, docker_rows, "one Docker volume per docker row");
    }
    let orphans = storage.orphans().await.unwrap();
    assert!(orphans.items.is_empty(), "{orphans:?}");
    // Clean up the Engine through the API (the sweep catches anything left).
    for name in rows.keys() {
        storage.delete(&ns, name).await.unwrap();
    }
    if docker {
        assert!(sweep.volumes().is_empty());
    }
}
