//! The default flag: one default, even under concurrent switches.

use std::sync::Arc;

use domain::Code;
use domain::Orchestrator;
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn making_one_default_clears_the_other_in_the_same_change() {
    let app = spawn_app().await;
    app.clear().await;
    let e = app.registry.default_orchestrator().await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert_eq!(app.default_orchestrator().await.status, 404);

    let a = app
        .put("a", json!({"kind": "nomad", "default": true}))
        .await;
    assert_eq!(a.body["default"], true);
    let a_version = app.get("a").await.body["resourceVersion"]
        .as_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    let b = app
        .put("b", json!({"kind": "nomad", "default": true}))
        .await;
    assert_eq!(b.body["default"], true);
    assert_eq!(app.defaults().await, ["b"]);
    let a_now = app.get("a").await.body;
    assert_eq!(a_now["default"], false);
    assert!(
        a_now["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > a_version,
        "a changed, so its version moved"
    );
    assert_eq!(app.default_orchestrator().await.body["name"], "b");

    // Omitting `default` keeps it; `false` clears it.
    let kept = app.put("b", json!({"kind": "nomad", "label": "x"})).await;
    assert_eq!(kept.body["default"], true);
    let cleared = app
        .put(
            "b",
            json!({"kind": "nomad", "label": "x", "default": false}),
        )
        .await;
    assert_eq!(cleared.body["default"], false);
    assert!(app.defaults().await.is_empty());

    // Deregistering the default leaves none.
    app.put("c", json!({"kind": "nomad", "default": true}))
        .await;
    app.delete("c").await;
    assert_eq!(app.default_orchestrator().await.status, 404);
}

#[tokio::test]
async fn fifty_concurrent_registrations_and_fifty_concurrent_default_switches_leave_exactly_one_default()
 {
    let app = spawn_app().await;
    for i in 0..10 {
        assert_eq!(
            app.put(&format!("seed-{i}"), json!({"kind": "nomad"}))
                .await
                .status,
            201
        );
    }
    let app = Arc::new(app);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..50 {
        let one = app.clone();
        let other = app.clone();
        tasks.spawn(async move {
            let app = one;
            // New names, every other one asking to be the default.
            app.put(
                &format!("new-{i}"),
                json!({"kind": "local", "config": {"basePath": format!("/srv/{i}")}, "default": i % 2 == 0}),
            )
            .await
            .status
        });
        tasks.spawn(async move {
            let app = other;
            // Switches among the existing names.
            app.put(
                &format!("seed-{}", i % 10),
                json!({"kind": "nomad", "default": true}),
            )
            .await
            .status
        });
    }
    while let Some(status) = tasks.join_next().await {
        let status = status.unwrap();
        assert!(status == 200 || status == 201, "{status}");
    }
    let list = app.registry.list().await.unwrap();
    assert_eq!(
        list.items.len(),
        1 + 10 + 50,
        "the detected default, the seeds, the new ones"
    );
    let defaults: Vec<&Orchestrator> = list.items.iter().filter(|o| o.default).collect();
    assert_eq!(defaults.len(), 1, "{defaults:?}");
    assert_eq!(
        app.registry.default_orchestrator().await.unwrap().name,
        defaults[0].name
    );
}
