//! The built binary killed mid-flight: no acknowledged change lost, no orphan left.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use client::storage::ListParams;
use client::{ClientOptions, ServiceClient};
use domain::orchestrator::RegisterOrchestrator;
use domain::{OrchestratorKind, VolumePhase, VolumeProvisionerProfile};
use service_kit::testing::eventually;
use storage_ops::env_vars;

use crate::support::*;

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
        .env(env_vars::STORAGE_OPS_DB, db)
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
    // No backend object without a row: the file system and the Engine, checked directly. An add
    // the kill stopped between making its object and committing its row leaves an uncommitted
    // object, which the reconciler (every 200ms here) takes back: wait for its pass, then every
    // directory is a row's.
    let uids: HashSet<String> = rows.values().map(|v| v.metadata.uid.clone()).collect();
    let local_rows = rows
        .values()
        .filter(|v| v.spec.orchestrator == "disk")
        .count();
    let unowned = || -> Vec<String> {
        objects_under(&base, &ns)
            .into_iter()
            .filter(|o| !uids.contains(&o[o.len().saturating_sub(36)..]))
            .collect()
    };
    eventually("every directory is a row's", WAIT, || async {
        unowned().is_empty().then_some(())
    })
    .await;
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
