//! Watch of the orchestrators: the list's version, then ADDED, MODIFIED (the previous default
//! too, when the default moves) and DELETED; every orchestrator first without a version; a
//! version from before a restart is 410.

use std::time::Duration;

use serde_json::{Value, json};
use service_kit::Env;
use service_kit::testing::Events;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(10);

async fn watch(app: &TestApp, query: &str) -> reqwest::Response {
    app.http
        .get(format!(
            "{}/v1/orchestrators?watch=true&timeoutSeconds=30&{query}",
            app.url
        ))
        .send()
        .await
        .unwrap()
}

fn summary(event: &Value) -> (String, String, bool) {
    (
        event["type"].as_str().unwrap().to_string(),
        event["object"]["name"].as_str().unwrap().to_string(),
        event["object"]["default"].as_bool().unwrap(),
    )
}

#[tokio::test]
async fn a_watch_sees_registrations_the_default_moving_and_deregistrations() {
    let app = spawn_app().await;
    app.clear().await;
    app.put("a", json!({"kind": "nomad", "default": true}))
        .await;
    let list = app.list().await.body;
    let version = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        version,
        list["items"][0]["resourceVersion"].as_str().unwrap(),
        "the list is at its newest change"
    );
    let response = watch(&app, &format!("resourceVersion={version}")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let mut events = Events::new(response);
    app.put("b", json!({"kind": "nomad", "default": true}))
        .await;
    // Same body again: nothing changes, nothing is streamed.
    app.put("b", json!({"kind": "nomad", "default": true}))
        .await;
    assert_eq!(app.delete("a").await.status, 200);
    let mut seen = Vec::new();
    let mut versions = Vec::new();
    for _ in 0..3 {
        let event = events.next_change(WAIT).await.unwrap();
        versions.push(
            event["object"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap(),
        );
        seen.push(summary(&event));
    }
    // Each change its own version, even the two one registration makes: a watcher that resumes
    // from either misses neither.
    assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
    let s = |t: &str, n: &str, d| (t.to_string(), n.to_string(), d);
    assert_eq!(
        seen,
        [
            s("MODIFIED", "a", false),
            s("ADDED", "b", true),
            s("DELETED", "a", false)
        ]
    );

    // Without a version: every orchestrator first.
    let mut from_now = Events::new(watch(&app, "").await);
    assert_eq!(
        summary(&from_now.next_change(WAIT).await.unwrap()),
        s("ADDED", "b", true)
    );
}

#[tokio::test]
async fn a_version_from_before_a_restart_is_gone() {
    let app = spawn_app().await;
    app.clear().await;
    let first = app.put("a", json!({"kind": "nomad"})).await.body["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    app.put("b", json!({"kind": "nomad"})).await;
    let dir = app.stop().await;
    let app = spawn_app_with(Env::default(), false, Some(dir)).await;
    let response = watch(&app, &format!("resourceVersion={first}")).await;
    assert_eq!(response.status(), 410);
    let problem: Value = response.json().await.unwrap();
    assert_eq!(problem["code"], 11, "{problem}");
    for bad in ["resourceVersion=x", "timeoutSeconds=0", "watch=maybe"] {
        let response = watch(&app, bad).await;
        assert_eq!(response.status(), 400, "{bad}");
        if bad == "watch=maybe" {
            // The parameter and the rule, in our words (not serde's, nor the value): the
            // helper's own `watch=true` is there too.
            let problem: Value = response.json().await.unwrap();
            assert_eq!(
                problem["detail"], "query parameter watch: is given more than once",
                "{problem}"
            );
        }
    }
}
