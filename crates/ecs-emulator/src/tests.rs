//! The emulator's tests through its HTTP front: signatures V1 and V3, formats and versions,
//! `/metrics`, faults, the admin API, and an account kept across restarts.
//!
//! A file of its own because it outgrew `lib.rs`; it drives the emulator as a client does, over
//! [`router`], so it belongs to no one module of the crate.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, Request, StatusCode, header};
use http_body_util::BodyExt as _;
use serde_json::Value;
use sha2::Digest as _;
use tower::ServiceExt as _;

use super::*;
use crate::emulator::lock;

const ID: &str = "k";
const SECRET: &str = "s";

fn emulator() -> Emulator {
    Emulator::new(Config::for_tests(ID, SECRET))
}

async fn send(emu: &Emulator, req: Request<Body>) -> (StatusCode, Value) {
    let resp = emu.router().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, v)
}

fn json_req(method: &str, uri: &str, body: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

/// [`v1_get`] sent, answered.
async fn send_v1(
    emu: &Emulator,
    action: &str,
    extra: &[(&str, &str)],
    nonce: &str,
) -> (StatusCode, Value) {
    send(emu, v1_get(action, extra, nonce)).await
}

/// A `PUT` of the JSON `body` to `path`, answered.
async fn put(emu: &Emulator, path: &str, body: &str) -> (StatusCode, Value) {
    send(emu, json_req("PUT", path, body)).await
}

fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A V1 GET with every parameter in the query.
fn v1_get(action: &str, extra: &[(&str, &str)], nonce: &str) -> Request<Body> {
    let ts = now();
    let mut p: BTreeMap<String, String> = [
        ("Action", action),
        ("Version", "2014-05-26"),
        ("Format", "json"),
        ("AccessKeyId", ID),
        ("SignatureMethod", "HMAC-SHA1"),
        ("SignatureVersion", "1.0"),
        ("SignatureNonce", nonce),
        ("Timestamp", &ts),
    ]
    .into_iter()
    .chain(extra.iter().copied())
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let sig = auth::v1_signature("GET", &p, SECRET);
    p.insert("Signature".into(), sig);
    Request::get(format!("/?{}", wire::canonical_query(&p)))
        .body(Body::empty())
        .unwrap()
}

/// A V3 POST with the given signed header names (the rest are sent unsigned).
fn v3_post(
    query: &[(&str, &str)],
    signed: &[&str],
    extra_header: Option<(&str, &str)>,
) -> Request<Body> {
    let q: BTreeMap<String, String> = query
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let hash = hex::encode(sha2::Sha256::digest(b""));
    let mut headers = HeaderMap::new();
    for (k, v) in [
        ("host", "ecs.example"),
        ("x-acs-action", "DescribeInstances"),
        ("x-acs-version", "2014-05-26"),
        ("x-acs-date", now().as_str()),
        (
            "x-acs-signature-nonce",
            uuid::Uuid::new_v4().to_string().as_str(),
        ),
        ("x-acs-content-sha256", hash.as_str()),
    ] {
        headers.insert(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    if let Some((k, v)) = extra_header {
        headers.insert(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    let canonical = auth::v3_canonical_request("POST", "/", &q, &headers, signed, &hash).unwrap();
    let sig = auth::v3_signature(&canonical, SECRET);
    let mut b = Request::post(format!("/?{}", wire::canonical_query(&q))).header(
        header::AUTHORIZATION,
        format!(
            "ACS3-HMAC-SHA256 Credential={ID},SignedHeaders={},Signature={sig}",
            signed.join(";")
        ),
    );
    for (k, v) in &headers {
        b = b.header(k, v);
    }
    b.body(Body::empty()).unwrap()
}

const ALL_SIGNED: [&str; 6] = auth::REQUIRED_SIGNED_HEADERS;

#[tokio::test]
async fn v1_get_with_lowercase_json_format_works() {
    let emu = emulator();
    let (status, v) = send_v1(
        &emu,
        "DescribeInstances",
        &[("RegionId", "cn-shanghai")],
        "n1",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["TotalCount"], 0);
    assert!(v["RequestId"].is_string());
}

/// Issue 32, point 2: the emulator serves `/metrics` (404 before), with calls by action and no
/// label from a caller's own action name.
#[tokio::test]
async fn metrics_count_calls_by_known_action_only() {
    let emu = emulator();
    send_v1(
        &emu,
        "DescribeInstances",
        &[("RegionId", "cn-shanghai")],
        "n1",
    )
    .await;
    send_v1(&emu, "NoSuchActionOfMine", &[], "n2").await;
    let answer = router(emu.clone())
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let page = String::from_utf8(
        answer
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    assert!(
        page.contains("ecs_emulator_calls_total{action=\"DescribeInstances\"} 1"),
        "{page}"
    );
    assert!(!page.contains("NoSuchActionOfMine"), "{page}");
    assert!(page.contains("ecs_emulator_instances 0"), "{page}");
    assert!(
        page.contains("berth_build_info{service=\"ecs-emulator\""),
        "{page}"
    );
}

#[tokio::test]
async fn xml_format_unknown_action_and_version_are_refused() {
    let emu = emulator();
    let (status, v) = send_v1(&emu, "DescribeInstances", &[("Format", "XML")], "n1").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(v["Code"], "InvalidParameter.Format");
    let (status, v) = send_v1(&emu, "Nope", &[], "n2").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(v["Code"], "InvalidAction.NotFound");
    let (_, v) = send_v1(
        &emu,
        "DescribeInstances",
        &[("Version", "2016-01-01")],
        "n3",
    )
    .await;
    assert_eq!(v["Code"], "InvalidVersion");
}

#[tokio::test]
async fn v3_canonicalises_exactly_the_signed_headers() {
    let emu = emulator();
    let q = [("RegionId", "cn-shanghai")];
    // An unsigned extra x-acs header does not take part.
    let (status, v) = send(&emu, v3_post(&q, &ALL_SIGNED, Some(("x-acs-extra", "1")))).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    // Signing an extra header works as long as it is sent.
    let mut signed = ALL_SIGNED.to_vec();
    signed.push("x-acs-extra");
    let (status, v) = send(&emu, v3_post(&q, &signed, Some(("x-acs-extra", "1")))).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    // A common header left out of SignedHeaders is refused.
    let partial: Vec<&str> = ALL_SIGNED
        .iter()
        .copied()
        .filter(|h| *h != "x-acs-date")
        .collect();
    let (status, v) = send(&emu, v3_post(&q, &partial, None)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(v["Code"], "IncompleteSignature");
}

#[tokio::test]
async fn v3_tampered_query_does_not_match() {
    let emu = emulator();
    let req = v3_post(&[("RegionId", "cn-shanghai")], &ALL_SIGNED, None);
    let (mut parts, body) = req.into_parts();
    parts.uri = "/?RegionId=cn-beijing".parse().unwrap();
    let (status, v) = send(&emu, Request::from_parts(parts, body)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(v["Code"], "SignatureDoesNotMatch");
    assert_eq!(emu.stats().rejected, 1);
}

#[tokio::test]
async fn throttled_answers_carry_the_ratelimit_header() {
    let emu = emulator();
    emu.set_faults(Faults {
        throttle_rate: 1.0,
        throttle_time_left_ms: 1234,
        ..Faults::default()
    })
    .unwrap();
    let resp = emu
        .router()
        .oneshot(v1_get(
            "DescribeInstances",
            &[("RegionId", "cn-shanghai")],
            "n1",
        ))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let h = resp.headers()["x-ratelimit-user-api"].to_str().unwrap();
    assert!(h.contains("TimeLeft:1234"), "{h}");
}

#[tokio::test]
async fn a_seed_beyond_the_instance_bound_is_refused_before_anything_is_made() {
    let emu = emulator();
    let (status, v) = send(
        &emu,
        json_req("POST", "/_emulator/seed", r#"{"count":99999999999}"#),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert!(v.to_string().contains("at most 200000"), "{v}");
    // The kit's problem+json, as every Berth service answers a refusal.
    assert_eq!(v["title"], "InvalidArgument", "{v}");
    assert_eq!(
        (v["status"].as_u64(), v["code"].as_u64()),
        (Some(400), Some(3))
    );
    assert!(
        v["detail"].as_str().unwrap().contains("at most 200000"),
        "{v}"
    );
    assert!(v.get("error").is_none(), "{v}");
    assert_eq!(lock(&emu.inner.state).instances.len(), 0);
}

#[tokio::test]
async fn admin_endpoints_seed_pin_state_faults_and_reset() {
    let emu = emulator();
    let (status, v) = send(
        &emu,
        json_req("POST", "/_emulator/seed", r#"{"count":3,"tags":{"a":"b"}}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["created"], 3);
    let id = v["firstInstanceId"].as_str().unwrap().to_owned();
    let (status, _) = put(
        &emu,
        &format!("/_emulator/instances/{id}/status"),
        r#"{"status":"Pending"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, state) = send(&emu, json_req("GET", "/_emulator/state", "")).await;
    assert_eq!(state["instances"].as_array().unwrap().len(), 3);
    let pinned = state["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["InstanceId"] == id.as_str())
        .unwrap();
    assert_eq!(pinned["Status"], "Pending");
    assert_eq!(pinned["Pinned"], true);
    let (status, _) = put(
        &emu,
        "/_emulator/instances/i-missing/status",
        r#"{"status":"Pending"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, problem) = put(&emu, "/_emulator/faults", "not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(problem["code"], 3, "{problem}");
    assert!(
        problem["detail"].as_str().unwrap().starts_with("body: "),
        "{problem}"
    );
    let (status, f) = put(
        &emu,
        "/_emulator/faults",
        r#"{"throttleRate":0.5,"noStockZones":["z"]}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(f["throttleRate"], 0.5);
    let (status, _) = put(&emu, "/_emulator/faults", r#"{"throttleRate":2}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = send(&emu, json_req("POST", "/_emulator/reset", "")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(emu.instance_count(), 0);
    assert_eq!(emu.faults(), Faults::default());
    let (status, l) = put(
        &emu,
        "/_emulator/lifecycle",
        r#"{"pendingMs":5,"startingMs":6,"stoppingMs":7}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(l["startingMs"], 6);
}

// -----------------------------------------------------------------------------------------
// A kept account
// -----------------------------------------------------------------------------------------

fn kept(dir: &std::path::Path, lifecycle: Lifecycle) -> Emulator {
    Emulator::open(
        Config::for_tests(ID, SECRET)
            .with_lifecycle(lifecycle)
            .with_state_dir(dir),
    )
    .unwrap()
}

async fn run(emu: &Emulator, name: &str, token: &str, nonce: &str) -> String {
    let (status, v) = send(
        emu,
        v1_get(
            "RunInstances",
            &[
                ("RegionId", "cn-shanghai"),
                ("ImageId", "img"),
                ("InstanceType", "ecs.t"),
                ("InstanceName", name),
                ("ClientToken", token),
                ("Tag.1.Key", "owner"),
                ("Tag.1.Value", name),
            ],
            nonce,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    v["InstanceIdSets"]["InstanceIdSet"][0]
        .as_str()
        .unwrap()
        .to_owned()
}

/// id → (status, tags) of every instance, as DescribeInstances answers.
async fn described(emu: &Emulator, nonce: &str) -> BTreeMap<String, (String, Value)> {
    let (status, v) = send(
        emu,
        v1_get(
            "DescribeInstances",
            &[("RegionId", "cn-shanghai"), ("MaxResults", "100")],
            nonce,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    v["Instances"]["Instance"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["InstanceId"].as_str().unwrap().to_owned(),
                (i["Status"].as_str().unwrap().to_owned(), i["Tags"].clone()),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_restarted_emulator_keeps_ids_statuses_tags_and_client_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let first = kept(dir.path(), Lifecycle::instant());
    let a = run(&first, "m-a", "token-a", "n1").await;
    let b = run(&first, "m-b", "token-b", "n2").await;
    let (status, v) = send(
        &first,
        v1_get("StopInstance", &[("InstanceId", b.as_str())], "n3"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let before = described(&first, "n4").await;
    assert_eq!(before[&a].0, "Running");
    assert_eq!(before[&b].0, "Stopped");
    let resources = (first.disk_count(), first.network_interface_count());
    drop(first);

    let second = kept(dir.path(), Lifecycle::instant());
    assert_eq!(described(&second, "n5").await, before);
    assert_eq!(
        (second.disk_count(), second.network_interface_count()),
        resources
    );
    // The ClientToken still names its instance, and ids never repeat.
    assert_eq!(run(&second, "m-a", "token-a", "n6").await, a);
    let c = run(&second, "m-c", "token-c", "n7").await;
    assert!(c != a && c != b, "{c}");
    // Deleting is kept as well.
    let (status, v) = send(
        &second,
        v1_get(
            "DeleteInstance",
            &[("InstanceId", a.as_str()), ("Force", "true")],
            "n8",
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    drop(second);
    let third = kept(dir.path(), Lifecycle::instant());
    let ids: std::collections::BTreeSet<String> =
        described(&third, "n9").await.into_keys().collect();
    assert_eq!(ids, [b, c].into());
}

#[tokio::test]
async fn an_instance_mid_transition_resumes_its_lifecycle_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let slow = Lifecycle {
        pending_ms: 60_000,
        ..Lifecycle::instant()
    };
    let first = kept(dir.path(), slow);
    let id = run(&first, "m-slow", "token-slow", "n1").await;
    drop(first);
    // Still within its Pending minute: not Running just because the process restarted.
    let second = kept(dir.path(), slow);
    assert_eq!(described(&second, "n2").await[&id].0, "Pending");
    drop(second);
    // Restarted with no Pending delay, it moves on at once.
    let third = kept(dir.path(), Lifecycle::instant());
    assert_eq!(described(&third, "n3").await[&id].0, "Running");
}

#[tokio::test]
async fn admin_changes_are_kept_and_an_in_memory_emulator_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let first = kept(dir.path(), Lifecycle::instant());
    let ids = first
        .seed(&Seed {
            count: 2,
            ..Seed::default()
        })
        .unwrap();
    first.pin_status(&ids[0], "Starting").unwrap();
    drop(first);
    let second = kept(dir.path(), Lifecycle::instant());
    let state = second.snapshot();
    let pinned = state["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["InstanceId"] == ids[0].as_str())
        .unwrap();
    assert_eq!(pinned["Status"], "Starting");
    assert_eq!(pinned["Pinned"], true);
    second.reset();
    drop(second);
    assert_eq!(kept(dir.path(), Lifecycle::instant()).instance_count(), 0);

    let untouched = tempfile::tempdir().unwrap();
    let memory = Emulator::new(Config::for_tests(ID, SECRET).with_state_dir(untouched.path()));
    run(&memory, "m-mem", "token-mem", "n1").await;
    assert_eq!(std::fs::read_dir(untouched.path()).unwrap().count(), 0);
}
