//! Register, get, has, list and deregister: idempotency, versions, unknown names.

use domain::Code;
use domain::OrchestratorKind;
use domain::orchestrator::{DEFAULT_DOCKER_HOST, RegisterOrchestrator};
use serde_json::{Value, json};

use crate::support::*;

#[tokio::test]
async fn register_get_has_list_and_deregister_through_the_typed_client() {
    let app = spawn_app().await;
    app.clear().await;
    let c = &app.registry;
    let mut req = RegisterOrchestrator::new(OrchestratorKind::Docker);
    req.label = Some("ci".into());
    req.region = Some("eu-west".into());
    let made = c.register("engine", &req).await.unwrap();
    assert_eq!(made.name, "engine");
    assert_eq!(made.kind, OrchestratorKind::Docker);
    assert_eq!(made.label, "ci");
    assert_eq!(made.region, "eu-west");
    assert_eq!(made.config, json!({"host": DEFAULT_DOCKER_HOST}));
    assert!(made.storage_ops);
    assert!(!made.default);
    assert!(made.resource_version > 0);
    assert_eq!(c.get("engine").await.unwrap(), made);
    assert!(c.has("engine").await.unwrap());
    assert!(!c.has("absent").await.unwrap());

    let mut k8s = RegisterOrchestrator::new(OrchestratorKind::Nomad);
    k8s.default = Some(true);
    let k = c.register("a-cluster", &k8s).await.unwrap();
    assert!(!k.storage_ops, "nomad StorageOps are reported honestly");
    assert!(k.default);
    assert_eq!(c.default_orchestrator().await.unwrap().name, "a-cluster");

    let names: Vec<String> = c
        .list()
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| o.name)
        .collect();
    assert_eq!(names, ["a-cluster", "engine"], "sorted by name");

    c.deregister("engine").await.unwrap();
    assert!(!c.has("engine").await.unwrap());
    assert!(!c.deregister_reporting("engine").await.unwrap());
    let e = c.get("engine").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
}

#[tokio::test]
async fn list_is_sorted_and_items_is_an_empty_array_when_none_is_registered() {
    let app = spawn_app().await;
    app.clear().await;
    let r = app.list().await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["items"], json!([]));
    assert!(
        r.body["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .is_ok(),
        "the list says the version a watch resumes from: {}",
        r.body
    );
    for name in ["zeta", "alpha", "mid-1", "mid-0"] {
        assert_eq!(app.put(name, json!({"kind": "nomad"})).await.status, 201);
    }
    let list = app.list().await.body;
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "mid-0", "mid-1", "zeta"]);
}

#[tokio::test]
async fn register_is_idempotent_and_a_different_body_replaces_and_bumps_the_version() {
    let app = spawn_app().await;
    let body = json!({"kind": "local", "label": "fast", "config": {"basePath": "/srv/vols", "capacity": "10Gi"}});
    let first = app.put("disks", body.clone()).await;
    assert_eq!(first.status, 201, "{}", first.body);
    assert_eq!(first.headers["location"], "/v1/orchestrators/disks");
    let v1 = first.body["resourceVersion"]
        .as_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    assert_eq!(first.etag(), format!("\"{v1}\""));

    let again = app.put("disks", body.clone()).await;
    assert_eq!(again.status, 200);
    assert_eq!(
        again.body, first.body,
        "the same body again changes nothing"
    );

    // The same meaning written differently is still the same registration.
    let same = app
        .put(
            "disks",
            json!({"kind": "local", "label": "fast", "config": {"basePath": "//srv/./vols/", "capacity": "10240Mi"}}),
        )
        .await;
    assert_eq!(
        same.body["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap(),
        v1
    );

    let changed = app
        .put(
            "disks",
            json!({"kind": "local", "label": "slow", "config": {"basePath": "/srv/vols"}}),
        )
        .await;
    assert_eq!(changed.status, 200);
    let v2 = changed.body["resourceVersion"]
        .as_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    assert!(v2 > v1);
    assert_eq!(changed.body["label"], "slow");
    assert_eq!(changed.body["config"], json!({"basePath": "/srv/vols"}));
    assert_eq!(app.get("disks").await.body, changed.body);
    assert_eq!(app.get("disks").await.etag(), format!("\"{v2}\""));

    // A different kind under the same name replaces it too.
    let other = app.put("disks", json!({"kind": "docker"})).await;
    assert_eq!(other.status, 200);
    assert_eq!(other.body["kind"], "docker");
    assert!(
        other.body["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > v2
    );
}

#[tokio::test]
async fn if_match_with_a_stale_version_is_412_with_code_9() {
    let app = spawn_app().await;
    let made = app.put("pinned", json!({"kind": "nomad"})).await;
    let v1 = made.body["resourceVersion"]
        .as_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();

    let ok = app
        .put_if_match(
            "pinned",
            json!({"kind": "nomad", "label": "a"}),
            &format!("\"{v1}\""),
        )
        .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let v2 = ok.body["resourceVersion"]
        .as_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();

    let stale = app
        .put_if_match(
            "pinned",
            json!({"kind": "nomad", "label": "b"}),
            &format!("\"{v1}\""),
        )
        .await;
    assert_eq!(stale.status, 412);
    assert_eq!(stale.body["code"], 9);
    assert!(
        stale.detail().contains(&format!("at resourceVersion {v2}")),
        "{}",
        stale.detail()
    );
    assert_eq!(
        app.get("pinned").await.body["label"],
        "a",
        "nothing changed"
    );

    let any = app
        .put_if_match("pinned", json!({"kind": "nomad", "label": "c"}), "*")
        .await;
    assert_eq!(any.status, 200);
    let missing = app
        .put_if_match("nobody", json!({"kind": "nomad"}), "*")
        .await;
    assert_eq!(missing.status, 412);
    assert_eq!(missing.body["code"], 9);
    assert_eq!(app.get("nobody").await.status, 404, "nothing was created");

    app.put_if_match("pinned", json!({"kind": "nomad"}), "soon")
        .await
        .assert_invalid("If-Match");
    // A malformed If-Match is the caller's 400 even when the body points where the operator does
    // not allow (which alone would be a 412): the request's shape is checked first.
    app.put_if_match(
        "elsewhere",
        json!({"kind": "local", "config": {"basePath": "/0"}}),
        "{}",
    )
    .await
    .assert_invalid("If-Match");
    app.put(
        "elsewhere",
        json!({"kind": "local", "config": {"basePath": "/0"}, "default": {}}),
    )
    .await
    .assert_invalid("default");
}

#[tokio::test]
async fn unknown_names_are_404_with_the_maya_message_and_head_has_no_body() {
    let app = spawn_app().await;
    let r = app.get("ghost").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["code"], 5);
    assert_eq!(
        r.detail(),
        "'ghost' is not a registered orchestration provider"
    );
    assert_eq!(r.headers["content-type"], "application/problem+json");

    let h = app.head("ghost").await;
    assert_eq!(h.status, 404);
    assert_eq!(h.body, Value::Null);
    app.put("real", json!({"kind": "nomad"})).await;
    let h = app.head("real").await;
    assert_eq!(h.status, 200);
    assert_eq!(h.body, Value::Null);
    assert!(!h.etag().is_empty());

    let e = app.registry.get("ghost").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert_eq!(e.http_status, Some(404));
    assert_eq!(
        e.status.message,
        "'ghost' is not a registered orchestration provider"
    );
}

#[tokio::test]
async fn deregister_is_idempotent_and_says_whether_it_existed() {
    let app = spawn_app().await;
    app.put("short-lived", json!({"kind": "nomad"})).await;
    let first = app.delete("short-lived").await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body, json!({"deleted": true}));
    let second = app.delete("short-lived").await;
    assert_eq!(second.status, 200);
    assert_eq!(second.body, json!({"deleted": false}));
    assert_eq!(app.get("short-lived").await.status, 404);
}

#[tokio::test]
async fn registering_and_removing_orchestrators_needs_a_cluster_wide_caller_and_reads_do_not() {
    use service_kit::tenancy::{NAMESPACES_HEADER, TOKEN_NAME_HEADER};
    let app = spawn_app().await;
    app.clear().await;
    let body = json!({"kind": "nomad"});
    assert_eq!(app.put("shared", body.clone()).await.status, 201);
    let scoped = |request: reqwest::RequestBuilder| {
        request
            .header(TOKEN_NAME_HEADER, "team")
            .header(NAMESPACES_HEADER, "team-a")
    };
    for request in [
        app.http.put(app.item("mine")).json(&body),
        app.http
            .put(app.item("shared"))
            .json(&json!({"kind": "nomad", "label": "taken"})),
        app.http.delete(app.item("shared")),
    ] {
        let answer = app.send(scoped(request)).await;
        assert_eq!(answer.status, 403, "{:?}", answer.body);
        assert_eq!(answer.body["code"], 7, "PermissionDenied");
        assert!(
            answer
                .detail()
                .contains("registering orchestrators is cluster-wide"),
            "{}",
            answer.detail()
        );
    }
    assert_eq!(app.get("mine").await.status, 404);
    assert_eq!(app.get("shared").await.body["label"], "");
    // Reads are open to a namespaced caller.
    let read = app.send(scoped(app.http.get(app.item("shared")))).await;
    assert_eq!(read.status, 200);
    let list = app
        .send(scoped(
            app.http.get(format!("{}/v1/orchestrators", app.url)),
        ))
        .await;
    assert_eq!(list.status, 200);
    // A cluster-wide token (`*`) may, as may a call with no namespaces header (another service).
    let wide = app
        .send(
            app.http
                .delete(app.item("shared"))
                .header(NAMESPACES_HEADER, "*"),
        )
        .await;
    assert_eq!(
        (wide.status.as_u16(), &wide.body),
        (200, &json!({"deleted": true}))
    );
}

/// Two `local` orchestrators whose base paths nest (the same directory, or one inside the other's
/// tree) would put one's volumes inside the other's directories: the second is refused, 409 naming
/// the first and the rule, and nothing is registered.
#[tokio::test]
async fn local_base_paths_that_nest_are_refused_naming_the_other_orchestrator() {
    let app = spawn_app().await;
    app.clear().await;
    assert_eq!(app.put("a", local("/srv/berth/a")).await.status, 201);
    for (i, path) in [
        "/srv/berth/a",
        "/srv//berth/a/./",
        "/srv/berth/a/team",
        "/srv/berth/a/team/x-0f8fad5b/deeper",
        "/srv/berth",
        "/srv",
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("nested-{i}");
        let r = app.put(&name, local(path)).await;
        assert_eq!(r.status, 409, "{path}: {}", r.body);
        assert_eq!(r.body["code"], 6, "{}", r.body);
        assert!(
            r.detail().starts_with("config.basePath: ")
                && r.detail().contains("local orchestrator 'a'")
                && r.detail().contains("\"/srv/berth/a\"")
                && r.detail().contains("must not nest"),
            "{path}: {}",
            r.detail()
        );
        assert_eq!(
            app.get(&name).await.status,
            404,
            "{path}: nothing registered"
        );
    }
    // Beside it is fine, a name that only starts the same too; so is re-registering `a` itself.
    assert_eq!(app.put("b", local("/srv/berth/ab")).await.status, 201);
    assert_eq!(app.put("c", local("/srv/berth/c")).await.status, 201);
    let relabelled = json!({"kind": "local", "label": "x", "config": {"basePath": "/srv/berth/a"}});
    assert_eq!(app.put("a", relabelled).await.status, 200);
    // Moving `a` inside another is refused too, naming that one; `a` stays as it was.
    let r = app.put("a", local("/srv/berth/c/inner")).await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(
        r.detail().contains("local orchestrator 'c'"),
        "{}",
        r.detail()
    );
    assert_eq!(
        app.get("a").await.body["config"]["basePath"],
        "/srv/berth/a"
    );
    // Other kinds have no base path to clash.
    assert_eq!(app.put("n", json!({"kind": "nomad"})).await.status, 201);
    // Once `c` is gone, its directory is free.
    app.delete("c").await;
    assert_eq!(app.put("a2", local("/srv/berth/c/inner")).await.status, 201);
}

/// The check runs in the registration's write transaction: of two nested registrations racing,
/// exactly one is registered.
#[tokio::test]
async fn of_two_nested_registrations_racing_exactly_one_wins() {
    let app = spawn_app().await;
    app.clear().await;
    for round in 0..10 {
        let (outer, inner) = (format!("outer-{round}"), format!("inner-{round}"));
        let outer_path = format!("/srv/race/{round}");
        let inner_path = format!("/srv/race/{round}/in");
        let (x, y) = tokio::join!(
            app.put(&outer, local(&outer_path)),
            app.put(&inner, local(&inner_path)),
        );
        let mut statuses = [x.status.as_u16(), y.status.as_u16()];
        statuses.sort();
        assert_eq!(statuses, [201, 409], "{} / {}", x.body, y.body);
    }
}
