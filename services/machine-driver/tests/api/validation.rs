//! Spec fields and secret keys (the AWS provider's negative paths that apply here).

use domain::Code;
use domain::machine::Secret;
use serde_json::{Value, json};

use crate::support::*;

#[tokio::test]
async fn bad_spec_fields_are_invalid_argument_naming_the_field() {
    let app = spawn_app().await;
    type Mutation = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(Mutation, &str)> = vec![
        (
            Box::new(|s| {
                s.as_object_mut().unwrap().remove("imageID");
            }),
            "machineClass.providerSpec.imageID: ImageID is required",
        ),
        (
            Box::new(|s| s["region"] = json!("")),
            "machineClass.providerSpec.region: Region is required",
        ),
        (
            Box::new(|s| {
                s.as_object_mut().unwrap().remove("vSwitchID");
            }),
            "machineClass.providerSpec.vSwitchID: VSwitchID is required",
        ),
        (
            Box::new(|s| s["dataDisks"][0]["size"] = json!(10)),
            "machineClass.providerSpec.dataDisks[0].size: Invalid value: 10: must be between 20 and 32768, inclusive",
        ),
        (
            Box::new(|s| s["dataDisks"][1]["name"] = json!("d1")),
            "Data Disk Name 'd1' duplicated 2 times, Name must be unique",
        ),
        (
            Box::new(|s| s["dataDisks"][0]["name"] = json!("9lives")),
            "machineClass.providerSpec.dataDisks[0].name: Disk name given: 9lives does not match the expected pattern",
        ),
        (
            Box::new(|s| s["dataDisks"][0]["size"] = json!("big")),
            "machineClass.providerSpec.dataDisks[0].size: invalid type: string, expected",
        ),
        (
            Box::new(|s| s["tags"] = json!({CLUSTER_TAG: "1"})),
            "machineClass.providerSpec.tags: Tag required of the form kubernetes.io/role/****",
        ),
        (
            Box::new(|s| {
                s.as_object_mut().unwrap().remove("tags");
            }),
            "machineClass.providerSpec.tags: Tags required for Alicloud machines",
        ),
        (
            Box::new(|s| s["IoOptimized"] = json!("maybe")),
            "machineClass.providerSpec.IoOptimized: Unsupported value: \"maybe\"",
        ),
        (
            Box::new(|s| *s = json!(["not", "an", "object"])),
            "machineClass.providerSpec: must be a JSON object",
        ),
        (
            Box::new(|s| s["instanceTyp"] = json!("ecs.g6.xlarge")),
            "machineClass.providerSpec.instanceTyp: is not a field of the Alicloud provider spec: did you mean instanceType?",
        ),
        (
            Box::new(|s| s["dataDisks"][0]["categroy"] = json!("cloud_ssd")),
            "machineClass.providerSpec.dataDisks[0].categroy: is not a field of the Alicloud provider spec: did you mean category?",
        ),
    ];
    for (i, (mutate, want)) in cases.iter().enumerate() {
        let mut spec = provider_spec();
        mutate(&mut spec);
        let mut r = req(&format!("m-bad-{i}"));
        r.machine_class = class_with(spec);
        let e = app.create(&r).await.unwrap_err();
        assert_code(&e, Code::InvalidArgument, 400);
        assert!(
            e.status.message.contains(want),
            "{want:?} not in {:?}",
            e.status.message
        );
    }
    // A bad machine name is refused before anything is asked of ECS, too.
    let mut r = req("m");
    r.machine.metadata.name = "*".into();
    let e = app.delete(&r).await.unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert!(e.status.message.starts_with("machine.metadata.name:"));
    assert_eq!(app.emulator.stats().total_calls(), 0, "nothing reached ECS");
    assert_eq!(app.emulator.instance_count(), 0);
}

#[tokio::test]
async fn missing_secret_keys_are_invalid_argument_naming_the_key_never_the_value() {
    let app = spawn_app().await;
    let mut r = req("m-secret");
    r.secret.data.remove("alicloudAccessKeySecret");
    let e = app.create(&r).await.unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert_eq!(
        e.status.message,
        "secret.data[alicloudAccessKeySecret]: is required (or its fallback accessKeySecret)"
    );
    let mut r = req("m-secret");
    r.secret.data.remove("alicloudAccessKeyID");
    let e = app.status(&r).await.unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert!(e.status.message.contains("alicloudAccessKeyID"));
    assert!(!e.status.message.contains(KEY_SECRET));
    let mut r = req("m-secret");
    r.secret
        .data
        .insert("alicloudAccessKeyID".into(), "%%%".into());
    let e = app
        .list()
        .await
        .map(|_| ())
        .and(app.create(&r).await.map(|_| ()));
    let e = e.unwrap_err();
    // Refused as the body is read, as Kubernetes refuses such a Secret: every data value is base64.
    assert_eq!(
        e.status.message,
        "secret.data.alicloudAccessKeyID: is not valid base64 (standard alphabet, padded, no white space)"
    );
    assert_eq!(app.emulator.instance_count(), 0);

    // The fallback keys and stringData work; a missing userData means none.
    let mut r = req("m-fallback");
    r.secret = Secret::from_string_data([("accessKeyID", KEY_ID), ("accessKeySecret", KEY_SECRET)]);
    app.create(&r).await.unwrap();
    let i = &app.instances_named("m-fallback")[0];
    assert_eq!(i["UserDataBytes"], 0);
}

/// Every `data` value is read as base64, and a token key as ASCII text, even where `stringData`
/// holds the same key and wins: a request is refused for what it sends, as the document says, not
/// only for what this call reads (schemathesis found a bad `data.userData` behind an empty
/// `stringData.userData` answered 412 for the Engine instead of 400).
#[tokio::test]
async fn a_data_value_behind_string_data_is_still_checked() {
    let app = spawn_app().await;
    let mut r = req("m-shadowed");
    r.secret
        .string_data
        .insert("userData".into(), String::new());
    r.secret.data.insert("userData".into(), "\u{84}".into());
    let e = app.create(&r).await.unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert!(
        e.status
            .message
            .starts_with("secret.data.userData: is not valid base64"),
        "{}",
        e.status.message
    );
    let mut r = req("m-shadowed");
    r.secret
        .string_data
        .insert("alicloudSecurityToken".into(), "sts".into());
    // base64 of "é": valid base64, not ASCII text.
    r.secret
        .data
        .insert("alicloudSecurityToken".into(), "w6k=".into());
    let e = app.create(&r).await.unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert_eq!(
        e.status.message,
        "secret.data[alicloudSecurityToken]: must be base64 of ASCII text (an STS token)"
    );
    assert_eq!(app.emulator.instance_count(), 0);
}

#[tokio::test]
async fn a_hundred_thousand_character_instance_type_is_a_400_not_a_vm() {
    let app = spawn_app().await;
    let mut r = req("m-huge-type");
    r.machine_class.provider_spec["instanceType"] = json!("ecs.".repeat(25_000));
    let e = app.create(&r).await.unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert!(
        e.status.message.contains(
            "machineClass.providerSpec.instanceType: is 100000 characters long; the limit is 64"
        ),
        "{e}"
    );
    assert!(e.status.message.len() < 1_000, "the value is echoed");
    let mut r = req("m-bad-type");
    r.machine_class.provider_spec["instanceType"] = json!("g6 large; rm -rf");
    let e = app.create(&r).await.unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert!(
        e.status
            .message
            .contains("machineClass.providerSpec.instanceType: must be an ECS instance type"),
        "{e}"
    );
    assert_eq!(app.calls("RunInstances"), 0);
    assert_eq!(app.emulator.instance_count(), 0);
}

#[tokio::test]
async fn a_malformed_secret_is_told_before_a_region_the_operator_refuses() {
    let app = spawn_app_with(|c| {
        c.regions = vec![alicloud::Region::parse("cn-beijing").unwrap()];
    })
    .await;
    // Well-formed region outside the allow-list (412), and no access key id (400): the 400 wins.
    let mut r = req("m-order");
    r.secret = Secret::default();
    for e in [
        app.status(&r).await.unwrap_err(),
        app.create(&r).await.unwrap_err(),
    ] {
        assert_code(&e, Code::InvalidArgument, 400);
        assert!(
            e.status
                .message
                .contains("secret.data[alicloudAccessKeyID]"),
            "{e}"
        );
    }
    // Too much user data is malformed too.
    let mut r = req("m-order");
    r.secret
        .data
        .insert("userData".into(), b64(&"x".repeat(40_000)));
    let e = app.create(&r).await.unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert!(e.status.message.contains("secret.data[userData]"), "{e}");
    // A well-formed request is refused for the region.
    let e = app.status(&req("m-order")).await.unwrap_err();
    assert_code(&e, Code::FailedPrecondition, 412);
}
