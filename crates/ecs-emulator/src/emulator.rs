//! The emulator itself: [`Emulator`] and the account it holds (state, nonces, faults, lifecycle,
//! [`Stats`]), kept on disk after each change when it has a state directory; its in-process admin
//! methods and [`AdminError`]; and the handling of one ECS call, from authentication through the
//! injected faults to the action.
//!
//! Apart from the HTTP front ([`crate::router`]) because tests and the stack drive an emulator in
//! process through these methods, with no HTTP: what it holds and does is read here, how it is
//! reached over the wire there.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use rand::Rng as _;
use serde::Serialize;
use serde_json::{Value, json};

use crate::auth::{self, Incoming, NonceStore};
use crate::request::request_params;
use crate::wire::EcsError;
use crate::{
    Config, Faults, FaultsError, Lifecycle, Seed, SeedError, StateError, actions, persist, router,
    state,
};

/// Counts of what the emulator answered since start or the last reset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// Authenticated calls by action (including the throttled and failed ones).
    pub calls: BTreeMap<String, u64>,
    /// Calls answered `Throttling` by fault injection.
    pub throttled: u64,
    /// Calls answered 5xx by fault injection.
    pub server_errors: u64,
    /// Requests refused before reaching an action (signature, key, timestamp, nonce).
    pub rejected: u64,
}

impl Stats {
    /// Authenticated calls of every action.
    pub fn total_calls(&self) -> u64 {
        self.calls.values().sum()
    }
}

/// Why a change through [`Emulator`]'s admin methods (or `/_emulator/`) did not happen.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// No instance has this id.
    #[error("no instance {0}")]
    NoInstance(String),
    /// Not an ECS instance status.
    #[error("unknown status {0:?}")]
    UnknownStatus(String),
    /// The seed was refused.
    #[error(transparent)]
    Seed(#[from] SeedError),
    /// The faults were refused.
    #[error(transparent)]
    Faults(#[from] FaultsError),
    /// The change was made but could not be written to the state directory.
    #[error(transparent)]
    Save(#[from] StateError),
}

/// The emulator: configuration plus mutable account state. Cheap to clone (shared).
#[derive(Clone)]
pub struct Emulator {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    config: Config,
    pub(crate) state: Mutex<state::State>,
    nonces: Mutex<NonceStore>,
    knobs: Mutex<Knobs>,
    /// Where the account is kept, for an emulator made by [`Emulator::open`] with a state dir.
    store: Option<Arc<persist::Store>>,
    /// Counts changes to `state`; taken under its lock, so a higher revision is a newer account.
    revision: AtomicU64,
}

/// The account as it was after one change, to be written before the change is acknowledged.
pub(crate) struct Snapshot {
    store: Arc<persist::Store>,
    revision: u64,
    bytes: Vec<u8>,
}

impl Snapshot {
    /// Writes it (blocking: fsync).
    fn save(self) -> Result<(), StateError> {
        self.store.save(self.revision, &self.bytes)
    }

    /// Writes it on the blocking pool, so a slow disk never stalls the async runtime.
    pub(crate) async fn save_off_runtime(self) -> Result<(), StateError> {
        tokio::task::spawn_blocking(move || self.save())
            .await
            .unwrap_or_else(|e| {
                Err(StateError::Io {
                    path: std::path::PathBuf::from(persist::STATE_FILE),
                    source: std::io::Error::other(e.to_string()),
                })
            })
    }
}

struct Knobs {
    faults: Faults,
    lifecycle: Lifecycle,
    stats: Stats,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep serving.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Emulator {
    /// An emulator with an empty account kept in memory only. `config.state_dir` is neither read
    /// nor written: [`Emulator::open`] is the constructor that uses it.
    pub fn new(config: Config) -> Self {
        if config.state_dir.is_some() {
            tracing::warn!(
                "Emulator::new ignores state_dir; use Emulator::open to keep the account"
            );
        }
        Emulator::build(config, state::State::default(), None)
    }

    /// An emulator whose account lives in `config.state_dir`: the one kept there is loaded (an
    /// empty one on first use, creating the directory), and every change is written back,
    /// crash-safely, before it is answered. Without a state dir this is [`Emulator::new`].
    ///
    /// Fails when the directory cannot be created or read, or holds a state file this emulator
    /// did not write (which is then left untouched).
    pub fn open(config: Config) -> Result<Self, StateError> {
        let Some(dir) = config.state_dir.clone() else {
            return Ok(Emulator::build(config, state::State::default(), None));
        };
        let (store, account) = persist::Store::open(&dir)?;
        tracing::info!(
            state_dir = %dir.display(),
            instances = account.instances.len(),
            "ECS emulator account loaded"
        );
        Ok(Emulator::build(config, account, Some(Arc::new(store))))
    }

    fn build(config: Config, account: state::State, store: Option<Arc<persist::Store>>) -> Self {
        let knobs = Knobs {
            faults: config.faults.clone(),
            lifecycle: config.lifecycle,
            stats: Stats::default(),
        };
        Emulator {
            inner: Arc::new(Inner {
                config,
                state: Mutex::new(account),
                nonces: Mutex::default(),
                knobs: Mutex::new(knobs),
                store,
                revision: AtomicU64::new(0),
            }),
        }
    }

    /// What must be written after a change to `account` (whose lock the caller holds), if the
    /// account is kept on disk.
    fn snapshot_of(&self, account: &state::State) -> Option<Snapshot> {
        let store = self.inner.store.as_ref()?;
        Some(Snapshot {
            store: Arc::clone(store),
            revision: self.inner.revision.fetch_add(1, Ordering::SeqCst) + 1,
            bytes: persist::encode(account),
        })
    }

    /// Writes a change made outside an ECS call (admin), now.
    fn save_now(snapshot: Option<Snapshot>) -> Result<(), StateError> {
        snapshot.map(Snapshot::save).transpose().map(|_| ())
    }

    /// The HTTP router (ECS on `/`, admin under `/_emulator/`).
    pub fn router(&self) -> Router {
        router(self.clone())
    }

    /// The start configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The current faults.
    pub fn faults(&self) -> Faults {
        lock(&self.inner.knobs).faults.clone()
    }

    /// Replaces the faults.
    pub fn set_faults(&self, faults: Faults) -> Result<(), AdminError> {
        faults.validate()?;
        lock(&self.inner.knobs).faults = faults;
        Ok(())
    }

    /// The current lifecycle delays.
    pub fn lifecycle(&self) -> Lifecycle {
        lock(&self.inner.knobs).lifecycle
    }

    /// Replaces the lifecycle delays (instances already mid-transition use the new ones).
    pub fn set_lifecycle(&self, lifecycle: Lifecycle) {
        lock(&self.inner.knobs).lifecycle = lifecycle;
    }

    /// Sets an instance's status and pins it there until [`Emulator::unpin`].
    pub fn pin_status(&self, instance_id: &str, status: &str) -> Result<(), AdminError> {
        let status = state::Status::parse(status)
            .ok_or_else(|| AdminError::UnknownStatus(status.to_owned()))?;
        let mut s = lock(&self.inner.state);
        let i = s
            .instances
            .get_mut(instance_id)
            .ok_or_else(|| AdminError::NoInstance(instance_id.to_owned()))?;
        i.set_status(status, tokio::time::Instant::now());
        i.pinned = true;
        let snapshot = self.snapshot_of(&s);
        drop(s);
        Ok(Emulator::save_now(snapshot)?)
    }

    /// Lets a pinned instance continue its lifecycle from now.
    pub fn unpin(&self, instance_id: &str) -> Result<(), AdminError> {
        let mut s = lock(&self.inner.state);
        let i = s
            .instances
            .get_mut(instance_id)
            .ok_or_else(|| AdminError::NoInstance(instance_id.to_owned()))?;
        i.pinned = false;
        i.since = tokio::time::Instant::now();
        let snapshot = self.snapshot_of(&s);
        drop(s);
        Ok(Emulator::save_now(snapshot)?)
    }

    /// Creates instances in bulk; returns their ids.
    pub fn seed(&self, seed: &Seed) -> Result<Vec<String>, AdminError> {
        let mut s = lock(&self.inner.state);
        let ids = actions::seed(
            &mut s,
            tokio::time::Instant::now(),
            &self.inner.config.default_region,
            seed,
        )?;
        let snapshot = self.snapshot_of(&s);
        drop(s);
        Emulator::save_now(snapshot)?;
        Ok(ids)
    }

    /// Instances, disks and network interfaces in ECS's JSON shapes (statuses brought up to date).
    pub fn snapshot(&self) -> Value {
        let life = self.lifecycle();
        let now = tokio::time::Instant::now();
        let mut s = lock(&self.inner.state);
        for i in s.instances.values_mut() {
            i.advance(now, &life);
        }
        json!({
            "instances": s.instances.values().map(|i| {
                let mut v = i.to_json();
                v["Pinned"] = json!(i.pinned);
                v["UserDataBytes"] = json!(i.user_data_bytes);
                v
            }).collect::<Vec<_>>(),
            "disks": s.disks.values().map(state::Disk::to_json).collect::<Vec<_>>(),
            "networkInterfaces": s.nics.values().map(state::Nic::to_json).collect::<Vec<_>>(),
            "clientTokens": s.client_tokens.len(),
            "nonces": lock(&self.inner.nonces).len(),
        })
    }

    /// How many instances exist.
    pub fn instance_count(&self) -> usize {
        lock(&self.inner.state).instances.len()
    }

    /// How many disks exist.
    pub fn disk_count(&self) -> usize {
        lock(&self.inner.state).disks.len()
    }

    /// How many network interfaces exist.
    pub fn network_interface_count(&self) -> usize {
        lock(&self.inner.state).nics.len()
    }

    /// Counts of calls since start or the last reset.
    pub fn stats(&self) -> Stats {
        lock(&self.inner.knobs).stats.clone()
    }

    /// Forgets every resource, client token, nonce and count; faults and lifecycle return to the
    /// start configuration. A kept account is emptied on disk too (a failure to write is logged).
    pub fn reset(&self) {
        let snapshot = {
            let mut s = lock(&self.inner.state);
            s.clear();
            self.snapshot_of(&s)
        };
        if let Err(e) = Emulator::save_now(snapshot) {
            tracing::error!(error = %e, "the emptied account could not be written");
        }
        lock(&self.inner.nonces).clear();
        let mut k = lock(&self.inner.knobs);
        k.faults = self.inner.config.faults.clone();
        k.lifecycle = self.inner.config.lifecycle;
        k.stats = Stats::default();
    }

    /// Handles one ECS call (after any injected latency). A call that changed a kept account also
    /// returns the snapshot to write before answering.
    pub(crate) fn handle(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<(Value, Option<Snapshot>), EcsError> {
        let (query, all) = request_params(uri, headers, body)?;
        let authenticated = {
            let mut nonces = lock(&self.inner.nonces);
            auth::authenticate(
                Incoming {
                    method,
                    path: uri.path(),
                    headers,
                    query,
                    all,
                    body,
                },
                &self.inner.config.access_keys,
                self.inner.config.max_clock_skew,
                &mut nonces,
            )
        };
        let a = match authenticated {
            Ok(a) => a,
            Err(e) => {
                lock(&self.inner.knobs).stats.rejected += 1;
                return Err(e);
            }
        };
        if a.version != "2014-05-26" {
            return Err(EcsError::new(
                400,
                "InvalidVersion",
                "Specified parameter Version is not valid.",
            ));
        }
        if let Some(f) = &a.format
            && !f.eq_ignore_ascii_case("json")
        {
            return Err(EcsError::invalid(
                "Format",
                "the emulator answers JSON only; send Format=JSON",
            ));
        }
        let (faults, lifecycle) = {
            let mut k = lock(&self.inner.knobs);
            *k.stats.calls.entry(a.action.clone()).or_default() += 1;
            (k.faults.clone(), k.lifecycle)
        };
        let mut rng = rand::rng();
        if faults.throttle_rate > 0.0 && rng.random::<f64>() < faults.throttle_rate {
            lock(&self.inner.knobs).stats.throttled += 1;
            let mut e = EcsError::new(
                400,
                "Throttling",
                "Request was denied due to request throttling.",
            );
            let reset = chrono::Utc::now().timestamp() as u64 + 1;
            let value = format!(
                "Limit:100,Remain:0,TimeLeft:{},Reset:{reset}",
                faults.throttle_time_left_ms
            );
            if let Ok(v) = HeaderValue::from_str(&value) {
                e.headers
                    .push((HeaderName::from_static("x-ratelimit-user-api"), v));
            }
            return Err(e);
        }
        if faults.server_error_rate > 0.0 && rng.random::<f64>() < faults.server_error_rate {
            lock(&self.inner.knobs).stats.server_errors += 1;
            return Err(if rng.random::<bool>() {
                EcsError::new(
                    500,
                    "InternalError",
                    "The request processing has failed due to some unknown error, exception or failure.",
                )
            } else {
                EcsError::new(
                    503,
                    "ServiceUnavailable",
                    "The request has failed due to a temporary failure of the server.",
                )
            });
        }
        let ctx = actions::Ctx {
            now: tokio::time::Instant::now(),
            now_ms: crate::state::unix_ms_now(),
            lifecycle: &lifecycle,
            faults: &faults,
        };
        let mut s = lock(&self.inner.state);
        let answer = actions::dispatch(&mut s, &ctx, &a.action, &a.params)?;
        let snapshot = if actions::mutates(&a.action) {
            self.snapshot_of(&s)
        } else {
            None
        };
        Ok((answer, snapshot))
    }
}
