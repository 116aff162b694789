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

    // A Docker volume has no size to grow: 412, saying so; its labels still change.
    let e = app
        .storage
        .patch(
            &ns,
            "data",
            &serde_json::json!({"spec": {"capacity": "2Gi"}}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.http_status, Some(412), "{e}");
    assert!(
        e.status.message.contains("Docker volume cannot grow"),
        "{e}"
    );
    app.storage
        .patch(
            &ns,
            "data",
            &serde_json::json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .await
        .unwrap();

    // A labelled volume of this Berth that no row owns is an orphan; one of another Berth is not.
    assert!(app.storage.orphans().await.unwrap().items.is_empty());
    assert!(app.storage.delete(&ns, "data").await.unwrap().deleted);
    assert!(sweep.volumes().is_empty());
    assert!(!app.storage.delete(&ns, "data").await.unwrap().deleted);
}

#[tokio::test]
async fn a_docker_volume_with_this_volumes_uid_but_another_stacks_instance_is_left_alone() {
    if !docker_or_skip(
        "a_docker_volume_with_this_volumes_uid_but_another_stacks_instance_is_left_alone",
    )
    .await
    {
        return;
    }
    // What a restored copy of a stack's database meets (`berth restore`): the original's volumes
    // carry the same names and uids, under the original's instance.
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
    let (v, _) = app.storage.add(&p).await.unwrap();
    let name = v.status.location.clone();
    let docker = |args: &[&str]| {
        let out = std::process::Command::new("docker")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    docker(&["volume", "rm", &name]);
    docker(&[
        "volume",
        "create",
        "--label",
        "io.berth.instance=the-original",
        "--label",
        &format!("io.berth.uid={}", v.metadata.uid),
        "--label",
        &format!("io.berth.namespace={ns}"),
        "--label",
        "io.berth.name=data",
        &name,
    ]);
    app.storage.delete(&ns, "data").await.unwrap();
    assert_eq!(
        sweep.volumes(),
        vec![name],
        "the other stack's volume stays"
    );
}
