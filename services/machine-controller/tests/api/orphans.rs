//! Orphan collection and MCM #657: a VM this controller made whose machine is gone is deleted after
//! two listings an interval apart; while the listing fails nothing is deleted (the stale or failed
//! listing that made MCM's collector delete live VMs); a live machine's VM and a VM someone made
//! through the driver directly are never touched.

use std::time::Duration;

use domain::resources::Kind;
use serde_json::json;

use crate::support::{KEY_ID, KEY_SECRET, NS, class_body, quick, running, spawn_app};

#[tokio::test]
async fn a_leaked_vm_goes_after_two_good_listings_and_nothing_goes_while_listings_fail() {
    let mut settings = quick();
    settings.orphan_interval = Duration::from_millis(500);
    let app = spawn_app(settings).await;
    app.alicloud_class("small", "ecs.g6.large").await;
    for name in ["keep", "leak"] {
        let (status, body) = app
            .post(
                "machines",
                json!({"metadata": {"name": name}, "spec": {"class": {"name": "small"}}}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    app.machines_until("both run", |m| running(m) == 2).await;
    // A VM made through the driver directly, with the same class: not the controller's.
    let class = class_body("small", "ecs.g6.large");
    let outsider = json!({
        "machine": {"metadata": {"name": "outsider", "namespace": NS, "uid": "outsider-uid"}},
        "machineClass": class,
        "secret": {"stringData": {"alicloudAccessKeyID": KEY_ID, "alicloudAccessKeySecret": KEY_SECRET}},
    });
    let made = reqwest::Client::new()
        .post(format!("{}/v1/machines:create", app.driver_url))
        .json(&outsider)
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), 200, "{}", made.text().await.unwrap());
    assert_eq!(app.instances().len(), 3);
    // Every listing fails from now on.
    app.emulator
        .set_faults(ecs_emulator::Faults {
            server_error_rate: 1.0,
            ..ecs_emulator::Faults::default()
        })
        .unwrap();
    // The machine "leak" vanishes from the store with its finalizer undone: its VM is left behind.
    let store = &app.controller.writer.store;
    store
        .update(Kind::Machine, NS, "leak", None, None, |body, _| {
            body["metadata"]["finalizers"] = json!([]);
            body["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            Ok(())
        })
        .await
        .unwrap();
    assert!(
        store
            .get(Kind::Machine, NS, "leak")
            .await
            .unwrap()
            .is_none()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let names: Vec<String> = app
        .instances()
        .iter()
        .map(|i| i["InstanceName"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names.len(),
        3,
        "a failed listing deleted something: {names:?}"
    );
    // Listings work again: the leaked VM goes, the others stay.
    app.emulator
        .set_faults(ecs_emulator::Faults::default())
        .unwrap();
    service_kit::testing::eventually(
        "the leaked VM is deleted",
        Duration::from_secs(30),
        || async {
            let names: Vec<String> = app
                .instances()
                .iter()
                .map(|i| i["InstanceName"].as_str().unwrap().to_string())
                .collect();
            (!names.contains(&"leak".to_string())).then_some(names)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut names: Vec<String> = app
        .instances()
        .iter()
        .map(|i| i["InstanceName"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["keep", "outsider"]);
    let (_, keep) = app.get("machines", "keep").await;
    assert_eq!(keep["status"]["phase"], "Running", "{keep}");
}

#[tokio::test]
async fn one_listing_is_not_enough_to_delete() {
    let mut settings = quick();
    // The background collector stays out of the way: this test runs the passes itself.
    settings.orphan_interval = Duration::from_secs(3600);
    let app = spawn_app(settings).await;
    app.alicloud_class("small", "ecs.g6.large").await;
    let (status, _) = app
        .post(
            "machines",
            json!({"metadata": {"name": "leak"}, "spec": {"class": {"name": "small"}}}),
        )
        .await;
    assert_eq!(status, 201);
    app.machines_until("it runs", |m| running(m) == 1).await;
    let store = &app.controller.writer.store;
    store
        .update(Kind::Machine, NS, "leak", None, None, |body, _| {
            body["metadata"]["finalizers"] = json!([]);
            body["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            Ok(())
        })
        .await
        .unwrap();
    let collect = machine_controller::reconcile::orphans::collect;
    let first = collect(&app.controller).await.unwrap();
    assert_eq!((first.listed, first.orphans, first.deleted), (1, 1, 0));
    // A second listing, but sooner than the interval after the first: still nothing.
    let second = collect(&app.controller).await.unwrap();
    assert_eq!((second.orphans, second.deleted), (1, 0));
    assert_eq!(app.instances().len(), 1);
}
