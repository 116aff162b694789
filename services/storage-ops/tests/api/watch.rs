//! Watch of a namespace's volumes: the list's version, then ADDED, MODIFIED and DELETED as they
//! commit; every current volume first without a version; another tenant's namespace tells nothing;
//! after a restart a version from before it is 410, the list's new one resumes.

use std::time::Duration;

use serde_json::{Value, json};
use service_kit::tenancy::{NAMESPACES_HEADER, TOKEN_NAME_HEADER};
use service_kit::testing::Events;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(10);

fn rand_name() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}

async fn list_version(app: &TestApp, namespace: &str) -> String {
    let list: Value = app
        .http
        .get(format!("{}/v1/volumes?namespace={namespace}", app.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_else(|| panic!("a namespace's list says its version: {list}"))
        .to_string()
}

async fn watch(app: &TestApp, query: &str, namespaces: Option<&str>) -> reqwest::Response {
    let mut request = app.http.get(format!(
        "{}/v1/volumes?watch=true&timeoutSeconds=30&{query}",
        app.url
    ));
    if let Some(namespaces) = namespaces {
        request = request
            .header(TOKEN_NAME_HEADER, "tenant")
            .header(NAMESPACES_HEADER, namespaces);
    }
    request.send().await.unwrap()
}

async fn add(app: &TestApp, namespace: &str, name: &str, labels: Value) -> Value {
    let response = app
        .post_raw(
            &json!({"name": name, "namespace": namespace, "capacity": "1Mi", "labels": labels}),
        )
        .await;
    assert_eq!(response.status(), 201);
    response.json().await.unwrap()
}

#[tokio::test]
async fn a_watch_streams_a_namespaces_changes_after_its_lists_version() {
    let app = spawn_app().await;
    add(&app, "team-a", "before", json!({})).await;
    let version = list_version(&app, "team-a").await;
    let response = watch(
        &app,
        &format!("namespace=team-a&resourceVersion={version}"),
        None,
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let mut events = Events::new(response);
    // Another namespace's volume is not in it; this namespace's are, in order.
    add(&app, "team-b", "elsewhere", json!({})).await;
    let made = add(&app, "team-a", "v1", json!({"tier": "db"})).await;
    let added = events.next_change(WAIT).await.unwrap();
    assert_eq!(added["type"], "ADDED", "{added}");
    assert_eq!(added["object"], made);
    assert!(
        added["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > version.parse().unwrap()
    );
    let deleted = app
        .http
        .delete(format!("{}/v1/volumes/team-a/v1", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    // Deleting first (a MODIFIED), then gone.
    let mut gone = events.next_change(WAIT).await.unwrap();
    if gone["type"] == "MODIFIED" {
        assert_eq!(gone["object"]["status"]["phase"], "Deleting", "{gone}");
        gone = events.next_change(WAIT).await.unwrap();
    }
    assert_eq!(gone["type"], "DELETED", "{gone}");
    assert_eq!(gone["object"]["metadata"]["name"], "v1");
    // A delete takes a version of its own: a watch resumed from it sees nothing again.
    let delete_version = gone["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap();
    assert!(
        delete_version.parse::<u64>().unwrap()
            > made["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
    );
    assert_eq!(list_version(&app, "team-a").await, delete_version);

    // Without a version: every current volume first, filtered by the selector, then changes.
    add(&app, "team-a", "v2", json!({"tier": "web"})).await;
    add(&app, "team-a", "v3", json!({"tier": "db"})).await;
    let mut from_now =
        Events::new(watch(&app, "namespace=team-a&labelSelector=tier%3Ddb", None).await);
    let first = from_now.next_change(WAIT).await.unwrap();
    assert_eq!(
        (
            first["type"].as_str(),
            first["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("v3"))
    );
    add(&app, "team-a", "v4", json!({"tier": "web"})).await;
    add(&app, "team-a", "v5", json!({"tier": "db"})).await;
    let next = from_now.next_change(WAIT).await.unwrap();
    assert_eq!(
        next["object"]["metadata"]["name"], "v5",
        "the selector keeps v4 out: {next}"
    );
}

#[tokio::test]
async fn a_watch_names_its_namespace_and_another_tenants_tells_nothing() {
    let app = spawn_app_with(&[("BERTH_WATCH_HEARTBEAT", "200ms")]).await;
    let response = watch(&app, "", None).await;
    let (status, refused) = problem(response).await;
    assert_eq!(status, 400);
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .starts_with("namespace: is required with watch=true"),
        "{refused}"
    );
    for bad in [
        "resourceVersion=abc",
        "resourceVersion=-1",
        "timeoutSeconds=0",
        "timeoutSeconds=1801",
    ] {
        let (status, refused) =
            problem(watch(&app, &format!("namespace=team-a&{bad}"), None).await).await;
        assert_eq!(status, 400, "{bad}: {refused}");
    }

    add(&app, "team-b", "private", json!({})).await;
    // A tenant of team-a watching team-b: a stream of bookmarks carrying only the version it
    // asked for, however team-b's moves, and none of its volumes; a version team-b is long past
    // is not "too old" to it either.
    let mut theirs = Events::new(watch(&app, "namespace=team-b", Some("team-a")).await);
    let mut resumed =
        Events::new(watch(&app, "namespace=team-b&resourceVersion=1", Some("team-a")).await);
    for _ in 0..3 {
        add(
            &app,
            "team-b",
            &format!("another-{}", rand_name()),
            json!({}),
        )
        .await;
    }
    for (events, asked) in [(&mut theirs, "0"), (&mut resumed, "1")] {
        let event = events.next(WAIT).await.unwrap();
        assert_eq!(event["type"], "BOOKMARK", "{event}");
        assert_eq!(
            event["object"]["metadata"]["resourceVersion"], asked,
            "{event}"
        );
    }
    assert_ne!(list_version(&app, "team-b").await, "1");
}

#[tokio::test]
async fn after_a_restart_an_older_version_is_gone_and_the_new_list_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let registry_url = spawn_registry(tmp.path()).await;
    register_local(
        &registry_client(&registry_url),
        "disk",
        &tmp.path().join("vols"),
        None,
        true,
    )
    .await;
    let db = tmp.path().join("storage.db");
    let url = spawn_storage(&db, &registry_url, &[]).await;
    let http = reqwest::Client::new();
    for name in ["a", "b"] {
        let made = http
            .post(format!("{url}/v1/volumes"))
            .json(&json!({"name": name, "namespace": "team-a", "capacity": "1Mi"}))
            .send()
            .await
            .unwrap();
        assert_eq!(made.status(), 201);
    }
    let before: Value = http
        .get(format!("{url}/v1/volumes?namespace=team-a"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let old = before["items"][0]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let current = before["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    // A second storage-ops on the same file stands for the restarted one: its feed starts empty.
    let restarted = spawn_storage(&db, &registry_url, &[]).await;
    let watch = |version: &str| {
        http.get(format!("{restarted}/v1/volumes?namespace=team-a&watch=true&timeoutSeconds=5&resourceVersion={version}"))
            .send()
    };
    let (status, problem) = problem(watch(&old).await.unwrap()).await;
    assert_eq!(status, 410, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("the oldest a watch can resume from is {current}")),
        "{problem}"
    );
    let resumed = watch(&current).await.unwrap();
    assert_eq!(resumed.status(), 200);
    let mut events = Events::new(resumed);
    let made = http
        .post(format!("{restarted}/v1/volumes"))
        .json(&json!({"name": "c", "namespace": "team-a", "capacity": "1Mi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), 201);
    let added = events.next_change(WAIT).await.unwrap();
    assert_eq!(added["object"]["metadata"]["name"], "c", "{added}");
}
