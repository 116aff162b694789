//! Restarts and kills on the same database file.

use std::path::Path;
use std::time::Duration;

use client::registry::Client as RegistryClient;
use client::{ClientOptions, ServiceClient};
use domain::OrchestratorKind;
use domain::orchestrator::RegisterOrchestrator;
use serde_json::json;
use service_kit::Env;
use service_kit::testing::{eventually, init_test_logging};

use crate::support::*;

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
        .map(|o| {
            o["resourceVersion"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .max()
        .unwrap();
    assert!(
        next.body["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > max_before
    );
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
        dir.path().join("volumes/local").display().to_string()
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
