//! storage-ops benchmark: prints figures, asserts nothing.
//!
//! Run: `cargo bench -p storage-ops --bench storage` (optionally `BERTH_BENCH_DIR=/some/disk` to measure
//! another disk, `BERTH_BENCH_ADDS=2000` for more AddStorage calls, `BERTH_BENCH_ROUNDS=9` for more
//! rounds of the one-client comparison; `BERTH_BENCH_PROFILE=berth|design|bare` makes only 3000
//! one-client creates of that kind, for a profiler).
//!
//! 1. Raw SQLite (rusqlite, no sqlx) with storage-ops' exact settings (WAL, `synchronous = FULL`,
//!    busy timeout, foreign keys) and schema: single-row transactions, then 64-row transactions.
//! 2. The same single-row inserts through sqlx on one connection (sqlx's own cost).
//! 3. storage-ops' store (one writer, group commit): 1 caller, then 64 concurrent callers.
//! 4. AddStorage over HTTP with the local backend (lookup in a fake in-memory registry; a mkdir, a
//!    directory fsync and one commit per volume), 1 client, in interleaved rounds beside raw SQLite's
//!    single-row commit, the floor of a crash-safe create with nothing else (mkdir, directory fsync,
//!    raw commit), that floor behind a bare axum route, and the design's floor (the same route asking
//!    the registry over HTTP first, as every AddStorage must): medians of the rounds, and ratios taken
//!    round by round (this machine's fsync time drifts by tens of percent within minutes, so only
//!    figures measured side by side compare). Then 32 clients, and the rounds again on tmpfs
//!    (`/dev/shm`), where no fsync costs anything and only the software path is left.
//! 5. Where one AddStorage's time goes: each step it takes, timed alone, one at a time (HTTP round
//!    trip with a read, the registry look-up, one store commit, the local backend's create and its
//!    parts: the `mkdir`, the directory `fsync`, the path checks).
//! 6. ListStorage page latency over HTTP at 1 000, 10 000 and 100 000 volumes: first page, a page from the
//!    middle via `continue`, a 1000-item page, and a label-selector page.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::storage::ListParams;
use client::{ClientOptions, ServiceClient};
use domain::orchestrator::RegisterOrchestrator;
use domain::{OrchestratorKind, VolumePhase, VolumeProvisionerProfile};
use service_kit::Env;
use sqlx::sqlite::SqliteSynchronous;
use sqlx::{Connection, Executor};
use storage_ops::store::{Store, VolumeRow, now};

/// The binary's allocator, so the figures are those of the service as it runs: an add allocates a
/// few hundred times, so another allocator shows in them (glibc's malloc, measured: BENCHMARKS.md,
/// “Storage: AddStorage vs raw SQLite, ListStorage pages”).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../../tests/fake_registry/mod.rs"]
mod fake_registry;

mod breakdown;
mod floor;
mod listing;
mod sqlite;

use breakdown::*;
use floor::*;
use listing::*;
use sqlite::*;

struct Stack {
    storage: client::storage::Client,
    registry_url: String,
    ops: Arc<storage_ops::ops::Ops>,
    _servers: Vec<service_kit::testing::TestServer>,
}

async fn start_stack(dir: &Path) -> Stack {
    // The registry's API, faked in memory: this measures storage-ops, and keeps the crate from
    // linking the registry service.
    let registry_url = fake_registry::spawn().await;
    client::registry::Client::new(ServiceClient::new(&registry_url, ClientOptions::default()))
        .register(
            "disk",
            &RegisterOrchestrator {
                config: Some(
                    serde_json::json!({"basePath": dir.join("vols").display().to_string()}),
                ),
                default: Some(true),
                ..RegisterOrchestrator::new(OrchestratorKind::Local)
            },
        )
        .await
        .unwrap();
    let config = storage_ops::Config::from_env(
        &Env::default()
            .with("BERTH_LISTEN", "127.0.0.1:0")
            .with(
                "BERTH_STORAGE_OPS_DB",
                dir.join("storage.db").display().to_string(),
            )
            .with("BERTH_REGISTRY_URL", &registry_url)
            .with("BERTH_RECONCILE_INTERVAL", "1h")
            .with("BERTH_LOCAL_ROOTS", dir.display().to_string()),
    )
    .unwrap();
    let ops = storage_ops::ops(&config).await.unwrap();
    let server = service_kit::testing::spawn(storage_ops::router(&config, ops.clone())).await;
    Stack {
        storage: client::storage::Client::new(ServiceClient::new(
            &server.url,
            ClientOptions::default(),
        )),
        ops,
        registry_url,
        _servers: vec![server],
    }
}

/// One timed sequence of calls: calls/s, and each call's p50 and p99 in ms.
#[derive(Clone, Copy)]
struct Timed {
    rate: f64,
    p50: f64,
    p99: f64,
}

impl Timed {
    fn of(latencies: Vec<Duration>, started: Instant) -> Timed {
        let rate = latencies.len() as f64 / started.elapsed().as_secs_f64();
        let (p50, p99) = percentiles(latencies);
        Timed { rate, p50, p99 }
    }
}

/// AddStorage over HTTP from `clients` sequential clients, `total` volumes in all.
async fn adds(stack: &Stack, clients: usize, total: usize, tag: &str) -> Timed {
    let started = Instant::now();
    let per = total / clients;
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let storage = stack.storage.clone();
            let tag = tag.to_string();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per);
                for i in 0..per {
                    let sent = Instant::now();
                    let (_, created) = storage
                        .add(&VolumeProvisionerProfile {
                            name: format!("{tag}-{c:03}-{i:05}"),
                            namespace: Some("adds".into()),
                            capacity: "1Gi".into(),
                            ..Default::default()
                        })
                        .await
                        .unwrap();
                    latencies.push(sent.elapsed());
                    assert!(created);
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(total);
    for t in tasks {
        latencies.extend(t.await.unwrap());
    }
    Timed::of(latencies, started)
}

/// `total` calls of a blocking `step`, one after another, timed.
fn blocking_calls(total: usize, mut step: impl FnMut(usize)) -> Timed {
    let mut latencies = Vec::with_capacity(total);
    let started = Instant::now();
    for i in 0..total {
        let sent = Instant::now();
        step(i);
        latencies.push(sent.elapsed());
    }
    Timed::of(latencies, started)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// One client's AddStorage beside the raw commit and the floor, in `rounds` interleaved rounds of
/// `per` calls each (the first of each kind starts the round in turn), printed as medians: the
/// rate of each, and each rate's ratio to raw (and Berth's to each floor) taken round by round, so
/// a disk that speeds up or slows down between rounds moves all five together. Returns the raw
/// rate's median.
async fn one_client_rounds(stack: &Stack, dir: &Path, rounds: usize, per: usize) -> f64 {
    const KINDS: [&str; 5] = [
        "raw SQLite, one row a transaction (FULL)",
        "floor: mkdir, dir fsync, raw commit (no HTTP)",
        "floor over HTTP (bare axum route, no Berth)",
        "the same, asking the registry first (design)",
        "Berth AddStorage, 1 client",
    ];
    const BERTH: usize = KINDS.len() - 1;
    let mut raw = RawDb::open(&dir.join("raw-rounds.db"), "FULL");
    let mut floor = Floor::open(dir, "thread");
    let floor_http = FloorOverHttp::start(dir, None).await;
    let design_floor = FloorOverHttp::start(dir, Some(&stack.registry_url)).await;
    let mut timed: [Vec<Timed>; KINDS.len()] = Default::default();
    for round in 0..rounds {
        for k in 0..KINDS.len() {
            let kind = (round + k) % KINDS.len();
            let tag = format!("r{round}");
            let t = match kind {
                0 => blocking_calls(per, |i| raw.commit_one(&format!("{tag}-{i:05}"))),
                1 => blocking_calls(per, |i| floor.create(&format!("{tag}-{i:05}"))),
                2 => floor_http.creates(per, &tag).await,
                3 => design_floor.creates(per, &tag).await,
                _ => adds(stack, 1, per, &format!("one-{tag}")).await,
            };
            timed[kind].push(t);
        }
    }
    let ratio = |of: usize, to: usize| {
        median(
            timed[of]
                .iter()
                .zip(&timed[to])
                .map(|(a, b)| a.rate / b.rate)
                .collect(),
        )
    };
    for (kind, label) in KINDS.iter().enumerate() {
        let rate = median(timed[kind].iter().map(|t| t.rate).collect());
        let p50 = median(timed[kind].iter().map(|t| t.p50).collect());
        let p99 = median(timed[kind].iter().map(|t| t.p99).collect());
        let to_raw = if kind == 0 {
            "          ".to_string()
        } else {
            format!("{:>5.2}x raw", ratio(kind, 0))
        };
        println!("    {label:<46} {rate:>7.0}/s {to_raw}   p50 {p50:>5.2} ms   p99 {p99:>5.2} ms");
    }
    println!(
        "    Berth's 1-client add: {:.2}x the floor, {:.2}x the floor over HTTP, {:.2}x the design's floor",
        ratio(BERTH, 1),
        ratio(BERTH, 2),
        ratio(BERTH, 3)
    );
    let per_round = |of: usize| {
        timed[of]
            .iter()
            .zip(&timed[0])
            .map(|(a, b)| format!("{:.2}", a.rate / b.rate))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "    each round's ratio to raw: Berth {}; floor {}; over HTTP {}; design {}",
        per_round(BERTH),
        per_round(1),
        per_round(2),
        per_round(3)
    );
    median(timed[0].iter().map(|t| t.rate).collect())
}

#[tokio::main]
async fn main() {
    let root = std::env::var_os("BERTH_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(&root).unwrap();
    // For a profiler (`perf stat`, `perf record`): only 3000 one-client creates of one kind.
    if let Ok(kind) = std::env::var("BERTH_BENCH_PROFILE") {
        let stack = start_stack(dir.path()).await;
        let timed = match kind.as_str() {
            "berth" => adds(&stack, 1, 3000, "profile").await,
            "design" => {
                FloorOverHttp::start(dir.path(), Some(&stack.registry_url))
                    .await
                    .creates(3000, "profile")
                    .await
            }
            "bare" => {
                FloorOverHttp::start(dir.path(), None)
                    .await
                    .creates(3000, "profile")
                    .await
            }
            other => panic!("BERTH_BENCH_PROFILE: {other:?} is none of berth, design, bare"),
        };
        println!(
            "{kind}: 3000 creates, {:.0}/s, p50 {:.2} ms",
            timed.rate, timed.p50
        );
        return;
    }
    let total_adds: usize = std::env::var("BERTH_BENCH_ADDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    println!(
        "storage-ops benchmark in {} (WAL, synchronous=FULL)",
        dir.path().display()
    );

    // Each figure is the best of three rounds, the rounds interleaved, so a burst of someone else's
    // disk traffic does not land on one figure only.
    let mut best = [0f64; 7];
    for _ in 0..3 {
        let round = [
            raw_sqlite(dir.path(), 1, "FULL"),
            raw_sqlite(dir.path(), 64, "FULL"),
            sqlx_single(dir.path(), SqliteSynchronous::Full).await,
            store_inserts(dir.path(), 1).await,
            store_inserts(dir.path(), 64).await,
            raw_sqlite(dir.path(), 1, "NORMAL"),
            sqlx_single(dir.path(), SqliteSynchronous::Normal).await,
        ];
        for (b, r) in best.iter_mut().zip(round) {
            *b = b.max(r);
        }
    }
    println!("  SQLite inserts, {RAW_ROWS} rows of the volumes table (best of 3):");
    for (label, rate) in [
        "raw SQLite (rusqlite), FULL, 1 row per transaction",
        "raw SQLite (rusqlite), FULL, 64 rows per transaction",
        "sqlx, one connection, FULL, 1 row per transaction",
        "storage-ops store, FULL, 1 caller",
        "storage-ops store, FULL, 64 callers (group commit)",
        "raw SQLite (rusqlite), NORMAL, 1 row per transaction",
        "sqlx, one connection, NORMAL, 1 row per transaction",
    ]
    .into_iter()
    .zip(best)
    {
        println!("    {label:<56} {rate:>9.0} rows/s");
    }

    let stack = start_stack(dir.path()).await;
    let rounds: usize = std::env::var("BERTH_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let per = (total_adds / 2).clamp(10, 300);
    println!(
        "  AddStorage over HTTP, local backend, 1 client, beside raw SQLite and the floor of a crash-safe create ({rounds} interleaved rounds of {per} each; medians):"
    );
    let raw = one_client_rounds(&stack, dir.path(), rounds, per).await;
    let par = adds(&stack, 32, total_adds, "par").await;
    println!(
        "    {:<46} {:>7.0}/s {:>5.2}x raw   p50 {:>5.2} ms   p99 {:>5.2} ms",
        "Berth AddStorage, 32 clients (one run)",
        par.rate,
        par.rate / raw,
        par.p50,
        par.p99
    );
    // The same on tmpfs, where an fsync costs nothing: what is left is the software path (HTTP, the
    // read and the registry's answer, hand-overs between threads, the writer's statements), a figure
    // that does not drift with the disk as the ones above do.
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        let mem = tempfile::tempdir_in(shm).unwrap();
        let mem_stack = start_stack(mem.path()).await;
        println!(
            "  The same on tmpfs ({}: no disk, so no fsync cost; {} rounds):",
            mem.path().display(),
            rounds.div_ceil(2)
        );
        one_client_rounds(&mem_stack, mem.path(), rounds.div_ceil(2), per).await;
    }
    add_breakdown(&stack, dir.path(), &stack.registry_url).await;

    // A fresh database, so the table holds exactly the seeded volumes.
    let list_dir = dir.path().join("list");
    std::fs::create_dir_all(&list_dir).unwrap();
    let stack = start_stack(&list_dir).await;
    let store = stack.ops.store().clone();
    let mut seeded = 0;
    for size in [1_000, 10_000, 100_000] {
        let started = Instant::now();
        seed(&store, seeded, size).await;
        if seeded > 0 {
            println!(
                "  (seeded {} more rows through the store in {:.1} s)",
                size - seeded,
                started.elapsed().as_secs_f64()
            );
        }
        seeded = size;
        list_figures(&stack, size).await;
    }
}
