//! Tenancy (issue 30 point 6) on the Alicloud provider: two callers in different namespaces walk
//! every driver route, and neither sees, changes or learns the other's machine; the machine quota
//! per namespace (`BERTH_QUOTA_MACHINES`); and a machine created and deleted far more often than the
//! old 64-token ClientToken series allowed (F8).

use serde_json::{Value, json};
use service_kit::tenancy::{NAMESPACES_HEADER, TOKEN_NAME_HEADER};

use crate::support::*;

/// A caller the gateway vouched for: its token's name and namespaces.
struct Tenant {
    token: &'static str,
    namespaces: &'static str,
}

const A: Tenant = Tenant {
    token: "ci-a",
    namespaces: "team-a",
};
const B: Tenant = Tenant {
    token: "ci-b",
    namespaces: "team-b,team-c",
};

impl App {
    /// A POST as `tenant`, as the gateway forwards it.
    async fn as_tenant(&self, tenant: &Tenant, path: &str, body: &Value) -> (u16, Value) {
        let r = reqwest::Client::new()
            .post(format!("{}{path}", self.driver.url))
            .header(TOKEN_NAME_HEADER, tenant.token)
            .header(NAMESPACES_HEADER, tenant.namespaces)
            .json(body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }
}

/// A request for machine `name` in `namespace`.
fn in_namespace(name: &str, namespace: &str) -> Value {
    let mut r = req(name);
    r.machine.metadata.namespace = namespace.into();
    serde_json::to_value(r).unwrap()
}

/// Asserts `body` says nothing of the other tenant's machine.
fn learns_nothing(body: &Value, secrets: &[&str]) {
    let text = body.to_string();
    for s in secrets {
        assert!(!text.contains(s), "{s:?} leaked in {text}");
    }
}

#[tokio::test]
async fn two_tenants_neither_see_nor_change_nor_learn_each_others_machines() {
    let app = spawn_app().await;
    // Tenant A makes its machine.
    let a_req = in_namespace("m-tenant", "team-a");
    let (code, made) = app.as_tenant(&A, "/v1/machines:create", &a_req).await;
    assert_eq!(code, 200, "{made}");
    let provider_id = made["providerID"].as_str().unwrap().to_owned();
    let id = instance_id(&provider_id).to_owned();
    let stamped = &app.instances_named("m-tenant")[0];
    let stamp = stamped["Tags"]["Tag"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["TagKey"] == NAMESPACE_STAMP)
        .map(|t| t["TagValue"].clone());
    assert_eq!(stamp, Some(json!("team-a")), "{stamped}");
    let a_uid = "uid-m-tenant";
    let never = [id.as_str(), a_uid, "team-a"];

    // What a machine that does not exist gets, for comparison.
    let (missing_code, missing) = app
        .as_tenant(
            &B,
            "/v1/machines:status",
            &in_namespace("m-tenant", "team-b"),
        )
        .await;
    assert_eq!(missing_code, 404, "{missing}");

    // B names A's machine in A's namespace: as if it did not exist, on every route.
    let mut with_id = a_req.clone();
    with_id["machine"]["spec"]["providerID"] = json!(provider_id);
    for body in [&a_req, &with_id] {
        for route in ["status", "initialize"] {
            let (code, answer) = app
                .as_tenant(&B, &format!("/v1/machines:{route}"), body)
                .await;
            assert_eq!(code, 404, "{route}: {answer}");
            assert_eq!(answer["code"], 5, "{route}: {answer}");
            assert_eq!(answer["detail"], missing["detail"], "{route}: {answer}");
            learns_nothing(&answer, &never);
        }
        // A create names the namespace itself: refused for it, in words that hold for any
        // machine there.
        let (code, answer) = app.as_tenant(&B, "/v1/machines:create", body).await;
        assert_eq!(code, 403, "{answer}");
        assert_eq!(
            answer["detail"],
            "machine.metadata.namespace: the token may not act in namespace \"team-a\"",
            "{answer}"
        );
        learns_nothing(&answer, &never[..2]);
        let (code, answer) = app.as_tenant(&B, "/v1/machines:delete", body).await;
        assert_eq!(code, 200, "{answer}");
        assert!(
            answer["lastKnownState"]
                .as_str()
                .unwrap()
                .contains("nothing to release"),
            "{answer}"
        );
        learns_nothing(&answer, &never);
    }
    // B names it (name, UID, providerID) in its own namespace: not found, not deleted, and a
    // create with its UID refused without a word of A's machine.
    let mut in_b = with_id.clone();
    in_b["machine"]["metadata"]["namespace"] = json!("team-b");
    let mut without_id = in_b.clone();
    without_id["machine"]["spec"]["providerID"] = json!("");
    for body in [&in_b, &without_id] {
        for route in ["status", "initialize"] {
            let (code, answer) = app
                .as_tenant(&B, &format!("/v1/machines:{route}"), body)
                .await;
            assert_eq!(code, 404, "{route}: {answer}");
            learns_nothing(&answer, &never);
        }
        let (code, answer) = app.as_tenant(&B, "/v1/machines:delete", body).await;
        assert_eq!(code, 200, "{answer}");
        learns_nothing(&answer, &never);
        // A's UID is A's machine's: B gets no VM with it (its ClientToken was used with A's
        // tags), and is told only that the UID is taken.
        let (code, answer) = app.as_tenant(&B, "/v1/machines:create", body).await;
        assert_eq!(code, 409, "{answer}");
        assert_eq!(answer["code"], 6, "{answer}");
        learns_nothing(&answer, &never);
    }
    // B's own machine of A's machine's name, in B's namespace: made, as ECS names need not be
    // unique (a 409 here told B that another namespace had a machine of that name).
    let mut other_uid = without_id.clone();
    other_uid["machine"]["metadata"]["uid"] = json!("uid-b-own");
    let (code, answer) = app.as_tenant(&B, "/v1/machines:create", &other_uid).await;
    assert_eq!(code, 200, "{answer}");
    learns_nothing(&answer, &never);
    assert_eq!(app.instances_named("m-tenant").len(), 2);
    let (code, answer) = app.as_tenant(&B, "/v1/machines:delete", &other_uid).await;
    assert_eq!(code, 200, "{answer}");
    // A's VM is untouched and only A lists it.
    assert_eq!(app.instances_named("m-tenant").len(), 1);
    let list = serde_json::to_value(list_req()).unwrap();
    let (code, b_list) = app.as_tenant(&B, "/v1/machines:list", &list).await;
    assert_eq!(code, 200);
    assert_eq!(b_list["machineList"], json!({}), "{b_list}");
    let (_, a_list) = app.as_tenant(&A, "/v1/machines:list", &list).await;
    assert_eq!(a_list["machineList"][&provider_id], "m-tenant", "{a_list}");
    // B's own machine is B's: A does not see it, and a cluster-wide caller sees both.
    let b_req = in_namespace("m-tenant-b", "team-c");
    let (code, b_made) = app.as_tenant(&B, "/v1/machines:create", &b_req).await;
    assert_eq!(code, 200, "{b_made}");
    let (_, a_list) = app.as_tenant(&A, "/v1/machines:list", &list).await;
    assert_eq!(a_list["machineList"].as_object().unwrap().len(), 1);
    let all = app.list().await.unwrap();
    assert_eq!(all.len(), 2, "{all:?}");
    // A still has its machine, unchanged, and deletes it.
    let (code, status) = app.as_tenant(&A, "/v1/machines:status", &a_req).await;
    assert_eq!(code, 200, "{status}");
    assert_eq!(status["providerID"], provider_id.as_str());
    let (code, _) = app.as_tenant(&A, "/v1/machines:delete", &a_req).await;
    assert_eq!(code, 200);
    assert!(app.instances_named("m-tenant").is_empty());
}

#[tokio::test]
async fn a_machine_without_a_namespace_stamp_is_the_default_namespaces() {
    let app = spawn_app().await;
    // Made before namespaces existed: no stamp.
    let run = alicloud::RunInstances {
        image_id: "m-image-1".into(),
        instance_type: "ecs.g6.large".into(),
        instance_name: Some("m-old".into()),
        tags: vec![
            alicloud::Tag::new(CLUSTER_TAG, "1"),
            alicloud::Tag::new(ROLE_TAG, "1"),
        ],
        ..alicloud::RunInstances::default()
    };
    app.ecs()
        .run_instances(
            &run,
            alicloud::deadline_in(std::time::Duration::from_secs(10)),
        )
        .await
        .unwrap();
    let old = in_namespace("m-old", "");
    let default_only = Tenant {
        token: "d",
        namespaces: "default",
    };
    let (code, answer) = app
        .as_tenant(&default_only, "/v1/machines:status", &old)
        .await;
    assert_eq!(code, 200, "{answer}");
    let (code, _) = app
        .as_tenant(&A, "/v1/machines:status", &in_namespace("m-old", "team-a"))
        .await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn a_namespace_that_is_not_a_dns_label_is_refused_naming_the_field() {
    let app = spawn_app().await;
    let (code, _, answer) = app
        .raw(
            "/v1/machines:create",
            &in_namespace("m-bad-ns", "Team A/../x"),
        )
        .await;
    assert_eq!(code, 400, "{answer}");
    let detail = answer["detail"].as_str().unwrap();
    assert!(detail.contains("machine.metadata.namespace"), "{detail}");
    assert_eq!(app.emulator.instance_count(), 0);
}

#[tokio::test]
async fn a_namespace_has_at_most_the_quota_of_machines() {
    let app = spawn_app_with(|c| c.quota_machines = Some(2)).await;
    for name in ["m-q1", "m-q2"] {
        let (code, answer) = app
            .as_tenant(&A, "/v1/machines:create", &in_namespace(name, "team-a"))
            .await;
        assert_eq!(code, 200, "{answer}");
    }
    // A third new one is refused, naming the quota, the namespace, its use and the limit.
    let third = in_namespace("m-q3", "team-a");
    let (code, answer) = app.as_tenant(&A, "/v1/machines:create", &third).await;
    assert_eq!(code, 429, "{answer}");
    assert_eq!(answer["code"], 8, "{answer}");
    let detail = answer["detail"].as_str().unwrap();
    for part in [
        "BERTH_QUOTA_MACHINES",
        "\"team-a\"",
        "has 2 machine(s)",
        "limit is 2",
    ] {
        assert!(detail.contains(part), "{part:?} not in {detail}");
    }
    assert!(app.instances_named("m-q3").is_empty());
    // Creating an existing machine again (a retry, MCM's re-create) is never refused.
    let (code, answer) = app
        .as_tenant(&A, "/v1/machines:create", &in_namespace("m-q1", "team-a"))
        .await;
    assert_eq!(code, 200, "{answer}");
    // The same name and UID under another cluster tag would make a new VM: counted, and refused.
    let elsewhere = serde_json::to_string(&in_namespace("m-q1", "team-a"))
        .unwrap()
        .replace(CLUSTER_TAG, "kubernetes.io/cluster/shoot--elsewhere");
    let elsewhere: Value = serde_json::from_str(&elsewhere).unwrap();
    let (code, answer) = app.as_tenant(&A, "/v1/machines:create", &elsewhere).await;
    assert_eq!(code, 429, "{answer}");
    assert_eq!(app.instances_named("m-q1").len(), 1);
    // Another region holds the same namespace's machines: counted together, and refused (counted
    // in the class's region alone, a tenant went on in the next: a break-it finding).
    let beijing = serde_json::to_string(&in_namespace("m-q5", "team-a"))
        .unwrap()
        .replace(REGION, "cn-beijing");
    let beijing: Value = serde_json::from_str(&beijing).unwrap();
    let (code, answer) = app.as_tenant(&A, "/v1/machines:create", &beijing).await;
    assert_eq!(code, 429, "{answer}");
    assert!(app.instances_named("m-q5").is_empty());
    // Another namespace has its own count.
    let (code, answer) = app
        .as_tenant(&B, "/v1/machines:create", &in_namespace("m-q3", "team-b"))
        .await;
    assert_eq!(code, 200, "{answer}");
    // Once one is deleted, there is room again.
    let (code, _) = app
        .as_tenant(&A, "/v1/machines:delete", &in_namespace("m-q2", "team-a"))
        .await;
    assert_eq!(code, 200);
    let (code, answer) = app
        .as_tenant(&A, "/v1/machines:create", &in_namespace("m-q4", "team-a"))
        .await;
    assert_eq!(code, 200, "{answer}");
}

#[tokio::test]
async fn concurrent_creates_in_one_namespace_never_pass_the_quota_together() {
    let app = spawn_app_with(|c| c.quota_machines = Some(3)).await;
    let bodies: Vec<Value> = (0..8)
        .map(|n| in_namespace(&format!("m-race-{n}"), "team-a"))
        .collect();
    let answers = futures::future::join_all(
        bodies
            .iter()
            .map(|b| app.as_tenant(&A, "/v1/machines:create", b)),
    )
    .await;
    let made = answers.iter().filter(|(code, _)| *code == 200).count();
    let refused = answers.iter().filter(|(code, _)| *code == 429).count();
    assert_eq!((made, refused), (3, 5), "{answers:?}");
    assert_eq!(app.emulator.instance_count(), 3);
}

#[tokio::test]
async fn a_machine_created_and_deleted_seventy_times_can_be_created_again() {
    let app = spawn_app().await;
    let r = req("m-phoenix");
    let mut ids = std::collections::BTreeSet::new();
    for round in 0..72 {
        let made = app
            .create(&r)
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(
            ids.insert(made.provider_id.clone()),
            "round {round}: reused"
        );
        app.delete(&r)
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
    }
    let made = app.create(&r).await.unwrap();
    assert!(!ids.contains(&made.provider_id));
    assert_eq!(app.instances_named("m-phoenix").len(), 1);
    // And it stays idempotent: the same create again finds the same VM.
    assert_eq!(app.create(&r).await.unwrap().provider_id, made.provider_id);
    assert_eq!(app.instances_named("m-phoenix").len(), 1);
}

/// Every mutating call is audited once, naming the token, its namespaces, the route, the machine
/// (`namespace/name`) and the outcome; reads are not, and the token itself never appears.
#[tokio::test]
async fn each_mutating_call_writes_one_audit_line_naming_the_machine() {
    let captured = crate::secrets::Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_writer(captured.clone())
        .with_ansi(false)
        .finish();
    // Single-threaded runtime: the driver runs on this thread, under this subscriber.
    let _guard = tracing::subscriber::set_default(subscriber);
    let app = spawn_app().await;
    let body = in_namespace("m-audit", "team-a");
    for route in ["create", "status", "initialize", "delete"] {
        let (code, answer) = app
            .as_tenant(&A, &format!("/v1/machines:{route}"), &body)
            .await;
        assert_eq!(code, 200, "{route}: {answer}");
    }
    // Another tenant's delete is audited too, as what it was: a call about a machine it cannot see.
    app.as_tenant(&B, "/v1/machines:delete", &body).await;
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let audit: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("berth::audit"))
        .collect();
    assert_eq!(audit.len(), 4, "{audit:#?}");
    for (line, route) in audit
        .iter()
        .zip(["create", "initialize", "delete", "delete"])
    {
        assert!(
            line.contains(&format!("route=POST /v1/machines:{route}")),
            "{line}"
        );
        assert!(line.contains("object=team-a/m-audit"), "{line}");
        assert!(line.contains("outcome=200"), "{line}");
    }
    assert!(audit[0].contains("token=ci-a") && audit[0].contains("namespaces=team-a"));
    assert!(audit[3].contains("token=ci-b") && audit[3].contains("namespaces=team-b,team-c"));
}
