//! Writes of every kind: what is refused and named, what a read shows, and what stays sealed.

use std::time::Duration;

use serde_json::json;

use crate::support::{KEY_SECRET, NS, class_body, detail, quick, spawn_app};

#[tokio::test]
async fn a_secret_is_write_only_and_sealed_at_rest() {
    let app = spawn_app(quick()).await;
    let (status, made) = app
        .post(
            "secrets",
            json!({"metadata": {"name": "alicloud"}, "stringData": {
            "alicloudAccessKeyID": "id-1", "alicloudAccessKeySecret": KEY_SECRET}}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(
        made["keys"],
        json!(["alicloudAccessKeyID", "alicloudAccessKeySecret"])
    );
    assert_eq!(made["apiVersion"], "berth.io/v1");
    assert_eq!(made["kind"], "Secret");
    assert_eq!(made["metadata"]["namespace"], NS);
    let (_, read) = app.get("secrets", "alicloud").await;
    let text = read.to_string();
    assert!(
        !text.contains(KEY_SECRET) && !text.contains("id-1"),
        "{text}"
    );
    assert!(read.get("data").is_none() && read.get("stringData").is_none());
    // Nothing in the database files holds a value in the clear.
    for entry in std::fs::read_dir(app.dir.path()).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        let found = bytes
            .windows(KEY_SECRET.len())
            .any(|w| w == KEY_SECRET.as_bytes());
        assert!(!found, "a value in the clear on disk");
    }
    // A read printed back is refused: it carries no values, and would empty the secret.
    let (status, refused) = app
        .call(
            reqwest::Method::PUT,
            &format!("/v1/namespaces/{NS}/secrets/alicloud"),
            Some(read),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(detail(&refused).starts_with("data:"), "{refused}");
    // A patch merges into the stored values: the key kept is still there.
    let (status, patched) = app
        .patch("secrets", "alicloud", json!({"stringData": {"extra": "x"}}))
        .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(
        patched["keys"],
        json!(["alicloudAccessKeyID", "alicloudAccessKeySecret", "extra"])
    );
    let version = patched["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    // The same values again change nothing, not even the version.
    let (status, same) = app
        .patch("secrets", "alicloud", json!({"stringData": {"extra": "x"}}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(same["metadata"]["resourceVersion"], version.as_str());
    // New values are a new generation, whether a PATCH or a PUT brings them.
    let generation = same["metadata"]["generation"].as_i64().unwrap();
    let (status, put) = app
        .call(
            reqwest::Method::PUT,
            &format!("/v1/namespaces/{NS}/secrets/alicloud"),
            Some(json!({"metadata": {"name": "alicloud"}, "stringData": {
                "alicloudAccessKeyID": "id-2", "alicloudAccessKeySecret": KEY_SECRET,
                "extra": "x"}})),
        )
        .await;
    assert_eq!(status, 200, "{put}");
    assert_eq!(put["metadata"]["generation"], generation + 1, "{put}");
    // A key patched to null is removed under either map, whichever wrote it: `extra` came as
    // stringData and goes as `data.extra: null`.
    for (patch, keys) in [
        (
            json!({"data": {"extra": null}}),
            json!(["alicloudAccessKeyID", "alicloudAccessKeySecret"]),
        ),
        (
            json!({"stringData": {"alicloudAccessKeyID": null}}),
            json!(["alicloudAccessKeySecret"]),
        ),
    ] {
        let (status, patched) = app.patch("secrets", "alicloud", patch.clone()).await;
        assert_eq!(status, 200, "{patch}: {patched}");
        assert_eq!(patched["keys"], keys, "{patch}");
    }
}

/// PUT is how `apply` makes an object whether or not it exists: two applies of one new object at
/// once both succeed, one making it and the other replacing it, where the second used to answer 409
/// AlreadyExists (a break-it finding: concurrent applies of one file failed a third of the time).
#[tokio::test]
async fn puts_racing_to_make_one_object_all_succeed() {
    let app = spawn_app(quick()).await;
    for round in 0..10 {
        let name = format!("raced-{round}");
        let path = format!("/v1/namespaces/{NS}/secrets/{name}");
        let puts = (0..8).map(|i| {
            app.call(
                reqwest::Method::PUT,
                &path,
                Some(json!({"metadata": {"name": name}, "stringData": {"k": format!("v{i}")}})),
            )
        });
        let answers = futures::future::join_all(puts).await;
        for (status, body) in &answers {
            assert!(*status == 200 || *status == 201, "{status} {body}");
        }
        let made = answers.iter().filter(|(status, _)| *status == 201).count();
        assert_eq!(made, 1, "one of the racing PUTs makes {name}");
        let (status, stored) = app.get("secrets", &name).await;
        assert_eq!(status, 200, "{stored}");
    }
}

#[tokio::test]
async fn a_class_is_held_to_the_drivers_rules_and_its_secret_must_be_beside_it() {
    let app = spawn_app(quick()).await;
    let (status, refused) = app
        .post("machineclasses", class_body("small", "ecs.g6.large"))
        .await;
    assert_eq!(status, 412, "{refused}");
    assert!(detail(&refused).contains("secretRef.name"), "{refused}");
    app.alicloud_class("small", "ecs.g6.large").await;
    // The driver's own rule for a spec field, named as in the class.
    let mut bad = class_body("bad", "ecs.g6.large");
    bad["providerSpec"]["instanceType"] = json!(42);
    let (status, refused) = app.post("machineclasses", bad).await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        detail(&refused).starts_with("providerSpec.instanceType"),
        "{refused}"
    );
    // Another namespace's secret is not this class's to use.
    let mut foreign = class_body("foreign", "ecs.g6.large");
    foreign["secretRef"]["namespace"] = json!("team-b");
    let (status, refused) = app.post("machineclasses", foreign).await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        detail(&refused).starts_with("secretRef.namespace"),
        "{refused}"
    );
    // The same name again is taken; a wrong kind on the route is named.
    let (status, _) = app
        .post("machineclasses", class_body("small", "ecs.g6.large"))
        .await;
    assert_eq!(status, 409);
    let mut wrong_kind = class_body("other", "ecs.g6.large");
    wrong_kind["kind"] = json!("Machine");
    let (status, refused) = app.post("machineclasses", wrong_kind).await;
    assert_eq!(status, 400);
    assert!(detail(&refused).starts_with("kind:"), "{refused}");
    // A secret a class uses cannot be deleted.
    let (status, refused) = app.delete("secrets", "alicloud").await;
    assert_eq!(status, 412, "{refused}");
    assert!(detail(&refused).contains("MachineClass small"), "{refused}");
}

#[tokio::test]
async fn a_machine_needs_its_class_and_cannot_name_its_vm() {
    let app = spawn_app(quick()).await;
    let (status, refused) = app
        .post(
            "machines",
            json!({"metadata": {"name": "w-1"}, "spec": {"class": {"name": "absent"}}}),
        )
        .await;
    assert_eq!(status, 412, "{refused}");
    assert!(detail(&refused).starts_with("spec.class.name"), "{refused}");
    app.alicloud_class("small", "ecs.g6.large").await;
    let (status, refused) = app
        .post("machines", json!({"metadata": {"name": "w-1"}, "spec": {"class": {"name": "small"}, "providerID": "cn-shanghai.i-theirs"}}))
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(detail(&refused).starts_with("spec.providerID"), "{refused}");
    let (status, refused) = app
        .post("machinesets", json!({"metadata": {"name": "s"}, "spec": {"replicas": 101,
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"class": {"name": "small"}}}}}))
        .await;
    assert_eq!(status, 412, "{refused}");
    assert!(
        detail(&refused).contains("BERTH_CONTROLLER_MAX_REPLICAS"),
        "{refused}"
    );
    let (status, _) = app.get("machines", "Bad_Name").await;
    assert_eq!(status, 400);
    let (status, _) = app.get("machines", "absent").await;
    assert_eq!(status, 404);
}

/// A field an object does not have is refused by name, with the one meant when it is a near miss,
/// on every write: a typo once did nothing, or made a set of 0 (a break-it finding). What a read
/// answers (status, uid, resourceVersion…) still goes back in as it came out.
#[tokio::test]
async fn a_field_an_object_does_not_have_is_refused_by_name() {
    let app = spawn_app(quick()).await;
    app.alicloud_class("small", "ecs.g6.large").await;
    let set = |spec: serde_json::Value| json!({"metadata": {"name": "typo"}, "spec": spec});
    let template =
        json!({"metadata": {"labels": {"p": "t"}}, "spec": {"class": {"name": "small"}}});
    let (status, refused) = app
        .post(
            "machinesets",
            set(json!({"replica": 3, "selector": {"matchLabels": {"p": "t"}}, "template": template})),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["detail"],
        "spec.replica: not a field it has; did you mean replicas?"
    );
    let (status, made) = app
        .post(
            "machinesets",
            set(json!({"replicas": 0, "selector": {"matchLabels": {"p": "t"}}, "template": template})),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let (status, refused) = app
        .patch("machinesets", "typo", json!({"spec": {"replcas": 3}}))
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["detail"],
        "spec.replcas: not a field it has; did you mean replicas?"
    );
    // A namespace other than the route's is refused by PATCH as by PUT, not dropped.
    let (status, refused) = app
        .patch(
            "machinesets",
            "typo",
            json!({"metadata": {"namespace": "elsewhere"}}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["detail"],
        "metadata.namespace: must be the namespace of the route (or absent)"
    );
    let (status, same) = app
        .patch(
            "machinesets",
            "typo",
            json!({"metadata": {"namespace": NS}}),
        )
        .await;
    assert_eq!(status, 200, "{same}");
    let (status, refused) = app
        .post(
            "secrets",
            json!({"metadata": {"name": "s", "bogus": 1}, "stringData": {"k": "v"}}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["detail"], "metadata.bogus: not a field it has");
    // The field meant is one the object leaves out while empty: still named.
    let (status, refused) = app
        .post(
            "secrets",
            json!({"metadata": {"name": "s", "labells": {"a": "b"}}, "stringData": {"k": "v"}}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["detail"],
        "metadata.labells: not a field it has; did you mean labels?"
    );
    // A misspelt values field is named, not read as "no values sent".
    let (status, refused) = app
        .post(
            "secrets",
            json!({"metadata": {"name": "s"}, "stringDatta": {"k": "v"}}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["detail"],
        "stringDatta: not a field it has; did you mean stringData?"
    );
    // What a read answered goes back unchanged (read again when the set's own status write
    // came between).
    service_kit::testing::eventually("a read goes back", Duration::from_secs(10), || async {
        let (_, read) = app.get("machinesets", "typo").await;
        let (status, again) = app
            .call(
                reqwest::Method::PUT,
                &format!("/v1/namespaces/{NS}/machinesets/typo"),
                Some(read.clone()),
            )
            .await;
        if status == 409 {
            return None;
        }
        assert_eq!(status, 200, "{again}");
        assert_eq!(
            again["metadata"]["resourceVersion"],
            read["metadata"]["resourceVersion"]
        );
        Some(())
    })
    .await;
}

/// A uid sent with a replace or a patch is a precondition, as in Kubernetes: a write meant for an
/// object that has since been deleted and made anew under its name is refused (409), not landed on
/// the new one.
#[tokio::test]
async fn a_uid_sent_with_a_write_must_be_the_objects() {
    let app = spawn_app(quick()).await;
    let secret = |value: &str| json!({"metadata": {"name": "s"}, "stringData": {"k": value}});
    let (status, first) = app.post("secrets", secret("a")).await;
    assert_eq!(status, 201, "{first}");
    let old_uid = first["metadata"]["uid"].as_str().unwrap().to_string();
    assert_eq!(app.delete("secrets", "s").await.0, 200);
    let (status, made) = app.post("secrets", secret("b")).await;
    assert_eq!(status, 201, "{made}");
    let uid = made["metadata"]["uid"].as_str().unwrap().to_string();
    assert_ne!(uid, old_uid);

    let (status, refused) = app
        .patch(
            "secrets",
            "s",
            json!({"metadata": {"uid": old_uid}, "stringData": {"k": "c"}}),
        )
        .await;
    assert_eq!(status, 409, "{refused}");
    assert!(detail(&refused).starts_with("metadata.uid: "), "{refused}");
    let mut put = secret("c");
    put["metadata"]["uid"] = json!(old_uid);
    let path = format!("/v1/namespaces/{NS}/secrets/s");
    let (status, refused) = app.call(reqwest::Method::PUT, &path, Some(put)).await;
    assert_eq!(status, 409, "{refused}");
    let (status, refused) = app
        .patch("secrets", "s", json!({"metadata": {"uid": 7}}))
        .await;
    assert_eq!(status, 400, "{refused}");
    // Its own uid, or none, writes.
    let (status, patched) = app
        .patch(
            "secrets",
            "s",
            json!({"metadata": {"uid": uid}, "stringData": {"k": "c"}}),
        )
        .await;
    assert_eq!(status, 200, "{patched}");
}
