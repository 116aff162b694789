//! Watch: a list's version, then its changes as newline-delimited events; bookmarks when quiet;
//! 410 for a version older than what is kept.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{NS, detail, quick, spawn_app, spawn_controller};

#[tokio::test]
async fn a_watch_streams_changes_after_the_lists_version() {
    let app = spawn_app(quick()).await;
    let (status, list) = app
        .call(
            reqwest::Method::GET,
            &format!("/v1/namespaces/{NS}/secrets"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let version = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut response = reqwest::get(format!(
        "{}/v1/namespaces/{NS}/secrets?watch=true&resourceVersion={version}&timeoutSeconds=5",
        app.url
    ))
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let (status, _) = app
        .post(
            "secrets",
            json!({"metadata": {"name": "s1"}, "stringData": {"k": "very-secret"}}),
        )
        .await;
    assert_eq!(status, 201);
    let mut seen: Vec<Value> = Vec::new();
    let mut buffer = Vec::new();
    while seen.iter().all(|e| e["type"] != "ADDED") {
        let chunk = tokio::time::timeout(Duration::from_secs(5), response.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            seen.push(serde_json::from_slice(&line).unwrap());
        }
    }
    let added = seen.iter().find(|e| e["type"] == "ADDED").unwrap();
    assert_eq!(added["object"]["metadata"]["name"], "s1");
    assert!(!added.to_string().contains("very-secret"));
    // Quiet: a bookmark with the latest version comes within the heartbeat.
    let chunk = tokio::time::timeout(Duration::from_secs(2), response.chunk())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let event: Value = serde_json::from_slice(chunk.strip_suffix(b"\n").unwrap()).unwrap();
    assert_eq!(event["type"], "BOOKMARK", "{event}");
    assert_eq!(
        event["object"]["metadata"]["resourceVersion"],
        added["object"]["metadata"]["resourceVersion"]
    );
}

#[tokio::test]
async fn a_version_older_than_the_feed_is_gone() {
    let mut app = spawn_app(quick()).await;
    for n in 0..3 {
        app.post(
            "secrets",
            json!({"metadata": {"name": format!("s{n}")}, "stringData": {"k": "v"}}),
        )
        .await;
    }
    // The controller restarted on the same database starts its feed at the current version. (One
    // controller per database: the second waits for the first's writer to end.)
    let dir = std::mem::replace(&mut app.dir, tempfile::tempdir().unwrap());
    drop(app);
    let (second, _reconcilers) = spawn_controller(dir.path(), "http://127.0.0.1:9", quick()).await;
    let response = reqwest::get(format!(
        "{}/v1/namespaces/{NS}/secrets?watch=true&resourceVersion=1",
        second.url
    ))
    .await
    .unwrap();
    assert_eq!(response.status(), 410);
    let problem: Value = response.json().await.unwrap();
    assert_eq!(problem["code"], 11, "{problem}");
    let bad = reqwest::get(format!(
        "{}/v1/namespaces/{NS}/secrets?watch=true&resourceVersion=x",
        second.url
    ))
    .await
    .unwrap();
    assert_eq!(bad.status(), 400);
    // Without a version, the current objects come first, as ADDED.
    let response = reqwest::get(format!(
        "{}/v1/namespaces/{NS}/secrets?watch=true&timeoutSeconds=1",
        second.url
    ))
    .await
    .unwrap();
    let text = response.text().await.unwrap();
    let added = text.lines().filter(|l| l.contains("\"ADDED\"")).count();
    assert_eq!(added, 3, "{text}");
}

#[tokio::test]
async fn a_watch_ends_at_the_operators_ceiling_whatever_it_asks() {
    let dir = tempfile::tempdir().unwrap();
    let env = service_kit::Env::default()
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with("BERTH_DATA_DIR", dir.path().to_str().unwrap())
        .with("BERTH_WATCH_HEARTBEAT", "200ms")
        .with("BERTH_WATCH_MAX_DURATION", "1s");
    let config = machine_controller::Config::from_env(&env).unwrap();
    assert_eq!(config.watch.max_duration, Duration::from_secs(1));
    let writer = machine_controller::writer(&config).await.unwrap();
    let server = service_kit::testing::spawn(machine_controller::router(&config, writer)).await;
    for asked in ["", "&timeoutSeconds=1800"] {
        let response = reqwest::get(format!(
            "{}/v1/namespaces/{NS}/secrets?watch=true{asked}",
            server.url
        ))
        .await
        .unwrap();
        assert_eq!(response.status(), 200);
        // The stream ends by itself: the whole body arrives long before 30 minutes.
        let body = tokio::time::timeout(Duration::from_secs(20), response.bytes())
            .await
            .expect("the watch outlived the ceiling")
            .unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(text.lines().all(|l| l.contains("BOOKMARK")), "{text}");
    }
    // Outside 1..1800 is refused, naming the field, with or without watch.
    for asked in ["watch=true&timeoutSeconds=0", "timeoutSeconds=1801"] {
        let response = reqwest::get(format!("{}/v1/namespaces/{NS}/secrets?{asked}", server.url))
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{asked}");
        let problem: Value = response.json().await.unwrap();
        assert!(
            detail(&problem).starts_with("query parameter timeoutSeconds:"),
            "{problem}"
        );
    }
    // A ceiling above Kubernetes' own 30 minutes is cut to it.
    let env = env.with("BERTH_WATCH_MAX_DURATION", "2h");
    let config = machine_controller::Config::from_env(&env).unwrap();
    assert_eq!(config.watch.max_duration, Duration::from_secs(1800));
}

async fn list_version(app: &crate::support::App, namespace: &str) -> String {
    let (status, list) = app
        .call(
            reqwest::Method::GET,
            &format!("/v1/namespaces/{namespace}/secrets"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn secret_in(app: &crate::support::App, namespace: &str, name: &str) {
    let (status, body) = app
        .call(
            reqwest::Method::POST,
            &format!("/v1/namespaces/{namespace}/secrets"),
            Some(json!({"metadata": {"name": name}, "stringData": {"k": "v"}})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
}

/// A tenant learns nothing of another namespace's writes from its own namespace: not from its
/// versions (each namespace has its own sequence), not from when its bookmarks come (they follow
/// the stream's own silence), not from being told to list again.
#[tokio::test]
async fn another_namespaces_writes_tell_a_namespace_nothing() {
    let app = spawn_app(quick()).await;
    secret_in(&app, NS, "mine").await;
    let mine = list_version(&app, NS).await;
    let watch = reqwest::get(format!(
        "{}/v1/namespaces/{NS}/secrets?watch=true&resourceVersion={mine}&timeoutSeconds=30",
        app.url
    ))
    .await
    .unwrap();
    let mut events = service_kit::testing::Events::new(watch);
    // Another tenant writes, often, for longer than several heartbeats (200 ms).
    let started = std::time::Instant::now();
    let mut bookmarks = 0;
    let mut n = 0;
    while started.elapsed() < Duration::from_millis(1500) {
        secret_in(&app, "team-b", &format!("theirs-{n}")).await;
        n += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        list_version(&app, NS).await,
        mine,
        "another namespace moved this one's version"
    );
    while let Ok(Some(event)) = tokio::time::timeout(
        Duration::from_millis(100),
        events.next(Duration::from_secs(5)),
    )
    .await
    {
        assert_eq!(event["type"], "BOOKMARK", "{event}");
        assert_eq!(
            event["object"]["metadata"]["resourceVersion"],
            mine.as_str()
        );
        bookmarks += 1;
    }
    assert!(
        bookmarks >= 3,
        "bookmarks kept coming every heartbeat while another namespace wrote: {bookmarks} in 1.5 s"
    );
}

/// With a selector, an object relabelled out of it is DELETED to the watch, and back in, ADDED.
#[tokio::test]
async fn a_selector_sees_objects_leave_and_enter_it() {
    let app = spawn_app(quick()).await;
    let (status, _) = app
        .post(
            "secrets",
            json!({"metadata": {"name": "s", "labels": {"app": "x"}}, "stringData": {"k": "v"}}),
        )
        .await;
    assert_eq!(status, 201);
    let watch = reqwest::get(format!(
        "{}/v1/namespaces/{NS}/secrets?watch=true&labelSelector=app%3Dx&timeoutSeconds=30",
        app.url
    ))
    .await
    .unwrap();
    let mut events = service_kit::testing::Events::new(watch);
    let wait = Duration::from_secs(5);
    let seen = |e: Value| {
        (
            e["type"].as_str().unwrap().to_string(),
            e["object"]["metadata"]["labels"]["app"].clone(),
        )
    };
    assert_eq!(
        seen(events.next_change(wait).await.unwrap()),
        ("ADDED".into(), json!("x"))
    );
    for app_label in ["y", "x"] {
        let (status, _) = app
            .patch(
                "secrets",
                "s",
                json!({"metadata": {"labels": {"app": app_label}}}),
            )
            .await;
        assert_eq!(status, 200);
    }
    assert_eq!(
        seen(events.next_change(wait).await.unwrap()),
        ("DELETED".into(), json!("y"))
    );
    assert_eq!(
        seen(events.next_change(wait).await.unwrap()),
        ("ADDED".into(), json!("x"))
    );
    assert_eq!(app.delete("secrets", "s").await.0, 200);
    assert_eq!(seen(events.next_change(wait).await.unwrap()).0, "DELETED");
}

/// A server that starts to drain ends its open watches at once and cleanly, rather than holding
/// its drain for as long as they asked to last or cutting their connections.
#[tokio::test]
async fn a_drain_ends_open_watches() {
    let dir = tempfile::tempdir().unwrap();
    let env = service_kit::Env::default()
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with("BERTH_DATA_DIR", dir.path().to_str().unwrap());
    let config = machine_controller::Config::from_env(&env).unwrap();
    let writer = machine_controller::writer(&config).await.unwrap();
    let server = service_kit::testing::spawn(machine_controller::router(&config, writer)).await;
    let response = reqwest::get(format!(
        "{}/v1/namespaces/{NS}/secrets?watch=true&timeoutSeconds=600",
        server.url
    ))
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    let started = std::time::Instant::now();
    let (stopped, body) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(10), server.shutdown()),
        tokio::time::timeout(Duration::from_secs(10), response.bytes()),
    );
    assert!(stopped.is_ok(), "the drain waited for the watch");
    // Ended as a stream ends (its last chunk), not cut: a client tells it from a broken one.
    body.expect("the watch outlived the drain")
        .expect("the watch was cut rather than ended");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
