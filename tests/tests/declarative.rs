//! Declarative machines through the gateway (issue 33): a tenant's secret, class and deployment
//! reach Running on the stack's ECS emulator; another tenant can neither see nor touch them by any
//! route, nor watch them; and a watch outlives the gateway's upstream timeout, kept open by
//! bookmarks; volumes and orchestrators are watched through the gateway the same way.

use std::time::{Duration, Instant};

use berth_tests::{ECS_KEY_ID, ECS_KEY_SECRET, Stack};
use serde_json::{Value, json};

const OWNER: &str = "tok-tenant-a";
const INTRUDER: &str = "tok-tenant-b";
const NS: &str = "tenant-a";

async fn send(
    stack: &Stack,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = stack.call(method, path, Some(token));
    if let Some(body) = body {
        let kind = if method == "PATCH" {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        request = request.header("content-type", kind).body(body.to_string());
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn class() -> Value {
    json!({
        "metadata": {"name": "small"},
        "provider": "Alicloud",
        "providerSpec": {
            "imageID": "m-image", "instanceType": "ecs.g6.large", "region": "cn-shanghai",
            "zoneID": "cn-shanghai-b", "securityGroupID": "sg-1", "vSwitchID": "vsw-1", "keyPairName": "kp",
            "tags": {"kubernetes.io/cluster/tenant-a": "1", "kubernetes.io/role/node": "1"}
        },
        "secretRef": {"name": "cloud"}
    })
}

#[tokio::test]
async fn a_tenants_deployment_runs_and_no_other_tenant_reaches_it() {
    let stack = Stack::spawn(&[("BERTH_CONTROLLER_RESYNC", "300ms")]).await;
    let base = format!("/v1/namespaces/{NS}");
    let (status, body) = send(
        &stack,
        "POST",
        &format!("{base}/secrets"),
        OWNER,
        Some(json!({"metadata": {"name": "cloud"}, "stringData": {
            "alicloudAccessKeyID": ECS_KEY_ID, "alicloudAccessKeySecret": ECS_KEY_SECRET}})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = send(
        &stack,
        "POST",
        &format!("{base}/machineclasses"),
        OWNER,
        Some(class()),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = send(&stack, "POST", &format!("{base}/machinedeployments"), OWNER, Some(json!({
        "metadata": {"name": "pool", "labels": {"team": "a"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"pool": "p"}},
            "template": {"metadata": {"labels": {"pool": "p"}}, "spec": {"class": {"name": "small"}}}}
    }))).await;
    assert_eq!(status, 201, "{body}");
    let uid = body["metadata"]["uid"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, d) = send(
            &stack,
            "GET",
            &format!("{base}/machinedeployments/pool"),
            OWNER,
            None,
        )
        .await;
        if d["status"]["readyReplicas"] == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "not Running in time: {d}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(stack.emulator.instance_count(), 3);
    // The other tenant: every route answers as if nothing were there, and leaks nothing.
    for plural in [
        "secrets",
        "machineclasses",
        "machinedeployments",
        "machinesets",
        "machines",
    ] {
        let (status, list) = send(&stack, "GET", &format!("{base}/{plural}"), INTRUDER, None).await;
        assert_eq!(
            (status, list["items"].clone()),
            (200, json!([])),
            "{plural}: {list}"
        );
        let watch = stack
            .call(
                "GET",
                &format!("{base}/{plural}?watch=true&timeoutSeconds=1"),
                Some(INTRUDER),
            )
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            !watch.contains("ADDED") && !watch.contains(&uid),
            "{plural}: {watch}"
        );
    }
    for (method, path, body) in [
        ("GET", format!("{base}/machinedeployments/pool"), None),
        (
            "PUT",
            format!("{base}/machinedeployments/pool"),
            Some(json!({"spec": {"replicas": 0}})),
        ),
        (
            "PATCH",
            format!("{base}/machinedeployments/pool"),
            Some(json!({"spec": {"replicas": 0}})),
        ),
        ("DELETE", format!("{base}/machinedeployments/pool"), None),
        ("DELETE", format!("{base}/secrets/cloud"), None),
        (
            "PATCH",
            format!("{base}/secrets/cloud"),
            Some(json!({"stringData": {"alicloudAccessKeyID": "mine"}})),
        ),
        (
            "POST",
            format!("{base}/secrets"),
            Some(json!({"metadata": {"name": "planted"}, "stringData": {"k": "v"}})),
        ),
    ] {
        let (status, answer) = send(&stack, method, &path, INTRUDER, body).await;
        // A write that names the namespace (POST, or PUT, which may create) is refused for it;
        // one object there is answered as a missing one is.
        let expected = if matches!(method, "POST" | "PUT") {
            403
        } else {
            404
        };
        assert_eq!(status, expected, "{method} {path}: {answer}");
        let text = answer.to_string();
        assert!(
            !text.contains(&uid) && !text.contains("team"),
            "{method} {path}: {text}"
        );
    }
    // Nor does a write's answer say what the namespace holds: a machine of a class that is
    // there and of one that is not, a class of a secret that is there and of one that is not,
    // are refused in the same words (checking them would read the namespace, and open its
    // secret to ask the driver about the class).
    let shared = &stack;
    let refused = |plural: &'static str, body: Value| {
        let path = format!("{base}/{plural}");
        async move { send(shared, "POST", &path, INTRUDER, Some(body)).await }
    };
    let machine =
        |class: &str| json!({"metadata": {"name": "m"}, "spec": {"class": {"name": class}}});
    let (status, there) = refused("machines", machine("small")).await;
    assert_eq!(status, 403, "{there}");
    let (status, missing) = refused("machines", machine("missing")).await;
    assert_eq!(
        (status, &missing["detail"]),
        (403, &there["detail"]),
        "{missing}"
    );
    let class_of = |secret: &str| {
        let mut body = class();
        body["metadata"]["name"] = json!("planted");
        body["secretRef"]["name"] = json!(secret);
        body
    };
    let (status, there) = refused("machineclasses", class_of("cloud")).await;
    assert_eq!(status, 403, "{there}");
    let (status, missing) = refused("machineclasses", class_of("missing")).await;
    assert_eq!(
        (status, &missing["detail"]),
        (403, &there["detail"]),
        "{missing}"
    );
    assert!(
        there["detail"]
            .as_str()
            .is_some_and(|d| d.contains("may not act in namespace")),
        "{there}"
    );
    let (_, d) = send(
        &stack,
        "GET",
        &format!("{base}/machinedeployments/pool"),
        OWNER,
        None,
    )
    .await;
    assert_eq!(d["spec"]["replicas"], 3, "{d}");
    assert!(d["metadata"]["deletionTimestamp"].is_null(), "{d}");
    // The owner deletes: the VMs go, then the deployment.
    let (status, _) = send(
        &stack,
        "DELETE",
        &format!("{base}/machinedeployments/pool"),
        OWNER,
        None,
    )
    .await;
    assert_eq!(status, 200);
    let deadline = Instant::now() + Duration::from_secs(60);
    while stack.emulator.instance_count() > 0
        || send(
            &stack,
            "GET",
            &format!("{base}/machinedeployments/pool"),
            OWNER,
            None,
        )
        .await
        .0 != 404
    {
        assert!(Instant::now() < deadline, "not deleted in time");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_watch_through_the_gateway_outlives_its_upstream_timeout() {
    let stack = Stack::spawn(&[
        ("BERTH_UPSTREAM_TIMEOUT", "1s"),
        ("BERTH_WATCH_HEARTBEAT", "200ms"),
    ])
    .await;
    let path = format!("/v1/namespaces/{NS}/secrets?watch=true&timeoutSeconds=3");
    let started = Instant::now();
    let mut response = stack.call("GET", &path, Some(OWNER)).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut text = Vec::new();
    let mut made = false;
    while let Some(chunk) = response.chunk().await.unwrap() {
        text.extend_from_slice(&chunk);
        if !made && started.elapsed() > Duration::from_millis(1500) {
            made = true;
            let (status, _) = send(
                &stack,
                "POST",
                &format!("/v1/namespaces/{NS}/secrets"),
                OWNER,
                Some(json!({"metadata": {"name": "late"}, "stringData": {"k": "v"}})),
            )
            .await;
            assert_eq!(status, 201);
        }
    }
    assert!(
        started.elapsed() >= Duration::from_millis(2900),
        "ended after {:?}",
        started.elapsed()
    );
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.lines().filter(|l| l.contains("BOOKMARK")).count() >= 5,
        "{text}"
    );
    assert!(
        text.contains("\"ADDED\"") && text.contains("\"late\""),
        "{text}"
    );
}

#[tokio::test]
async fn open_watches_count_against_their_tokens_calls_in_flight() {
    let stack = Stack::spawn(&[("BERTH_TOKEN_MAX_IN_FLIGHT", "2")]).await;
    let path = format!("/v1/namespaces/{NS}/machines?watch=true&timeoutSeconds=5");
    let mut open = Vec::new();
    for _ in 0..2 {
        let response = stack.call("GET", &path, Some(OWNER)).send().await.unwrap();
        assert_eq!(response.status(), 200);
        open.push(response);
    }
    let third = stack.call("GET", &path, Some(OWNER)).send().await.unwrap();
    assert_eq!(third.status(), 429, "{}", third.text().await.unwrap());
    // Another token has its own bound.
    let other = stack
        .call(
            "GET",
            "/v1/namespaces/tenant-b/machines?watch=true&timeoutSeconds=1",
            Some(INTRUDER),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200);
    drop(open);
    // Once they are closed, the token may watch again.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let again = stack.call("GET", &path, Some(OWNER)).send().await.unwrap();
        if again.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the closed watches still count");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn volumes_and_orchestrators_are_watched_through_the_gateway() {
    use service_kit::testing::Events;
    let stack = Stack::spawn(&[
        ("BERTH_UPSTREAM_TIMEOUT", "1s"),
        ("BERTH_WATCH_HEARTBEAT", "200ms"),
    ])
    .await;
    let wait = Duration::from_secs(10);
    let watch = |path: &str, token: &str| stack.call("GET", path, Some(token)).send();
    let volumes = watch(
        "/v1/volumes?namespace=tenant-a&watch=true&timeoutSeconds=5",
        OWNER,
    )
    .await
    .unwrap();
    assert_eq!(volumes.status(), 200);
    let mut volumes = Events::new(volumes);
    // Another tenant watching tenant-a's volumes sees none of them.
    let mut intruder = Events::new(
        watch(
            "/v1/volumes?namespace=tenant-a&watch=true&timeoutSeconds=5",
            INTRUDER,
        )
        .await
        .unwrap(),
    );
    let orchestrators = watch("/v1/orchestrators?watch=true&timeoutSeconds=5", "tok-admin")
        .await
        .unwrap();
    assert_eq!(orchestrators.status(), 200);
    let mut orchestrators = Events::new(orchestrators);
    // The stack's default orchestrator comes first.
    let first = orchestrators.next_change(wait).await.unwrap();
    assert_eq!(first["type"], "ADDED", "{first}");
    // Past the gateway's upstream timeout, the streams still deliver.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (status, made) = send(
        &stack,
        "POST",
        "/v1/volumes",
        OWNER,
        Some(json!({"namespace": "tenant-a", "name": "data", "capacity": "1Mi"})),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    let added = volumes.next_change(wait).await.unwrap();
    assert_eq!(
        (&added["type"], &added["object"]["metadata"]["name"]),
        (&json!("ADDED"), &json!("data")),
        "{added}"
    );
    let (status, _) = send(
        &stack,
        "PUT",
        "/v1/orchestrators/spare",
        "tok-admin",
        Some(json!({"kind": "nomad"})),
    )
    .await;
    assert_eq!(status, 201);
    let registered = orchestrators.next_change(wait).await.unwrap();
    assert_eq!(registered["object"]["name"], "spare", "{registered}");
    // Its deletion is streamed too (and the stack's Docker volume, when the default orchestrator
    // is an Engine, is not left behind).
    let (status, _) = send(&stack, "DELETE", "/v1/volumes/tenant-a/data", OWNER, None).await;
    assert_eq!(status, 200);
    loop {
        let event = volumes.next_change(wait).await.unwrap();
        if event["type"] == "DELETED" {
            assert_eq!(event["object"]["metadata"]["name"], "data");
            break;
        }
    }
    while let Some(event) = intruder.next(wait).await {
        assert_eq!(event["type"], "BOOKMARK", "the intruder saw {event}");
    }
}
