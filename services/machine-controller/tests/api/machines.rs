//! A machine's life through the controller: made, Running, replaced when its VM dies behind
//! Berth's back, and deleted with its VM.

use std::time::Duration;

use serde_json::json;

use crate::support::{NS, phase, quick, running, spawn_app};

#[tokio::test]
async fn a_machine_runs_and_its_delete_takes_the_vm_with_it() {
    let app = spawn_app(quick()).await;
    app.alicloud_class("small", "ecs.g6.large").await;
    let (status, made) = app
        .post("machines", json!({"metadata": {"name": "worker-1", "labels": {"pool": "a"}}, "spec": {"class": {"name": "small"}}}))
        .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["metadata"]["finalizers"], json!(["berth.io/machine"]));
    let machines = app
        .machines_until("worker-1 runs", |m| running(m) == 1)
        .await;
    let status = &machines[0]["status"];
    assert!(
        status["providerID"]
            .as_str()
            .unwrap()
            .starts_with("cn-shanghai.i-"),
        "{status}"
    );
    assert!(
        !status["addresses"].as_array().unwrap().is_empty(),
        "{status}"
    );
    assert_eq!(app.instances().len(), 1);
    assert_eq!(app.instances()[0]["InstanceName"], "worker-1");
    // Read by name alone.
    let (code, read) = app.get("machines", "worker-1").await;
    assert_eq!(code, 200);
    assert_eq!(phase(&read), "Running");
    let (code, deleting) = app.delete("machines", "worker-1").await;
    assert_eq!(code, 200, "{deleting}");
    assert!(
        deleting["metadata"]["deletionTimestamp"].is_string(),
        "{deleting}"
    );
    service_kit::testing::eventually("worker-1 is gone", Duration::from_secs(30), || async {
        (app.get("machines", "worker-1").await.0 == 404).then_some(())
    })
    .await;
    assert!(app.instances().is_empty(), "{:?}", app.instances());
}

#[tokio::test]
async fn a_set_keeps_its_replicas_and_replaces_a_vm_killed_behind_its_back() {
    let app = spawn_app(quick()).await;
    app.alicloud_class("small", "ecs.g6.large").await;
    let set = json!({"metadata": {"name": "workers"}, "spec": {"replicas": 5,
        "selector": {"matchLabels": {"pool": "w"}},
        "template": {"metadata": {"labels": {"pool": "w"}}, "spec": {"class": {"name": "small"}}}}});
    let (status, body) = app.post("machinesets", set).await;
    assert_eq!(status, 201, "{body}");
    let machines = app
        .machines_until("5 machines run", |m| m.len() == 5 && running(m) == 5)
        .await;
    assert_eq!(app.instances().len(), 5);
    // Kill one VM behind Berth's back: Unknown, then Failed after the health timeout, then
    // replaced by a new machine with a VM of its own.
    let victim = machines[0].clone();
    let provider_id = victim["status"]["providerID"].as_str().unwrap();
    let instance = provider_id.rsplit_once('.').unwrap().1;
    app.ecs()
        .delete_instance(
            instance,
            true,
            alicloud::deadline_in(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    let victim_name = victim["metadata"]["name"].as_str().unwrap().to_string();
    let machines = app
        .machines_until("the killed machine is replaced", |m| {
            m.len() == 5
                && running(m) == 5
                && !m
                    .iter()
                    .any(|x| x["metadata"]["name"] == victim_name.as_str())
        })
        .await;
    assert_eq!(app.instances().len(), 5);
    let (_, set) = app.get("machinesets", "workers").await;
    assert_eq!(set["status"]["readyReplicas"], 5, "{set}");
    // The failure count in a row is back to zero once the replacement runs.
    assert_eq!(set["status"]["failures"], 0, "{set}");
    // Scale down to 2, preserving one machine: it is never the one picked.
    let keep = machines[4]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, _) = app
        .patch(
            "machines",
            &keep,
            json!({"metadata": {"annotations": {"berth.io/preserve": "true"}}}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = app
        .patch("machinesets", "workers", json!({"spec": {"replicas": 2}}))
        .await;
    assert_eq!(status, 200);
    let machines = app
        .machines_until("2 machines", |m| m.len() == 2 && running(m) == 2)
        .await;
    assert!(
        machines
            .iter()
            .any(|m| m["metadata"]["name"] == keep.as_str()),
        "{machines:?}"
    );
    service_kit::testing::eventually("2 VMs", Duration::from_secs(30), || async {
        (app.instances().len() == 2).then_some(())
    })
    .await;
    // Deleting the set deletes its machines and their VMs, then the set.
    let (status, _) = app.delete("machinesets", "workers").await;
    assert_eq!(status, 200);
    service_kit::testing::eventually("everything is gone", Duration::from_secs(30), || async {
        let gone = app.list("machines").await.is_empty()
            && app.get("machinesets", "workers").await.0 == 404
            && app.instances().is_empty();
        gone.then_some(())
    })
    .await;
    let _ = NS;
}
