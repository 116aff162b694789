//! The Docker backend against a real Engine (skipped with a reason when none answers).

use domain::orchestrator::RegisterOrchestrator;
use domain::{OrchestratorKind, VolumePhase};

use crate::support::*;

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
