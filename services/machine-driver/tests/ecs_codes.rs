//! The errors the real ECS client gets from the real emulator, as the driver's Alicloud provider
//! maps them to MCM's machine codes (`machine_driver::alicloud::codes`).
//!
//! These assertions were the ECS crate's (`crates/alicloud/tests/emulator.rs`) while the mapping
//! lived there. Each scenario here is the one that test drives; the ECS side of it (the code ECS
//! answers, the retries, nothing secret in the error) is still asserted there, the machine code
//! here.

use std::time::Duration;

use alicloud::{
    Credentials, DataDisk, DescribeInstances, Ecs, EcsClient, EcsConfig, Error, Region,
    RetryPolicy, RunInstances, SignatureVersion, Tag, deadline_in,
};
use domain::Code;
use ecs_emulator::{AccessKey, Config, Emulator, Faults};
use machine_driver::alicloud::codes::MachineCode as _;
use service_kit::testing::{TestServer, spawn};

const KEY_ID: &str = "test-key";
const SECRET: &str = "test-secret-value";
const REGION: &str = "cn-shanghai";
const CLUSTER_TAG: &str = "kubernetes.io/cluster/shoot--test";

/// An emulator served on port 0.
struct Harness {
    emulator: Emulator,
    server: TestServer,
}

async fn harness(config: Config) -> Harness {
    let emulator = Emulator::new(config);
    let server = spawn(emulator.router()).await;
    Harness { emulator, server }
}

async fn harness_default() -> Harness {
    harness(Config::for_tests(KEY_ID, SECRET)).await
}

fn config(h: &Harness, signature: SignatureVersion) -> EcsConfig {
    EcsConfig {
        endpoint: Some(h.server.url.clone()),
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

fn client_with(cfg: EcsConfig, creds: Credentials) -> EcsClient {
    Ecs::new(cfg)
        .unwrap()
        .client(&Region::parse(REGION).unwrap(), creds)
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

#[tokio::test]
async fn a_refused_sts_token_is_unauthenticated() {
    let mut key = AccessKey::new("sts-key", "sts-secret");
    key.security_token = Some("sts-token-value".into());
    let h = harness(Config::for_tests(KEY_ID, SECRET).with_access_key(key)).await;
    for sig in [SignatureVersion::V1, SignatureVersion::V3] {
        let bad = client_with(
            config(&h, sig),
            Credentials::new("sts-key", "sts-secret").with_security_token("other-token"),
        );
        let e = bad
            .describe_instances(&DescribeInstances::default(), deadline())
            .await
            .unwrap_err();
        assert_eq!(e.machine_code(), Code::Unauthenticated, "{e}");
    }
}

#[tokio::test]
async fn bad_credentials_are_unauthenticated_and_never_leak() {
    let h = harness_default().await;
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
        assert_eq!(e.machine_code(), Code::Unauthenticated);
        let text = format!("{e} {e:?} {}", e.to_status());
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
        assert_eq!(e.machine_code(), Code::Unauthenticated);
    }
}

#[tokio::test]
async fn a_client_token_reused_with_other_parameters_is_already_exists() {
    let h = harness_default().await;
    let c = client(&h, SignatureVersion::V1);
    let mut req = machine("idem");
    req.client_token = Some("machine-uid-0001".into());
    c.run_instances(&req, deadline()).await.unwrap();
    req.instance_type = "ecs.g6.xlarge".into();
    let e = c.run_instances(&req, deadline()).await.unwrap_err();
    assert_eq!(e.ecs_code(), Some("IdempotentParameterMismatch"));
    assert_eq!(e.machine_code(), Code::AlreadyExists);
}

#[tokio::test]
async fn server_errors_past_the_retries_are_unavailable() {
    let h = harness_default().await;
    h.emulator
        .set_faults(Faults {
            server_error_rate: 1.0,
            ..Faults::default()
        })
        .unwrap();
    let mut cfg = config(&h, SignatureVersion::V1);
    cfg.retry.max_attempts = 3;
    let c = client_with(cfg, Credentials::new(KEY_ID, SECRET));
    let e = c
        .describe_instances(&DescribeInstances::default(), deadline())
        .await
        .unwrap_err();
    assert!(matches!(e.http_status(), Some(500 | 503)), "{e}");
    assert_eq!(e.machine_code(), Code::Unavailable);
}

#[tokio::test]
async fn no_stock_is_resource_exhausted() {
    let h = harness_default().await;
    let mut f = Faults::default();
    f.no_stock_zones.insert("cn-shanghai-b".into());
    h.emulator.set_faults(f).unwrap();
    let c = client(&h, SignatureVersion::V1);
    let e = c
        .run_instances(&machine("ns"), deadline())
        .await
        .unwrap_err();
    assert_eq!(e.ecs_code(), Some("OperationDenied.NoStock"));
    assert_eq!(e.machine_code(), Code::ResourceExhausted);
}

#[tokio::test]
async fn a_delete_refused_mid_state_is_unavailable_and_a_missing_instance_not_found() {
    let h = harness_default().await;
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
    assert_eq!(e.machine_code(), Code::Unavailable);

    c.delete_instance(&id, true, deadline()).await.unwrap();
    let e = c.delete_instance(&id, true, deadline()).await.unwrap_err();
    assert!(e.is_not_found());
    assert_eq!(e.machine_code(), Code::NotFound);
}

#[tokio::test]
async fn the_caller_deadline_is_deadline_exceeded() {
    let h = harness_default().await;
    h.emulator
        .set_faults(Faults {
            latency_ms: 2_000,
            ..Faults::default()
        })
        .unwrap();
    let c = client(&h, SignatureVersion::V1);
    let e = c
        .describe_instances(
            &DescribeInstances::default(),
            deadline_in(Duration::from_millis(150)),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::DeadlineExceeded { .. }), "{e}");
    assert_eq!(e.machine_code(), Code::DeadlineExceeded);
}
