//! Latency and throughput of `GET /v1/orchestrators/{name}` under concurrent load.
//!
//! Spawns the registry in-process on `127.0.0.1:0` over a temporary database (the whole middleware
//! stack included: request id, trace, metrics, problem+json), registers some orchestrators, then has
//! `--concurrency` clients (each with its own keep-alive connection pool) issue `--requests` GETs in all,
//! round-robin over the names, and prints requests/s and the latency percentiles.
//!
//! Run: `cargo bench -p orchestrator-registry --bench get_latency -- --concurrency 32 --requests 50000`
//! (the client and the server share the machine, and the runtime, so this measures both).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use client::registry::Client as RegistryClient;
use client::{ClientOptions, ServiceClient};
use domain::OrchestratorKind;
use domain::orchestrator::RegisterOrchestrator;
use orchestrator_registry::detect::FixedProbe;
use service_kit::Env;

struct Args {
    concurrency: usize,
    requests: usize,
    orchestrators: usize,
}

fn args() -> Args {
    let mut args = Args {
        concurrency: 32,
        requests: 50_000,
        orchestrators: 16,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .and_then(|v| v.parse::<usize>().ok())
                .filter(|v| *v > 0)
                .unwrap_or_else(|| panic!("{flag} needs a positive number"))
        };
        match flag.as_str() {
            "--concurrency" => args.concurrency = value(),
            "--requests" => args.requests = value(),
            "--orchestrators" => args.orchestrators = value(),
            // cargo bench passes `--bench`; anything else is ignored too.
            _ => {}
        }
    }
    args
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    let args = args();
    let dir = tempfile::tempdir().expect("temp dir");
    let env = Env::default()
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with("BERTH_DATA_DIR", dir.path().display().to_string())
        // The benchmark's registrations name /srv/berth/<i>; nothing is made there.
        .with(
            "BERTH_LOCAL_ROOTS",
            format!("/srv/berth,{}", dir.path().display()),
        );
    let mut config = orchestrator_registry::Config::from_env(&env).expect("config");
    config.docker_probe = Arc::new(FixedProbe(false));
    let app = orchestrator_registry::build(config).await.expect("build");
    let url = format!("http://{}", app.local_addr());
    tokio::spawn(app.run_until(std::future::pending()));

    let registry = RegistryClient::new(ServiceClient::new(&url, ClientOptions::default()));
    let names: Vec<String> = (0..args.orchestrators)
        .map(|i| format!("bench-{i}"))
        .collect();
    for (i, name) in names.iter().enumerate() {
        let mut req = RegisterOrchestrator::new(OrchestratorKind::Local);
        req.config =
            Some(serde_json::json!({"basePath": format!("/srv/berth/{i}"), "capacity": "100Gi"}));
        req.label = Some(format!("bench {i}"));
        registry.register(name, &req).await.expect("register");
    }
    let urls: Arc<Vec<String>> = Arc::new(
        names
            .iter()
            .map(|n| format!("{url}/v1/orchestrators/{n}"))
            .collect(),
    );

    // Warm up: connections, statement cache, page cache.
    let warm = reqwest::Client::new();
    for u in urls.iter().cycle().take(500) {
        let r = warm.get(u).send().await.expect("warm-up GET");
        assert!(r.status().is_success());
        r.bytes().await.expect("body");
    }

    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..args.concurrency {
        let next = next.clone();
        let urls = urls.clone();
        let total = args.requests;
        workers.spawn(async move {
            let http = reqwest::Client::new();
            let mut samples = Vec::with_capacity(total / 8 + 1);
            let mut errors = 0usize;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let t = Instant::now();
                let ok = match http.get(&urls[i % urls.len()]).send().await {
                    Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                    Err(_) => false,
                };
                samples.push(t.elapsed());
                if !ok {
                    errors += 1;
                }
            }
            (samples, errors)
        });
    }
    let mut samples = Vec::with_capacity(args.requests);
    let mut errors = 0;
    while let Some(done) = workers.join_next().await {
        let (s, e) = done.expect("worker");
        samples.extend(s);
        errors += e;
    }
    let elapsed = started.elapsed();
    samples.sort_unstable();

    println!("GET /v1/orchestrators/{{name}}  (orchestrator-registry, in-process, 127.0.0.1)");
    println!(
        "  cores: {}  concurrency: {}  requests: {}  orchestrators: {}  errors: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        args.concurrency,
        samples.len(),
        args.orchestrators,
        errors
    );
    println!(
        "  throughput: {:.0} requests/s over {:.2} s",
        samples.len() as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64()
    );
    println!(
        "  latency: p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
        ms(percentile(&samples, 50.0)),
        ms(percentile(&samples, 90.0)),
        ms(percentile(&samples, 99.0)),
        ms(percentile(&samples, 99.9)),
        ms(*samples.last().expect("samples")),
    );
}
