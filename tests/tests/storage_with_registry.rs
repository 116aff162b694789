//! storage-ops with the real orchestrator registry, both served in-process on port 0: what only the
//! two services together show. The registry may allow more than storage-ops (an operator narrowed
//! storage-ops' settings since, or the registry's database holds older registrations), and
//! storage-ops must still refuse; and with an internal credential set, storage-ops presents it to
//! the registry, which refuses calls without it.
//!
//! storage-ops' own tests (`services/storage-ops/tests/`) run against a fake registry, so that crate
//! does not link the registry service.

use std::path::Path;

use client::storage::ListParams;
use client::{ClientError, ClientOptions, ServiceClient};
use domain::orchestrator::RegisterOrchestrator;
use domain::{Code, OrchestratorKind, VolumePhase, VolumeProvisionerProfile};
use serde_json::{Value, json};
use service_kit::Env;
use storage_ops::env_vars;

/// The operator's allow-lists these tests run with: anything under the test's directory, and the
/// local Docker socket.
fn allowed(dir: &Path) -> [(&'static str, String); 2] {
    [
        ("BERTH_LOCAL_ROOTS", dir.display().to_string()),
        (
            "BERTH_DOCKER_ENDPOINTS",
            domain::orchestrator::DEFAULT_DOCKER_HOST.to_string(),
        ),
    ]
}

/// The registry, served in-process on port 0, with `extra` settings over [`allowed`].
async fn spawn_registry_with(dir: &Path, extra: &[(&str, &str)]) -> String {
    let mut env = Env::default();
    for (k, v) in allowed(dir) {
        env = env.with(k, v);
    }
    for (k, v) in extra {
        env = env.with(k, *v);
    }
    let env = env
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with("BERTH_DATA_DIR", dir.display().to_string())
        .with(
            "BERTH_REGISTRY_DB",
            dir.join("registry.db").display().to_string(),
        )
        .with(
            "BERTH_LOCAL_BASE_PATH",
            dir.join("registry-default").display().to_string(),
        );
    let app = orchestrator_registry::build(orchestrator_registry::Config::from_env(&env).unwrap())
        .await
        .unwrap();
    let url = format!("http://{}", app.local_addr());
    tokio::spawn(app.run_until(std::future::pending()));
    url
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

fn storage_client(url: &str) -> client::storage::Client {
    client::storage::Client::new(ServiceClient::new(url, ClientOptions::default()))
}

fn registry_client(url: &str) -> client::registry::Client {
    client::registry::Client::new(ServiceClient::new(url, ClientOptions::default()))
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

fn code(e: &ClientError) -> Code {
    e.code()
}

#[tokio::test]
async fn storage_ops_uses_no_orchestrator_outside_what_its_operator_allows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // The registry allows all of the test's directory and a TCP Engine; storage-ops, as if it had
    // been configured more narrowly since (or the registry's database held older registrations),
    // only `allowed/` and the local socket.
    let registry_url = spawn_registry_with(
        dir,
        &[(
            "BERTH_DOCKER_ENDPOINTS",
            "unix:///var/run/docker.sock,tcp://127.0.0.1:9",
        )],
    )
    .await;
    let registry = registry_client(&registry_url);
    let allowed_root = dir.join("allowed");
    let allowed_root_text = allowed_root.display().to_string();
    let url = spawn_storage(
        &dir.join("storage.db"),
        &registry_url,
        &[
            ("BERTH_LOCAL_ROOTS", allowed_root_text.as_str()),
            ("BERTH_DOCKER_ENDPOINTS", "unix:///var/run/docker.sock"),
        ],
    )
    .await;
    let storage = storage_client(&url);
    register_local(&registry, "inside", &allowed_root.join("vols"), None, false).await;
    register_local(&registry, "elsewhere", &dir.join("elsewhere"), None, false).await;
    // Registered while nothing was there; a link planted afterwards leads outside.
    register_local(&registry, "linked", &allowed_root.join("link"), None, false).await;
    std::fs::create_dir_all(&allowed_root).unwrap();
    std::fs::create_dir_all(dir.join("outside")).unwrap();
    std::os::unix::fs::symlink(dir.join("outside"), allowed_root.join("link")).unwrap();
    registry
        .register(
            "remote",
            &RegisterOrchestrator {
                config: Some(json!({"host": "tcp://127.0.0.1:9"})),
                ..RegisterOrchestrator::new(OrchestratorKind::Docker)
            },
        )
        .await
        .unwrap();
    for (orchestrator, setting) in [
        ("elsewhere", "BERTH_LOCAL_ROOTS"),
        ("linked", "symbolic link"),
        ("remote", "BERTH_DOCKER_ENDPOINTS"),
    ] {
        let mut p = profile(&format!("on-{orchestrator}"), "1Gi");
        p.orchestrator = Some(orchestrator.into());
        let e = storage.add(&p).await.unwrap_err();
        assert_eq!(e.http_status, Some(412), "{orchestrator}: {e}");
        assert!(e.status.message.contains(setting), "{orchestrator}: {e}");
        assert!(
            !e.status
                .message
                .contains(&dir.join("outside").display().to_string()),
            "{e}"
        );
    }
    assert!(
        !dir.join("elsewhere").exists(),
        "nothing made outside the roots"
    );
    assert_eq!(std::fs::read_dir(dir.join("outside")).unwrap().count(), 0);
    assert!(
        storage
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len()
            <= 1,
        "at most a Failed record of the linked one"
    );
    let mut p = profile("fine", "1Gi");
    p.orchestrator = Some("inside".into());
    let (v, created) = storage.add(&p).await.unwrap();
    assert!(created && v.status.phase == VolumePhase::Ready);
    assert!(v.status.location.starts_with(&allowed_root_text));
}

#[tokio::test]
async fn the_internal_credential_is_required_and_presented_to_the_registry() {
    let tmp = tempfile::tempdir().unwrap();
    let env = Env::default()
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with("BERTH_DATA_DIR", tmp.path().display().to_string())
        .with("BERTH_LOCAL_ROOTS", tmp.path().display().to_string())
        .with("BERTH_INTERNAL_TOKEN", "s3cret");
    let registry =
        orchestrator_registry::build(orchestrator_registry::Config::from_env(&env).unwrap())
            .await
            .unwrap();
    let registry_url = format!("http://{}", registry.local_addr());
    tokio::spawn(registry.run_until(std::future::pending()));
    let with_token = |url: &str| {
        ServiceClient::new(
            url,
            ClientOptions {
                bearer: Some(service_kit::SecretString::new("s3cret")),
                ..ClientOptions::default()
            },
        )
    };
    register_local(
        &client::registry::Client::new(with_token(&registry_url)),
        "disk",
        &tmp.path().join("vols"),
        None,
        true,
    )
    .await;
    let url = spawn_storage(
        &tmp.path().join("storage.db"),
        &registry_url,
        &[("BERTH_INTERNAL_TOKEN", "s3cret")],
    )
    .await;
    let e = storage_client(&url)
        .add(&profile("data", "1Gi"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::Unauthenticated);
    let storage = client::storage::Client::new(with_token(&url));
    let (v, created) = storage.add(&profile("data", "1Gi")).await.unwrap();
    assert!(created && v.status.phase == VolumePhase::Ready);
    // Under `berth up` the credential is random and never shown: each service's own document must
    // still be readable without it, like the probes.
    for service in [&url, &registry_url] {
        let r = reqwest::get(format!("{service}/openapi.json"))
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            200,
            "{service}/openapi.json without the credential"
        );
        let doc: Value = r.json().await.unwrap();
        assert!(doc["paths"].is_object(), "{doc}");
    }
}
