//! The real client against the real emulator, over HTTP on 127.0.0.1:0.
//!
//! Each test spawns its own emulator, so tests run in parallel without sharing state. Lifecycle
//! delays are zero and backoffs a few milliseconds, so nothing here sleeps for long.
//!
//! What these errors mean as machine codes is the driver's mapping, tested against the same
//! emulator in `services/machine-driver/tests/ecs_codes.rs`.

use std::collections::BTreeMap;
use std::time::Duration;

use alicloud::{
    Credentials, DataDisk, DescribeDisks, DescribeInstances, DescribeNetworkInterfaces, Ecs,
    EcsClient, EcsConfig, Error, InstanceStatus, Region, RetryPolicy, RunInstances,
    SignatureVersion, Tag, deadline_in,
};
use ecs_emulator::{AccessKey, Config, Emulator, Faults, Seed};

const KEY_ID: &str = "test-key";
const SECRET: &str = "test-secret-value";
const REGION: &str = "cn-shanghai";
const CLUSTER_TAG: &str = "kubernetes.io/cluster/shoot--test";

struct Harness {
    emulator: Emulator,
    url: String,
}

async fn spawn(config: Config) -> Harness {
    let emulator = Emulator::new(config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = emulator.router();
    tokio::spawn(async move {
        axum::serve(listener, router).await.expect("serve");
    });
    Harness { emulator, url }
}

async fn spawn_default() -> Harness {
    spawn(Config::for_tests(KEY_ID, SECRET)).await
}

fn config(h: &Harness, signature: SignatureVersion) -> EcsConfig {
    EcsConfig {
        endpoint: Some(h.url.clone()),
        signature,
        request_timeout: Duration::from_secs(10),
        retry: RetryPolicy {
            max_attempts: 10,
            base_backoff: Duration::from_millis(2),
            max_backoff: Duration::from_millis(20),
        },
        ..EcsConfig::default()
    }
}

fn region() -> Region {
    Region::parse(REGION).unwrap()
}

fn client_with(cfg: EcsConfig, creds: Credentials) -> EcsClient {
    Ecs::new(cfg).unwrap().client(&region(), creds)
}

fn client(h: &Harness, signature: SignatureVersion) -> EcsClient {
    client_with(config(h, signature), Credentials::new(KEY_ID, SECRET))
}

fn deadline() -> alicloud::Instant {
    deadline_in(Duration::from_secs(30))
}

fn machine(name: &str) -> RunInstances {
    RunInstances {
        image_id: "m-image".into(),
        instance_type: "ecs.g6.large".into(),
        zone_id: Some("cn-shanghai-b".into()),
        v_switch_id: Some("vsw-1".into()),
        instance_name: Some(name.into()),
        io_optimized: Some("optimized".into()),
        tags: vec![
            Tag::new(CLUSTER_TAG, "1"),
            Tag::new("kubernetes.io/role/worker/shoot--test", "1"),
        ],
        data_disks: vec![DataDisk {
            category: Some("cloud_efficiency".into()),
            size_gib: Some(50),
            disk_name: Some(format!("{name}-d1-data-disk")),
            delete_with_instance: Some(true),
            ..Default::default()
        }],
        user_data: Some(b"#!/bin/sh\necho bootstrap-token-xyz\n".to_vec()),
        ..Default::default()
    }
}

async fn by_name(c: &EcsClient, name: &str) -> Vec<alicloud::Instance> {
    c.describe_all_instances(
        &DescribeInstances {
            instance_name: Some(name.into()),
            tags: vec![Tag::new(CLUSTER_TAG, "")],
            ..Default::default()
        },
        deadline(),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn v1_and_v3_signed_calls_are_accepted() {
    let h = spawn_default().await;
    for (n, sig) in [SignatureVersion::V1, SignatureVersion::V3]
        .into_iter()
        .enumerate()
    {
        let c = client(&h, sig);
        let name = format!("m-{n}");
        let created = c.run_instances(&machine(&name), deadline()).await.unwrap();
        assert_eq!(created.instance_ids.len(), 1, "{sig:?}");
        let found = by_name(&c, &name).await;
        assert_eq!(found.len(), 1);
        let i = &found[0];
        assert_eq!(i.instance_id, created.instance_ids[0]);
        assert_eq!(i.status, InstanceStatus::Running);
        assert_eq!(i.tag(CLUSTER_TAG), Some("1"));
        assert_eq!(i.private_ip_addresses.len(), 1);
        assert_eq!(
            i.host_name.as_deref(),
            Some(format!("iZ{}Z", &i.instance_id[2..]).as_str())
        );
    }
    let stats = h.emulator.stats();
    assert_eq!(stats.rejected, 0);
    // User data arrived base64-decoded to the right length, and the answer never echoes it.
    let state = h.emulator.snapshot();
    let sent = machine("x").user_data.unwrap().len();
    assert_eq!(state["instances"][0]["UserDataBytes"], sent);
}

#[tokio::test]
async fn sts_token_is_sent_with_both_signatures() {
    let mut key = AccessKey::new("sts-key", "sts-secret");
    key.security_token = Some("sts-token-value".into());
    let h = spawn(Config::for_tests(KEY_ID, SECRET).with_access_key(key)).await;
    for sig in [SignatureVersion::V1, SignatureVersion::V3] {
        let good = client_with(
            config(&h, sig),
            Credentials::new("sts-key", "sts-secret").with_security_token("sts-token-value"),
        );
        good.describe_instances(&DescribeInstances::default(), deadline())
            .await
            .unwrap();
        let bad = client_with(
            config(&h, sig),
            Credentials::new("sts-key", "sts-secret").with_security_token("other-token"),
        );
        let e = bad
            .describe_instances(&DescribeInstances::default(), deadline())
            .await
            .unwrap_err();
        assert!(!format!("{e} {e:?}").contains("token-value"));
    }
}

#[tokio::test]
async fn bad_credentials_are_unauthenticated_and_never_leak() {
    let h = spawn_default().await;
    for sig in [SignatureVersion::V1, SignatureVersion::V3] {
        let wrong_secret = client_with(
            config(&h, sig),
            Credentials::new(KEY_ID, "wrong-secret-123"),
        );
        let e = wrong_secret
            .describe_instances(&DescribeInstances::default(), deadline())
            .await
            .unwrap_err();
        assert_eq!(e.ecs_code(), Some("SignatureDoesNotMatch"), "{e}");
        assert!(e.request_id().is_some_and(|r| !r.is_empty()));
        let text = format!("{e} {e:?}");
        assert!(
            !text.contains("wrong-secret-123") && !text.contains(SECRET),
            "{text}"
        );

        let unknown = client_with(config(&h, sig), Credentials::new("nobody", SECRET));
        let e = unknown
            .run_instances(&machine("x"), deadline())
            .await
            .unwrap_err();
        assert_eq!(e.ecs_code(), Some("InvalidAccessKeyId.NotFound"));
    }
    // Not retried: one rejection per call, and nothing was created.
    assert_eq!(h.emulator.stats().rejected, 4);
    assert_eq!(h.emulator.instance_count(), 0);
}

/// A hand-signed V1 request, to replay it exactly.
fn signed_v1_form(nonce: &str, timestamp: &str) -> String {
    let mut p: BTreeMap<String, String> = [
        ("Action", "DescribeInstances"),
        ("Version", "2014-05-26"),
        ("Format", "JSON"),
        ("AccessKeyId", KEY_ID),
        ("SignatureMethod", "HMAC-SHA1"),
        ("SignatureVersion", "1.0"),
        ("SignatureNonce", nonce),
        ("Timestamp", timestamp),
        ("RegionId", REGION),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let sig = alicloud::sign::v1_signature("POST", &p, SECRET);
    p.insert("Signature".into(), sig);
    alicloud::sign::canonical_query(&p)
}

async fn post_form(url: &str, body: String) -> (u16, serde_json::Value) {
    let r = reqwest::Client::new()
        .post(format!("{url}/"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

#[tokio::test]
async fn replayed_nonce_and_stale_timestamp_are_refused() {
    let h = spawn_default().await;
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let body = signed_v1_form("nonce-1", &now);
    let (status, first) = post_form(&h.url, body.clone()).await;
    assert_eq!(status, 200, "{first}");
    assert!(first["Instances"]["Instance"].is_array());
    let (status, second) = post_form(&h.url, body).await;
    assert_eq!(status, 400);
    assert_eq!(second["Code"], "SignatureNonceUsed");
    assert!(second["RequestId"].as_str().is_some_and(|r| !r.is_empty()));
    assert!(
        second["Recommend"]
            .as_str()
            .unwrap()
            .contains("SignatureNonceUsed")
    );

    let stale = (chrono::Utc::now() - chrono::Duration::minutes(20))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let (status, e) = post_form(&h.url, signed_v1_form("nonce-2", &stale)).await;
    assert_eq!(status, 400);
    assert_eq!(e["Code"], "InvalidTimeStamp.Expired");
}

#[tokio::test]
async fn client_token_makes_create_idempotent() {
    let h = spawn_default().await;
    let c = client(&h, SignatureVersion::V1);
    let mut req = machine("idem");
    req.client_token = Some("machine-uid-0001".into());
    let a = c.run_instances(&req, deadline()).await.unwrap();
    let b = c.run_instances(&req, deadline()).await.unwrap();
    assert_eq!(a.instance_ids, b.instance_ids);
    assert_eq!(a.client_token, "machine-uid-0001");
    assert_eq!(h.emulator.instance_count(), 1);

    req.instance_type = "ecs.g6.xlarge".into();
    let e = c.run_instances(&req, deadline()).await.unwrap_err();
    assert_eq!(e.ecs_code(), Some("IdempotentParameterMismatch"));
    assert_eq!(h.emulator.instance_count(), 1);

    // Without a token the client makes one per call.
    let t = c.run_instances(&machine("auto"), deadline()).await.unwrap();
    assert_eq!(t.client_token.len(), 36);
}

#[tokio::test]
async fn describe_all_pages_through_250_instances() {
    let h = spawn_default().await;
    h.emulator
        .seed(&Seed {
            count: 260,
            region_id: Some(REGION.into()),
            tags: [(CLUSTER_TAG.to_owned(), "1".to_owned())].into(),
            ..Seed::default()
        })
        .unwrap();
    h.emulator
        .seed(&Seed {
            count: 15,
            region_id: Some(REGION.into()),
            name_prefix: "other-".into(),
            ..Seed::default()
        })
        .unwrap();
    for sig in [SignatureVersion::V1, SignatureVersion::V3] {
        let c = client(&h, sig);
        let all = c
            .describe_all_instances(
                &DescribeInstances {
                    tags: vec![Tag::new(CLUSTER_TAG, "1")],
                    ..Default::default()
                },
                deadline(),
            )
            .await
            .unwrap();
        assert_eq!(all.len(), 260);
        let mut ids: Vec<_> = all.iter().map(|i| i.instance_id.clone()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 260, "no instance twice");
        // And by id, more than 100 at once (split into calls of 100).
        let by_id = c
            .describe_all_instances(
                &DescribeInstances {
                    instance_ids: ids.clone(),
                    ..Default::default()
                },
                deadline(),
            )
            .await
            .unwrap();
        assert_eq!(by_id.len(), 260);
    }
    // 3 pages of 100 by tag + 3 calls by id, per signature version.
    assert_eq!(h.emulator.stats().calls["DescribeInstances"], 12);
}

#[tokio::test]
async fn throttling_is_absorbed_by_retries() {
    let h = spawn_default().await;
    h.emulator
        .set_faults(Faults {
            throttle_rate: 0.2,
            throttle_time_left_ms: 5,
            ..Faults::default()
        })
        .unwrap();
    let c = client(&h, SignatureVersion::V3);
    let tasks: Vec<_> = (0..40)
        .map(|n| {
            let c = c.clone();
            tokio::spawn(async move {
                c.run_instances(&machine(&format!("t-{n}")), deadline())
                    .await
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    for n in 0..40 {
        assert_eq!(by_name(&c, &format!("t-{n}")).await.len(), 1);
    }
    assert_eq!(h.emulator.instance_count(), 40);
    // 80 calls at 20 %: no throttling at all has probability 0.8^80 ≈ 2e-8.
    assert!(h.emulator.stats().throttled > 0);
}

#[tokio::test]
async fn server_errors_are_retried_and_eventually_reported() {
    let h = spawn_default().await;
    h.emulator
        .set_faults(Faults {
            server_error_rate: 0.25,
            ..Faults::default()
        })
        .unwrap();
    let c = client(&h, SignatureVersion::V1);
    for n in 0..20 {
        c.run_instances(&machine(&format!("s-{n}")), deadline())
            .await
            .unwrap();
    }
    assert_eq!(h.emulator.instance_count(), 20);
    assert!(h.emulator.stats().server_errors > 0);

    // Always failing: exactly max_attempts tries, then Unavailable with ECS's code.
    h.emulator
        .set_faults(Faults {
            server_error_rate: 1.0,
            ..Faults::default()
        })
        .unwrap();
    let before = h.emulator.stats().server_errors;
    let mut cfg = config(&h, SignatureVersion::V1);
    cfg.retry.max_attempts = 3;
    let c = client_with(cfg, Credentials::new(KEY_ID, SECRET));
    let e = c
        .describe_instances(&DescribeInstances::default(), deadline())
        .await
        .unwrap_err();
    assert!(matches!(e.http_status(), Some(500 | 503)), "{e}");
    assert_eq!(h.emulator.stats().server_errors - before, 3);
}

#[tokio::test]
async fn no_stock_is_resource_exhausted_and_not_retried() {
    let h = spawn_default().await;
    let mut f = Faults::default();
    f.no_stock_zones.insert("cn-shanghai-b".into());
    h.emulator.set_faults(f).unwrap();
    let c = client(&h, SignatureVersion::V1);
    let e = c
        .run_instances(&machine("ns"), deadline())
        .await
        .unwrap_err();
    assert_eq!(e.ecs_code(), Some("OperationDenied.NoStock"));
    assert_eq!(h.emulator.stats().calls["RunInstances"], 1);
    assert_eq!(h.emulator.instance_count(), 0);
}

#[tokio::test]
async fn delete_semantics_force_status_and_not_found() {
    let h = spawn_default().await;
    let mut cfg = config(&h, SignatureVersion::V1);
    cfg.retry.max_attempts = 2;
    let c = client_with(cfg, Credentials::new(KEY_ID, SECRET));
    let id = c
        .run_instances(&machine("del"), deadline())
        .await
        .unwrap()
        .instance_ids[0]
        .clone();

    // Running without Force: IncorrectInstanceStatus (retried as transient, then reported).
    let e = c.delete_instance(&id, false, deadline()).await.unwrap_err();
    assert_eq!(e.ecs_code(), Some("IncorrectInstanceStatus"));
    assert_eq!(h.emulator.stats().calls["DeleteInstance"], 2);

    // Pinned Pending: even Force is refused while it initialises.
    h.emulator.pin_status(&id, "Pending").unwrap();
    let e = c.delete_instance(&id, true, deadline()).await.unwrap_err();
    assert_eq!(e.ecs_code(), Some("IncorrectInstanceStatus.Initializing"));
    let found = by_name(&c, "del").await;
    assert_eq!(found[0].status, InstanceStatus::Pending);
    h.emulator.unpin(&id).unwrap();

    c.delete_instance(&id, true, deadline()).await.unwrap();
    assert_eq!(h.emulator.instance_count(), 0);
    assert_eq!(
        h.emulator.disk_count(),
        0,
        "system and data disk went with it"
    );
    let e = c.delete_instance(&id, true, deadline()).await.unwrap_err();
    assert!(e.is_not_found());
}

#[tokio::test]
async fn stop_and_start_walk_the_lifecycle() {
    let h = spawn_default().await;
    let c = client(&h, SignatureVersion::V3);
    let id = c
        .run_instances(&machine("life"), deadline())
        .await
        .unwrap()
        .instance_ids[0]
        .clone();
    c.stop_instance(&id, true, deadline()).await.unwrap();
    assert_eq!(by_name(&c, "life").await[0].status, InstanceStatus::Stopped);
    // Stopped may be released without Force, but start it first.
    c.start_instance(&id, deadline()).await.unwrap();
    assert_eq!(by_name(&c, "life").await[0].status, InstanceStatus::Running);
}

#[tokio::test]
async fn leftover_disks_and_nics_are_found_by_tag_and_deleted() {
    let h = spawn_default().await;
    h.emulator
        .set_faults(Faults {
            leak_on_delete: true,
            ..Faults::default()
        })
        .unwrap();
    let c = client(&h, SignatureVersion::V1);
    let id = c
        .run_instances(&machine("leak"), deadline())
        .await
        .unwrap()
        .instance_ids[0]
        .clone();
    c.delete_instance(&id, true, deadline()).await.unwrap();

    let tags = vec![Tag::new(CLUSTER_TAG, "1")];
    let disks = c
        .describe_all_disks(
            &DescribeDisks {
                tags: tags.clone(),
                status: Some("Available".into()),
                ..Default::default()
            },
            deadline(),
        )
        .await
        .unwrap();
    assert_eq!(disks.len(), 2, "system + data disk left behind");
    for d in &disks {
        assert_eq!(d.instance_id, None);
        c.delete_disk(&d.disk_id, deadline()).await.unwrap();
    }
    let nics = c
        .describe_all_network_interfaces(
            &DescribeNetworkInterfaces {
                tags,
                ..Default::default()
            },
            deadline(),
        )
        .await
        .unwrap();
    assert_eq!(nics.len(), 1);
    assert_eq!(nics[0].status, "Available");
    c.delete_network_interface(&nics[0].network_interface_id, deadline())
        .await
        .unwrap();
    assert_eq!(h.emulator.disk_count(), 0);
    assert_eq!(h.emulator.network_interface_count(), 0);
    let e = c
        .delete_disk(&disks[0].disk_id, deadline())
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
}

#[tokio::test]
async fn a_kept_disk_set_to_go_with_its_instance_goes_with_it() {
    let h = spawn_default().await;
    let c = client(&h, SignatureVersion::V3);
    let mut run = machine("keep");
    run.data_disks[0].delete_with_instance = Some(false);
    let id = c
        .run_instances(&run, deadline())
        .await
        .unwrap()
        .instance_ids[0]
        .clone();
    let attached = |c: EcsClient, id: String| async move {
        c.describe_all_disks(
            &DescribeDisks {
                instance_id: Some(id),
                ..Default::default()
            },
            deadline(),
        )
        .await
        .unwrap()
    };
    let kept: Vec<_> = attached(c.clone(), id.clone())
        .await
        .into_iter()
        .filter(|d| d.delete_with_instance == Some(false))
        .collect();
    assert_eq!(kept.len(), 1);
    c.set_disk_delete_with_instance(&kept[0].disk_id, true, deadline())
        .await
        .unwrap();
    assert!(
        attached(c.clone(), id.clone())
            .await
            .iter()
            .all(|d| d.delete_with_instance == Some(true))
    );
    c.delete_instance(&id, true, deadline()).await.unwrap();
    assert_eq!(h.emulator.disk_count(), 0);
    let e = c
        .set_disk_delete_with_instance(&kept[0].disk_id, true, deadline())
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
}

#[tokio::test]
async fn the_caller_deadline_bounds_every_call() {
    let h = spawn_default().await;
    h.emulator
        .set_faults(Faults {
            latency_ms: 2_000,
            ..Faults::default()
        })
        .unwrap();
    let c = client(&h, SignatureVersion::V1);
    let started = std::time::Instant::now();
    let e = c
        .describe_instances(
            &DescribeInstances::default(),
            deadline_in(Duration::from_millis(150)),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::DeadlineExceeded { .. }), "{e}");
    assert!(started.elapsed() < Duration::from_millis(1_500));
}

#[tokio::test]
async fn the_rate_limit_is_shared_per_key_and_region() {
    let h = spawn_default().await;
    let mut cfg = config(&h, SignatureVersion::V1);
    cfg.qps = Some(20.0);
    cfg.burst = Some(1);
    let ecs = Ecs::new(cfg).unwrap();
    let started = std::time::Instant::now();
    // Two clients for the same key and region share one bucket.
    let a = ecs.client(&region(), Credentials::new(KEY_ID, SECRET));
    let b = ecs.client(&region(), Credentials::new(KEY_ID, SECRET));
    for n in 0..10 {
        let c = if n % 2 == 0 { &a } else { &b };
        c.describe_instances(&DescribeInstances::default(), deadline())
            .await
            .unwrap();
    }
    // 1 token at once, then 9 at 20/s: at least 450 ms.
    assert!(
        started.elapsed() >= Duration::from_millis(440),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn metrics_are_recorded_per_action_and_result() {
    let h = spawn_default().await;
    let c = client(&h, SignatureVersion::V1);
    c.describe_instances(&DescribeInstances::default(), deadline())
        .await
        .unwrap();
    let bad = client_with(
        config(&h, SignatureVersion::V1),
        Credentials::new(KEY_ID, "nope"),
    );
    let _ = bad
        .describe_instances(&DescribeInstances::default(), deadline())
        .await;
    let text = metric_families::render();
    assert!(
        text.contains(r#"berth_ecs_requests_total{action="DescribeInstances",result="ok"}"#),
        "{text}"
    );
    assert!(text.contains(
        r#"berth_ecs_requests_total{action="DescribeInstances",result="SignatureDoesNotMatch"}"#
    ));
    assert!(text.contains("berth_ecs_request_duration_seconds"));
}
