//! CreateMachine (MCM alicloud: "should create machine successfully"; spi request building).

use std::collections::BTreeMap;
use std::time::Duration;

use client::machines::Client;
use client::{ClientOptions, ServiceClient};
use domain::Code;
use domain::machine::Secret;
use ecs_emulator::Faults;
use serde_json::Value;

use crate::support::*;

#[tokio::test]
async fn create_machine_successfully_builds_the_request_as_mcm_does() {
    let app = spawn_app().await;
    let resp = app.create(&req("m-create")).await.unwrap();
    let id = instance_id(&resp.provider_id).to_owned();
    assert!(id.starts_with("i-"), "{id}");
    assert_eq!(resp.provider_id, format!("{REGION}.{id}"));
    assert_eq!(resp.node_name, format!("iz{}z", &id[2..]));
    assert_eq!(
        resp.last_known_state,
        format!("ECS instance {id} created for machine m-create")
    );
    assert!(resp.addresses.iter().any(|a| a.kind == "InternalIP"));
    assert!(
        resp.addresses
            .iter()
            .any(|a| a.kind == "Hostname" && a.address == resp.node_name)
    );

    let state = app.state();
    let i = &app.instances_named("m-create")[0];
    assert_eq!(i["InstanceId"], id.as_str());
    assert_eq!(i["ImageId"], "m-image-1");
    assert_eq!(i["InstanceType"], "ecs.g6.large");
    assert_eq!(i["ZoneId"], ZONE);
    assert_eq!(i["KeyPairName"], "kp-1");
    assert_eq!(i["InternetMaxBandwidthOut"], 5);
    assert_eq!(i["VpcAttributes"]["VSwitchId"], "vsw-1");
    assert_eq!(i["UserDataBytes"], USER_DATA.len());
    let tags: BTreeMap<String, String> = i["Tags"]["Tag"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["TagKey"].as_str().unwrap().to_owned(),
                t["TagValue"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(tags[CLUSTER_TAG], "1");
    assert_eq!(tags[ROLE_TAG], "1");
    assert_eq!(tags["pool"], "a");
    assert_eq!(tags["berth.io/machine"], "m-create");
    let disks: Vec<&Value> = state["disks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["InstanceId"] == id.as_str())
        .collect();
    assert_eq!(disks.len(), 3, "system disk and two data disks");
    let system = disks.iter().find(|d| d["Type"] == "system").unwrap();
    assert_eq!(system["Category"], "cloud_efficiency");
    assert_eq!(system["Size"], 50);
    let d1 = disks
        .iter()
        .find(|d| d["DiskName"] == "m-create-d1-data-disk")
        .unwrap();
    assert_eq!(d1["DeleteWithInstance"], true, "default true");
    assert_eq!(d1["Size"], 100);
    assert_eq!(d1["Description"], "shoot--test-datavol-d1");
    let keep = disks
        .iter()
        .find(|d| d["DiskName"] == "m-create-keep-data-disk")
        .unwrap();
    assert_eq!(keep["DeleteWithInstance"], false, "explicit false");
    assert_eq!(keep["Category"], "cloud_essd");
}

#[tokio::test]
async fn create_twice_makes_one_instance() {
    let app = spawn_app().await;
    let first = app.create(&req("m-twice")).await.unwrap();
    let second = app.create(&req("m-twice")).await.unwrap();
    assert_eq!(first.provider_id, second.provider_id);
    assert_eq!(first.node_name, second.node_name);
    assert!(second.last_known_state.contains("adopted"), "{second:?}");
    // Adoption by providerID works as well.
    let third = app
        .create(&with_provider_id(req("m-twice"), &first.provider_id))
        .await
        .unwrap();
    assert_eq!(third.provider_id, first.provider_id);
    assert_eq!(app.emulator.instance_count(), 1);
    assert_eq!(app.calls("RunInstances"), 1);
}

#[tokio::test]
async fn create_after_a_lost_response_makes_one_instance() {
    let app = spawn_app().await;
    // The caller gives up before the driver answers (the answer is lost), then retries.
    app.emulator
        .set_faults(Faults {
            latency_ms: 300,
            ..Faults::default()
        })
        .unwrap();
    let impatient = Client::new(ServiceClient::new(
        &app.driver.url,
        ClientOptions {
            timeout: Duration::from_millis(150),
            ..ClientOptions::default()
        },
    ));
    let lost = impatient.create(&req("m-lost")).await.unwrap_err();
    assert_eq!(lost.code(), Code::DeadlineExceeded, "{lost}");
    let retried = app.create(&req("m-lost")).await.unwrap();
    // A status call takes longer than any first attempt still in flight.
    let status = app.status(&req("m-lost")).await.unwrap();
    assert_eq!(status.provider_id, retried.provider_id);
    assert_eq!(app.instances_named("m-lost").len(), 1);

    // Concurrent duplicates all miss the name lookup and race to RunInstances: the machine's
    // ClientToken makes ECS answer them all with one instance.
    app.emulator.set_faults(Faults::default()).unwrap();
    let race = req("m-race");
    let answers = futures::future::join_all((0..8).map(|_| app.create(&race))).await;
    let ids: std::collections::BTreeSet<String> = answers
        .into_iter()
        .map(|a| a.unwrap().provider_id)
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(app.instances_named("m-race").len(), 1);
}

#[tokio::test]
async fn recreating_a_released_machine_without_uid_makes_a_new_instance() {
    let app = spawn_app().await;
    let mut r = req("m-again");
    r.machine.metadata.uid.clear();
    let first = app.create(&r).await.unwrap();
    app.delete(&with_provider_id(r.clone(), &first.provider_id))
        .await
        .unwrap();
    assert_eq!(app.emulator.instance_count(), 0);
    // Same namespace/name, so the same first ClientToken, which ECS answers with the released id.
    let second = app.create(&r).await.unwrap();
    assert_ne!(second.provider_id, first.provider_id);
    assert_eq!(app.instances_named("m-again").len(), 1);
    let status = app.status(&r).await.unwrap();
    assert_eq!(status.provider_id, second.provider_id);
    // And a retry of that create still gets the same new instance.
    let third = app.create(&r).await.unwrap();
    assert_eq!(third.provider_id, second.provider_id);
}

#[tokio::test]
async fn no_stock_is_resource_exhausted() {
    let app = spawn_app().await;
    app.emulator
        .set_faults(Faults {
            no_stock_zones: [ZONE.to_string()].into(),
            ..Faults::default()
        })
        .unwrap();
    let (status, headers, body) = app
        .raw(
            "/v1/machines:create",
            &serde_json::to_value(req("m-nostock")).unwrap(),
        )
        .await;
    assert_eq!(status, 429);
    assert_eq!(body["code"], 8);
    assert!(headers.contains_key("retry-after"));
    let mce = body["machineCodesError"].as_str().unwrap();
    assert!(
        mce.starts_with("machine codes error: code = [ResourceExhausted] message = ["),
        "{mce}"
    );
    assert!(mce.contains("OperationDenied.NoStock"), "{mce}");
    assert_eq!(app.emulator.instance_count(), 0);
}

#[tokio::test]
async fn bad_credentials_are_unauthenticated() {
    let app = spawn_app().await;
    let mut r = req("m-creds");
    r.secret = Secret::from_string_data([
        ("alicloudAccessKeyID", "no-such-key"),
        ("alicloudAccessKeySecret", "whatever-secret-1"),
    ]);
    let e = app.create(&r).await.unwrap_err();
    assert_code(&e, Code::Unauthenticated, 401);
    assert!(e.status.message.contains("InvalidAccessKeyId"), "{e}");
    assert!(!e.status.message.contains("whatever-secret-1"));
    r.secret = Secret::from_string_data([
        ("alicloudAccessKeyID", KEY_ID),
        ("alicloudAccessKeySecret", "wrong-secret-2"),
    ]);
    let e = app.status(&r).await.unwrap_err();
    assert_code(&e, Code::Unauthenticated, 401);
    assert!(e.status.message.contains("SignatureDoesNotMatch"), "{e}");
    assert!(!e.status.message.contains("wrong-secret-2"));
    assert_eq!(app.emulator.instance_count(), 0);
}

#[tokio::test]
async fn throttling_is_absorbed_by_retries() {
    let app = spawn_app().await;
    app.emulator
        .set_faults(Faults {
            throttle_rate: 0.5,
            throttle_time_left_ms: 5,
            server_error_rate: 0.1,
            ..Faults::default()
        })
        .unwrap();
    for n in 0..5 {
        let name = format!("m-throttled-{n}");
        let created = app.create(&req(&name)).await.unwrap();
        let status = app.status(&req(&name)).await.unwrap();
        assert_eq!(status.provider_id, created.provider_id);
    }
    assert_eq!(app.list().await.unwrap().len(), 5);
    for n in 0..5 {
        app.delete(&req(&format!("m-throttled-{n}"))).await.unwrap();
    }
    assert_eq!(app.emulator.instance_count(), 0);
    let stats = app.emulator.stats();
    assert!(stats.throttled > 0, "{stats:?}");
}

#[tokio::test]
async fn a_uid_is_one_machine_s_and_a_released_machine_s_uid_can_be_used_again() {
    let app = spawn_app().await;
    let with_uid = |name: &str| {
        let mut r = req(name);
        r.machine.metadata.uid = "uid-shared".into();
        r
    };
    let a = with_uid("m-uid-a");
    app.create(&a).await.unwrap();
    // Another name with the same UID: ECS refuses the UID's ClientToken as used with other
    // parameters, and the instance that token made is m-uid-a's, which keeps it.
    let b = with_uid("m-uid-b");
    let e = app.create(&b).await.unwrap_err();
    assert_code(&e, Code::AlreadyExists, 409);
    assert!(e.status.message.contains("\"m-uid-a\""), "{e}");
    assert!(app.instances_named("m-uid-b").is_empty());
    // Once m-uid-a's VM is released, its token stands for nothing any more: the next token of the
    // UID's series makes m-uid-b's VM (a retry, not a 503 forever).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while let Err(e) = app.delete(&a).await {
        assert_code(&e, Code::Unavailable, 503);
        assert!(std::time::Instant::now() < deadline, "{e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let made = app.create(&b).await.unwrap();
    assert_eq!(app.instances_named("m-uid-b").len(), 1);
    assert_eq!(app.create(&b).await.unwrap().provider_id, made.provider_id);
}
