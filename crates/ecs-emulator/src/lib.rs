//! A wire-compatible stand-in for Alibaba Cloud ECS, what LocalStack and moto are for AWS.
//!
//! It speaks the ECS RPC protocol (API version `2014-05-26`) on `/`: parameters in the query or a
//! form body, signature V1 (`Signature`, HMAC-SHA1) or V3 (`Authorization: ACS3-HMAC-SHA256 ...`)
//! checked against configured access keys, timestamp skew and nonce replay refused with ECS's own
//! error codes, and JSON answers in ECS's shapes. So Berth's `alicloud` client, or Alibaba's SDKs,
//! pointed at it run unchanged. Instances move Pending → Starting → Running (and Stopping → Stopped)
//! after configurable delays; each comes with a system disk, its data disks and a primary network
//! interface, tagged like the instance.
//!
//! By default the account lives in memory. With [`Config::state_dir`], [`Emulator::open`] keeps it
//! in that directory, written crash-safely after every change, so a restarted emulator still has
//! its instances (ids, statuses, tags), disks, network interfaces and ClientTokens; with
//! [`stored_access_key`] the access key it accepts is kept there too.
//!
//! For tests it injects faults (throttling with `x-ratelimit-*` headers, 5xx answers, latency,
//! `OperationDenied.NoStock` per zone, resources leaked on delete, a status pinned on an instance)
//! and exposes its state, either through [`Emulator`]'s methods in-process or the unauthenticated
//! admin endpoints under `/_emulator/` (bind it to loopback):
//!
//! | route | does |
//! |---|---|
//! | `GET /_emulator/state` | instances, disks and network interfaces, in ECS's JSON shapes; how many ClientTokens and nonces are held |
//! | `POST /_emulator/reset` | forgets every resource, client token and nonce; faults and lifecycle back to the start config |
//! | `GET`/`PUT /_emulator/faults` | read / replace [`Faults`] (camelCase JSON) |
//! | `GET`/`PUT /_emulator/lifecycle` | read / replace [`Lifecycle`] delays |
//! | `POST /_emulator/seed` | create many instances at once ([`Seed`]), for list benchmarks |
//! | `PUT /_emulator/instances/{id}/status` | `{"status":"Pending"}`: set and pin an instance's status |
//! | `DELETE /_emulator/instances/{id}/pin` | let a pinned instance move on |
//! | `GET /_emulator/stats` | calls by action, throttled, 5xx and rejected counts |
//! | `GET /healthz` | liveness |
//!
//! # Layout
//! - [`config`]: [`Config`], [`AccessKey`], [`Lifecycle`], [`Faults`].
//! - `auth`: V1/V3 signature verification, skew and nonce checks.
//! - `wire`: parameter decoding, RFC 3986 encoding, ECS error answers.
//! - `state`: the account's resources in ordered maps, ids, lifecycle, filters.
//! - `actions`: the ECS actions ([`ACTIONS`]), one module per resource (instances, disks, network
//!   interfaces, regions) beside parameter reading, tags and seeding ([`Seed`]).
//! - [`persist`]: the state directory: crash-safe writes, loading, the stored access key.
//! - this file: [`Emulator`], [`router`], the HTTP handlers and [`AdminError`], what an admin
//!   change fails with.

mod actions;
mod auth;
pub mod cli;
pub mod config;
pub mod persist;
mod state;
mod wire;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use rand::Rng as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use actions::{ACTIONS, Seed, SeedError};
pub use config::{AccessKey, Config, Faults, FaultsError, Lifecycle};
pub use persist::{StateError, stored_access_key};

use auth::{Incoming, NonceStore};
use wire::EcsError;

/// Decoded request parameters, by name.
type ParamMap = BTreeMap<String, String>;

/// A call's query parameters, and its query and form parameters together, as ECS decodes them.
fn request_params(
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(ParamMap, ParamMap), EcsError> {
    let mut query = BTreeMap::new();
    wire::parse_pairs(uri.query().unwrap_or(""), &mut query);
    let mut all = query.clone();
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if is_form && !body.is_empty() {
        let text = std::str::from_utf8(body)
            .map_err(|_| EcsError::new(400, "InvalidParameter", "The form body is not UTF-8."))?;
        wire::parse_pairs(text, &mut all);
    }
    Ok((query, all))
}

/// Authenticates one call exactly as the emulator's HTTP front does (parameter decoding, V1 or V3
/// signature, security token, clock skew, nonce against a fresh nonce store), without an emulator,
/// a socket or any state: the action and every parameter of a call that passes, else the ECS error
/// code and message it is refused with.
///
/// For property tests and the fuzz targets (`fuzz/`), which hold this verifier, written
/// independently, against `alicloud`'s signer on arbitrary requests.
pub fn authenticate_request(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    keys: &[AccessKey],
    max_skew: Duration,
) -> Result<(String, ParamMap), (String, String)> {
    let refused = |e: EcsError| (e.code, e.message);
    let (query, all) = request_params(uri, headers, body).map_err(refused)?;
    let a = auth::authenticate(
        Incoming {
            method,
            path: uri.path(),
            headers,
            query,
            all,
            body,
        },
        keys,
        max_skew,
        &mut NonceStore::default(),
    )
    .map_err(refused)?;
    Ok((a.action, a.params))
}

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
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    state: Mutex<state::State>,
    nonces: Mutex<NonceStore>,
    knobs: Mutex<Knobs>,
    /// Where the account is kept, for an emulator made by [`Emulator::open`] with a state dir.
    store: Option<Arc<persist::Store>>,
    /// Counts changes to `state`; taken under its lock, so a higher revision is a newer account.
    revision: AtomicU64,
}

/// The account as it was after one change, to be written before the change is acknowledged.
struct Snapshot {
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
    async fn save_off_runtime(self) -> Result<(), StateError> {
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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
    fn handle(
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

/// The emulator's HTTP router: ECS on `/` (GET and POST), admin under `/_emulator/`, `/healthz`.
pub fn router(emulator: Emulator) -> Router {
    Router::new()
        .route("/", get(ecs).post(ecs))
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .route("/_emulator/state", get(admin_state))
        .route("/_emulator/reset", post(admin_reset))
        .route("/_emulator/faults", get(admin_faults).put(admin_set_faults))
        .route(
            "/_emulator/lifecycle",
            get(admin_lifecycle).put(admin_set_lifecycle),
        )
        .route("/_emulator/seed", post(admin_seed))
        .route("/_emulator/instances/{id}/status", put(admin_pin))
        .route("/_emulator/instances/{id}/pin", delete(admin_unpin))
        .route("/_emulator/stats", get(admin_stats))
        .with_state(emulator)
}

async fn ecs(
    State(emu): State<Emulator>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request_id = uuid::Uuid::new_v4().to_string().to_uppercase();
    let latency = emu.faults().latency_ms;
    if latency > 0 {
        tokio::time::sleep(Duration::from_millis(latency)).await;
    }
    match emu.handle(&method, &uri, &headers, &body) {
        Ok((mut answer, snapshot)) => {
            if let Some(snapshot) = snapshot
                && let Err(e) = snapshot.save_off_runtime().await
            {
                // The change stands in memory but is not durable: say so as ECS says "retry".
                tracing::error!(error = %e, "the account could not be written");
                return EcsError::new(
                    500,
                    "InternalError",
                    "The request processing has failed due to some unknown error, exception or failure.",
                )
                .into_response(&request_id);
            }
            answer["RequestId"] = Value::String(request_id);
            axum::Json(answer).into_response()
        }
        Err(e) => {
            tracing::debug!(code = %e.code, status = e.status.as_u16(), "ECS error answer");
            e.into_response(&request_id)
        }
    }
}

/// An admin refusal, answered as every Berth service answers one: the kit's problem+json (the
/// ECS API on `/` keeps ECS's own error shape, which is what it emulates). One error type on the
/// wire for everything that is Berth's.
fn admin_error(code: service_kit::error::Code, message: impl Into<String>) -> Response {
    service_kit::ApiError::from_code(code, message).into_response()
}

/// A body that is not the admin endpoint's JSON (400).
fn admin_bad_body(e: &serde_json::Error) -> Response {
    admin_error(
        service_kit::error::Code::InvalidArgument,
        format!("body: {e}"),
    )
}

/// An admin change that was refused (400), named an instance that is not there (404), or could not
/// be written to the state directory (500, the cause logged, not answered).
fn admin_failure(e: AdminError) -> Response {
    use service_kit::error::Code;
    match e {
        AdminError::NoInstance(_) => admin_error(Code::NotFound, e.to_string()),
        AdminError::Save(_) => service_kit::ApiError::internal(e).into_response(),
        AdminError::UnknownStatus(_) | AdminError::Seed(_) | AdminError::Faults(_) => {
            admin_error(Code::InvalidArgument, e.to_string())
        }
    }
}

async fn admin_state(State(emu): State<Emulator>) -> Response {
    axum::Json(emu.snapshot()).into_response()
}

async fn admin_reset(State(emu): State<Emulator>) -> Response {
    emu.reset();
    StatusCode::NO_CONTENT.into_response()
}

async fn admin_faults(State(emu): State<Emulator>) -> Response {
    axum::Json(emu.faults()).into_response()
}

async fn admin_set_faults(State(emu): State<Emulator>, body: Bytes) -> Response {
    let faults: Faults = match serde_json::from_slice(&body) {
        Ok(f) => f,
        Err(e) => return admin_bad_body(&e),
    };
    match emu.set_faults(faults) {
        Ok(()) => axum::Json(emu.faults()).into_response(),
        Err(e) => admin_failure(e),
    }
}

async fn admin_lifecycle(State(emu): State<Emulator>) -> Response {
    axum::Json(emu.lifecycle()).into_response()
}

async fn admin_set_lifecycle(State(emu): State<Emulator>, body: Bytes) -> Response {
    match serde_json::from_slice::<Lifecycle>(&body) {
        Ok(l) => {
            emu.set_lifecycle(l);
            axum::Json(l).into_response()
        }
        Err(e) => admin_bad_body(&e),
    }
}

async fn admin_seed(State(emu): State<Emulator>, body: Bytes) -> Response {
    let seed: Seed = match serde_json::from_slice(&body) {
        Ok(s) => s,
        Err(e) => return admin_bad_body(&e),
    };
    match emu.seed(&seed) {
        Ok(ids) => axum::Json(json!({
            "created": ids.len(),
            "firstInstanceId": ids.first(),
            "lastInstanceId": ids.last(),
        }))
        .into_response(),
        Err(e) => admin_failure(e),
    }
}

#[derive(Deserialize)]
struct PinBody {
    status: String,
}

async fn admin_pin(State(emu): State<Emulator>, Path(id): Path<String>, body: Bytes) -> Response {
    let pin: PinBody = match serde_json::from_slice(&body) {
        Ok(p) => p,
        Err(e) => return admin_bad_body(&e),
    };
    match emu.pin_status(&id, &pin.status) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => admin_failure(e),
    }
}

async fn admin_unpin(State(emu): State<Emulator>, Path(id): Path<String>) -> Response {
    match emu.unpin(&id) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => admin_failure(e),
    }
}

/// The emulator's Prometheus page: calls by action (an action it does not implement is `other`, so
/// no caller's string becomes a label), the faults it injected, the requests it refused, the
/// instances it holds, then the process series every Berth program serves.
async fn metrics(State(emu): State<Emulator>) -> Response {
    use std::fmt::Write as _;
    let stats = emu.stats();
    let instances = lock(&emu.inner.state).instances.len();
    let mut calls: BTreeMap<&str, u64> = BTreeMap::new();
    for (action, n) in &stats.calls {
        let label = actions::ACTIONS
            .iter()
            .find(|a| **a == action.as_str())
            .copied()
            .unwrap_or("other");
        *calls.entry(label).or_default() += n;
    }
    let mut page = String::from(
        "# HELP ecs_emulator_calls_total Authenticated ECS calls by action, failed ones included.\n# TYPE ecs_emulator_calls_total counter\n",
    );
    for (action, n) in calls {
        let _ = writeln!(page, "ecs_emulator_calls_total{{action=\"{action}\"}} {n}");
    }
    for (name, help, value) in [
        (
            "ecs_emulator_throttled_total",
            "Calls answered Throttling by fault injection.",
            stats.throttled,
        ),
        (
            "ecs_emulator_server_errors_total",
            "Calls answered 5xx by fault injection.",
            stats.server_errors,
        ),
        (
            "ecs_emulator_rejected_total",
            "Requests refused before an action (signature, key, timestamp, nonce).",
            stats.rejected,
        ),
    ] {
        let _ = writeln!(
            page,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
        );
    }
    let _ = writeln!(
        page,
        "# HELP ecs_emulator_instances Instances the emulated account holds.\n# TYPE ecs_emulator_instances gauge\necs_emulator_instances {instances}"
    );
    page.push_str(&service_kit::process_metrics::page("ecs-emulator"));
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        page,
    )
        .into_response()
}

async fn admin_stats(State(emu): State<Emulator>) -> Response {
    axum::Json(emu.stats()).into_response()
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt as _;
    use sha2::Digest as _;
    use tower::ServiceExt as _;

    use super::*;

    const ID: &str = "k";
    const SECRET: &str = "s";

    fn emulator() -> Emulator {
        Emulator::new(Config::for_tests(ID, SECRET))
    }

    async fn send(emu: &Emulator, req: Request<Body>) -> (StatusCode, Value) {
        let resp = emu.router().oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, v)
    }

    fn json_req(method: &str, uri: &str, body: &str) -> Request<Body> {
        Request::builder()
            .method(method)
            .uri(uri)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_owned()))
            .unwrap()
    }

    /// [`v1_get`] sent, answered.
    async fn send_v1(
        emu: &Emulator,
        action: &str,
        extra: &[(&str, &str)],
        nonce: &str,
    ) -> (StatusCode, Value) {
        send(emu, v1_get(action, extra, nonce)).await
    }

    /// A `PUT` of the JSON `body` to `path`, answered.
    async fn put(emu: &Emulator, path: &str, body: &str) -> (StatusCode, Value) {
        send(emu, json_req("PUT", path, body)).await
    }

    fn now() -> String {
        chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    /// A V1 GET with every parameter in the query.
    fn v1_get(action: &str, extra: &[(&str, &str)], nonce: &str) -> Request<Body> {
        let ts = now();
        let mut p: BTreeMap<String, String> = [
            ("Action", action),
            ("Version", "2014-05-26"),
            ("Format", "json"),
            ("AccessKeyId", ID),
            ("SignatureMethod", "HMAC-SHA1"),
            ("SignatureVersion", "1.0"),
            ("SignatureNonce", nonce),
            ("Timestamp", &ts),
        ]
        .into_iter()
        .chain(extra.iter().copied())
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let sig = auth::v1_signature("GET", &p, SECRET);
        p.insert("Signature".into(), sig);
        Request::get(format!("/?{}", wire::canonical_query(&p)))
            .body(Body::empty())
            .unwrap()
    }

    /// A V3 POST with the given signed header names (the rest are sent unsigned).
    fn v3_post(
        query: &[(&str, &str)],
        signed: &[&str],
        extra_header: Option<(&str, &str)>,
    ) -> Request<Body> {
        let q: BTreeMap<String, String> = query
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let hash = hex::encode(sha2::Sha256::digest(b""));
        let mut headers = HeaderMap::new();
        for (k, v) in [
            ("host", "ecs.example"),
            ("x-acs-action", "DescribeInstances"),
            ("x-acs-version", "2014-05-26"),
            ("x-acs-date", now().as_str()),
            (
                "x-acs-signature-nonce",
                uuid::Uuid::new_v4().to_string().as_str(),
            ),
            ("x-acs-content-sha256", hash.as_str()),
        ] {
            headers.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        if let Some((k, v)) = extra_header {
            headers.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        let canonical =
            auth::v3_canonical_request("POST", "/", &q, &headers, signed, &hash).unwrap();
        let sig = auth::v3_signature(&canonical, SECRET);
        let mut b = Request::post(format!("/?{}", wire::canonical_query(&q))).header(
            header::AUTHORIZATION,
            format!(
                "ACS3-HMAC-SHA256 Credential={ID},SignedHeaders={},Signature={sig}",
                signed.join(";")
            ),
        );
        for (k, v) in &headers {
            b = b.header(k, v);
        }
        b.body(Body::empty()).unwrap()
    }

    const ALL_SIGNED: [&str; 6] = auth::REQUIRED_SIGNED_HEADERS;

    #[tokio::test]
    async fn v1_get_with_lowercase_json_format_works() {
        let emu = emulator();
        let (status, v) = send_v1(
            &emu,
            "DescribeInstances",
            &[("RegionId", "cn-shanghai")],
            "n1",
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!(v["TotalCount"], 0);
        assert!(v["RequestId"].is_string());
    }

    /// Issue 32, point 2: the emulator serves `/metrics` (404 before), with calls by action and no
    /// label from a caller's own action name.
    #[tokio::test]
    async fn metrics_count_calls_by_known_action_only() {
        let emu = emulator();
        send_v1(
            &emu,
            "DescribeInstances",
            &[("RegionId", "cn-shanghai")],
            "n1",
        )
        .await;
        send_v1(&emu, "NoSuchActionOfMine", &[], "n2").await;
        let answer = router(emu.clone())
            .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        let page = String::from_utf8(
            answer
                .into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .to_vec(),
        )
        .unwrap();
        assert!(
            page.contains("ecs_emulator_calls_total{action=\"DescribeInstances\"} 1"),
            "{page}"
        );
        assert!(!page.contains("NoSuchActionOfMine"), "{page}");
        assert!(page.contains("ecs_emulator_instances 0"), "{page}");
        assert!(
            page.contains("berth_build_info{service=\"ecs-emulator\""),
            "{page}"
        );
    }

    #[tokio::test]
    async fn xml_format_unknown_action_and_version_are_refused() {
        let emu = emulator();
        let (status, v) = send_v1(&emu, "DescribeInstances", &[("Format", "XML")], "n1").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(v["Code"], "InvalidParameter.Format");
        let (status, v) = send_v1(&emu, "Nope", &[], "n2").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(v["Code"], "InvalidAction.NotFound");
        let (_, v) = send_v1(
            &emu,
            "DescribeInstances",
            &[("Version", "2016-01-01")],
            "n3",
        )
        .await;
        assert_eq!(v["Code"], "InvalidVersion");
    }

    #[tokio::test]
    async fn v3_canonicalises_exactly_the_signed_headers() {
        let emu = emulator();
        let q = [("RegionId", "cn-shanghai")];
        // An unsigned extra x-acs header does not take part.
        let (status, v) = send(&emu, v3_post(&q, &ALL_SIGNED, Some(("x-acs-extra", "1")))).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        // Signing an extra header works as long as it is sent.
        let mut signed = ALL_SIGNED.to_vec();
        signed.push("x-acs-extra");
        let (status, v) = send(&emu, v3_post(&q, &signed, Some(("x-acs-extra", "1")))).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        // A common header left out of SignedHeaders is refused.
        let partial: Vec<&str> = ALL_SIGNED
            .iter()
            .copied()
            .filter(|h| *h != "x-acs-date")
            .collect();
        let (status, v) = send(&emu, v3_post(&q, &partial, None)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(v["Code"], "IncompleteSignature");
    }

    #[tokio::test]
    async fn v3_tampered_query_does_not_match() {
        let emu = emulator();
        let req = v3_post(&[("RegionId", "cn-shanghai")], &ALL_SIGNED, None);
        let (mut parts, body) = req.into_parts();
        parts.uri = "/?RegionId=cn-beijing".parse().unwrap();
        let (status, v) = send(&emu, Request::from_parts(parts, body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(v["Code"], "SignatureDoesNotMatch");
        assert_eq!(emu.stats().rejected, 1);
    }

    #[tokio::test]
    async fn throttled_answers_carry_the_ratelimit_header() {
        let emu = emulator();
        emu.set_faults(Faults {
            throttle_rate: 1.0,
            throttle_time_left_ms: 1234,
            ..Faults::default()
        })
        .unwrap();
        let resp = emu
            .router()
            .oneshot(v1_get(
                "DescribeInstances",
                &[("RegionId", "cn-shanghai")],
                "n1",
            ))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        let h = resp.headers()["x-ratelimit-user-api"].to_str().unwrap();
        assert!(h.contains("TimeLeft:1234"), "{h}");
    }

    #[tokio::test]
    async fn a_seed_beyond_the_instance_bound_is_refused_before_anything_is_made() {
        let emu = emulator();
        let (status, v) = send(
            &emu,
            json_req("POST", "/_emulator/seed", r#"{"count":99999999999}"#),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
        assert!(v.to_string().contains("at most 200000"), "{v}");
        // The kit's problem+json, as every Berth service answers a refusal.
        assert_eq!(v["title"], "InvalidArgument", "{v}");
        assert_eq!(
            (v["status"].as_u64(), v["code"].as_u64()),
            (Some(400), Some(3))
        );
        assert!(
            v["detail"].as_str().unwrap().contains("at most 200000"),
            "{v}"
        );
        assert!(v.get("error").is_none(), "{v}");
        assert_eq!(lock(&emu.inner.state).instances.len(), 0);
    }

    #[tokio::test]
    async fn admin_endpoints_seed_pin_state_faults_and_reset() {
        let emu = emulator();
        let (status, v) = send(
            &emu,
            json_req("POST", "/_emulator/seed", r#"{"count":3,"tags":{"a":"b"}}"#),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(v["created"], 3);
        let id = v["firstInstanceId"].as_str().unwrap().to_owned();
        let (status, _) = put(
            &emu,
            &format!("/_emulator/instances/{id}/status"),
            r#"{"status":"Pending"}"#,
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        let (_, state) = send(&emu, json_req("GET", "/_emulator/state", "")).await;
        assert_eq!(state["instances"].as_array().unwrap().len(), 3);
        let pinned = state["instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["InstanceId"] == id.as_str())
            .unwrap();
        assert_eq!(pinned["Status"], "Pending");
        assert_eq!(pinned["Pinned"], true);
        let (status, _) = put(
            &emu,
            "/_emulator/instances/i-missing/status",
            r#"{"status":"Pending"}"#,
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, problem) = put(&emu, "/_emulator/faults", "not json").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(problem["code"], 3, "{problem}");
        assert!(
            problem["detail"].as_str().unwrap().starts_with("body: "),
            "{problem}"
        );
        let (status, f) = put(
            &emu,
            "/_emulator/faults",
            r#"{"throttleRate":0.5,"noStockZones":["z"]}"#,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(f["throttleRate"], 0.5);
        let (status, _) = put(&emu, "/_emulator/faults", r#"{"throttleRate":2}"#).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let (status, _) = send(&emu, json_req("POST", "/_emulator/reset", "")).await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert_eq!(emu.instance_count(), 0);
        assert_eq!(emu.faults(), Faults::default());
        let (status, l) = put(
            &emu,
            "/_emulator/lifecycle",
            r#"{"pendingMs":5,"startingMs":6,"stoppingMs":7}"#,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(l["startingMs"], 6);
    }

    // -----------------------------------------------------------------------------------------
    // A kept account
    // -----------------------------------------------------------------------------------------

    fn kept(dir: &std::path::Path, lifecycle: Lifecycle) -> Emulator {
        Emulator::open(
            Config::for_tests(ID, SECRET)
                .with_lifecycle(lifecycle)
                .with_state_dir(dir),
        )
        .unwrap()
    }

    async fn run(emu: &Emulator, name: &str, token: &str, nonce: &str) -> String {
        let (status, v) = send(
            emu,
            v1_get(
                "RunInstances",
                &[
                    ("RegionId", "cn-shanghai"),
                    ("ImageId", "img"),
                    ("InstanceType", "ecs.t"),
                    ("InstanceName", name),
                    ("ClientToken", token),
                    ("Tag.1.Key", "owner"),
                    ("Tag.1.Value", name),
                ],
                nonce,
            ),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{v}");
        v["InstanceIdSets"]["InstanceIdSet"][0]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// id → (status, tags) of every instance, as DescribeInstances answers.
    async fn described(emu: &Emulator, nonce: &str) -> BTreeMap<String, (String, Value)> {
        let (status, v) = send(
            emu,
            v1_get(
                "DescribeInstances",
                &[("RegionId", "cn-shanghai"), ("MaxResults", "100")],
                nonce,
            ),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{v}");
        v["Instances"]["Instance"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                (
                    i["InstanceId"].as_str().unwrap().to_owned(),
                    (i["Status"].as_str().unwrap().to_owned(), i["Tags"].clone()),
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn a_restarted_emulator_keeps_ids_statuses_tags_and_client_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let first = kept(dir.path(), Lifecycle::instant());
        let a = run(&first, "m-a", "token-a", "n1").await;
        let b = run(&first, "m-b", "token-b", "n2").await;
        let (status, v) = send(
            &first,
            v1_get("StopInstance", &[("InstanceId", b.as_str())], "n3"),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{v}");
        let before = described(&first, "n4").await;
        assert_eq!(before[&a].0, "Running");
        assert_eq!(before[&b].0, "Stopped");
        let resources = (first.disk_count(), first.network_interface_count());
        drop(first);

        let second = kept(dir.path(), Lifecycle::instant());
        assert_eq!(described(&second, "n5").await, before);
        assert_eq!(
            (second.disk_count(), second.network_interface_count()),
            resources
        );
        // The ClientToken still names its instance, and ids never repeat.
        assert_eq!(run(&second, "m-a", "token-a", "n6").await, a);
        let c = run(&second, "m-c", "token-c", "n7").await;
        assert!(c != a && c != b, "{c}");
        // Deleting is kept as well.
        let (status, v) = send(
            &second,
            v1_get(
                "DeleteInstance",
                &[("InstanceId", a.as_str()), ("Force", "true")],
                "n8",
            ),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{v}");
        drop(second);
        let third = kept(dir.path(), Lifecycle::instant());
        let ids: std::collections::BTreeSet<String> =
            described(&third, "n9").await.into_keys().collect();
        assert_eq!(ids, [b, c].into());
    }

    #[tokio::test]
    async fn an_instance_mid_transition_resumes_its_lifecycle_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let slow = Lifecycle {
            pending_ms: 60_000,
            ..Lifecycle::instant()
        };
        let first = kept(dir.path(), slow);
        let id = run(&first, "m-slow", "token-slow", "n1").await;
        drop(first);
        // Still within its Pending minute: not Running just because the process restarted.
        let second = kept(dir.path(), slow);
        assert_eq!(described(&second, "n2").await[&id].0, "Pending");
        drop(second);
        // Restarted with no Pending delay, it moves on at once.
        let third = kept(dir.path(), Lifecycle::instant());
        assert_eq!(described(&third, "n3").await[&id].0, "Running");
    }

    #[tokio::test]
    async fn admin_changes_are_kept_and_an_in_memory_emulator_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let first = kept(dir.path(), Lifecycle::instant());
        let ids = first
            .seed(&Seed {
                count: 2,
                ..Seed::default()
            })
            .unwrap();
        first.pin_status(&ids[0], "Starting").unwrap();
        drop(first);
        let second = kept(dir.path(), Lifecycle::instant());
        let state = second.snapshot();
        let pinned = state["instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["InstanceId"] == ids[0].as_str())
            .unwrap();
        assert_eq!(pinned["Status"], "Starting");
        assert_eq!(pinned["Pinned"], true);
        second.reset();
        drop(second);
        assert_eq!(kept(dir.path(), Lifecycle::instant()).instance_count(), 0);

        let untouched = tempfile::tempdir().unwrap();
        let memory = Emulator::new(Config::for_tests(ID, SECRET).with_state_dir(untouched.path()));
        run(&memory, "m-mem", "token-mem", "n1").await;
        assert_eq!(std::fs::read_dir(untouched.path()).unwrap().count(), 0);
    }
}
