//! A machine's life through the controller: made, Running, replaced when its VM dies behind
//! Berth's back, and deleted with its VM.

use std::time::Duration;

use serde_json::{Value, json};

use machine_controller::reconcile::Settings;

use crate::support::{KEY_SECRET, NS, phase, quick, running, spawn_app};

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
    // A machine the set made, sent back as read (what `apply` of its `get -o yaml` does), is
    // the same object: nothing in it is the API's to drop.
    let name = machines[1]["metadata"]["name"].as_str().unwrap();
    // The controller may write the machine's status (its first health check) between the read
    // and the PUT, which then rightly refuses the stale resourceVersion (409): read again.
    let (sent, replaced) = service_kit::testing::eventually(
        "a PUT of the machine as read is taken",
        Duration::from_secs(30),
        || async {
            let (_, read) = app.get("machines", name).await;
            let (status, replaced) = app
                .call(
                    reqwest::Method::PUT,
                    &format!("/v1/namespaces/{NS}/machines/{name}"),
                    Some(read.clone()),
                )
                .await;
            assert!(status == 200 || status == 409, "{status}: {replaced}");
            (status == 200).then_some((read, replaced))
        },
    )
    .await;
    let without_version = |m: &serde_json::Value| {
        let mut meta = m["metadata"].clone();
        meta.as_object_mut().unwrap().remove("resourceVersion");
        (meta, m["spec"].clone())
    };
    assert_eq!(without_version(&replaced), without_version(&sent));
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
    // The set's status is written on its next pass after the machines change: waited for.
    // The failure count in a row is back to zero once the replacement runs.
    service_kit::testing::eventually(
        "the set counts 5 ready and no failures in a row",
        Duration::from_secs(30),
        || async {
            let (_, set) = app.get("machinesets", "workers").await;
            (set["status"]["readyReplicas"] == 5 && set["status"]["failures"] == 0).then_some(())
        },
    )
    .await;
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
    // Deleting the set deletes its machines and their VMs, then the set; the preserved machine
    // it lets go, kept with its VM and owned by nothing.
    let (status, _) = app.delete("machinesets", "workers").await;
    assert_eq!(status, 200);
    let kept = app
        .machines_until("the preserved machine alone is left", |m| {
            m.len() == 1 && m[0]["metadata"]["name"] == keep.as_str()
        })
        .await;
    assert!(kept[0]["metadata"]["ownerReferences"].is_null(), "{kept:?}");
    assert!(
        kept[0]["metadata"]["deletionTimestamp"].is_null(),
        "{kept:?}"
    );
    service_kit::testing::eventually("the set is gone", Duration::from_secs(30), || async {
        (app.get("machinesets", "workers").await.0 == 404 && app.instances().len() == 1)
            .then_some(())
    })
    .await;
    // Deleting it is its owner's own act.
    let (status, _) = app.delete("machines", &keep).await;
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

/// MCM #449: failed machines kept for inspection when the operator asks, replaced beside them.
#[tokio::test]
async fn a_set_keeps_failed_machines_for_inspection_when_asked() {
    let mut settings = quick();
    settings.keep_failed = 1;
    let app = spawn_app(settings).await;
    app.alicloud_class("small", "ecs.g6.large").await;
    let set = json!({"metadata": {"name": "kept"}, "spec": {"replicas": 2,
        "selector": {"matchLabels": {"pool": "k"}},
        "template": {"metadata": {"labels": {"pool": "k"}}, "spec": {"class": {"name": "small"}}}}});
    assert_eq!(app.post("machinesets", set).await.0, 201);
    let machines = app.machines_until("2 run", |m| running(m) == 2).await;
    let victim = machines[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let instance = machines[0]["status"]["providerID"]
        .as_str()
        .unwrap()
        .rsplit_once('.')
        .unwrap()
        .1
        .to_string();
    app.ecs()
        .delete_instance(
            &instance,
            true,
            alicloud::deadline_in(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    let machines = app
        .machines_until("the failed one is kept beside 2 running", |m| {
            m.len() == 3
                && running(m) == 2
                && m.iter()
                    .any(|x| x["metadata"]["name"] == victim.as_str() && phase(x) == "Failed")
        })
        .await;
    let failed = machines.iter().find(|x| phase(x) == "Failed").unwrap();
    assert_eq!(
        failed["status"]["lastOperation"]["state"], "Failed",
        "{failed}"
    );
    // The set's status is written on its own next pass, after the machines it counts change, so
    // it is waited for rather than read once.
    let set = service_kit::testing::eventually(
        "the set counts 1 failed and 2 ready",
        Duration::from_secs(30),
        || async {
            let (_, set) = app.get("machinesets", "kept").await;
            (set["status"]["failedReplicas"] == 1 && set["status"]["readyReplicas"] == 2)
                .then_some(set)
        },
    )
    .await;
    // A machine kept for inspection is not one of the set's replicas.
    assert_eq!(set["status"]["replicas"], 2, "{set}");
}

/// MCM #977: a cloud out of capacity (ResourceExhausted) is asked again only after the long
/// `exhausted_retry`, not at the short backoff of other failures.
#[tokio::test]
async fn resource_exhausted_waits_the_long_interval() {
    let mut settings = quick();
    settings.exhausted_retry = Duration::from_secs(3);
    let app = spawn_app(settings).await;
    app.alicloud_class("small", "ecs.g6.large").await;
    app.emulator
        .set_faults(ecs_emulator::Faults {
            no_stock_zones: ["cn-shanghai-b".to_string()].into(),
            ..ecs_emulator::Faults::default()
        })
        .unwrap();
    let runs = |app: &crate::support::App| {
        app.emulator
            .stats()
            .calls
            .get("RunInstances")
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(
        app.post(
            "machines",
            json!({"metadata": {"name": "waits"}, "spec": {"class": {"name": "small"}}})
        )
        .await
        .0,
        201
    );
    let machine =
        service_kit::testing::eventually("the create fails", Duration::from_secs(10), || async {
            let (_, m) = app.get("machines", "waits").await;
            (m["status"]["lastOperation"]["errorCode"] == "ResourceExhausted").then_some(m)
        })
        .await;
    assert_eq!(phase(&machine), "Creating", "{machine}");
    let after_first = runs(&app);
    // At the short backoff (50 ms, doubling) a second try would come at once.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        runs(&app),
        after_first,
        "asked again before the exhausted interval"
    );
    app.emulator
        .set_faults(ecs_emulator::Faults::default())
        .unwrap();
    app.machines_until("it runs once capacity is back", |m| running(m) == 1)
        .await;
}

/// MCM #706: creates are paced per class, so a scale-up cannot exhaust the cloud's API limits.
#[tokio::test]
async fn creates_are_paced_per_class() {
    let mut settings = quick();
    settings.class_calls_per_second = std::num::NonZeroU32::new(2).unwrap();
    let app = spawn_app(settings).await;
    app.alicloud_class("small", "ecs.g6.large").await;
    let started = std::time::Instant::now();
    let set = json!({"metadata": {"name": "paced"}, "spec": {"replicas": 6,
        "selector": {"matchLabels": {"pool": "p"}},
        "template": {"metadata": {"labels": {"pool": "p"}}, "spec": {"class": {"name": "small"}}}}});
    assert_eq!(app.post("machinesets", set).await.0, 201);
    app.machines_until("6 run", |m| running(m) == 6).await;
    // Two at once, then two a second: the last of six cannot start before two seconds.
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "6 creates in {:?}",
        started.elapsed()
    );
}

/// A call the driver refuses is tried again at the growing backoff, not at once: the status the
/// failure writes does not wake the machine's own reconcile.
#[tokio::test]
async fn a_refused_create_is_retried_at_its_backoff_not_at_once() {
    let app = spawn_app(quick()).await;
    app.alicloud_class("small", "ecs.g6.large").await;
    // One character: the driver refuses it as an ECS instance name (InvalidArgument).
    let machine = json!({"metadata": {"name": "x"}, "spec": {"class": {"name": "small"}}});
    assert_eq!(app.post("machines", machine).await.0, 201);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, m) = app.get("machines", "x").await;
    assert_eq!(
        m["status"]["lastOperation"]["errorCode"], "InvalidArgument",
        "{m}"
    );
    assert!(
        m["status"]["lastOperation"]["description"]
            .as_str()
            .unwrap()
            .contains("ECS instance names are 2 to 128 characters"),
        "{m}"
    );
    // 50 ms doubling to 500 ms is about nine tries in three seconds; the test's resync every
    // 200 ms reads the failure's time to the second, so a few more. Woken by its own status
    // write, it was about seventy a second.
    let failures = m["status"]["failures"].as_u64().unwrap();
    assert!((1..=30).contains(&failures), "{failures} tries in 3 s: {m}");
}

/// A machine failing on a wrong key is retried as soon as its secret changes, not when its
/// backoff ends: the change may be the fix (a corrected secret waited out up to five minutes of
/// backoff: a break-it finding).
#[tokio::test]
async fn a_fixed_secret_is_tried_at_once_not_after_the_backoff() {
    let app = spawn_app(Settings {
        backoff_base: Duration::from_secs(600),
        backoff_max: Duration::from_secs(600),
        ..quick()
    })
    .await;
    app.alicloud_class("small", "ecs.g6.large").await;
    let (status, body) = app
        .patch(
            "secrets",
            "alicloud",
            json!({"stringData": {"alicloudAccessKeySecret": "not-the-key"}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let machine = json!({"metadata": {"name": "w-1"}, "spec": {"class": {"name": "small"}}});
    assert_eq!(app.post("machines", machine).await.0, 201);
    service_kit::testing::eventually("the create fails", Duration::from_secs(10), || async {
        let (_, m) = app.get("machines", "w-1").await;
        (m["status"]["lastOperation"]["state"] == "Failed").then_some(())
    })
    .await;
    // Ten minutes of backoff ahead; the corrected secret cuts it short.
    let (status, body) = app
        .patch(
            "secrets",
            "alicloud",
            json!({"stringData": {"alicloudAccessKeySecret": KEY_SECRET}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    app.machines_until("the machine runs", |m| m.len() == 1 && running(m) == 1)
        .await;
}

/// A machine relabelled out of its set's selector is the set's no more, as Kubernetes' and MCM's
/// controllers treat it: let go (kept, with its VM, no owner) and replaced, so the set again keeps
/// its replicas of machines its selector finds (a break-it finding: it stayed owned and counted).
#[tokio::test]
async fn a_machine_relabelled_out_of_its_set_is_let_go_and_replaced() {
    let app = spawn_app(quick()).await;
    app.alicloud_class("small", "ecs.g6.large").await;
    let set = json!({"metadata": {"name": "workers"}, "spec": {"replicas": 2,
        "selector": {"matchLabels": {"pool": "w"}},
        "template": {"metadata": {"labels": {"pool": "w"}}, "spec": {"class": {"name": "small"}}}}});
    let (status, body) = app.post("machinesets", set).await;
    assert_eq!(status, 201, "{body}");
    let machines = app
        .machines_until("2 machines run", |m| m.len() == 2 && running(m) == 2)
        .await;
    let strayed = machines[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, body) = app
        .patch(
            "machines",
            &strayed,
            json!({"metadata": {"labels": {"pool": null, "debug": "me"}}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let owned_by_set = |m: &Value| !m["metadata"]["ownerReferences"].is_null();
    let machines = app
        .machines_until("the strayed machine let go and replaced", |m| {
            m.len() == 3 && running(m) == 3 && m.iter().filter(|m| owned_by_set(m)).count() == 2
        })
        .await;
    let let_go = machines
        .iter()
        .find(|m| m["metadata"]["name"] == strayed.as_str())
        .expect("the strayed machine is kept");
    assert!(!owned_by_set(let_go), "{let_go}");
    assert_eq!(
        app.instances().len(),
        3,
        "its VM is kept, one made for the new"
    );
    service_kit::testing::eventually(
        "the set counts its 2 machines, both ready",
        Duration::from_secs(30),
        || async {
            let (_, set) = app.get("machinesets", "workers").await;
            (set["status"]["replicas"] == 2 && set["status"]["readyReplicas"] == 2).then_some(())
        },
    )
    .await;
}
