//! DeleteMachine.

use std::time::Duration;

use alicloud::{RunInstances, Tag, deadline_in};
use domain::Code;
use ecs_emulator::Faults;
use serde_json::Value;

use crate::support::*;

#[tokio::test]
async fn delete_machine_with_provider_id() {
    let app = spawn_app().await;
    let created = app.create(&req("m-del")).await.unwrap();
    let id = instance_id(&created.provider_id).to_owned();
    let d = app
        .delete(&with_provider_id(req("m-del"), &created.provider_id))
        .await
        .unwrap();
    assert!(
        d.last_known_state
            .starts_with(&format!("ECS instance(s) [{id}] deleted for machine m-del")),
        "{d:?}"
    );
    assert_eq!(app.emulator.instance_count(), 0);
    assert_eq!(app.emulator.network_interface_count(), 0);
    // Only the disk the spec asked to keep stays, detached.
    let state = app.state();
    let disks = state["disks"].as_array().unwrap();
    assert_eq!(disks.len(), 1, "{disks:?}");
    assert_eq!(disks[0]["DiskName"], "m-del-keep-data-disk");
    assert_eq!(disks[0]["Status"], "Available");
    let e = app.status(&req("m-del")).await.unwrap_err();
    assert_code(&e, Code::NotFound, 404);
}

#[tokio::test]
async fn delete_machine_without_provider_id() {
    let app = spawn_app().await;
    app.create(&req("m-del2")).await.unwrap();
    app.create(&req("m-other")).await.unwrap();
    let d = app.delete(&req("m-del2")).await.unwrap();
    assert!(
        d.last_known_state.contains("deleted for machine m-del2"),
        "{d:?}"
    );
    assert!(app.instances_named("m-del2").is_empty());
    assert_eq!(
        app.instances_named("m-other").len(),
        1,
        "other machines untouched"
    );
}

#[tokio::test]
async fn delete_without_provider_id_releases_every_same_named_instance_across_pages() {
    let app = spawn_app().await;
    let ecs = app.ecs();
    let ids = futures::future::join_all((0..102).map(|n| {
        let ecs = ecs.clone();
        async move {
            let run = RunInstances {
                image_id: "m-image-1".into(),
                instance_type: "ecs.g6.large".into(),
                instance_name: Some("m-many".into()),
                tags: vec![
                    Tag::new(CLUSTER_TAG, "1"),
                    Tag::new(ROLE_TAG, "1"),
                    Tag::new(NAMESPACE_STAMP, NAMESPACE),
                ],
                client_token: Some(format!("token-{n}")),
                ..RunInstances::default()
            };
            ecs.run_instances(&run, deadline_in(Duration::from_secs(10)))
                .await
                .unwrap()
        }
    }))
    .await;
    assert_eq!(ids.len(), 102);
    let foreign = app
        .run_directly("m-many", &[("kubernetes.io/cluster/other", "1")])
        .await;
    let before = app.calls("DescribeInstances");
    app.delete(&req("m-many")).await.unwrap();
    assert_eq!(
        app.calls("DescribeInstances") - before,
        2,
        "two pages of 100"
    );
    let left = app.instances_named("m-many");
    assert_eq!(left.len(), 1, "only the other cluster's VM is left");
    assert_eq!(left[0]["InstanceId"], foreign.as_str());
}

#[tokio::test]
async fn a_delete_without_the_machines_uid_says_the_name_is_held_and_leaves_the_vm() {
    // A break-it finding: sent without the UID (or with another), the delete released nothing
    // and said only "nothing to release", so the caller took a running VM for gone.
    let app = spawn_app().await;
    app.create(&req("m-held")).await.unwrap();
    for uid in ["", "another-uid"] {
        let mut r = req("m-held");
        r.machine.metadata.uid = uid.into();
        let d = app.delete(&r).await.unwrap();
        assert!(d.last_known_state.contains("nothing to release"), "{d:?}");
        assert!(
            d.last_known_state
                .contains("is held by a VM made for another machine UID in this namespace"),
            "{uid:?}: {d:?}"
        );
        assert_eq!(app.instances_named("m-held").len(), 1, "left running");
    }
    // A name nobody holds says nothing more.
    let d = app.delete(&req("m-free")).await.unwrap();
    assert!(!d.last_known_state.contains("held"), "{d:?}");
}

#[tokio::test]
async fn delete_of_a_missing_machine_is_ok() {
    let app = spawn_app().await;
    let d = app.delete(&req("m-never")).await.unwrap();
    assert!(d.last_known_state.contains("nothing to release"), "{d:?}");
    // MCM alicloud answered NotFound here; the contract says OK.
    let d = app
        .delete(&with_provider_id(
            req("m-never"),
            "cn-shanghai.i-doesnotexist",
        ))
        .await
        .unwrap();
    assert!(d.last_known_state.contains("nothing to release"), "{d:?}");
}

#[tokio::test]
async fn delete_with_an_orphans_provider_id_never_touches_the_named_machine() {
    // MCM's orphan collector sends a live machine's name with an orphan VM's providerID.
    let app = spawn_app().await;
    let live = app.create(&req("m-live")).await.unwrap();
    app.delete(&with_provider_id(req("m-live"), "cn-shanghai.i-orphangone"))
        .await
        .unwrap();
    let s = app.status(&req("m-live")).await.unwrap();
    assert_eq!(s.provider_id, live.provider_id);
    // And another cluster's VM is out of reach even by its providerID.
    let foreign = app
        .run_directly(
            "m-foreign",
            &[("kubernetes.io/cluster/other", "1"), (ROLE_TAG, "1")],
        )
        .await;
    app.delete(&with_provider_id(
        req("m-foreign"),
        &format!("{REGION}.{foreign}"),
    ))
    .await
    .unwrap();
    assert_eq!(app.instances_named("m-foreign").len(), 1);
}

#[tokio::test]
async fn delete_while_pending_is_unavailable() {
    let app = spawn_app().await;
    let created = app.create(&req("m-pending")).await.unwrap();
    let id = instance_id(&created.provider_id).to_owned();
    app.emulator.pin_status(&id, "Pending").unwrap();
    let r = with_provider_id(req("m-pending"), &created.provider_id);
    let (status, headers, body) = app
        .raw("/v1/machines:delete", &serde_json::to_value(&r).unwrap())
        .await;
    assert_eq!(status, 503);
    assert_eq!(body["code"], 14);
    assert!(headers.contains_key("retry-after"));
    assert!(
        body["detail"].as_str().unwrap().contains(&format!(
            "ECS instance not in running/stopped state: {id} is Pending"
        )),
        "{body}"
    );
    assert_eq!(app.emulator.instance_count(), 1, "nothing released");
    app.emulator.pin_status(&id, "Stopping").unwrap();
    let e = app.delete(&r).await.unwrap_err();
    assert_code(&e, Code::Unavailable, 503);
    app.emulator.unpin(&id).unwrap();
    app.delete(&r).await.unwrap();
    assert_eq!(app.emulator.instance_count(), 0);
}

#[tokio::test]
async fn delete_cleans_leftover_disks_and_network_interfaces() {
    let app = spawn_app().await;
    let created = app.create(&req("m-leaky")).await.unwrap();
    app.create(&req("m-neighbour")).await.unwrap();
    // ECS releases the instance but leaves its disks and NIC behind, detached.
    app.emulator
        .set_faults(Faults {
            leak_on_delete: true,
            ..Faults::default()
        })
        .unwrap();
    let d = app
        .delete(&with_provider_id(req("m-leaky"), &created.provider_id))
        .await
        .unwrap();
    assert!(d.last_known_state.contains("leftovers deleted"), "{d:?}");
    let state = app.state();
    let nics = state["networkInterfaces"].as_array().unwrap();
    assert_eq!(nics.len(), 1, "only the neighbour's NIC: {nics:?}");
    assert_eq!(nics[0]["Status"], "InUse");
    let leaky_disks: Vec<&Value> = state["disks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["InstanceId"] == "")
        .collect();
    assert_eq!(leaky_disks.len(), 1, "{leaky_disks:?}");
    assert_eq!(leaky_disks[0]["DiskName"], "m-leaky-keep-data-disk");
    // The neighbour's three disks are all still attached.
    assert_eq!(app.emulator.disk_count(), 4);

    // A machine whose VM is already gone still gets its leftovers cleaned (MCM #850).
    let created = app.create(&req("m-leaky2")).await.unwrap();
    app.ecs()
        .delete_instance(
            instance_id(&created.provider_id),
            true,
            deadline_in(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    assert_eq!(app.emulator.network_interface_count(), 2);
    let d = app.delete(&req("m-leaky2")).await.unwrap();
    assert!(d.last_known_state.contains("nothing to release"), "{d:?}");
    assert!(d.last_known_state.contains("leftovers deleted"), "{d:?}");
    assert_eq!(app.emulator.network_interface_count(), 1);
}
