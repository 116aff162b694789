//! GetMachineStatus.

use domain::Code;

use crate::support::*;

#[tokio::test]
async fn get_machine_status_successfully() {
    let app = spawn_app().await;
    let created = app.create(&req("m-status")).await.unwrap();
    let s = app.status(&req("m-status")).await.unwrap();
    assert_eq!(s.provider_id, created.provider_id);
    assert_eq!(s.node_name, created.node_name);
    assert!(s.addresses.iter().any(|a| a.kind == "InternalIP"));
    // The ECS status, and whether the VM is initialised (first_day.rs covers the `False` side).
    assert_eq!(s.conditions.len(), 2);
    assert_eq!(s.conditions[1].kind, "Initialized");
    assert_eq!(s.conditions[1].status, "True");
    assert_eq!(s.conditions[0].kind, "InstanceStatus");
    assert_eq!(s.conditions[0].reason, "Running");
    assert_eq!(s.conditions[0].status, "True");
    // By providerID first: found even when the name does not match.
    let mut other = with_provider_id(req("m-renamed"), &created.provider_id);
    other.machine.metadata.name = "m-renamed".into();
    let s = app.status(&other).await.unwrap();
    assert_eq!(s.provider_id, created.provider_id);
    // A stale providerID falls back to the name.
    let s = app
        .status(&with_provider_id(req("m-status"), "cn-shanghai.i-gone"))
        .await
        .unwrap();
    assert_eq!(s.provider_id, created.provider_id);
}

#[tokio::test]
async fn status_not_found_and_out_of_range() {
    let app = spawn_app().await;
    let (status, _, body) = app
        .raw(
            "/v1/machines:status",
            &serde_json::to_value(req("m-none")).unwrap(),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(body["code"], 5);
    assert_eq!(
        body["machineCodesError"],
        "machine codes error: code = [NotFound] message = [VM instance not found backing this machine object \"m-none\"]"
    );
    // A same-named VM of another cluster is not this machine's.
    app.run_directly(
        "m-dup",
        &[("kubernetes.io/cluster/other", "1"), (ROLE_TAG, "1")],
    )
    .await;
    let e = app.status(&req("m-dup")).await.unwrap_err();
    assert_code(&e, Code::NotFound, 404);
    // Two in this cluster are.
    let a = app
        .run_directly("m-dup", &[(CLUSTER_TAG, "1"), (ROLE_TAG, "1")])
        .await;
    let b = app
        .run_directly("m-dup", &[(CLUSTER_TAG, "1"), (ROLE_TAG, "1")])
        .await;
    let e = app.status(&req("m-dup")).await.unwrap_err();
    assert_code(&e, Code::OutOfRange, 409);
    assert_eq!(
        e.status.message,
        format!(
            "multiple VM instances found backing this machine object. IDs for all backing VMs - [{a} {b}]"
        )
    );
    // Create refuses to pick one.
    let e = app.create(&req("m-dup")).await.unwrap_err();
    assert_code(&e, Code::OutOfRange, 409);
    assert_eq!(app.emulator.instance_count(), 3);
}
