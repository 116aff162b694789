//! The storage-ops service: maya's `StorageOps` (add, read, list, delete volumes) over REST, persisted in its own SQLite, with real local and Docker backends.
//!
//! maya's volume API created non-idempotently (and its rollback deleted the volume that was already
//! there), answered 404 to a repeated delete, left data and objects behind, and listed `null`. Here
//! AddStorage is idempotent by (namespace, name) and spec, DeleteStorage by name, no acknowledged
//! change is ever without both its row and its backend object (on `local` the object is made marked
//! uncommitted before its one commit; see [`ops`]'s add), and a reconciler finishes what a crash
//! interrupted, removes uncommitted objects no row owns, and reports (or removes) other backend
//! objects no volume owns.
//!
//! # Layout
//! - [`Config`]: settings from `BERTH_*` variables ([`env_vars`]), and `DOCKER_HOST` ([`VARS`]
//!   names every one).
//! - [`api`]: the HTTP API, one handler per route, each in the OpenAPI document.
//! - [`ops`]: the logic, one module per idea (add, delete, list and read, reconcile), failing with a
//!   typed [`ops::OpsError`] that [`api`] alone turns into an HTTP answer.
//! - [`store`]: SQLite (WAL, `synchronous = FULL`, one writer with group commit, a reader pool).
//! - [`backend`]: the `local` and `docker` backends behind one trait.
//! - [`locks`]: per-volume locks.
//! - [`router`]: the whole router, a pure function of its state so tests can drive it with `oneshot`.
//! - [`build`]: opens the database, binds the listener, starts the reconciler, and assembles the
//!   [`Application`] that `main` (or `berth up`) runs.

use std::sync::Arc;
use std::time::Duration;

use client::{ClientOptions, ServiceClient};
use service_kit::config::{ConfigError, SqliteServiceConfig, vars};
use service_kit::health::{Check, NotReady};
use service_kit::server::Application;
use service_kit::{Env, HttpConfig, ServiceApp};

pub mod api;
pub mod backend;
pub mod locks;
pub mod ops;
pub mod store;

use crate::ops::{Ops, OrphanPolicy};
use crate::store::{NamespaceQuota, Store};

/// The service's name in logs, metrics and traces.
pub const NAME: &str = "storage-ops";
/// The port it listens on by default.
pub const DEFAULT_PORT: u16 = 8083;

service_kit::declare_variables! {
    /// Every variable storage-ops reads besides the kit's
    /// ([`service_kit::config::vars::EVERY_SERVICE`]), `DOCKER_HOST` among them (one of the Engines
    /// `docker` orchestrators may use when `BERTH_DOCKER_ENDPOINTS` is unset): the binary refuses any
    /// other `BERTH_*` one, and a test checks every name this crate's sources spell is here.
    pub const VARS = [
        env_vars::STORAGE_OPS_DB,
        env_vars::REGISTRY_URL,
        env_vars::REGISTRY_TIMEOUT,
        env_vars::UPSTREAM_TIMEOUT,
        env_vars::RECONCILE_INTERVAL,
        env_vars::ORPHAN_POLICY,
        env_vars::QUOTA_VOLUMES,
        env_vars::QUOTA_VOLUME_BYTES,
        service_kit::config::vars::LOCAL_ROOTS,
        service_kit::config::vars::DOCKER_ENDPOINTS,
        service_kit::config::vars::LOCAL_BASE_PATH,
        service_kit::config::vars::DOCKER_HOST,
        service_kit::config::vars::KUBERNETES_SERVERS,
        service_kit::config::vars::KUBERNETES_SERVICE_HOST,
        env_vars::KUBECONFIG,
        service_kit::watch::vars::MAX_WATCHES,
        service_kit::watch::vars::WATCH_HEARTBEAT,
        service_kit::watch::vars::WATCH_MAX_DURATION,
    ];
    /// Storage-ops' names retired in this release: a service's database is named for the service, as
    /// its address is (`BERTH_STORAGE_OPS_URL`).
    pub const RENAMED = [
        service_kit::config::Renamed::same(
            "BERTH_STORAGE_DB",
            env_vars::STORAGE_OPS_DB,
        ),
    ];
}

/// Names of the variables this service reads besides the common ones.
pub mod env_vars {
    /// The SQLite database file.
    pub const STORAGE_OPS_DB: &str = "BERTH_STORAGE_OPS_DB";
    /// The orchestrator registry's base URL.
    pub const REGISTRY_URL: &str = "BERTH_REGISTRY_URL";
    /// How long one call to the registry may take.
    pub const REGISTRY_TIMEOUT: &str = "BERTH_REGISTRY_TIMEOUT";
    /// How long the gateway waits for storage-ops (the gateway's own variable, read here too so
    /// the registry's time is derived from it, or refused when it does not fit in it).
    pub const UPSTREAM_TIMEOUT: &str = "BERTH_UPSTREAM_TIMEOUT";
    /// How often the reconciler runs (it also runs at start).
    pub const RECONCILE_INTERVAL: &str = "BERTH_RECONCILE_INTERVAL";
    /// `report` or `delete`: what the reconciler does with orphans.
    pub const ORPHAN_POLICY: &str = "BERTH_ORPHAN_POLICY";
    /// The most volumes one namespace may hold (unset: no limit).
    pub const QUOTA_VOLUMES: &str = "BERTH_QUOTA_VOLUMES";
    /// The most capacity one namespace's volumes may sum to, a quantity such as `100Gi` (unset: no
    /// limit).
    pub const QUOTA_VOLUME_BYTES: &str = "BERTH_QUOTA_VOLUME_BYTES";
    /// A kubeconfig file with credentials for the API servers `BERTH_KUBERNETES_SERVERS` allows:
    /// a `kubernetes` orchestrator naming a server uses the context whose cluster is that server.
    pub const KUBECONFIG: &str = "BERTH_KUBECONFIG";
}

/// The registry when `BERTH_REGISTRY_URL` is unset.
pub const DEFAULT_REGISTRY_URL: &str = "http://127.0.0.1:8082";
/// How often the reconciler runs by default.
pub const DEFAULT_RECONCILE_INTERVAL: Duration = Duration::from_secs(30);
/// The longest a registry call may take by default, when the caller's deadline leaves room for it
/// (see [`Config::registry_timeout`]).
pub const DEFAULT_REGISTRY_TIMEOUT: Duration = Duration::from_secs(5);
/// Attempts of an idempotent registry call (a second one only when the first could not connect).
pub const REGISTRY_ATTEMPTS: u32 = 2;

/// The service's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listen address (port 8083 by default), HTTP settings (the internal credential is also
    /// presented to the registry), data directory and the SQLite file (`BERTH_STORAGE_OPS_DB`, default
    /// `<data dir>/storage.db`).
    pub service: SqliteServiceConfig,
    /// The registry (`BERTH_REGISTRY_URL`, default `http://127.0.0.1:8082`).
    pub registry_url: String,
    /// One registry call's limit (`BERTH_REGISTRY_TIMEOUT`). Every attempt of a call together
    /// ([`REGISTRY_ATTEMPTS`] of them) must take at most half of the caller's deadline, the shorter
    /// of this service's request timeout and the gateway's `BERTH_UPSTREAM_TIMEOUT` when that is
    /// set: so a hung registry is this service's 503 with Retry-After, answered before the caller
    /// gives up with a 504. Unset, it is `5s` or that share of the deadline, whichever is shorter;
    /// set, a value that breaks the rule stops the service at start.
    pub registry_timeout: Duration,
    /// How often the reconciler runs (`BERTH_RECONCILE_INTERVAL`, default `30s`).
    pub reconcile_interval: Duration,
    /// What the reconciler does with orphans (`BERTH_ORPHAN_POLICY`, `report` or `delete`, default
    /// `report`).
    pub orphan_policy: OrphanPolicy,
    /// Where the orchestrators it uses may point: `BERTH_LOCAL_ROOTS` (default `<data dir>/volumes`
    /// and `BERTH_LOCAL_BASE_PATH`) and `BERTH_DOCKER_ENDPOINTS` (default the local socket and
    /// `DOCKER_HOST`), checked again here because the registry's registrations may be older than
    /// these, or the registry configured apart.
    pub limits: domain::orchestrator::OrchestratorLimits,
    /// What one namespace's volumes may hold (`BERTH_QUOTA_VOLUMES`, `BERTH_QUOTA_VOLUME_BYTES`;
    /// unset, no limit). An AddStorage past either is a 429 naming the quota.
    pub quota: NamespaceQuota,
    /// Credentials for named Kubernetes API servers (`BERTH_KUBECONFIG`; unset: none, so only
    /// in-cluster and servers that take anonymous calls, such as a test's loopback stand-in).
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Watches of a namespace's volumes: heartbeat, longest stream, most open.
    pub watch: service_kit::watch::WatchLimits,
}

impl Config {
    /// Reads the settings; unset variables take their defaults.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let service = SqliteServiceConfig::from_env(
            env,
            DEFAULT_PORT,
            env_vars::STORAGE_OPS_DB,
            "storage.db",
        )?;
        let registry_url = env
            .get(env_vars::REGISTRY_URL)
            .unwrap_or(DEFAULT_REGISTRY_URL)
            .trim_end_matches('/')
            .to_string();
        if !(registry_url.starts_with("http://") || registry_url.starts_with("https://")) {
            return Err(ConfigError {
                var: env_vars::REGISTRY_URL.into(),
                value: registry_url,
                problem: "must be an http:// or https:// URL".into(),
            });
        }
        let registry_timeout = registry_timeout(env, &service.http)?;
        let reconcile_interval =
            env.duration_or(env_vars::RECONCILE_INTERVAL, DEFAULT_RECONCILE_INTERVAL)?;
        if reconcile_interval.is_zero() {
            return Err(ConfigError {
                var: env_vars::RECONCILE_INTERVAL.into(),
                value: "0".into(),
                problem: "must be more than zero".into(),
            });
        }
        let orphan_policy = env.parse_or(env_vars::ORPHAN_POLICY, OrphanPolicy::Report)?;
        let limits = service_kit::config::orchestrator_limits(env)?;
        let quota = NamespaceQuota {
            volumes: match env.get(env_vars::QUOTA_VOLUMES) {
                None => None,
                Some(_) => Some(env.parse_or(env_vars::QUOTA_VOLUMES, 0u64)?),
            },
            bytes: match env.get(env_vars::QUOTA_VOLUME_BYTES) {
                None => None,
                Some(_) => Some(env.bytes_or(env_vars::QUOTA_VOLUME_BYTES, 0)?),
            },
        };
        let kubeconfig = env.get(env_vars::KUBECONFIG).map(std::path::PathBuf::from);
        Ok(Config {
            watch: service_kit::watch::WatchLimits::from_env(env)?,
            limits,
            quota,
            kubeconfig,
            service,
            registry_url,
            registry_timeout,
            reconcile_interval,
            orphan_policy,
        })
    }
}

/// The registry timeout: derived from the caller's deadline, or checked against it (see
/// [`Config::registry_timeout`]).
fn registry_timeout(env: &Env, http: &HttpConfig) -> Result<Duration, ConfigError> {
    let upstream = env.duration_or(env_vars::UPSTREAM_TIMEOUT, Duration::MAX)?;
    let (deadline, bound) = if upstream < http.request_timeout {
        (upstream, env_vars::UPSTREAM_TIMEOUT)
    } else {
        (http.request_timeout, vars::REQUEST_TIMEOUT)
    };
    let longest = deadline / (2 * REGISTRY_ATTEMPTS);
    let Some(text) = env.get(env_vars::REGISTRY_TIMEOUT) else {
        return Ok(DEFAULT_REGISTRY_TIMEOUT.min(longest));
    };
    let chosen = env.duration_or(env_vars::REGISTRY_TIMEOUT, DEFAULT_REGISTRY_TIMEOUT)?;
    let refuse = |problem: String| ConfigError {
        var: env_vars::REGISTRY_TIMEOUT.into(),
        value: text.to_string(),
        problem,
    };
    if chosen.is_zero() {
        return Err(refuse("must be more than zero".into()));
    }
    if chosen > longest {
        return Err(refuse(format!(
            "does not fit in the caller's deadline: {REGISTRY_ATTEMPTS} attempts must take at most half of {bound}={deadline:?}, so at most {longest:?} each; lower it, or raise {bound}"
        )));
    }
    Ok(chosen)
}

/// The service's router over `ops`.
pub fn router(config: &Config, ops: Arc<Ops>) -> axum::Router {
    let db = ops.clone();
    let registry = ops.clone();
    ServiceApp::new(NAME, api::routes(ops, config.watch.clone()))
        .document_edits(api::document_links)
        .metric_prefixes(&["berth_storage_"])
        .http_config(config.service.http.clone())
        // Readiness answers say what is wrong, never where (no internal host, port or path): the
        // details go to the log.
        .readiness(Check::new("db", move || {
            let ops = db.clone();
            async move {
                ops.store().ping().await.map_err(|e| {
                    tracing::warn!(error = %e, "readiness: the database does not answer");
                    NotReady::new("the database does not answer")
                })
            }
        }))
        .readiness(Check::new("registry", move || {
            let ops = registry.clone();
            async move {
                ops.registry().service().ready().await.map_err(|e| {
                    tracing::warn!(error = %e, "readiness: the orchestrator registry is not ready");
                    NotReady::new(format!(
                        "the orchestrator registry is not ready ({})",
                        e.public_reason()
                    ))
                })
            }
        }))
        .into_router()
}

/// Opens the store and wires the logic to the registry at `config.registry_url`.
pub async fn ops(config: &Config) -> Result<Arc<Ops>, Box<dyn std::error::Error + Send + Sync>> {
    if let Some(dir) = config
        .service
        .db_path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir).map_err(|e| {
            format!(
                "cannot make the directory of {} ({e}); set {} or {}",
                config.service.db_path.display(),
                vars::DATA_DIR,
                env_vars::STORAGE_OPS_DB
            )
        })?;
    }
    let store = Store::open_with_quota(&config.service.db_path, config.quota)
        .await
        .map_err(|e| {
            format!(
                "cannot open the database {} ({e}); set {}",
                config.service.db_path.display(),
                env_vars::STORAGE_OPS_DB
            )
        })?;
    let registry = client::registry::Client::new(ServiceClient::new(
        &config.registry_url,
        ClientOptions {
            timeout: config.registry_timeout,
            bearer: config.service.http.internal_token.clone(),
            attempts: REGISTRY_ATTEMPTS,
            // The registry's log and trace show the request that caused the call.
            propagation: Some(client::Propagation::new(
                service_kit::outbound::inject_propagation,
            )),
        },
    ));
    Ok(Arc::new(
        Ops::new(store, registry, config.orphan_policy, config.limits.clone())
            .with_kubeconfig(config.kubeconfig.clone()),
    ))
}

/// Runs the reconciler: once now, then every `interval`.
pub async fn reconcile_forever(ops: Arc<Ops>, interval: Duration) {
    loop {
        ops.reconcile_once().await;
        tokio::time::sleep(interval).await;
    }
}

/// Binds the listener and builds the application, reconciler included.
pub async fn build(
    config: Config,
) -> Result<Application, Box<dyn std::error::Error + Send + Sync>> {
    let listener = service_kit::server::bind(config.service.listen, vars::LISTEN).await?;
    build_on(config, listener).await
}

/// Builds the application, reconciler included, on a listener already bound (`berth up` binds
/// every port before it builds any service, so a port the OS picks is known to the others).
pub async fn build_on(
    config: Config,
    listener: tokio::net::TcpListener,
) -> Result<Application, Box<dyn std::error::Error + Send + Sync>> {
    let ops = ops(&config).await?;
    let mut app = Application::new(router(&config, ops.clone()), listener);
    app.background.push(tokio::spawn(reconcile_forever(
        ops,
        config.reconcile_interval,
    )));
    Ok(app)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bad_values() {
        let c = Config::from_env(&Env::default()).unwrap();
        assert_eq!(
            c.service.db_path,
            std::path::PathBuf::from("./berth-data/storage.db")
        );
        assert_eq!(c.registry_url, DEFAULT_REGISTRY_URL);
        assert_eq!(c.reconcile_interval, DEFAULT_RECONCILE_INTERVAL);
        assert_eq!(c.orphan_policy, OrphanPolicy::Report);
        let c = Config::from_env(
            &Env::default()
                .with(vars::DATA_DIR, "/srv/b")
                .with(env_vars::ORPHAN_POLICY, "delete"),
        )
        .unwrap();
        assert_eq!(
            c.service.db_path,
            std::path::PathBuf::from("/srv/b/storage.db")
        );
        assert_eq!(c.orphan_policy, OrphanPolicy::Delete);
        for (var, value) in [
            (env_vars::ORPHAN_POLICY, "purge"),
            (env_vars::RECONCILE_INTERVAL, "soon"),
            (env_vars::REGISTRY_URL, "registry:8082"),
        ] {
            let e = Config::from_env(&Env::default().with(var, value))
                .unwrap_err()
                .to_string();
            assert!(e.contains(var), "{e}");
        }
    }

    #[test]
    fn the_registry_timeout_is_derived_from_the_callers_deadline_or_refused() {
        let ms = Duration::from_millis;
        // The registry's attempts take at most half the time the caller waits.
        let c = Config::from_env(&Env::default()).unwrap();
        assert_eq!(c.registry_timeout, DEFAULT_REGISTRY_TIMEOUT);
        let c = Config::from_env(&Env::default().with(env_vars::UPSTREAM_TIMEOUT, "2s")).unwrap();
        assert_eq!(c.registry_timeout, ms(500));
        assert!(c.registry_timeout * REGISTRY_ATTEMPTS <= ms(1000));
        let c = Config::from_env(&Env::default().with(vars::REQUEST_TIMEOUT, "6s")).unwrap();
        assert_eq!(c.registry_timeout, ms(1500));
        let c = Config::from_env(
            &Env::default()
                .with(env_vars::UPSTREAM_TIMEOUT, "10s")
                .with(env_vars::REGISTRY_TIMEOUT, "2500ms"),
        )
        .unwrap();
        assert_eq!(c.registry_timeout, ms(2500));
        // An explicit registry timeout the caller would not wait for is refused at start, naming
        // both settings, instead of reaching callers as a 504 without Retry-After.
        for (env, bound) in [
            (
                Env::default()
                    .with(env_vars::UPSTREAM_TIMEOUT, "2s")
                    .with(env_vars::REGISTRY_TIMEOUT, "5s"),
                env_vars::UPSTREAM_TIMEOUT,
            ),
            (
                Env::default()
                    .with(env_vars::UPSTREAM_TIMEOUT, "10s")
                    .with(env_vars::REGISTRY_TIMEOUT, "2600ms"),
                env_vars::UPSTREAM_TIMEOUT,
            ),
            (
                Env::default()
                    .with(vars::REQUEST_TIMEOUT, "6s")
                    .with(env_vars::REGISTRY_TIMEOUT, "5s"),
                vars::REQUEST_TIMEOUT,
            ),
        ] {
            let e = Config::from_env(&env).unwrap_err();
            assert_eq!(e.var, env_vars::REGISTRY_TIMEOUT);
            assert!(e.problem.contains(bound), "{e}");
        }
        let e =
            Config::from_env(&Env::default().with(env_vars::REGISTRY_TIMEOUT, "0s")).unwrap_err();
        assert_eq!(e.var, env_vars::REGISTRY_TIMEOUT);
    }
}
