//! Machine-controller benchmark: prints figures, asserts nothing about speed.
//!
//! On one stack (ECS emulator with instant transitions, machine driver, machine controller, all on
//! 127.0.0.1), in one run:
//! 1. the driver's own CreateMachine throughput: `BENCH_REPLICAS` creates of distinct machines,
//!    `BENCH_CONCURRENCY` at a time, straight at the driver;
//! 2. the same, each create followed by InitializeMachine as MCM's creation flow does: the
//!    most a controller that follows that flow can reach here;
//! 3. the time a MachineDeployment of `BENCH_REPLICAS` takes from POST to every machine Running,
//!    through the controller (which creates, polls and initialises each), as machines per second;
//! 4. the ratio of 3 to 1 (the goal is at least 0.8), and of 3 to 2.
//!
//! Every part runs in this one process on the same cores, so the CPU each phase used per machine
//! is printed too: on a 2-core machine the rate follows it.
//!
//! `BENCH_ECS_LATENCY_MS` (0 by default) delays every answer of the emulator, as a real cloud's API
//! does (Alibaba Cloud's ECS calls take tens to hundreds of milliseconds): with 0, the figures
//! compare CPU costs; with a latency, they compare how well the controller keeps the driver busy.
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
use service_kit::testing::{Events, spawn};

const KEY_ID: &str = "bench-key";
const KEY_SECRET: &str = "bench-secret";

fn number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU time this process (emulator, driver and controller alike) has used so far.
fn cpu_time() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage");
    let (user, system) = (usage.user_time(), usage.system_time());
    let micros = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
    Duration::from_micros(micros(user) + micros(system))
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
    let latency_ms = number("BENCH_ECS_LATENCY_MS", 0);
    let mut ecs_config = ecs_emulator::Config::for_tests(KEY_ID, KEY_SECRET);
    ecs_config.faults.latency_ms = latency_ms as u64;
    let emulator = Emulator::new(ecs_config);
    println!(
        "{replicas} replicas, {concurrency} at a time; every ECS call answered after {latency_ms} ms"
    );
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
    let direct = |prefix: &'static str, initialize: bool| {
        let (machines, class, secret) = (machines.clone(), class.clone(), secret.clone());
        async move {
            let (started, cpu_before) = (Instant::now(), cpu_time());
            let results: Vec<bool> = futures::stream::iter(0..replicas)
                .map(|i| {
                    let (machines, class, secret) =
                        (machines.clone(), class.clone(), secret.clone());
                    async move {
                        let mut machine = Machine::default();
                        machine.metadata.name = format!("{prefix}-{i}");
                        machine.metadata.namespace = "direct".into();
                        machine.metadata.uid = format!("uid-{prefix}-{i}");
                        let mut req = MachineRequest {
                            machine,
                            machine_class: class,
                            secret,
                        };
                        let Ok(made) = machines.create(&req).await else {
                            return false;
                        };
                        if !initialize {
                            return true;
                        }
                        req.machine.spec.provider_id = made.provider_id;
                        machines.initialize(&req).await.is_ok()
                    }
                })
                .buffer_unordered(concurrency)
                .collect()
                .await;
            let seconds = started.elapsed().as_secs_f64();
            let cpu = (cpu_time() - cpu_before).as_secs_f64();
            let made = results.iter().filter(|ok| **ok).count();
            (made, seconds, cpu * 1000.0 / replicas as f64)
        }
    };
    let (made, driver_seconds, cpu) = direct("direct", false).await;
    let driver_rate = made as f64 / driver_seconds;
    println!(
        "driver CreateMachine: {made}/{replicas} made in {driver_seconds:.3} s, {concurrency} at a time: {driver_rate:.1} machines/s; CPU {cpu:.2} ms per machine"
    );
    // What MCM's creation flow asks of the driver for each machine, with no controller between:
    // the most any controller that follows it can reach on this machine.
    let (made, flow_seconds, cpu) = direct("flow", true).await;
    let flow_rate = made as f64 / flow_seconds;
    println!(
        "driver CreateMachine then InitializeMachine: {made}/{replicas} in {flow_seconds:.3} s, {concurrency} at a time: {flow_rate:.1} machines/s; CPU {cpu:.2} ms per machine"
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
    // Followed by a watch, not polled: the moment the last machine counts is seen as it is
    // committed, so the figure carries no polling interval.
    let watch = http
        .get(format!(
            "{}/v1/namespaces/bench/machinedeployments?watch=true&timeoutSeconds=600",
            api.url
        ))
        .send()
        .await
        .expect("watch");
    assert!(watch.status().is_success(), "watch: {}", watch.status());
    let mut events = Events::new(watch);
    let (started, cpu_before) = (Instant::now(), cpu_time());
    post("machinedeployments", json!({"metadata": {"name": "pool"}, "spec": {"replicas": replicas,
        "selector": {"matchLabels": {"pool": "p"}},
        "template": {"metadata": {"labels": {"pool": "p"}}, "spec": {"class": {"name": "bench"}}}}})).await;
    loop {
        let event = events
            .next(Duration::from_secs(600))
            .await
            .expect("not Running within 10 min");
        if event["object"]["status"]["readyReplicas"].as_u64() == Some(replicas as u64) {
            break;
        }
    }
    let controller_seconds = started.elapsed().as_secs_f64();
    let controller_cpu = (cpu_time() - cpu_before).as_secs_f64();
    let controller_rate = replicas as f64 / controller_seconds;
    println!(
        "controller: a MachineDeployment of {replicas} all Running in {controller_seconds:.3} s: {controller_rate:.1} machines/s ({concurrency} workers); CPU {:.2} ms per machine",
        controller_cpu * 1000.0 / replicas as f64
    );
    println!(
        "ratio controller/driver: {:.2} (goal >= 0.8); controller/(create then initialise): {:.2}",
        controller_rate / driver_rate,
        controller_rate / flow_rate
    );
}
