//! The machine-controller service: MCM's machine controller over REST. It stores secrets (sealed),
//! machine classes, machines, machine sets and machine deployments in its own SQLite, and keeps
//! the machines they ask for running by calling the machine driver, which stays the stateless MCM
//! driver contract.
//!
//! # Layout
//! - [`Config`]: settings from `BERTH_*` variables ([`env_vars`]; [`VARS`] names every one).
//! - [`api`]: the HTTP API, one documented set of routes per kind, written once over the kind;
//!   [`stream`] answers a list's `watch=true`.
//! - [`objects`]: what a write of each kind must be (checks, the driver's class check, what may
//!   not be deleted while used).
//! - [`store`]: SQLite (WAL, `synchronous = FULL`), a resourceVersion sequence per namespace, one
//!   writing connection whose writes share commits (group commit); every committed change goes to
//!   the feed ([`service_kit::watch::Feed`]) watches and reconcilers follow.
//! - [`seal`]: AES-256-GCM sealing of secrets' values with the operator's keys.
//! - [`reconcile`]: the machine, machine-set and deployment controllers, on one work queue.
//! - [`build`]: opens the store and keys, reseals secrets after a key rotation, starts the
//!   reconcilers and binds the listener.

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use client::{ClientOptions, ServiceClient};
use service_kit::config::{ConfigError, SqliteServiceConfig, vars};
use service_kit::health::{Check, NotReady};
use service_kit::server::Application;
use service_kit::watch::WatchLimits;
use service_kit::{Env, ServiceApp};

pub mod api;
pub mod objects;
pub mod reconcile;
pub mod seal;
pub mod store;
pub mod stream;

use crate::objects::Writer;
use crate::reconcile::{Controller, Settings};
use crate::seal::Keyring;
use crate::store::Store;

/// The service's name in logs, metrics and traces.
pub const NAME: &str = "machine-controller";
/// The port it listens on by default.
pub const DEFAULT_PORT: u16 = 8084;

service_kit::declare_variables! {
    /// Every variable the controller reads besides the kit's: the binary refuses any other
    /// `BERTH_*` one, and a test checks every name this crate's sources spell is here.
    pub const VARS = [
        env_vars::CONTROLLER_DB,
        env_vars::KEY_FILE,
        env_vars::MACHINE_DRIVER_URL,
        env_vars::MACHINE_DRIVER_TIMEOUT,
        env_vars::MAX_REPLICAS,
        env_vars::CREATION_TIMEOUT,
        env_vars::HEALTH_TIMEOUT,
        env_vars::RESYNC,
        env_vars::BACKOFF_MAX,
        env_vars::EXHAUSTED_RETRY,
        env_vars::CLASS_CALLS,
        env_vars::WORKERS,
        env_vars::KEEP_FAILED,
        env_vars::ORPHAN_INTERVAL,
        service_kit::watch::vars::MAX_WATCHES,
        service_kit::watch::vars::WATCH_HEARTBEAT,
        service_kit::watch::vars::WATCH_MAX_DURATION,
    ];
    /// The controller's names retired in this release: the most watches is one setting for every
    /// service that serves them.
    pub const RENAMED = [
        service_kit::config::Renamed::same(
            "BERTH_CONTROLLER_MAX_WATCHES",
            service_kit::watch::vars::MAX_WATCHES,
        ),
    ];
}

/// Names of the variables this service reads besides the common ones.
pub mod env_vars {
    /// The SQLite database file (default `<data dir>/controller.db`).
    pub const CONTROLLER_DB: &str = "BERTH_CONTROLLER_DB";
    /// The key file secrets are sealed with (default `<data dir>/controller.key`, made on a first
    /// start).
    pub const KEY_FILE: &str = "BERTH_CONTROLLER_KEY_FILE";
    /// The machine driver's base URL (the gateway's variable of the same name).
    pub const MACHINE_DRIVER_URL: &str = "BERTH_MACHINE_DRIVER_URL";
    /// How long one driver call may take (the gateway's variable of the same name).
    pub const MACHINE_DRIVER_TIMEOUT: &str = "BERTH_MACHINE_DRIVER_TIMEOUT";
    /// The most replicas a set or deployment may ask for.
    pub const MAX_REPLICAS: &str = "BERTH_CONTROLLER_MAX_REPLICAS";
    /// How long a machine may take to run before it is Failed.
    pub const CREATION_TIMEOUT: &str = "BERTH_CONTROLLER_CREATION_TIMEOUT";
    /// How long a machine may be unhealthy before it is Failed.
    pub const HEALTH_TIMEOUT: &str = "BERTH_CONTROLLER_HEALTH_TIMEOUT";
    /// How often everything is looked at again.
    pub const RESYNC: &str = "BERTH_CONTROLLER_RESYNC";
    /// The longest delay between retries of a failing call.
    pub const BACKOFF_MAX: &str = "BERTH_CONTROLLER_BACKOFF_MAX";
    /// How long to wait after ResourceExhausted.
    pub const EXHAUSTED_RETRY: &str = "BERTH_CONTROLLER_EXHAUSTED_RETRY";
    /// Create and delete calls per second per class.
    pub const CLASS_CALLS: &str = "BERTH_CONTROLLER_CLASS_CALLS_PER_SECOND";
    /// Reconciles run at once.
    pub const WORKERS: &str = "BERTH_CONTROLLER_WORKERS";
    /// Failed machines each set keeps for inspection.
    pub const KEEP_FAILED: &str = "BERTH_CONTROLLER_KEEP_FAILED";
    /// How often VMs no machine owns are looked for (two sightings this far apart delete one).
    pub const ORPHAN_INTERVAL: &str = "BERTH_CONTROLLER_ORPHAN_INTERVAL";
}

/// The driver when `BERTH_MACHINE_DRIVER_URL` is unset.
pub const DEFAULT_MACHINE_DRIVER_URL: &str = "http://127.0.0.1:8081";

/// The service's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listen address (port 8084), HTTP settings (the internal credential is also presented to
    /// the driver), data directory and the SQLite file.
    pub service: SqliteServiceConfig,
    /// The key file, and whether it is the default one (made on a first start when absent; a
    /// file the operator named is never made behind their back).
    pub key_file: (PathBuf, bool),
    /// The driver's base URL.
    pub driver_url: String,
    /// One driver call's limit.
    pub driver_timeout: Duration,
    /// The most replicas a set or deployment may ask for (default 100).
    pub max_replicas: u32,
    /// The reconcilers' settings.
    pub settings: Settings,
    /// Watches: heartbeat, longest stream, most open.
    pub watch: WatchLimits,
}

fn positive(var: &str, value: Duration) -> Result<Duration, ConfigError> {
    if value.is_zero() {
        return Err(ConfigError {
            var: var.into(),
            value: "0".into(),
            problem: "must be more than zero".into(),
        });
    }
    Ok(value)
}

impl Config {
    /// Reads the settings; unset variables take their defaults.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let service = SqliteServiceConfig::from_env(
            env,
            DEFAULT_PORT,
            env_vars::CONTROLLER_DB,
            "controller.db",
        )?;
        let key_file = match env.get(env_vars::KEY_FILE) {
            Some(path) => (PathBuf::from(path), false),
            None => (service.data_dir.join("controller.key"), true),
        };
        let driver_url = env
            .get(env_vars::MACHINE_DRIVER_URL)
            .unwrap_or(DEFAULT_MACHINE_DRIVER_URL)
            .trim_end_matches('/')
            .to_string();
        if !(driver_url.starts_with("http://") || driver_url.starts_with("https://")) {
            return Err(ConfigError {
                var: env_vars::MACHINE_DRIVER_URL.into(),
                value: driver_url,
                problem: "must be an http:// or https:// URL".into(),
            });
        }
        let defaults = Settings::default();
        let d = |var: &str, default: Duration| {
            env.duration_or(var, default).and_then(|v| positive(var, v))
        };
        let calls: u32 =
            env.parse_or(env_vars::CLASS_CALLS, defaults.class_calls_per_second.get())?;
        let settings = Settings {
            creation_timeout: d(env_vars::CREATION_TIMEOUT, defaults.creation_timeout)?,
            health_timeout: d(env_vars::HEALTH_TIMEOUT, defaults.health_timeout)?,
            resync: d(env_vars::RESYNC, defaults.resync)?,
            backoff_base: defaults.backoff_base,
            backoff_max: d(env_vars::BACKOFF_MAX, defaults.backoff_max)?,
            exhausted_retry: d(env_vars::EXHAUSTED_RETRY, defaults.exhausted_retry)?,
            class_calls_per_second: NonZeroU32::new(calls).ok_or_else(|| ConfigError {
                var: env_vars::CLASS_CALLS.into(),
                value: "0".into(),
                problem: "must be at least 1".into(),
            })?,
            workers: env
                .parse_or(env_vars::WORKERS, defaults.workers)?
                .clamp(1, 1024),
            keep_failed: env.parse_or(env_vars::KEEP_FAILED, defaults.keep_failed)?,
            orphan_interval: d(env_vars::ORPHAN_INTERVAL, defaults.orphan_interval)?,
        };
        Ok(Config {
            key_file,
            driver_url,
            driver_timeout: d(env_vars::MACHINE_DRIVER_TIMEOUT, Duration::from_secs(60))?,
            max_replicas: env.parse_or(env_vars::MAX_REPLICAS, 100u32)?,
            settings,
            watch: WatchLimits::from_env(env)?,
            service,
        })
    }
}

/// The service's router.
pub fn router(config: &Config, writer: Writer) -> axum::Router {
    let db = writer.store.clone();
    let state = api::AppState {
        writer,
        watch: config.watch.clone(),
    };
    ServiceApp::new(NAME, api::routes(state))
        .document_edits(api::document_examples)
        .metric_prefixes(&["berth_controller_"])
        .http_config(config.service.http.clone())
        .readiness(Check::new("db", move || {
            let store = db.clone();
            async move {
                store.ping().await.map_err(|e| {
                    tracing::warn!(error = %e, "readiness: the database does not answer");
                    NotReady::new("the database does not answer")
                })
            }
        }))
        .into_router()
}

/// Opens the store and the keys (resealing secrets sealed with an older key) and wires the driver.
pub async fn writer(config: &Config) -> Result<Writer, Box<dyn std::error::Error + Send + Sync>> {
    let store = Store::open(&config.service.db_path)
        .await
        .map_err(|e| format!("{e}; set {} or {}", vars::DATA_DIR, env_vars::CONTROLLER_DB))?;
    let (key_path, is_default) = &config.key_file;
    let keys = Arc::new(
        Keyring::load(key_path, *is_default)
            .map_err(|e| format!("{e}; set {}", env_vars::KEY_FILE))?,
    );
    let resealed = seal::reseal_all(&store, &keys).await?;
    if resealed > 0 {
        tracing::info!(
            resealed,
            key = keys.sealing_id(),
            "resealed secrets with the key file's first key; older keys may now be removed"
        );
    }
    let driver = client::machines::Client::new(ServiceClient::new(
        &config.driver_url,
        ClientOptions {
            timeout: config.driver_timeout,
            bearer: config.service.http.internal_token.clone(),
            attempts: 2,
            propagation: Some(client::Propagation::new(
                service_kit::outbound::inject_propagation,
            )),
        },
    ));
    Ok(Writer {
        store,
        keys,
        driver,
        max_replicas: config.max_replicas,
    })
}

/// Binds the listener and builds the application, reconcilers included.
pub async fn build(
    config: Config,
) -> Result<Application, Box<dyn std::error::Error + Send + Sync>> {
    let listener = service_kit::server::bind(config.service.listen, vars::LISTEN).await?;
    build_on(config, listener).await
}

/// Builds the application, reconcilers included, on a listener already bound (`berth up` binds
/// every port before it builds any service, so a port the OS picks is known to the others).
pub async fn build_on(
    config: Config,
    listener: tokio::net::TcpListener,
) -> Result<Application, Box<dyn std::error::Error + Send + Sync>> {
    let writer = writer(&config).await?;
    let controller = Controller::new(writer.clone(), config.settings.clone());
    let mut app = Application::new(router(&config, writer), listener);
    app.background.push(tokio::spawn(controller.run()));
    Ok(app)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_refusals() {
        let c = Config::from_env(&Env::default().with(vars::DATA_DIR, "/srv/b")).unwrap();
        assert_eq!(c.service.db_path, PathBuf::from("/srv/b/controller.db"));
        assert_eq!(c.key_file, (PathBuf::from("/srv/b/controller.key"), true));
        assert_eq!(c.driver_url, DEFAULT_MACHINE_DRIVER_URL);
        assert_eq!(c.settings.creation_timeout, Duration::from_secs(1200));
        assert_eq!(c.settings.health_timeout, Duration::from_secs(600));
        let c =
            Config::from_env(&Env::default().with(env_vars::KEY_FILE, "/etc/berth/keys")).unwrap();
        assert_eq!(c.key_file, (PathBuf::from("/etc/berth/keys"), false));
        for (var, value) in [
            (env_vars::MACHINE_DRIVER_URL, "driver:8081"),
            (env_vars::CREATION_TIMEOUT, "0s"),
            (env_vars::CLASS_CALLS, "0"),
            (env_vars::RESYNC, "soon"),
        ] {
            let e = Config::from_env(&Env::default().with(var, value)).unwrap_err();
            assert_eq!(e.var, var, "{value}");
        }
    }
}
