//! AddStorage on the kubernetes backend beside the local one: prints figures, asserts nothing.
//!
//! Run: `cargo bench -p storage-ops --bench kubernetes` (`BERTH_BENCH_ADDS=300` adds a round,
//! `BERTH_BENCH_ROUNDS=5` rounds).
//!
//! One client makes volumes through storage-ops' HTTP API (its registry faked in memory), on a
//! `local` orchestrator (a mkdir, a directory fsync, one commit) and on a `kubernetes` one whose API
//! server is the stand-in (`kube-standin`) on loopback: a GET of the claim, its POST, a GET and an
//! events LIST to observe it, then the row's two commits. Rounds alternate between the two, and the
//! medians are printed, so a drift of the machine's fsync time falls on both alike. The stand-in
//! answers in microseconds; a real API server adds its own latency (typically milliseconds) to each
//! of the four calls.

use std::path::Path;
use std::time::Instant;

use client::{ClientOptions, ServiceClient};
use domain::orchestrator::RegisterOrchestrator;
use domain::{OrchestratorKind, VolumeProvisionerProfile};
use service_kit::Env;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../tests/fake_registry/mod.rs"]
mod fake_registry;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Calls/s, p50 and p99 in ms, of `n` adds on `orchestrator` named from `round`.
async fn round(
    storage: &client::storage::Client,
    orchestrator: &str,
    round: usize,
    n: usize,
) -> (f64, f64, f64) {
    let mut times = Vec::with_capacity(n);
    let started = Instant::now();
    for i in 0..n {
        let profile = VolumeProvisionerProfile {
            name: format!("v{round}-{i}"),
            namespace: Some(orchestrator.into()),
            capacity: "1Gi".into(),
            orchestrator: Some(orchestrator.into()),
            ..Default::default()
        };
        let t = Instant::now();
        storage.add(&profile).await.expect("an add");
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    (rate, at(0.5), at(0.99))
}

async fn stack(dir: &Path, cluster: &str) -> client::storage::Client {
    let registry_url = fake_registry::spawn().await;
    let registry =
        client::registry::Client::new(ServiceClient::new(&registry_url, ClientOptions::default()));
    for (name, kind, config) in [
        (
            "local",
            OrchestratorKind::Local,
            serde_json::json!({"basePath": dir.join("vols").display().to_string()}),
        ),
        (
            "cluster",
            OrchestratorKind::Kubernetes,
            serde_json::json!({"server": cluster, "namespace": "berth-volumes"}),
        ),
    ] {
        registry
            .register(
                name,
                &RegisterOrchestrator {
                    config: Some(config),
                    ..RegisterOrchestrator::new(kind)
                },
            )
            .await
            .unwrap();
    }
    let config = storage_ops::Config::from_env(
        &Env::default()
            .with("BERTH_LISTEN", "127.0.0.1:0")
            .with(
                "BERTH_STORAGE_OPS_DB",
                dir.join("storage.db").display().to_string(),
            )
            .with("BERTH_REGISTRY_URL", &registry_url)
            .with("BERTH_RECONCILE_INTERVAL", "1h")
            .with("BERTH_LOCAL_ROOTS", dir.display().to_string())
            .with("BERTH_KUBERNETES_SERVERS", cluster),
    )
    .unwrap();
    let ops = storage_ops::ops(&config).await.unwrap();
    let server = service_kit::testing::spawn(storage_ops::router(&config, ops)).await;
    let url = server.url.clone();
    std::mem::forget(server);
    client::storage::Client::new(ServiceClient::new(&url, ClientOptions::default()))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let adds = env_usize("BERTH_BENCH_ADDS", 300);
    let rounds = env_usize("BERTH_BENCH_ROUNDS", 5);
    let dir = tempfile::tempdir().unwrap();
    let standin = kube_standin::StandIn::start(&["berth-volumes"]).await;
    let storage = stack(dir.path(), &standin.url).await;
    // Warm-up: connections, the kube client's first use, caches.
    round(&storage, "local", 0, 20).await;
    round(&storage, "cluster", 0, 20).await;
    let (mut local, mut cluster) = (Vec::new(), Vec::new());
    for r in 1..=rounds {
        local.push(round(&storage, "local", r, adds).await);
        cluster.push(round(&storage, "cluster", r, adds).await);
    }
    println!(
        "AddStorage, 1 client, {rounds} interleaved rounds of {adds} (medians of the rounds):"
    );
    for (name, runs) in [
        ("local backend", &local),
        ("kubernetes backend (stand-in on loopback)", &cluster),
    ] {
        println!(
            "  {name:<44} {:>7.0}/s   p50 {:>6.2} ms   p99 {:>6.2} ms",
            median(runs.iter().map(|r| r.0).collect()),
            median(runs.iter().map(|r| r.1).collect()),
            median(runs.iter().map(|r| r.2).collect()),
        );
    }
}
