//! Machine deployments: a template or class change rolls the machines within maxSurge and
//! maxUnavailable.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;

use crate::support::{detail, quick, running, spawn_app};

#[tokio::test]
async fn a_class_change_rolls_a_deployment_within_its_surge() {
    let app = Arc::new(spawn_app(quick()).await);
    app.alicloud_class("small", "ecs.g6.large").await;
    let deployment = json!({"metadata": {"name": "pool"}, "spec": {"replicas": 3,
        "selector": {"matchLabels": {"pool": "p"}},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
        "template": {"metadata": {"labels": {"pool": "p"}}, "spec": {"class": {"name": "small"}}}}});
    let (status, body) = app.post("machinedeployments", deployment).await;
    assert_eq!(status, 201, "{body}");
    let first = app
        .machines_until("3 machines run", |m| m.len() == 3 && running(m) == 3)
        .await;
    let (_, d) = app.get("machinedeployments", "pool").await;
    let first_hash = d["status"]["templateHash"].as_str().unwrap().to_string();
    // Watch the VM count while the class changes: never above replicas + maxSurge.
    let most = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (app, most) = (app.clone(), most.clone());
        tokio::spawn(async move {
            loop {
                most.fetch_max(app.instances().len(), Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let (status, body) = app
        .patch(
            "machineclasses",
            "small",
            json!({"providerSpec": {"instanceType": "ecs.g6.xlarge"}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let old_names: Vec<String> = first
        .iter()
        .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    service_kit::testing::eventually("the deployment rolled", Duration::from_secs(60), || async {
        let machines = app.list("machines").await;
        let rolled = machines.len() == 3
            && running(&machines) == 3
            && machines
                .iter()
                .all(|m| !old_names.contains(&m["metadata"]["name"].as_str().unwrap().to_string()));
        let (_, d) = app.get("machinedeployments", "pool").await;
        (rolled && d["status"]["updatedReplicas"] == 3 && app.list("machinesets").await.len() == 1)
            .then_some(())
    })
    .await;
    watcher.abort();
    assert!(
        most.load(Ordering::SeqCst) <= 4,
        "{} VMs at once",
        most.load(Ordering::SeqCst)
    );
    let (_, d) = app.get("machinedeployments", "pool").await;
    assert_ne!(d["status"]["templateHash"], first_hash.as_str());
    assert!(
        app.instances()
            .iter()
            .all(|i| i["InstanceType"] == "ecs.g6.xlarge"),
        "{:?}",
        app.instances()
    );
    // Scale down, then delete: everything goes.
    let (status, _) = app
        .patch(
            "machinedeployments",
            "pool",
            json!({"spec": {"replicas": 1}}),
        )
        .await;
    assert_eq!(status, 200);
    app.machines_until("1 machine", |m| m.len() == 1 && running(m) == 1)
        .await;
    let (status, _) = app.delete("machinedeployments", "pool").await;
    assert_eq!(status, 200);
    service_kit::testing::eventually("all gone", Duration::from_secs(30), || async {
        (app.list("machines").await.is_empty()
            && app.instances().is_empty()
            && app.get("machinedeployments", "pool").await.0 == 404)
            .then_some(())
    })
    .await;
}

/// A class's cluster tags changed under its machines (a break-it finding): the roll's deletes
/// still find the old VMs by their providerID, so none is left running with no machine behind it.
/// What no machine could survive, a class's provider or a machine's class changed, is refused.
#[tokio::test]
async fn a_class_tag_change_rolls_and_leaves_no_vm_behind() {
    let app = spawn_app(quick()).await;
    app.alicloud_class("small", "ecs.g6.large").await;
    let deployment = json!({"metadata": {"name": "pool"}, "spec": {"replicas": 2,
        "selector": {"matchLabels": {"pool": "p"}},
        "template": {"metadata": {"labels": {"pool": "p"}}, "spec": {"class": {"name": "small"}}}}});
    let (status, body) = app.post("machinedeployments", deployment).await;
    assert_eq!(status, 201, "{body}");
    let first = app
        .machines_until("2 machines run", |m| m.len() == 2 && running(m) == 2)
        .await;
    let old = first[0]["metadata"]["name"].as_str().unwrap().to_string();

    let (status, refused) = app
        .patch("machineclasses", "small", json!({"provider": "Docker"}))
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        detail(&refused).starts_with("provider: cannot be changed"),
        "{refused}"
    );
    let (status, refused) = app
        .patch(
            "machines",
            &old,
            json!({"spec": {"class": {"name": "other"}}}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        detail(&refused).starts_with("spec.class.name: cannot be changed"),
        "{refused}"
    );

    let (status, body) = app
        .patch(
            "machineclasses",
            "small",
            json!({"providerSpec": {"tags": {
                "kubernetes.io/cluster/shoot--ctl": null,
                "kubernetes.io/role/worker/shoot--ctl": null,
                "kubernetes.io/cluster/shoot--moved": "1",
                "kubernetes.io/role/worker/shoot--moved": "1"}}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let old_names: Vec<&str> = first
        .iter()
        .map(|m| m["metadata"]["name"].as_str().unwrap())
        .collect();
    app.machines_until("the deployment rolled", |m| {
        m.len() == 2
            && running(m) == 2
            && m.iter()
                .all(|x| !old_names.contains(&x["metadata"]["name"].as_str().unwrap()))
    })
    .await;
    service_kit::testing::eventually(
        "only the new machines' VMs are left",
        Duration::from_secs(30),
        || async {
            let instances = app.instances();
            let moved = instances.iter().all(|i| {
                i["Tags"]["Tag"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|t| t["TagKey"] == "kubernetes.io/cluster/shoot--moved")
            });
            (instances.len() == 2 && moved).then_some(())
        },
    )
    .await;
}
