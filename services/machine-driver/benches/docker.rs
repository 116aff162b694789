//! Docker machines benchmark: prints how long machines take from CreateMachine to Running
//! (GetMachineStatus OK, bootstrap included), asserts nothing about speed.
//!
//! Through the driver's REST API on 127.0.0.1 against the local Docker Engine, with the test
//! machine image (built from nothing a registry serves, as the tests build it) and a one-line
//! `bootstrap: exec`:
//! 1. one machine alone, `BENCH_ROUNDS` times (default 5);
//! 2. `BENCH_MACHINES` machines (default 20) created concurrently, each twice.
//!
//! Run: `cargo bench -p machine-driver --bench docker`. Without an Engine it says so and exits 0.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use client::machines::Client;
use client::{ClientOptions, ServiceClient};
use domain::machine::{Machine, MachineClass, MachineRequest, Secret};
use serde_json::json;
use service_kit::Env;
use service_kit::testing::spawn;
use support::{RUN_LABEL, Sweep, local_engine, machine_image};

const USER_DATA: &str = "#!/berth-machine bootstrap\nappend /var/lib/berth/runs ran\n";

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn request(run: &str, image: &str, n: usize) -> MachineRequest {
    let mut class = MachineClass {
        provider: "Docker".into(),
        provider_spec: json!({
            "image": image,
            "bootstrap": "exec",
            "tags": {format!("kubernetes.io/cluster/{run}"): "1", "kubernetes.io/role/worker": "1"},
            "labels": {RUN_LABEL: run},
        }),
        ..MachineClass::default()
    };
    class.metadata.name = format!("{run}-class");
    let mut machine = Machine::default();
    machine.metadata.name = format!("{run}-{n}");
    machine.metadata.uid = format!("uid-{run}-{n}");
    MachineRequest {
        machine,
        machine_class: class,
        secret: Secret::from_string_data([("userData", USER_DATA)]),
    }
}

/// Creates, then polls status every 100 ms until OK; the time from the create to the first OK.
async fn create_until_running(machines: &Client, req: &MachineRequest) -> Duration {
    let started = Instant::now();
    machines.create(req).await.expect("create");
    while machines.status(req).await.is_err() {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(started.elapsed() < Duration::from_secs(120), "not Running");
    }
    started.elapsed()
}

fn millis(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    if local_engine().await.is_none() {
        println!("docker bench skipped: no Docker Engine answers at unix:///var/run/docker.sock");
        return;
    }
    let rounds = env_or("BENCH_ROUNDS", 5);
    let count = env_or("BENCH_MACHINES", 20);
    let run = format!("bb{}", std::process::id());
    let _sweep = Sweep(run.clone());
    let image = machine_image().await;
    let env = Env::default()
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with("BERTH_REQUEST_TIMEOUT", "120s");
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

    let mut alone = Vec::new();
    for round in 0..rounds {
        let req = request(&run, &image, 1000 + round);
        alone.push(create_until_running(&machines, &req).await);
        machines.delete(&req).await.expect("delete");
    }
    alone.sort();
    println!(
        "one machine, create → Running: median {}, min {}, max {} ({rounds} rounds)",
        millis(alone[alone.len() / 2]),
        millis(alone[0]),
        millis(alone[alone.len() - 1])
    );

    let reqs: Vec<MachineRequest> = (0..count).map(|n| request(&run, &image, n)).collect();
    let started = Instant::now();
    let times = futures::future::join_all(
        reqs.iter()
            .chain(reqs.iter())
            .map(|r| create_until_running(&machines, r)),
    )
    .await;
    let all = started.elapsed();
    let mut times = times;
    times.sort();
    println!(
        "{count} machines created concurrently (each twice), create → Running: first {}, median {}, all {}",
        millis(times[0]),
        millis(times[times.len() / 2]),
        millis(all)
    );
    futures::future::join_all(reqs.iter().map(|r| machines.delete(r))).await;
}
