//! The mix of operations and what sends it: [`Kind`], the tallies of what each kind saw, the live
//! volumes, and [`Driver`], which sends one operation at a time and holds every answer to the rule.
//!
//! Apart from the phases and the checks because both phases send this same mix and the checks only
//! read its tallies: what the stack is asked to do is read here, how fast and what counts as
//! passing elsewhere.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde_json::{Value, json};

use crate::{
    ADMIN_TOKEN, CALL_TIMEOUT, ECS_KEY_ID, ECS_KEY_SECRET, LIVE_VOLUMES, MACHINES, NAMESPACE,
    VOLUME_PREFIX,
};

/// One kind of operation of the mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
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

    pub(crate) fn label(self) -> &'static str {
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
pub(crate) struct KindTally {
    pub(crate) ops: u64,
    pub(crate) errors: u64,
    pub(crate) latencies_us: Vec<u32>,
}

/// What one phase (the capacity run, the soak) saw.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) by_kind: BTreeMap<Kind, KindTally>,
    /// By status; 0 is no answer.
    pub(crate) statuses: BTreeMap<u16, u64>,
    /// 429s with `Retry-After`: the rate limit, allowed.
    pub(crate) limited: u64,
    pub(crate) errors: u64,
    /// The first errors, to show.
    pub(crate) examples: Vec<String>,
}

impl Tally {
    pub(crate) fn ops(&self) -> u64 {
        self.by_kind.values().map(|k| k.ops).sum()
    }

    pub(crate) fn latencies(&self) -> Vec<u32> {
        let mut all: Vec<u32> = self
            .by_kind
            .values()
            .flat_map(|k| k.latencies_us.iter().copied())
            .collect();
        all.sort_unstable();
        all
    }
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

pub(crate) struct Driver {
    http: reqwest::Client,
    gateway: String,
    sequence: Vec<Kind>,
    next_op: AtomicU64,
    /// Operations answered (or given up on), for the rate between samples.
    pub(crate) completed: AtomicU64,
    next_volume: AtomicU64,
    live: std::sync::Mutex<Live>,
    /// Names and uids of every volume made, for the `/metrics` check.
    pub(crate) made_uids: std::sync::Mutex<HashSet<String>>,
    machines: Vec<Value>,
    list_machines: Value,
    pub(crate) tally: std::sync::Mutex<Tally>,
}

impl Driver {
    pub(crate) fn new(gateway: String) -> Result<Driver, String> {
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
    pub(crate) fn take_tally(&self) -> Tally {
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
    pub(crate) async fn one(&self) {
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
    pub(crate) async fn make_machines(&self) -> Result<(), String> {
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
