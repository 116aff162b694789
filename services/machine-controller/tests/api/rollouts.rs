//! Machine deployments: a template or class change rolls the machines within maxSurge and
//! maxUnavailable.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;

use crate::support::{quick, running, spawn_app};

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
