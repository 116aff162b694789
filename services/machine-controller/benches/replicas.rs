//! Machine-controller benchmark: prints figures, asserts nothing about speed.
//!
//! On one stack (ECS emulator with instant transitions, machine driver, machine controller, all on
//! 127.0.0.1), in one run:
//! 1. the driver's own CreateMachine throughput: `BENCH_REPLICAS` creates of distinct machines,
//!    `BENCH_CONCURRENCY` at a time, straight at the driver;
//! 2. the time a MachineDeployment of `BENCH_REPLICAS` takes from POST to every machine Running,
//!    through the controller (which creates, polls and initialises each), as machines per second;
//! 3. their ratio (the goal is at least 0.8).
//!
//! The controller's per-class call rate (`BERTH_CONTROLLER_CLASS_CALLS_PER_SECOND`, 20 by default,
//! an operator's guard for the cloud's API limits) is raised to 10 000 here, so the figure is the
//! controller's own cost; at the default, 100 replicas take at least 5 s by design.
//!
//! Run: `cargo bench -p machine-controller --bench replicas` (release build).

use std::time::{Duration, Instant};

use client::machines::Client;
use client::{ClientOptions, ServiceClient};
use domain::machine::{Machine, MachineClass, MachineRequest, Secret};
use ecs_emulator::Emulator;
use futures::StreamExt as _;
use machine_controller::reconcile::{Controller, Settings};
use serde_json::{Value, json};
use service_kit::Env;
use service_kit::testing::spawn;

const KEY_ID: &str = "bench-key";
const KEY_SECRET: &str = "bench-secret";

fn number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn provider_spec() -> Value {
    json!({
        "imageID": "m-image", "instanceType": "ecs.g6.large", "region": "cn-shanghai",
        "zoneID": "cn-shanghai-b", "securityGroupID": "sg-1", "vSwitchID": "vsw-1", "keyPairName": "kp",
        "tags": {"kubernetes.io/cluster/bench": "1", "kubernetes.io/role/node": "1"}
    })
}

#[tokio::main]
async fn main() {
    let replicas = number("BENCH_REPLICAS", 100);
    let concurrency = number("BENCH_CONCURRENCY", 32);
    let emulator = Emulator::new(ecs_emulator::Config::for_tests(KEY_ID, KEY_SECRET));
    let ecs = spawn(emulator.router()).await;
    let env = Env::default()
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with("BERTH_ALICLOUD_ENDPOINT", ecs.url.clone())
        .with("BERTH_REQUEST_TIMEOUT", "120s");
    let config = machine_driver::Config::from_env(&env).expect("driver config");
    let providers = machine_driver::providers(&config).expect("providers");
    let driver = spawn(machine_driver::router(&config, providers)).await;

    // 1. The driver alone.
    let machines = Client::new(ServiceClient::new(&driver.url, ClientOptions::default()));
    let mut class = MachineClass {
        provider: "Alicloud".into(),
        provider_spec: provider_spec(),
        ..MachineClass::default()
    };
    class.metadata.name = "bench".into();
    let secret = Secret::from_string_data([
        ("alicloudAccessKeyID", KEY_ID),
        ("alicloudAccessKeySecret", KEY_SECRET),
    ]);
    let started = Instant::now();
    let results: Vec<bool> = futures::stream::iter(0..replicas)
        .map(|i| {
            let (machines, class, secret) = (machines.clone(), class.clone(), secret.clone());
            async move {
                let mut machine = Machine::default();
                machine.metadata.name = format!("direct-{i}");
                machine.metadata.namespace = "direct".into();
                machine.metadata.uid = format!("uid-direct-{i}");
                let req = MachineRequest {
                    machine,
                    machine_class: class,
                    secret,
                };
                machines.create(&req).await.is_ok()
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let driver_seconds = started.elapsed().as_secs_f64();
    let made = results.iter().filter(|ok| **ok).count();
    let driver_rate = made as f64 / driver_seconds;
    println!(
        "driver CreateMachine: {made}/{replicas} made in {driver_seconds:.2} s, {concurrency} at a time: {driver_rate:.1} machines/s"
    );

    // 2. The controller.
    let dir = tempfile::tempdir().expect("temp dir");
    let env = Env::default()
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with("BERTH_DATA_DIR", dir.path().to_str().expect("path"))
        .with("BERTH_MACHINE_DRIVER_URL", driver.url.clone())
        .with(
            "BERTH_CONTROLLER_MAX_REPLICAS",
            replicas.max(100).to_string(),
        );
    let mut config = machine_controller::Config::from_env(&env).expect("controller config");
    config.settings = Settings {
        class_calls_per_second: std::num::NonZeroU32::new(10_000).expect("non-zero"),
        workers: concurrency,
        ..Settings::default()
    };
    let writer = machine_controller::writer(&config).await.expect("store");
    let controller = Controller::new(writer.clone(), config.settings.clone());
    tokio::spawn(controller.run());
    let api = spawn(machine_controller::router(&config, writer)).await;
    let http = reqwest::Client::new();
    let post = |path: &str, body: Value| {
        let request = http
            .post(format!("{}/v1/namespaces/bench/{path}", api.url))
            .json(&body);
        async move {
            let answer = request.send().await.expect("answer");
            assert!(
                answer.status().is_success(),
                "{}",
                answer.text().await.unwrap_or_default()
            );
        }
    };
    post(
        "secrets",
        json!({"metadata": {"name": "cloud"}, "stringData": {
        "alicloudAccessKeyID": KEY_ID, "alicloudAccessKeySecret": KEY_SECRET}}),
    )
    .await;
    post(
        "machineclasses",
        json!({"metadata": {"name": "bench"}, "provider": "Alicloud",
        "providerSpec": provider_spec(), "secretRef": {"name": "cloud"}}),
    )
    .await;
    let started = Instant::now();
    post("machinedeployments", json!({"metadata": {"name": "pool"}, "spec": {"replicas": replicas,
        "selector": {"matchLabels": {"pool": "p"}},
        "template": {"metadata": {"labels": {"pool": "p"}}, "spec": {"class": {"name": "bench"}}}}})).await;
    loop {
        let d: Value = http
            .get(format!(
                "{}/v1/namespaces/bench/machinedeployments/pool",
                api.url
            ))
            .send()
            .await
            .expect("answer")
            .json()
            .await
            .expect("json");
        if d["status"]["readyReplicas"].as_u64() == Some(replicas as u64) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "not Running within 10 min: {d}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let controller_seconds = started.elapsed().as_secs_f64();
    let controller_rate = replicas as f64 / controller_seconds;
    println!(
        "controller: a MachineDeployment of {replicas} all Running in {controller_seconds:.2} s: {controller_rate:.1} machines/s ({concurrency} workers)"
    );
    println!(
        "ratio controller/driver: {:.2} (goal >= 0.8)",
        controller_rate / driver_rate
    );
}
