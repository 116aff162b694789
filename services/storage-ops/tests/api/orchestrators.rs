//! The registry and the operator's allow-lists: orchestrators that cannot serve, a registry
//! that is down or hung and what a 5xx may name.

use std::time::Duration;

use client::storage::ListParams;
use domain::orchestrator::RegisterOrchestrator;
use domain::{Code, OrchestratorKind, VolumePhase};
use serde_json::{Value, json};
use storage_ops::env_vars;

use crate::support::*;

#[tokio::test]
async fn orchestrators_that_cannot_serve_are_refused_with_their_reason() {
    let app = spawn_app().await;
    // A kind without StorageOps (nomad), and a kubernetes registration outside what this
    // service's operator allows (registered before its limits, or with a registry set up apart).
    app.registry
        .register("batch", &RegisterOrchestrator::new(OrchestratorKind::Nomad))
        .await
        .unwrap();
    app.registry
        .register(
            "k8s",
            &RegisterOrchestrator {
                config: Some(json!({"server": "https://k8s.example:6443", "namespace": "v"})),
                ..RegisterOrchestrator::new(OrchestratorKind::Kubernetes)
            },
        )
        .await
        .unwrap();
    let mut p = profile("data", "1Gi");
    for (orchestrator, says) in [("batch", "nomad"), ("k8s", "BERTH_KUBERNETES_SERVERS")] {
        p.orchestrator = Some(orchestrator.into());
        let e = app.storage.add(&p).await.unwrap_err();
        assert_eq!(code(&e), Code::FailedPrecondition, "{e}");
        assert!(e.status.message.contains(says), "{}", e.status.message);
        // The caller may be a tenant that cannot read orchestrators: the refusal names the field
        // and the setting, never the address nor the allow-list (a break-it finding).
        assert!(
            !e.status.message.contains("k8s.example"),
            "{}",
            e.status.message
        );
        assert!(
            !e.status.message.contains("allowed:"),
            "{}",
            e.status.message
        );
    }

    p.orchestrator = Some("ghost".into());
    let e = app.storage.add(&p).await.unwrap_err();
    assert_eq!(code(&e), Code::FailedPrecondition);
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

/// Fails when `text` names any of `internals` (hosts, ports, paths, sockets). A problem's
/// `requestId` is left out of the search: it is 32 random hex digits, which now and then hold a
/// port's four.
fn assert_names_none(text: &str, internals: &[&str]) {
    let searched = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(mut problem)) => {
            problem.remove("requestId");
            Value::Object(problem).to_string()
        }
        _ => text.to_string(),
    };
    for internal in internals {
        assert!(
            !searched.contains(internal),
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
    // A backend that fails: a base path under a file (412, the operator's to mend), and an Engine
    // socket nobody serves (503).
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
    for (orchestrator, status) in [("blocked", 412), ("engine", 503)] {
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
