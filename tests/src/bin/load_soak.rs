//! The load soak: the stack under a steady 80 % of the gateway's measured capacity for ten minutes,
//! with mixed operations, makes no errors beyond the rate limit, does not grow in memory after
//! warm-up, and keeps its `/metrics` pages bounded.
//!
//! The stack runs as separate processes (`berth_tests::processes`), the gateway's rate limit set far
//! above anything this machine can send (so the limiter runs on every call but is never the
//! bottleneck). A few Alicloud machines are made on the ECS emulator first. Then:
//! - capacity: the mix at full speed from 32 keep-alive connections (a closed loop) for
//!   `--capacity-seconds`; the completed requests per second are the gateway's capacity here (the
//!   load comes from this machine too, so it is the capacity of the stack and its caller together);
//! - soak: the same mix at `--fraction` of that rate for `--seconds`, paced open-loop: every 2 ms
//!   the pacer dispatches the operations now due to a bounded pool of 64 workers. An operation whose
//!   due time finds every worker busy is dropped and counted, and one dispatched over 100 ms after
//!   it was due is counted late: the pacer never slows down to suit the stack, so a stack that cannot
//!   keep up shows as a missed rate, not as a gentler test;
//! - every 10 s: each process's RSS (`VmRSS`) and open file descriptors, and the size in bytes and
//!   series of each service's `/metrics` page (the emulator has none).
//!
//! The mix, per 100 operations: 15 `GET /v1/kinds`, 15 `GET /v1/orchestrators`, 10
//! `GET /v1/volumes?limit=100`, 20 reads of one volume, 10 MCM GetMachineStatus and 6 ListMachines
//! (machine driver → emulator), 12 AddStorage and 12 DeleteStorage on the `local` orchestrator (in
//! the stack's temporary data directory). Each volume name is new; at most 200 volumes live at once
//! (an AddStorage beyond that deletes instead, a DeleteStorage with none idle adds), and a volume
//! is read or deleted by one worker at a time, so every answer has one right status: 2xx.
//!
//! Warm-up is the soak's first third, at least 60 s, at most half the run (see [`warm_up`] for
//! why). Checks, a row each:
//! - errors beyond the rate limit, in the capacity run and in the soak: any answer but a 2xx or a
//!   429 with `Retry-After`, and any call with no answer within 10 s;
//! - memory, per Berth service: RSS at the end less than 20 % above RSS in the first sample after
//!   warm-up (the emulator's is shown, not judged: it keeps every request's signature nonce for 30
//!   minutes to refuse replays, as ECS does, so it grows with the calls during a soak by design);
//! - `/metrics`, per service: bytes at the end at most 20 % above the first sample after warm-up;
//!   and no line of any page names a volume this run made (its name or uid): labels must not grow
//!   with the volumes;
//! - load: the soak's completed operations per second at least 95 % of its target rate.
//!
//! ```text
//! load-soak [--bin-dir DIR] [--seconds N] [--capacity-seconds N] [--fraction F]
//! ```
//!
//! Defaults: 600 s, 10 s, 0.8. Prints a line per sample, a summary (target and achieved rates, ops
//! by kind with p50/p99 latency, statuses, RSS and `/metrics` at warm-up and end), a row per check,
//! and closes with `load: N passed, N failed`.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use berth_tests::processes::{Credentials, ProcessStack, Service};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

const ADMIN_TOKEN: &str = "load-soak-admin-token";
const INTERNAL_TOKEN: &str = "load-soak-internal-credential";
const ECS_KEY_ID: &str = "LTAIloadsoak";
const ECS_KEY_SECRET: &str = "load-soak-secret";
const NAMESPACE: &str = "soak";
/// Every volume's name starts so: a `/metrics` line holding it names a volume.
const VOLUME_PREFIX: &str = "soak-vol-";
/// Volumes alive at once, at most.
const LIVE_VOLUMES: usize = 200;
/// Machines made before the load, for GetMachineStatus to read.
const MACHINES: usize = 4;
/// Connections of the capacity run.
const CONNECTIONS: usize = 32;
/// Workers of the soak: twice the capacity run's connections, so a passing hiccup is absorbed and
/// only a stack that really falls behind leaves operations undispatched.
const POOL: usize = 64;
/// How often the pacer dispatches what is due.
const PACER_TICK: Duration = Duration::from_millis(2);
/// An operation dispatched this long after its due time is late.
const LATE: Duration = Duration::from_millis(100);
/// One call's limit: past it the call counts as an error with no answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// Growth allowed after warm-up, of RSS and of `/metrics`.
const GROWTH: f64 = 0.20;
/// The share of the target rate the soak must reach.
const RATE_FLOOR: f64 = 0.95;

#[derive(Debug, Clone)]
struct Options {
    bin_dir: PathBuf,
    seconds: u64,
    capacity_seconds: u64,
    fraction: f64,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        bin_dir: std::env::current_exe()
            .map_err(|e| e.to_string())?
            .parent()
            .ok_or("this binary has no directory")?
            .to_path_buf(),
        seconds: 600,
        capacity_seconds: 10,
        fraction: 0.8,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--bin-dir" => o.bin_dir = PathBuf::from(value()?),
            "--seconds" => o.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--capacity-seconds" => {
                o.capacity_seconds = value()?
                    .parse()
                    .map_err(|e| format!("--capacity-seconds: {e}"))?
            }
            "--fraction" => {
                o.fraction = value()?.parse().map_err(|e| format!("--fraction: {e}"))?
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if o.seconds == 0 || o.capacity_seconds == 0 {
        return Err("--seconds and --capacity-seconds must be at least 1".into());
    }
    if !(o.fraction > 0.0 && o.fraction <= 1.0) {
        return Err("--fraction must be in (0, 1]".into());
    }
    Ok(o)
}

/// Warm-up: a third of the run (200 s of the long form's 600), at least 60 s, at most half of it
/// (so a short run still has samples after it to compare). A third, because that is how long the
/// stack takes to reach its working size under this load: storage-ops' RSS rises while each of its
/// SQLite connections fills a page cache of up to 2 MiB as the table and its indexes reach their
/// steady size, and the gateway's while its connections settle, then both level off. Measured from
/// 60 s, that filling read as a leak (the figures of the soak that showed it: RELIABILITY.md,
/// “Load”).
fn warm_up(run: Duration) -> Duration {
    Duration::from_secs(60).max(run / 3).min(run / 2)
}

/// One kind of operation of the mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Kinds,
    Orchestrators,
    ListVolumes,
    ReadVolume,
    MachineStatus,
    ListMachines,
    AddVolume,
    DeleteVolume,
}

impl Kind {
    /// The mix: each kind and its operations per 100.
    const MIX: [(Kind, usize); 8] = [
        (Kind::Kinds, 15),
        (Kind::Orchestrators, 15),
        (Kind::ListVolumes, 10),
        (Kind::ReadVolume, 20),
        (Kind::MachineStatus, 10),
        (Kind::ListMachines, 6),
        (Kind::AddVolume, 12),
        (Kind::DeleteVolume, 12),
    ];

    fn label(self) -> &'static str {
        match self {
            Kind::Kinds => "GET /v1/kinds",
            Kind::Orchestrators => "GET /v1/orchestrators",
            Kind::ListVolumes => "GET /v1/volumes?limit=100",
            Kind::ReadVolume => "GET /v1/volumes/{ns}/{name}",
            Kind::MachineStatus => "POST /v1/machines:status",
            Kind::ListMachines => "POST /v1/machines:list",
            Kind::AddVolume => "POST /v1/volumes",
            Kind::DeleteVolume => "DELETE /v1/volumes/{ns}/{name}",
        }
    }

    /// The mix as a sequence of 100, shuffled with a fixed seed: every window of 100 operations
    /// holds the exact proportions, without the kinds coming in runs.
    fn sequence() -> Vec<Kind> {
        let mut s: Vec<Kind> = Kind::MIX
            .iter()
            .flat_map(|(k, n)| std::iter::repeat_n(*k, *n))
            .collect();
        s.shuffle(&mut StdRng::seed_from_u64(18));
        s
    }
}

/// What one kind of operation saw.
#[derive(Default)]
struct KindTally {
    ops: u64,
    errors: u64,
    latencies_us: Vec<u32>,
}

/// What one phase (the capacity run, the soak) saw.
#[derive(Default)]
struct Tally {
    by_kind: BTreeMap<Kind, KindTally>,
    /// By status; 0 is no answer.
    statuses: BTreeMap<u16, u64>,
    /// 429s with `Retry-After`: the rate limit, allowed.
    limited: u64,
    errors: u64,
    /// The first errors, to show.
    examples: Vec<String>,
}

impl Tally {
    fn ops(&self) -> u64 {
        self.by_kind.values().map(|k| k.ops).sum()
    }

    fn latencies(&self) -> Vec<u32> {
        let mut all: Vec<u32> = self
            .by_kind
            .values()
            .flat_map(|k| k.latencies_us.iter().copied())
            .collect();
        all.sort_unstable();
        all
    }
}

/// The `p`th percentile of sorted microseconds, in milliseconds.
fn percentile_ms(sorted: &[u32], p: usize) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = (sorted.len() * p / 100).min(sorted.len() - 1);
    f64::from(sorted[i]) / 1000.0
}

/// The volumes alive: idle ones (free to read or delete) and how many exist or are being made.
#[derive(Default)]
struct Live {
    idle: VecDeque<String>,
    total: usize,
}

/// A write the mix asked for, as the live volumes allow it.
enum Write {
    Add(String),
    Delete(String),
    Neither,
}

struct Driver {
    http: reqwest::Client,
    gateway: String,
    sequence: Vec<Kind>,
    next_op: AtomicU64,
    /// Operations answered (or given up on), for the rate between samples.
    completed: AtomicU64,
    next_volume: AtomicU64,
    live: std::sync::Mutex<Live>,
    /// Names and uids of every volume made, for the `/metrics` check.
    made_uids: std::sync::Mutex<HashSet<String>>,
    machines: Vec<Value>,
    list_machines: Value,
    tally: std::sync::Mutex<Tally>,
}

impl Driver {
    fn new(gateway: String) -> Result<Driver, String> {
        let http = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            // Below the gateway's 30 s idle limit: a pooled connection is never taken up just as
            // the gateway closes it, which would be this client's error, not the stack's.
            .pool_idle_timeout(Duration::from_secs(20))
            .build()
            .map_err(|e| e.to_string())?;
        let machines: Vec<Value> = (0..MACHINES)
            .map(|i| {
                let name = format!("soak-machine-{i}");
                berth_tests::alicloud_machine_request(&berth_tests::AlicloudMachine {
                    name: &name,
                    uid: &format!("uid-{name}"),
                    cluster: "shoot--soak",
                    class: "soak",
                    key_id: ECS_KEY_ID,
                    key_secret: ECS_KEY_SECRET,
                    user_data: "#!/bin/sh\necho soak\n",
                })
            })
            .collect();
        let list_machines = json!({
            "machineClass": machines[0]["machineClass"],
            "secret": machines[0]["secret"],
        });
        Ok(Driver {
            http,
            gateway,
            sequence: Kind::sequence(),
            next_op: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            next_volume: AtomicU64::new(0),
            live: std::sync::Mutex::new(Live::default()),
            made_uids: std::sync::Mutex::new(HashSet::new()),
            machines,
            list_machines,
            tally: std::sync::Mutex::new(Tally::default()),
        })
    }

    /// The tally so far, and a fresh one for the next phase.
    fn take_tally(&self) -> Tally {
        std::mem::take(&mut *self.tally.lock().expect("tally"))
    }

    /// Sends one call, holds its answer to the rule (2xx, or 429 with `Retry-After`) and records
    /// it under `kind`. Returns the body of a 2xx.
    async fn call(
        &self,
        kind: Kind,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Option<Value> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.gateway))
            .bearer_auth(ADMIN_TOKEN);
        if let Some(body) = body {
            request = request.json(body);
        }
        let started = Instant::now();
        let answer = async {
            let response = request.send().await?;
            let status = response.status().as_u16();
            let retry_after = response.headers().contains_key("retry-after");
            // The whole body is read, so the connection goes back to the pool and the latency is
            // the caller's.
            let bytes = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, retry_after, bytes))
        }
        .await;
        let elapsed = started.elapsed();
        self.completed.fetch_add(1, Ordering::Relaxed);
        let (status, error, body) = match answer {
            Ok((status, _, bytes)) if (200..300).contains(&status) => {
                (status, None, serde_json::from_slice(&bytes).ok())
            }
            Ok((429, true, _)) => (429, None, None),
            Ok((status, retry_after, bytes)) => {
                let problem: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let why = if status == 429 && !retry_after {
                    "429 without Retry-After".to_string()
                } else {
                    format!("{status} {}", problem["detail"].as_str().unwrap_or(""))
                };
                (status, Some(format!("{}: {why}", kind.label())), None)
            }
            Err(e) => (
                0,
                Some(format!(
                    "{}: no answer after {elapsed:.1?} ({e})",
                    kind.label()
                )),
                None,
            ),
        };
        let mut t = self.tally.lock().expect("tally");
        let k = t.by_kind.entry(kind).or_default();
        k.ops += 1;
        k.latencies_us
            .push(u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX));
        if error.is_some() {
            k.errors += 1;
        }
        *t.statuses.entry(status).or_default() += 1;
        match error {
            Some(e) => {
                t.errors += 1;
                if t.examples.len() < 20 {
                    t.examples.push(e);
                }
            }
            None if status == 429 => t.limited += 1,
            None => {}
        }
        body
    }

    async fn get(&self, kind: Kind, path: &str) -> Option<Value> {
        self.call(kind, reqwest::Method::GET, path, None).await
    }

    /// The next operation of the mix.
    async fn one(&self) {
        let n = self.next_op.fetch_add(1, Ordering::Relaxed);
        let kind = self.sequence[(n % self.sequence.len() as u64) as usize];
        match kind {
            Kind::Kinds => {
                self.get(kind, "/v1/kinds").await;
            }
            Kind::Orchestrators => {
                self.get(kind, "/v1/orchestrators").await;
            }
            Kind::ListVolumes => {
                self.get(kind, "/v1/volumes?limit=100").await;
            }
            Kind::ReadVolume => {
                // Taken from the idle ones and put back after: no delete can race the read.
                let name = self.live.lock().expect("live").idle.pop_front();
                match name {
                    Some(name) => {
                        self.get(kind, &format!("/v1/volumes/{NAMESPACE}/{name}"))
                            .await;
                        self.live.lock().expect("live").idle.push_back(name);
                    }
                    None => {
                        self.get(Kind::Kinds, "/v1/kinds").await;
                    }
                }
            }
            Kind::MachineStatus => {
                let machine = &self.machines[(n % MACHINES as u64) as usize];
                self.call(
                    kind,
                    reqwest::Method::POST,
                    "/v1/machines:status",
                    Some(machine),
                )
                .await;
            }
            Kind::ListMachines => {
                self.call(
                    kind,
                    reqwest::Method::POST,
                    "/v1/machines:list",
                    Some(&self.list_machines),
                )
                .await;
            }
            Kind::AddVolume | Kind::DeleteVolume => match self.choose(kind == Kind::AddVolume) {
                Write::Add(name) => self.add(name).await,
                Write::Delete(name) => self.delete(name).await,
                Write::Neither => {
                    self.get(Kind::Kinds, "/v1/kinds").await;
                }
            },
        }
    }

    /// What a write becomes: an add beyond the live limit is a delete, a delete with no idle
    /// volume an add.
    fn choose(&self, add: bool) -> Write {
        let mut live = self.live.lock().expect("live");
        let can_add = live.total < LIVE_VOLUMES;
        if can_add && (add || live.idle.is_empty()) {
            live.total += 1;
            let n = self.next_volume.fetch_add(1, Ordering::Relaxed);
            return Write::Add(format!("{VOLUME_PREFIX}{n}"));
        }
        match live.idle.pop_front() {
            Some(name) => Write::Delete(name),
            None => Write::Neither,
        }
    }

    async fn add(&self, name: String) {
        let body = json!({"namespace": NAMESPACE, "name": name, "capacity": "1Mi"});
        let made = self
            .call(
                Kind::AddVolume,
                reqwest::Method::POST,
                "/v1/volumes",
                Some(&body),
            )
            .await;
        match made {
            Some(volume) => {
                if let Some(uid) = volume["metadata"]["uid"].as_str() {
                    self.made_uids.lock().expect("uids").insert(uid.to_string());
                }
                self.live.lock().expect("live").idle.push_back(name);
            }
            None => self.live.lock().expect("live").total -= 1,
        }
    }

    async fn delete(&self, name: String) {
        let deleted = self
            .call(
                Kind::DeleteVolume,
                reqwest::Method::DELETE,
                &format!("/v1/volumes/{NAMESPACE}/{name}"),
                None,
            )
            .await;
        // A failed delete leaves the volume counted (it may still be there): an error either way.
        if deleted.is_some() {
            self.live.lock().expect("live").total -= 1;
        }
    }

    /// Makes the machines GetMachineStatus reads, and waits until each is Running.
    async fn make_machines(&self) -> Result<(), String> {
        for machine in &self.machines {
            let name = &machine["machine"]["metadata"]["name"];
            let started = Instant::now();
            // Created, then Running (the status call succeeds only then), within 30 s in all.
            for (verb, what) in [("create", "create answered"), ("status", "status still")] {
                loop {
                    let r = self
                        .http
                        .post(format!("{}/v1/machines:{verb}", self.gateway))
                        .bearer_auth(ADMIN_TOKEN)
                        .json(machine)
                        .send()
                        .await
                        .map_err(|e| format!("machine {name}, {verb}: {e}"))?;
                    if r.status().is_success() {
                        break;
                    }
                    if started.elapsed() > Duration::from_secs(30) {
                        return Err(format!("machine {name}: {what} {} after 30 s", r.status()));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        Ok(())
    }
}

/// The capacity run: `CONNECTIONS` callers, each sending the next operation as soon as the last
/// was answered. Returns completed operations per second.
async fn capacity(driver: &Arc<Driver>, run: Duration) -> f64 {
    let started = Instant::now();
    let callers: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let driver = driver.clone();
            tokio::spawn(async move {
                while started.elapsed() < run {
                    driver.one().await;
                }
            })
        })
        .collect();
    for c in callers {
        let _ = c.await;
    }
    let ops = driver.tally.lock().expect("tally").ops();
    ops as f64 / started.elapsed().as_secs_f64()
}

/// How the pacer did.
#[derive(Default)]
struct Pace {
    dispatched: u64,
    /// Due when every worker was busy: not sent.
    dropped: u64,
    /// Dispatched over `LATE` after their due time.
    late: u64,
    elapsed: Duration,
}

/// The soak's pacer: operation `n` is due at `n / rate` seconds; every `PACER_TICK` everything due
/// by now goes to a free worker, or is dropped when none is free.
async fn soak(driver: &Arc<Driver>, rate: f64, run: Duration) -> Pace {
    let workers = Arc::new(Semaphore::new(POOL));
    let started = Instant::now();
    let mut tick = tokio::time::interval(PACER_TICK);
    // The due count comes from the clock, so a missed tick is caught up on the next one.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut p = Pace::default();
    loop {
        tick.tick().await;
        let now = started.elapsed();
        if now >= run {
            break;
        }
        let due = (now.as_secs_f64() * rate) as u64;
        while p.dispatched + p.dropped < due {
            let n = p.dispatched + p.dropped;
            if now.as_secs_f64() - n as f64 / rate > LATE.as_secs_f64() {
                p.late += 1;
            }
            match workers.clone().try_acquire_owned() {
                Ok(worker) => {
                    let driver = driver.clone();
                    tokio::spawn(async move {
                        driver.one().await;
                        drop(worker);
                    });
                    p.dispatched += 1;
                }
                Err(_) => p.dropped += 1,
            }
        }
    }
    p.elapsed = started.elapsed();
    // The operations still running finish before the tally is read.
    let _ = workers.acquire_many(POOL as u32).await;
    p
}

/// One service's `/metrics` page: bytes, series (lines that are not comments).
#[derive(Debug, Clone, Copy)]
struct Page {
    bytes: usize,
    series: usize,
}

/// What a sample saw.
struct Sample {
    at: Duration,
    /// Operations completed since the soak began.
    completed: u64,
    /// Operations per second since the previous sample.
    rate: f64,
    /// `VmRSS` in KiB; `None` when the process is gone.
    rss: BTreeMap<Service, Option<u64>>,
    /// Open file descriptors (sockets, files): shown beside RSS, since a leak of either shows there.
    fds: BTreeMap<Service, Option<usize>>,
    metrics: BTreeMap<Service, Option<Page>>,
}

/// `VmRSS` and `VmHWM` of a process, in KiB.
fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

struct Sampler {
    http: reqwest::Client,
    pids: BTreeMap<Service, u32>,
    /// Every service with a `/metrics` page, and its URL.
    pages: Vec<(Service, String)>,
}

impl Sampler {
    /// One sample; also returns the pages' text.
    async fn sample(
        &self,
        at: Duration,
        completed: u64,
        rate: f64,
    ) -> (Sample, Vec<(Service, Result<String, String>)>) {
        let rss = Service::ALL
            .into_iter()
            .map(|s| {
                (
                    s,
                    self.pids.get(&s).and_then(|p| memory_kib(*p)).map(|m| m.0),
                )
            })
            .collect();
        let fds = Service::ALL
            .into_iter()
            .map(|s| {
                let count = self.pids.get(&s).and_then(|p| {
                    std::fs::read_dir(format!("/proc/{p}/fd"))
                        .ok()
                        .map(Iterator::count)
                });
                (s, count)
            })
            .collect();
        let mut metrics = BTreeMap::new();
        let mut texts = Vec::new();
        for (s, url) in &self.pages {
            let text = async {
                let r = self
                    .http
                    .get(format!("{url}/metrics"))
                    // The gateway's page needs a cluster-wide metrics:read token; the services'
                    // ignore it.
                    .bearer_auth(ADMIN_TOKEN)
                    .timeout(CALL_TIMEOUT)
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                if !r.status().is_success() {
                    return Err(format!("/metrics answered {}", r.status()));
                }
                r.text().await.map_err(|e| e.to_string())
            }
            .await;
            metrics.insert(
                *s,
                text.as_ref().ok().map(|t| Page {
                    bytes: t.len(),
                    series: t
                        .lines()
                        .filter(|l| !l.is_empty() && !l.starts_with('#'))
                        .count(),
                }),
            );
            texts.push((*s, text));
        }
        (
            Sample {
                at,
                completed,
                rate,
                rss,
                fds,
                metrics,
            },
            texts,
        )
    }
}

fn mib(kib: Option<u64>) -> String {
    kib.map_or("gone".into(), |k| format!("{:.1}", k as f64 / 1024.0))
}

fn bytes(page: Option<Page>) -> String {
    page.map_or("none".into(), |p| p.bytes.to_string())
}

fn print_sample(s: &Sample) {
    print!("{:>5} {:>8.1}", s.at.as_secs(), s.rate);
    for svc in Service::ALL {
        print!(" {:>6}", mib(s.rss[&svc]));
    }
    for svc in Service::ALL.into_iter().filter(|s| *s != Service::Emulator) {
        print!(" {:>8}", bytes(s.metrics[&svc]));
    }
    println!();
}

/// Lines of `text` naming a volume this run made: its name (all share the prefix) or its uid as a
/// label value.
fn naming_volumes(text: &str, uids: &HashSet<String>) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.contains(VOLUME_PREFIX)
                || l.split('"')
                    .skip(1)
                    .step_by(2)
                    .any(|value| uids.contains(value))
        })
        .map(str::to_string)
        .collect()
}

/// The checks' table.
#[derive(Default)]
struct Report {
    passed: usize,
    failed: usize,
}

impl Report {
    fn row(&mut self, check: &str, measured: &str, limit: &str, ok: bool) {
        println!(
            "{check:<40} {measured:>44} {limit:>7}  {}",
            if ok { "passed" } else { "FAILED" }
        );
        if ok {
            self.passed += 1;
        } else {
            self.failed += 1;
        }
    }
}

fn growth(from: f64, to: f64) -> f64 {
    if from > 0.0 { to / from - 1.0 } else { 0.0 }
}

fn print_tally(phase: &str, t: &Tally) {
    println!(
        "{phase}: {:<32} {:>9} {:>7} {:>9} {:>9}",
        "operation", "ops", "errors", "p50 ms", "p99 ms"
    );
    for (kind, k) in &t.by_kind {
        let mut l = k.latencies_us.clone();
        l.sort_unstable();
        println!(
            "{phase}: {:<32} {:>9} {:>7} {:>9.2} {:>9.2}",
            kind.label(),
            k.ops,
            k.errors,
            percentile_ms(&l, 50),
            percentile_ms(&l, 99)
        );
    }
    let all = t.latencies();
    println!(
        "{phase}: {:<32} {:>9} {:>7} {:>9.2} {:>9.2}",
        "all",
        t.ops(),
        t.errors,
        percentile_ms(&all, 50),
        percentile_ms(&all, 99)
    );
    let statuses: Vec<String> = t
        .statuses
        .iter()
        .map(|(s, n)| {
            if *s == 0 {
                format!("no answer {n}")
            } else {
                format!("{s} {n}")
            }
        })
        .collect();
    println!(
        "{phase}: statuses {} (429 with Retry-After: {})",
        statuses.join(", "),
        t.limited
    );
    for e in t.examples.iter().take(10) {
        println!("      {e}");
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("load-soak: {e}");
            eprintln!(
                "usage: load-soak [--bin-dir DIR] [--seconds N] [--capacity-seconds N] [--fraction F]"
            );
            return std::process::ExitCode::from(2);
        }
    };
    if let Err(e) = berth_tests::processes::check_built("load-soak", &o.bin_dir) {
        eprintln!("{e}");
        return std::process::ExitCode::from(2);
    }
    let data = match tempfile::Builder::new().prefix("berth-load-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("load-soak: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let credentials = Credentials {
        admin_token: ADMIN_TOKEN.into(),
        internal_token: INTERNAL_TOKEN.into(),
        ecs_key_id: ECS_KEY_ID.into(),
        ecs_key_secret: ECS_KEY_SECRET.into(),
    };
    // The limiters on, as in production, but far above what one machine can send: a 429 here
    // would measure the settings, not the stack (the in-flight cap above the pool's calls).
    let settings = [
        (Service::Gateway, "BERTH_RATE_LIMIT_RPS", "1000000"),
        (Service::Gateway, "BERTH_TOKEN_MAX_IN_FLIGHT", "100000"),
    ];
    let mut stack =
        match ProcessStack::start(&o.bin_dir, data.path(), &credentials, &settings).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("load-soak: {e}");
                return std::process::ExitCode::from(2);
            }
        };
    let outcome = run(&o, &stack).await;
    stack.stop().await;
    match outcome {
        Ok(report) => {
            if report.failed > 0 {
                let kept = data.keep();
                eprintln!("load-soak: kept {} (logs of every service)", kept.display());
            }
            // The last line, which tests/reliability/run.sh tallies.
            println!("load: {} passed, {} failed", report.passed, report.failed);
            if report.failed == 0 {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("load-soak: {e}");
            let kept = data.keep();
            eprintln!("load-soak: kept {} (logs of every service)", kept.display());
            std::process::ExitCode::from(2)
        }
    }
}

/// Everything between the stack's start and its stop.
async fn run(o: &Options, stack: &ProcessStack) -> Result<Report, String> {
    let pids = stack.pids();
    if let Some(s) = Service::ALL.into_iter().find(|s| !pids.contains_key(s)) {
        return Err(format!("{} is not running", s.binary()));
    }
    let sampler = Sampler {
        http: reqwest::Client::new(),
        pids,
        pages: stack
            .urls()
            .into_iter()
            .filter(|(s, _)| *s != Service::Emulator)
            .collect(),
    };
    let driver = Arc::new(Driver::new(stack.gateway.clone())?);
    driver.make_machines().await?;
    // One scrape first: a page's own route is recorded after it is rendered, so the first scrape
    // adds its series to the next page, which would otherwise count as growth after warm-up.
    sampler.sample(Duration::ZERO, 0, 0.0).await;

    let soak_run = Duration::from_secs(o.seconds);
    let warm = warm_up(soak_run);
    println!(
        "== load suite: {} s at {:.0} % of the measured gateway capacity, mixed operations",
        o.seconds,
        o.fraction * 100.0
    );
    let capacity_rate = capacity(&driver, Duration::from_secs(o.capacity_seconds)).await;
    let capacity_tally = driver.take_tally();
    let target = capacity_rate * o.fraction;
    println!(
        "capacity: {:.1} operations/s over {} s from {CONNECTIONS} connections; soak target {target:.1}/s from a pool of {POOL}, warm-up {} s",
        capacity_rate,
        o.capacity_seconds,
        warm.as_secs()
    );
    println!(
        "{:>5} {:>8} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "t s",
        "ops/s",
        "ecs",
        "reg",
        "stor",
        "mdrv",
        "mctl",
        "gw",
        "reg",
        "stor",
        "mdrv",
        "mctl",
        "gw"
    );
    println!(
        "{:>5} {:>8} {:^41} {:^44}",
        "", "", "RSS MiB", "/metrics bytes"
    );

    // The sampler runs beside the pacer, every SAMPLE_EVERY from the soak's start.
    let sampler = Arc::new(sampler);
    let completed_before = driver.completed.load(Ordering::Relaxed);
    let sampling = {
        let (sampler, driver) = (sampler.clone(), driver.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let mut samples: Vec<Sample> = Vec::new();
            let mut tick =
                tokio::time::interval_at(tokio::time::Instant::now() + SAMPLE_EVERY, SAMPLE_EVERY);
            loop {
                tick.tick().await;
                let at = started.elapsed();
                // The last one is the end sample, taken once the soak is over.
                if at + Duration::from_secs(1) >= soak_run {
                    return samples;
                }
                let completed = driver.completed.load(Ordering::Relaxed) - completed_before;
                let (last_completed, last_at) = samples
                    .last()
                    .map_or((0, Duration::ZERO), |s| (s.completed, s.at));
                let rate = (completed - last_completed) as f64 / (at - last_at).as_secs_f64();
                let (sample, _) = sampler.sample(at, completed, rate).await;
                print_sample(&sample);
                samples.push(sample);
            }
        })
    };
    let pace = soak(&driver, target, soak_run).await;
    let samples = sampling
        .await
        .map_err(|e| format!("the sampler panicked: {e}"))?;
    let soak_tally = driver.take_tally();
    let achieved = soak_tally.ops() as f64 / pace.elapsed.as_secs_f64();
    let (last_completed, last_at) = samples
        .last()
        .map_or((0, Duration::ZERO), |s| (s.completed, s.at));
    let completed = driver.completed.load(Ordering::Relaxed) - completed_before;
    let end_rate =
        (completed - last_completed) as f64 / (pace.elapsed - last_at).as_secs_f64().max(1e-3);
    let (end, texts) = sampler.sample(pace.elapsed, completed, end_rate).await;
    print_sample(&end);
    let hwm: BTreeMap<Service, Option<u64>> = Service::ALL
        .into_iter()
        .map(|s| {
            (
                s,
                sampler
                    .pids
                    .get(&s)
                    .and_then(|p| memory_kib(*p))
                    .map(|m| m.1),
            )
        })
        .collect();
    // The first sample after warm-up; a run too short for one compares the end with itself.
    let base = samples.iter().find(|s| s.at >= warm).unwrap_or(&end);

    println!();
    println!(
        "soak: target {target:.1}/s ({:.0} % of {capacity_rate:.1}/s), achieved {achieved:.1}/s over {:.1} s; dispatched {}, dropped (every worker busy) {}, late (> {} ms) {}",
        o.fraction * 100.0,
        pace.elapsed.as_secs_f64(),
        pace.dispatched,
        pace.dropped,
        LATE.as_millis(),
        pace.late
    );
    print_tally("capacity", &capacity_tally);
    print_tally("soak", &soak_tally);
    println!(
        "{:<22} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>8} {:>8}",
        "service",
        "RSS warm",
        "RSS end",
        "RSS peak",
        "fds warm",
        "fds end",
        "/metrics",
        "/metrics",
        "series",
        "series"
    );
    println!(
        "{:<22} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>8} {:>8}",
        "", "MiB", "MiB", "MiB", "", "", "warm B", "end B", "warm", "end"
    );
    for s in Service::ALL {
        let count = |n: Option<usize>| n.map_or("-".to_string(), |n| n.to_string());
        let page = |sample: &Sample| sample.metrics.get(&s).copied().flatten();
        println!(
            "{:<22} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>8} {:>8}",
            s.binary(),
            mib(base.rss[&s]),
            mib(end.rss[&s]),
            mib(hwm[&s]),
            count(base.fds[&s]),
            count(end.fds[&s]),
            count(page(base).map(|p| p.bytes)),
            count(page(&end).map(|p| p.bytes)),
            count(page(base).map(|p| p.series)),
            count(page(&end).map(|p| p.series)),
        );
    }
    println!(
        "(warm = the first sample after the {} s warm-up, at {} s; end = after the soak, at {} s)",
        warm.as_secs(),
        base.at.as_secs(),
        end.at.as_secs()
    );
    println!();

    println!("{:<40} {:>44} {:>7}  result", "check", "measured", "limit");
    let mut report = Report::default();
    for (phase, t) in [("capacity run", &capacity_tally), ("soak", &soak_tally)] {
        report.row(
            &format!("errors beyond the rate limit: {phase}"),
            &format!("{} of {}", t.errors, t.ops()),
            "0",
            t.errors == 0 && t.ops() > 0,
        );
    }
    // Berth's four services; the emulator's RSS is shown above but not held to the rule: as ECS
    // does, it refuses replayed requests, so it remembers every signature nonce for twice its
    // 15-minute clock-skew allowance, and over a soak shorter than that its memory grows with the
    // machine calls by design (bounded by time, not a leak of Berth's).
    for s in Service::ALL.into_iter().filter(|s| *s != Service::Emulator) {
        let (from, to) = (base.rss[&s], end.rss[&s]);
        let (measured, ok) = match (from, to) {
            (Some(from), Some(to)) => {
                let g = growth(from as f64, to as f64);
                (
                    format!(
                        "{} → {} MiB ({:+.1} %)",
                        mib(Some(from)),
                        mib(Some(to)),
                        g * 100.0
                    ),
                    g < GROWTH,
                )
            }
            _ => ("the process is gone".into(), false),
        };
        report.row(
            &format!("RSS growth: {}", s.binary()),
            &measured,
            "< 20 %",
            ok,
        );
    }
    for (s, _) in &sampler.pages {
        let (from, to) = (base.metrics[s], end.metrics[s]);
        let (measured, ok) = match (from, to) {
            (Some(from), Some(to)) => {
                let g = growth(from.bytes as f64, to.bytes as f64);
                (
                    format!(
                        "{} → {} B ({:+.1} %), {} → {} series",
                        from.bytes,
                        to.bytes,
                        g * 100.0,
                        from.series,
                        to.series
                    ),
                    g <= GROWTH,
                )
            }
            _ => ("no page".into(), false),
        };
        report.row(
            &format!("/metrics growth: {}", s.binary()),
            &measured,
            "≤ 20 %",
            ok,
        );
    }
    let uids = driver.made_uids.lock().expect("uids").clone();
    let mut naming = Vec::new();
    let mut unread = Vec::new();
    for (s, text) in &texts {
        match text {
            Ok(text) => naming.extend(
                naming_volumes(text, &uids)
                    .into_iter()
                    .map(|l| format!("{}: {l}", s.binary())),
            ),
            Err(e) => unread.push(format!("{}: {e}", s.binary())),
        }
    }
    report.row(
        "no /metrics line names a volume made",
        &format!(
            "{} lines, {} volumes made, {} pages unread",
            naming.len(),
            uids.len(),
            unread.len()
        ),
        "0",
        naming.is_empty() && unread.is_empty() && !uids.is_empty(),
    );
    for l in naming.iter().chain(&unread).take(10) {
        println!("      {l}");
    }
    report.row(
        "achieved rate vs target",
        &format!(
            "{achieved:.1} of {target:.1}/s ({:.1} %)",
            achieved / target * 100.0
        ),
        "≥ 95 %",
        achieved >= target * RATE_FLOOR,
    );
    Ok(report)
}
