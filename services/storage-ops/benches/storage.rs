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

#[path = "../tests/fake_registry/mod.rs"]
mod fake_registry;

const SCHEMA: &str = include_str!("../migrations/0001_volumes.sql");
const RAW_ROWS: usize = 2000;

fn row(namespace: &str, name: &str, gold: bool) -> VolumeRow {
    VolumeRow {
        uid: uuid::Uuid::new_v4().to_string(),
        namespace: namespace.into(),
        name: name.into(),
        orchestrator: "disk".into(),
        kind: OrchestratorKind::Local,
        backend_config: serde_json::json!({"basePath": "/var/lib/berth/volumes"}),
        capacity: "1Gi".into(),
        capacity_bytes: 1 << 30,
        replicas: 1,
        labels: if gold {
            BTreeMap::from([("tier".into(), "gold".into())])
        } else {
            BTreeMap::from([("tier".into(), "bronze".into())])
        },
        parameters: BTreeMap::new(),
        spec_hash: "0".repeat(64),
        phase: VolumePhase::Ready,
        reason: "Provisioned".into(),
        message: String::new(),
        location: format!("/var/lib/berth/volumes/{namespace}/{name}"),
        created_at: now(),
        updated_at: now(),
        resource_version: 0,
    }
}

const INSERT: &str = "INSERT INTO volumes (uid, namespace, name, orchestrator, kind, backend_config, capacity, \
     capacity_bytes, replicas, labels, parameters, spec_hash, phase, reason, message, location, created_at, \
     updated_at, resource_version) VALUES (?1, ?2, ?3, 'disk', 'local', ?4, '1Gi', 1073741824, 1, ?5, '{}', ?6, \
     'Ready', 'Provisioned', '', ?7, ?8, ?8, ?9)";

/// One row of the volumes table through rusqlite, outside storage-ops' store (the raw baselines).
fn raw_insert(conn: &rusqlite::Connection, r: &VolumeRow, resource_version: i64) {
    conn.execute(
        INSERT,
        rusqlite::params![
            r.uid,
            r.namespace,
            r.name,
            r#"{"basePath":"/var/lib/berth/volumes"}"#,
            r#"{"tier":"bronze"}"#,
            r.spec_hash,
            r.location,
            r.created_at,
            resource_version
        ],
    )
    .unwrap();
}

fn raw_sqlite(dir: &Path, per_txn: usize, synchronous: &str) -> f64 {
    let path = dir.join(format!(
        "raw-{per_txn}-{synchronous}-{}.db",
        uuid::Uuid::new_v4()
    ));
    let conn = RawDb::open(&path, synchronous).conn;
    let started = Instant::now();
    let mut i = 0;
    while i < RAW_ROWS {
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        for _ in 0..per_txn {
            raw_insert(&conn, &row("bench", &format!("v{i:06}"), false), i as i64);
            i += 1;
        }
        conn.execute_batch("COMMIT").unwrap();
    }
    RAW_ROWS as f64 / started.elapsed().as_secs_f64()
}

async fn sqlx_single(dir: &Path, synchronous: SqliteSynchronous) -> f64 {
    let path = dir.join(format!("sqlx-{}.db", uuid::Uuid::new_v4()));
    // The store's settings (see `raw_sqlite`), through sqlx.
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .synchronous(synchronous)
        .busy_timeout(Duration::from_secs(5))
        .foreign_keys(true);
    let mut conn = sqlx::SqliteConnection::connect_with(&options)
        .await
        .unwrap();
    conn.execute(sqlx::AssertSqlSafe(SCHEMA)).await.unwrap();
    let config = r#"{"basePath":"/var/lib/berth/volumes"}"#;
    let started = Instant::now();
    for i in 0..RAW_ROWS {
        let r = row("bench", &format!("v{i:06}"), false);
        let mut tx = conn.begin().await.unwrap();
        sqlx::query(INSERT)
            .bind(&r.uid)
            .bind(&r.namespace)
            .bind(&r.name)
            .bind(config)
            .bind(r#"{"tier":"bronze"}"#)
            .bind(&r.spec_hash)
            .bind(&r.location)
            .bind(&r.created_at)
            .bind(i as i64)
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    RAW_ROWS as f64 / started.elapsed().as_secs_f64()
}

async fn store_inserts(dir: &Path, callers: usize) -> f64 {
    let store = Store::open(&dir.join(format!("store-{callers}-{}.db", uuid::Uuid::new_v4())))
        .await
        .unwrap();
    let started = Instant::now();
    let per = RAW_ROWS / callers;
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..per {
                    store
                        .insert(row("bench", &format!("c{c:03}-{i:06}"), false), None)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    (per * callers) as f64 / started.elapsed().as_secs_f64()
}

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

/// A raw connection with storage-ops' settings and schema (the raw baseline and the floor), with
/// the resource version it last wrote.
struct RawDb {
    conn: rusqlite::Connection,
    rv: i64,
}

impl RawDb {
    /// `synchronous` is `FULL` (storage-ops' own) or `NORMAL` (for comparison).
    fn open(path: &Path, synchronous: &str) -> RawDb {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = {synchronous}; PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = ON;"
        ))
        .unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        RawDb { conn, rv: 0 }
    }

    /// One single-row transaction, committed (so fsynced: FULL).
    fn commit_one(&mut self, name: &str) {
        self.rv += 1;
        let r = row("raw", name, false);
        self.conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        raw_insert(&self.conn, &r, self.rv);
        self.conn.execute_batch("COMMIT").unwrap();
    }
}

/// The floor of a crash-safe create, with nothing else: the object's mkdir, its directory's
/// fsync, then one raw single-row commit.
struct Floor {
    db: RawDb,
    objects: std::path::PathBuf,
}

impl Floor {
    fn open(dir: &Path, tag: &str) -> Floor {
        let objects = dir.join(format!("floor-{tag}"));
        std::fs::create_dir_all(&objects).unwrap();
        Floor {
            db: RawDb::open(&dir.join(format!("floor-{tag}.db")), "FULL"),
            objects,
        }
    }

    fn create(&mut self, name: &str) {
        std::fs::create_dir(self.objects.join(name)).unwrap();
        std::fs::File::open(&self.objects)
            .unwrap()
            .sync_all()
            .unwrap();
        self.db.commit_one(name);
    }
}

/// The state of a bare floor route: the floor, and for the design's floor the registry it asks.
struct FloorRoute {
    floor: std::sync::Mutex<Floor>,
    registry: Option<(reqwest::Client, String)>,
}

/// The floor route's handler: for the design's floor, first the registry's default orchestrator
/// (one GET, its JSON parsed), as every AddStorage asks it; then [`Floor::create`] on the blocking
/// pool.
async fn floor_create(
    axum::extract::State(route): axum::extract::State<Arc<FloorRoute>>,
    axum::Json(profile): axum::Json<VolumeProvisionerProfile>,
) -> (axum::http::StatusCode, axum::Json<serde_json::Value>) {
    if let Some((client, url)) = &route.registry {
        let orchestrator: serde_json::Value = client
            .get(url)
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(orchestrator["config"]["basePath"].is_string());
    }
    tokio::task::spawn_blocking(move || route.floor.lock().unwrap().create(&profile.name))
        .await
        .unwrap();
    (
        axum::http::StatusCode::CREATED,
        axum::Json(serde_json::json!({"created": true})),
    )
}

/// The floor of a durable create over HTTP, with no Berth code: a bare axum route (no middleware)
/// whose handler runs [`Floor::create`] on the blocking pool, called over keep-alive with
/// AddStorage's body. What any HTTP service doing a crash-safe create could reach on this machine;
/// with `registry`, what one that also asks a registry over HTTP first, as AddStorage must
/// (docs/design.md, “Storage ops API”), could reach.
struct FloorOverHttp {
    url: String,
    client: reqwest::Client,
}

impl FloorOverHttp {
    async fn start(dir: &Path, registry: Option<&str>) -> FloorOverHttp {
        let tag = if registry.is_some() { "design" } else { "http" };
        let route = Arc::new(FloorRoute {
            floor: std::sync::Mutex::new(Floor::open(dir, tag)),
            registry: registry.map(|url| {
                (
                    reqwest::Client::new(),
                    format!("{url}/v1/orchestrators:default"),
                )
            }),
        });
        let router = axum::Router::new()
            .route("/v1/volumes", axum::routing::post(floor_create))
            .with_state(route);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/volumes", listener.local_addr().unwrap());
        tokio::spawn(service_kit::serve(router, listener, std::future::pending()));
        FloorOverHttp {
            url,
            client: reqwest::Client::new(),
        }
    }

    /// `total` creates from one sequential client.
    async fn creates(&self, total: usize, tag: &str) -> Timed {
        let mut latencies = Vec::with_capacity(total);
        let started = Instant::now();
        for i in 0..total {
            let sent = Instant::now();
            let answer = self
                .client
                .post(&self.url)
                .json(&VolumeProvisionerProfile {
                    name: format!("{tag}-{i:05}"),
                    namespace: Some("adds".into()),
                    capacity: "1Gi".into(),
                    ..Default::default()
                })
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), reqwest::StatusCode::CREATED);
            answer.bytes().await.unwrap();
            latencies.push(sent.elapsed());
        }
        Timed::of(latencies, started)
    }
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

/// Mean and median of `rounds` timed runs of `step`, in microseconds.
async fn time_step<F, Fut>(rounds: usize, mut step: F) -> (f64, f64)
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let started = Instant::now();
        step(i).await;
        samples.push(started.elapsed());
    }
    let mean = samples.iter().sum::<Duration>().as_secs_f64() * 1e6 / rounds as f64;
    samples.sort();
    (mean, samples[rounds / 2].as_secs_f64() * 1e6)
}

/// The steps of one AddStorage, each timed alone (sequentially, one caller).
async fn add_breakdown(stack: &Stack, dir: &Path, registry_url: &str) {
    use storage_ops::backend::{Backend, ObjectRef, local::LocalBackend};
    const ROUNDS: usize = 300;
    println!(
        "  Where one AddStorage goes (one caller, each step alone, {ROUNDS} rounds; mean / median us):"
    );
    let print = |label: &str, (mean, median): (f64, f64)| {
        println!("    {label:<56} {mean:>8.0} / {median:>6.0} us");
    };
    let storage = stack.storage.clone();
    storage
        .add(&VolumeProvisionerProfile {
            name: "probe".into(),
            namespace: Some("breakdown".into()),
            capacity: "1Gi".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    print(
        "HTTP round trip + handler + one read (GET a volume)",
        time_step(ROUNDS, |_| {
            let storage = storage.clone();
            async move {
                storage.get("breakdown", "probe").await.unwrap();
            }
        })
        .await,
    );
    let registry =
        client::registry::Client::new(ServiceClient::new(registry_url, ClientOptions::default()));
    print(
        "registry: resolve the default orchestrator (HTTP)",
        time_step(ROUNDS, |_| {
            let registry = registry.clone();
            async move {
                registry.default_orchestrator().await.unwrap();
            }
        })
        .await,
    );
    let store = stack.ops.store().clone();
    let mut uids = Vec::with_capacity(ROUNDS);
    let inserted = time_step(ROUNDS, |i| {
        let store = store.clone();
        let mut r = row("breakdown-rows", &format!("r{i:05}"), false);
        r.phase = VolumePhase::Provisioning;
        uids.push(r.uid.clone());
        async move {
            store.insert(r, None).await.unwrap();
        }
    })
    .await;
    print("store: insert one row (one commit, fsync)", inserted);
    print(
        "store: set_status Ready (one commit, fsync)",
        time_step(ROUNDS, |i| {
            let store = store.clone();
            let uid = uids[i].clone();
            async move {
                store
                    .set_status(
                        &uid,
                        storage_ops::store::StatusUpdate {
                            phase: VolumePhase::Ready,
                            reason: "Provisioned".into(),
                            message: String::new(),
                            location: Some("/x".into()),
                        },
                    )
                    .await
                    .unwrap();
            }
        })
        .await,
    );
    let base = dir.join("vols");
    let backend = LocalBackend::new(
        &base.display().to_string(),
        vec![dir.display().to_string()].into(),
    );
    let object = |i: usize, ns: &str| ObjectRef {
        uid: uuid::Uuid::new_v4().to_string(),
        namespace: ns.into(),
        name: format!("b{i:05}"),
        capacity_bytes: 1 << 30,
        file: false,
    };
    print(
        "local backend: create (checks, mkdir, directory fsync)",
        time_step(ROUNDS, |i| {
            let (backend, v) = (backend.clone(), object(i, "breakdown-backend"));
            async move {
                backend.create(&v).await.unwrap();
            }
        })
        .await,
    );
    // The core of an add (no HTTP, no registry), both orders, on the same store and disk.
    let core_row = |i: usize, tag: &str| {
        let mut r = row("breakdown-core", &format!("{tag}{i:05}"), false);
        r.backend_config = serde_json::json!({"basePath": base.display().to_string()});
        r
    };
    print(
        "core, two commits: insert Provisioning, create, Ready",
        time_step(ROUNDS, |i| {
            let (store, backend) = (store.clone(), backend.clone());
            let mut r = core_row(i, "two");
            r.phase = VolumePhase::Provisioning;
            async move {
                let r = store.insert(r, None).await.unwrap();
                let v = r.object_ref();
                let location = backend.create(&v).await.unwrap();
                store
                    .set_status(
                        &r.uid,
                        storage_ops::store::StatusUpdate {
                            phase: VolumePhase::Ready,
                            reason: "Provisioned".into(),
                            message: String::new(),
                            location: Some(location),
                        },
                    )
                    .await
                    .unwrap();
            }
        })
        .await,
    );
    print(
        "core, in the writer: make, dir fsync, commit, mark",
        time_step(ROUNDS, |i| {
            let (store, backend) = (store.clone(), backend.clone());
            let r = core_row(i, "one");
            async move {
                let object = backend.new_object(&r.object_ref()).unwrap();
                store.insert_with_object(r, None, object).await.unwrap();
            }
        })
        .await,
    );
    let ns_dir = base.join("breakdown-raw");
    std::fs::create_dir_all(&ns_dir).unwrap();
    // The issue's floor for a crash-safe create, with nothing of Berth's in it: the object's mkdir and
    // its directory's fsync, then one raw single-row commit (rusqlite, FULL), in one thread.
    let mut floor = Floor::open(dir, "breakdown");
    print(
        "floor: mkdir, directory fsync, raw commit (no Berth code)",
        time_step(ROUNDS, |i| {
            floor.create(&format!("f{i:05}"));
            async {}
        })
        .await,
    );
    print(
        "  of which: mkdir alone (no fsync, no checks)",
        time_step(ROUNDS, |i| {
            let path = ns_dir.join(format!("m{i:05}"));
            async move {
                std::fs::create_dir(&path).unwrap();
            }
        })
        .await,
    );
    print(
        "  of which: mkdir then fsync of its directory",
        time_step(ROUNDS, |i| {
            let path = ns_dir.join(format!("f{i:05}"));
            let parent = ns_dir.clone();
            async move {
                std::fs::create_dir(&path).unwrap();
                std::fs::File::open(&parent).unwrap().sync_all().unwrap();
            }
        })
        .await,
    );
    print(
        "  of which: canonicalize the base and namespace paths",
        time_step(ROUNDS, |_| {
            let (base, ns) = (base.clone(), ns_dir.clone());
            async move {
                std::fs::canonicalize(&base).unwrap();
                std::fs::canonicalize(&ns).unwrap();
            }
        })
        .await,
    );
    print(
        "  of which: a spawn_blocking round trip",
        time_step(ROUNDS, |_| async {
            tokio::task::spawn_blocking(|| ()).await.unwrap();
        })
        .await,
    );
}

/// Seeds `ns` up to `target` rows (1 in 10 labelled gold), 256 callers at a time.
async fn seed(store: &Store, from: usize, target: usize) {
    let callers = 256;
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut i = from + c;
                while i < target {
                    store
                        .insert(
                            row("seeded", &format!("v{i:07}"), i.is_multiple_of(10)),
                            None,
                        )
                        .await
                        .unwrap();
                    i += callers;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (
        ms(samples[samples.len() / 2]),
        ms(samples[(samples.len() * 99 / 100).min(samples.len() - 1)]),
    )
}

async fn page_latency(stack: &Stack, label: &str, params: ListParams, rounds: usize) {
    // Untimed first: the first calls fill the readers' statement caches and the page cache, which
    // would otherwise land on whichever size is measured first.
    for _ in 0..rounds / 10 {
        stack.storage.list(&params).await.unwrap();
    }
    let mut samples = Vec::with_capacity(rounds);
    let mut items = 0;
    for _ in 0..rounds {
        let started = Instant::now();
        let page = stack.storage.list(&params).await.unwrap();
        samples.push(started.elapsed());
        items = page.items.len();
    }
    let (p50, p99) = percentiles(samples);
    println!("    {label:<44} {items:>5} items   p50 {p50:>7.2} ms   p99 {p99:>7.2} ms");
}

async fn list_figures(stack: &Stack, volumes: usize) {
    println!("  ListStorage at {volumes} volumes (namespace 'seeded'; HTTP, keep-alive):");
    // A token continues the list it was issued for: one for all namespaces, one for 'seeded'.
    let middle_name = format!("v{:07}", volumes / 2);
    let middle = stack.ops.encode_continue(
        "seeded",
        &middle_name,
        &storage_ops::ops::list_query(None, None),
    );
    let middle_seeded = stack.ops.encode_continue(
        "seeded",
        &middle_name,
        &storage_ops::ops::list_query(Some("seeded"), None),
    );
    page_latency(stack, "first page, limit 100", ListParams::default(), 200).await;
    page_latency(
        stack,
        "middle page via continue, limit 100",
        ListParams {
            continue_token: Some(middle.clone()),
            ..Default::default()
        },
        200,
    )
    .await;
    page_latency(
        stack,
        "namespace=seeded, middle, limit 100",
        ListParams {
            namespace: Some("seeded".into()),
            continue_token: Some(middle_seeded),
            ..Default::default()
        },
        200,
    )
    .await;
    page_latency(
        stack,
        "first page, limit 1000",
        ListParams {
            limit: Some(1000),
            ..Default::default()
        },
        50,
    )
    .await;
    page_latency(
        stack,
        "labelSelector=tier=gold (1 in 10), limit 100",
        ListParams {
            label_selector: Some("tier=gold".into()),
            ..Default::default()
        },
        100,
    )
    .await;
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
