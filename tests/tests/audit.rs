//! Every mutating call through the stack leaves exactly one `berth::audit` event, written by the
//! service that handled it, or by the gateway when it refused the call for its token's scope (no
//! service saw it), with the token's name, its namespaces, the route, the object and the outcome,
//! and never the token (issue 30, point 6).
//!
//! The stack serves on many tasks and threads, so the capture is the process's global subscriber:
//! this binary holds this one test.

use std::time::Duration;

use berth_tests::Stack;
use serde_json::{Value, json};
use service_kit::testing::{LogCapture, eventually};

fn audit_events(capture: &LogCapture) -> Vec<Value> {
    String::from_utf8(capture.bytes())
        .unwrap()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["target"] == "berth::audit")
        .map(|event| event["fields"].clone())
        .collect()
}

#[tokio::test]
async fn a_mutating_call_leaves_one_audit_event_naming_the_token_never_holding_it() {
    let capture = LogCapture::default();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
        .with_writer(capture.clone())
        .finish();
    tracing_subscriber::util::SubscriberInitExt::try_init(subscriber)
        .expect("no global subscriber yet");
    let stack = Stack::spawn(&[]).await;
    let base = stack.data.path().join("volumes/audit");
    let registered = stack
        .call("PUT", "/v1/orchestrators/audit-local", Some("tok-admin"))
        .json(&json!({"kind": "local", "default": true, "config": {"basePath": base.to_str().unwrap()}}))
        .send()
        .await
        .unwrap();
    assert!(registered.status().is_success());

    let mut seen = 1;
    for (method, path, body, object, outcome) in [
        (
            "POST",
            "/v1/volumes",
            Some(json!({"name": "audited", "namespace": "tenant-a", "capacity": "1Mi"})),
            "tenant-a/audited",
            201,
        ),
        (
            "DELETE",
            "/v1/volumes/tenant-b/theirs",
            None,
            "tenant-b/theirs",
            200,
        ),
        (
            "PUT",
            "/v1/orchestrators/mine",
            Some(json!({"kind": "nomad"})),
            "mine",
            403,
        ),
        (
            "DELETE",
            "/v1/volumes/tenant-a/audited",
            None,
            "tenant-a/audited",
            200,
        ),
    ] {
        let mut request = stack.call(method, path, Some("tok-tenant-a"));
        if let Some(body) = &body {
            request = request.json(body);
        }
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status().as_u16(), outcome, "{method} {path}");
        // Reads are not audited.
        let read = stack
            .call("GET", "/v1/volumes", Some("tok-tenant-a"))
            .send()
            .await
            .unwrap();
        assert_eq!(read.status(), 200);
        seen += 1;
        let events = eventually("the audit line", Duration::from_secs(10), || {
            let events = audit_events(&capture);
            async move { (events.len() >= seen).then_some(events) }
        })
        .await;
        assert_eq!(events.len(), seen, "one event per call: {events:#?}");
        let event = events.last().unwrap();
        let template = if path.starts_with("/v1/volumes/") {
            "/v1/volumes/{namespace}/{name}"
        } else if path.starts_with("/v1/orchestrators/") {
            "/v1/orchestrators/{name}"
        } else {
            path
        };
        assert_eq!(
            *event,
            json!({
                "message": "audit",
                "token": "tenant-a",
                "namespaces": "tenant-a",
                "route": format!("{method} {template}"),
                "object": object,
                "outcome": outcome,
            }),
            "{method} {path}"
        );
    }
    // A token refused by the gateway for its scope: the one line is the gateway's, with no object
    // (the body was never read).
    let refused = stack
        .call("POST", "/v1/volumes", Some("tok-volumes-read"))
        .json(&json!({"name": "sneaky", "namespace": "tenant-a", "capacity": "1Mi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    seen += 1;
    let events = eventually("the refusal's audit line", Duration::from_secs(10), || {
        let events = audit_events(&capture);
        async move { (events.len() >= seen).then_some(events) }
    })
    .await;
    assert_eq!(events.len(), seen, "one event for the refusal: {events:#?}");
    assert_eq!(
        *events.last().unwrap(),
        json!({
            "message": "audit",
            "token": "volumes-read",
            "namespaces": "*",
            "route": "POST /v1/volumes",
            "object": "-",
            "outcome": 403,
        })
    );
    // The admin's registration at the start was audited too, as cluster-wide.
    let first = &audit_events(&capture)[0];
    assert_eq!(first["token"], "admin");
    assert_eq!(first["namespaces"], "*");
    let text = String::from_utf8(capture.bytes()).unwrap();
    for token in ["tok-tenant-a", "tok-admin", berth_tests::INTERNAL_TOKEN] {
        assert!(!text.contains(token), "{token} reached the log");
    }
}
