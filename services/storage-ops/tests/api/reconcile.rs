//! The reconciler: failed volumes, retained objects, orphans, rows a crash left half-done.

use std::collections::BTreeMap;
use std::path::Path;

use domain::volume::ReclaimPolicy;
use domain::{OrchestratorKind, VolumePhase};
use serde_json::json;
use service_kit::testing::eventually;
use storage_ops::env_vars;

use crate::support::*;

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

/// What an add stopped by a crash leaves, met by a restart under the default (`report`) policy:
/// the object of an add that never committed (mode 000, no row) is taken back, one whose row was
/// committed is marked committed and kept, and a committed object without a row is an orphan,
/// reported and kept.
#[tokio::test]
async fn a_restart_takes_back_adds_that_never_committed_and_reports_only_true_orphans() {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let tmp = tempfile::tempdir().unwrap();
    let registry_url = spawn_registry(tmp.path()).await;
    let base = tmp.path().join("vols");
    register_local(&registry_client(&registry_url), "disk", &base, None, true).await;
    let db = tmp.path().join("storage.db");
    let team = base.join("team");
    std::fs::create_dir_all(&team).unwrap();
    let made = |name: &str, mode: u32| {
        let uid = uuid::Uuid::new_v4().to_string();
        let at = team.join(format!("{name}-{uid}"));
        std::fs::DirBuilder::new().mode(mode).create(&at).unwrap();
        (uid, at)
    };
    let (_, abandoned) = made("abandoned", 0);
    let (stray_uid, stray) = made("stray", 0o700);
    let (committed_uid, committed) = made("committed", 0);
    {
        let store = storage_ops::store::Store::open(&db).await.unwrap();
        store
            .insert(
                storage_ops::store::VolumeRow {
                    uid: committed_uid.clone(),
                    namespace: "team".into(),
                    name: "committed".into(),
                    orchestrator: "disk".into(),
                    kind: OrchestratorKind::Local,
                    backend_config: json!({"basePath": base.display().to_string()}),
                    capacity: "1Gi".into(),
                    capacity_bytes: 1 << 30,
                    replicas: 1,
                    labels: BTreeMap::new(),
                    parameters: BTreeMap::new(),
                    spec_hash: String::new(),
                    phase: VolumePhase::Ready,
                    reason: "Provisioned".into(),
                    message: String::new(),
                    location: committed.display().to_string(),
                    created_at: storage_ops::store::now(),
                    updated_at: storage_ops::store::now(),
                    resource_version: 0,
                },
                None,
            )
            .await
            .unwrap();
    }
    let url = spawn_storage(&db, &registry_url, &[]).await;
    let storage = storage_client(&url);
    eventually("the abandoned object is taken back", WAIT, || async {
        (!abandoned.exists()).then_some(())
    })
    .await;
    eventually("the committed object is marked committed", WAIT, || async {
        let mode = std::fs::symlink_metadata(&committed).ok()?.mode() & 0o7777;
        (mode == 0o700).then_some(())
    })
    .await;
    let v = storage.get("team", "committed").await.unwrap();
    assert_eq!(v.status.phase, VolumePhase::Ready);
    let orphans = storage.orphans().await.unwrap();
    assert_eq!(orphans.policy, "report");
    let uids: Vec<&str> = orphans.items.iter().map(|o| o.uid.as_str()).collect();
    assert_eq!(uids, [stray_uid.as_str()]);
    assert!(stray.is_dir(), "a true orphan is only reported");
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
