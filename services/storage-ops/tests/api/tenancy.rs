//! Namespaces and quotas: a caller the gateway scoped to some namespaces sees and touches nothing
//! outside them, and a namespace's volumes stay within the operator's quota however many adds race.

use serde_json::{Value, json};
use service_kit::tenancy::{NAMESPACES_HEADER, TOKEN_NAME_HEADER};

use crate::support::*;

/// A call as the gateway forwards it for a token of `namespaces`.
async fn as_tenant(
    app: &TestApp,
    namespaces: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = app
        .http
        .request(method.parse().unwrap(), format!("{}{path}", app.url))
        .header(TOKEN_NAME_HEADER, "tenant")
        .header(NAMESPACES_HEADER, namespaces);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn add(app: &TestApp, namespace: &str, name: &str) -> domain::Volume {
    let response = app
        .post_raw(&json!({"name": name, "namespace": namespace, "capacity": "1Mi", "labels": {"secret-label": "x"}}))
        .await;
    assert_eq!(response.status(), 201);
    response.json().await.unwrap()
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            format!(
                "{}/{}",
                v["metadata"]["namespace"].as_str().unwrap(),
                v["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test]
async fn a_caller_of_some_namespaces_sees_and_touches_nothing_outside_them() {
    let app = spawn_app().await;
    for ns in ["team-a", "team-b", "team-c"] {
        add(&app, ns, "v1").await;
        add(&app, ns, "v2").await;
    }
    let theirs = add(&app, "team-b", "private").await;

    let (status, list) = as_tenant(&app, "team-a", "GET", "/v1/volumes", None).await;
    assert_eq!(status, 200);
    assert_eq!(names(&list), ["team-a/v1", "team-a/v2"]);
    let (_, list) = as_tenant(&app, "team-a", "GET", "/v1/volumes?namespace=team-b", None).await;
    assert_eq!(
        list,
        json!({"metadata": {"resourceVersion": "0"}, "items": []}),
        "another namespace lists as an empty one, with no version of its own"
    );

    // Pages across two namespaces skip the one between them, and no `continue` token names it.
    let mut seen = Vec::new();
    let mut path = "/v1/volumes?limit=1".to_string();
    loop {
        let (status, page) = as_tenant(&app, "team-a,team-c", "GET", &path, None).await;
        assert_eq!(status, 200, "{page}");
        seen.extend(names(&page));
        match page["continue"].as_str() {
            Some(token) => path = format!("/v1/volumes?limit=1&continue={token}"),
            None => break,
        }
    }
    assert_eq!(seen, ["team-a/v1", "team-a/v2", "team-c/v1", "team-c/v2"]);

    // Read, stats and delete of another tenant's volume answer as for one that does not exist.
    let (_, missing) = as_tenant(&app, "team-b", "GET", "/v1/volumes/team-b/nothing", None).await;
    for path in [
        "/v1/volumes/team-b/private",
        "/v1/volumes/team-b/private/stats",
    ] {
        let (status, body) = as_tenant(&app, "team-a", "GET", path, None).await;
        assert_eq!(status, 404, "{path}");
        assert_eq!(
            body["detail"]
                .as_str()
                .unwrap()
                .replace("private", "nothing"),
            missing["detail"].as_str().unwrap(),
            "the words a missing volume gets"
        );
    }
    let (status, body) =
        as_tenant(&app, "team-a", "DELETE", "/v1/volumes/team-b/private", None).await;
    assert_eq!((status, body), (200, json!({"deleted": false})));
    assert_eq!(app.storage.get("team-b", "private").await.unwrap(), theirs);

    // Making one in a namespace the token may not use is refused, naming the namespace it named.
    let (status, body) = as_tenant(
        &app,
        "team-a",
        "POST",
        "/v1/volumes",
        Some(json!({"name": "x", "namespace": "team-b", "capacity": "1Mi"})),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("\"team-b\""),
        "{body}"
    );
    assert!(app.storage.get("team-b", "x").await.is_err());
    // And the namespace `default` is a namespace like any other.
    let (status, _) = as_tenant(
        &app,
        "team-a",
        "POST",
        "/v1/volumes",
        Some(json!({"name": "x", "capacity": "1Mi"})),
    )
    .await;
    assert_eq!(status, 403);

    // Orphans belong to no namespace: cluster-wide callers only.
    let (status, _) = as_tenant(&app, "team-a", "GET", "/v1/orphans", None).await;
    assert_eq!(status, 403);
    let (status, _) = as_tenant(&app, "*", "GET", "/v1/orphans", None).await;
    assert_eq!(status, 200);

    // Nothing of team-b's reached team-a in any answer.
    let (_, all) = as_tenant(&app, "team-a", "GET", "/v1/volumes?limit=1000", None).await;
    assert!(!all.to_string().contains(&theirs.metadata.uid));
    assert!(!all.to_string().contains("team-b"));
}

#[tokio::test]
async fn a_namespaces_quota_holds_under_concurrent_adds_and_is_named_when_refused() {
    let app = spawn_app_with(&[
        ("BERTH_QUOTA_VOLUMES", "3"),
        ("BERTH_QUOTA_VOLUME_BYTES", "5Mi"),
    ])
    .await;
    let adds = (0..12).map(|i| {
        let http = app.http.clone();
        let url = app.url.clone();
        async move {
            let response = http
                .post(format!("{url}/v1/volumes"))
                .json(&json!({"name": format!("v{i}"), "namespace": "busy", "capacity": "1Mi"}))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    });
    let answers = futures::future::join_all(adds).await;
    let made = answers.iter().filter(|(s, _)| *s == 201).count();
    assert_eq!(made, 3, "{answers:?}");
    for (status, body) in answers.iter().filter(|(s, _)| *s != 201) {
        assert_eq!(*status, 429, "{body}");
        let detail = body["detail"].as_str().unwrap();
        assert_eq!(
            detail,
            "namespace \"busy\" is at its quota BERTH_QUOTA_VOLUMES=3: 3 volumes in use, 1 more asked"
        );
    }
    assert_eq!(app.objects("busy").len(), 3, "refused adds leave no object");

    // Another namespace has its own quota; the byte quota is counted the same way.
    let big = |name: &str, capacity: &str| json!({"name": name, "namespace": "roomy", "capacity": capacity});
    assert_eq!(app.post_raw(&big("a", "4Mi")).await.status(), 201);
    let (status, body) = problem(app.post_raw(&big("b", "2Mi")).await).await;
    assert_eq!(status, 429);
    assert_eq!(
        body["detail"],
        "namespace \"roomy\" is at its quota BERTH_QUOTA_VOLUME_BYTES=5Mi: 4Mi in use, 2Mi more asked"
    );
    assert_eq!(app.post_raw(&big("c", "1Mi")).await.status(), 201);
    // A volume already there is answered as before, quota or not.
    assert_eq!(app.post_raw(&big("c", "1Mi")).await.status(), 200);
    // Deleting frees its share.
    assert!(app.storage.delete("roomy", "a").await.unwrap().deleted);
    assert_eq!(app.post_raw(&big("b", "2Mi")).await.status(), 201);
}

#[test]
fn a_quota_that_is_no_number_stops_the_service_naming_the_variable() {
    for (var, value) in [
        ("BERTH_QUOTA_VOLUMES", "many"),
        ("BERTH_QUOTA_VOLUME_BYTES", "lots"),
    ] {
        let env = service_kit::Env::default().with(var, value);
        let e = storage_ops::Config::from_env(&env).unwrap_err();
        assert_eq!(e.var, var);
    }
    let env = service_kit::Env::default()
        .with("BERTH_QUOTA_VOLUMES", "10")
        .with("BERTH_QUOTA_VOLUME_BYTES", "100Gi");
    let config = storage_ops::Config::from_env(&env).unwrap();
    assert_eq!(config.quota.volumes, Some(10));
    assert_eq!(config.quota.bytes, Some(100 << 30));
    let unset = storage_ops::Config::from_env(&service_kit::Env::default()).unwrap();
    assert_eq!(unset.quota, storage_ops::store::NamespaceQuota::default());
}
