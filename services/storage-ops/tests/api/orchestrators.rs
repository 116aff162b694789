//! The registry and the operator's allow-lists: orchestrators that cannot serve, a registry
//! that is down or hung, what a 5xx may name, the internal credential.

use std::time::Duration;

use client::storage::ListParams;
use client::{ClientOptions, ServiceClient};
use domain::orchestrator::RegisterOrchestrator;
use domain::{Code, OrchestratorKind, VolumePhase};
use serde_json::{Value, json};
use service_kit::Env;
use storage_ops::env_vars;

use crate::support::*;

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
