//! Machine-driver benchmark: prints figures, asserts nothing about speed.
//!
//! 1. ListMachines over 10 000 instances: ECS calls made (DescribeInstances pages) and wall time, over
//!    the REST API against the ECS emulator, both on 127.0.0.1.
//! 2. CreateMachine throughput under a 50 QPS account limit (`BERTH_ALICLOUD_QPS=50`): creates a
//!    second and ECS calls a second for many concurrent creates of distinct machines.
//!
//! Run: `cargo bench -p machine-driver --bench driver` (release build). `BENCH_CREATES` (default 300)
//! and `BENCH_CONCURRENCY` (default 50) size part 2.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use client::machines::Client;
use client::{ClientOptions, ServiceClient};
use domain::machine::{ListMachinesRequest, Machine, MachineClass, MachineRequest, Secret};
use ecs_emulator::{Emulator, Seed};
use futures::StreamExt as _;
use serde_json::json;
use service_kit::Env;
use service_kit::testing::{TestServer, spawn};

const KEY_ID: &str = "bench-key";
const KEY_SECRET: &str = "bench-secret";
const REGION: &str = "cn-shanghai";
const CLUSTER_TAG: &str = "kubernetes.io/cluster/shoot--bench";
const ROLE_TAG: &str = "kubernetes.io/role/worker/shoot--bench";
const LIST_INSTANCES: usize = 10_000;
const LIST_RUNS: usize = 5;

struct Stack {
    emulator: Emulator,
    machines: Client,
    _servers: (TestServer, TestServer),
}

async fn stack(extra: &[(&str, &str)]) -> Stack {
    let emulator = Emulator::new(ecs_emulator::Config::for_tests(KEY_ID, KEY_SECRET));
    let emulator_server = spawn(emulator.router()).await;
    let mut env = Env::default()
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with("BERTH_ALICLOUD_ENDPOINT", emulator_server.url.clone())
        .with("BERTH_REQUEST_TIMEOUT", "120s");
    for (k, v) in extra {
        env = env.with(k, *v);
    }
    let config = machine_driver::Config::from_env(&env).expect("config");
    let providers = machine_driver::providers(&config).expect("providers");
    let driver = spawn(machine_driver::router(&config, providers)).await;
    let machines = Client::new(ServiceClient::new(
        &driver.url,
        ClientOptions {
            timeout: Duration::from_secs(120),
            ..ClientOptions::default()
        },
    ));
    Stack {
        emulator,
        machines,
        _servers: (emulator_server, driver),
    }
}

fn class() -> MachineClass {
    MachineClass {
        provider: "Alicloud".into(),
        provider_spec: json!({
            "imageID": "m-image", "instanceType": "ecs.g6.large", "region": REGION,
            "zoneID": "cn-shanghai-b", "vSwitchID": "vsw-1", "keyPairName": "kp",
            "systemDisk": {"category": "cloud_efficiency", "size": 50},
            "tags": {CLUSTER_TAG: "1", ROLE_TAG: "1"}
        }),
        ..MachineClass::default()
    }
}

fn secret() -> Secret {
    Secret::from_string_data([
        ("alicloudAccessKeyID", KEY_ID),
        ("alicloudAccessKeySecret", KEY_SECRET),
        ("userData", "#!/bin/sh\necho hello\n"),
    ])
}

fn calls(e: &Emulator, action: &str) -> u64 {
    e.stats().calls.get(action).copied().unwrap_or(0)
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn list_benchmark() {
    let s = stack(&[]).await;
    let tags: BTreeMap<String, String> = [(CLUSTER_TAG, "1"), (ROLE_TAG, "1")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    s.emulator
        .seed(&Seed {
            count: LIST_INSTANCES,
            region_id: Some(REGION.into()),
            tags,
            ..Seed::default()
        })
        .expect("seed");
    let req = ListMachinesRequest {
        machine_class: class(),
        secret: secret(),
    };
    let mut walls = Vec::new();
    let mut pages = 0;
    for _ in 0..LIST_RUNS {
        let before = calls(&s.emulator, "DescribeInstances");
        let started = Instant::now();
        let list = s.machines.list(&req).await.expect("list");
        walls.push(started.elapsed());
        assert_eq!(list.machine_list.len(), LIST_INSTANCES);
        pages = calls(&s.emulator, "DescribeInstances") - before;
    }
    walls.sort();
    println!(
        "ListMachines over {LIST_INSTANCES} instances: {pages} ECS calls (DescribeInstances, MaxResults=100) per list; \
         wall time over {LIST_RUNS} runs: min {:.1} ms, median {:.1} ms, max {:.1} ms \
         (MCM's alicloud driver, with ECS's default 10 a page, would make {} calls)",
        walls[0].as_secs_f64() * 1e3,
        walls[LIST_RUNS / 2].as_secs_f64() * 1e3,
        walls[LIST_RUNS - 1].as_secs_f64() * 1e3,
        LIST_INSTANCES.div_ceil(10),
    );
}

async fn create_benchmark() {
    let creates = env_usize("BENCH_CREATES", 300);
    let concurrency = env_usize("BENCH_CONCURRENCY", 50);
    let s = stack(&[("BERTH_ALICLOUD_QPS", "50")]).await;
    let class = class();
    let secret = secret();
    let started = Instant::now();
    let mut latencies: Vec<Duration> = futures::stream::iter(0..creates)
        .map(|n| {
            let mut machine = Machine::default();
            machine.metadata.name = format!("bench-{n:05}");
            machine.metadata.uid = format!("uid-{n}");
            let req = MachineRequest {
                machine,
                machine_class: class.clone(),
                secret: secret.clone(),
            };
            let machines = s.machines.clone();
            async move {
                let t = Instant::now();
                machines.create(&req).await.expect("create");
                t.elapsed()
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let wall = started.elapsed();
    latencies.sort();
    let stats = s.emulator.stats();
    let ecs_calls = stats.total_calls();
    assert_eq!(s.emulator.instance_count(), creates);
    println!(
        "CreateMachine under a 50 QPS account limit: {creates} creates, {concurrency} concurrent, wall {:.2} s \
         -> {:.1} creates/s; {ecs_calls} ECS calls ({:.1} per create: {} DescribeInstances, {} RunInstances) \
         -> {:.1} ECS calls/s; create latency p50 {:.0} ms, p99 {:.0} ms",
        wall.as_secs_f64(),
        creates as f64 / wall.as_secs_f64(),
        ecs_calls as f64 / creates as f64,
        stats.calls.get("DescribeInstances").copied().unwrap_or(0),
        stats.calls.get("RunInstances").copied().unwrap_or(0),
        ecs_calls as f64 / wall.as_secs_f64(),
        latencies[latencies.len() / 2].as_secs_f64() * 1e3,
        latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)].as_secs_f64() * 1e3,
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not used here.
    list_benchmark().await;
    create_benchmark().await;
}
