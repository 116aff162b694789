//! The orchestrator-registry service: maya's `orchprovider` registry of orchestrator kinds and registered orchestrators, persisted in its own SQLite.
//!
//! maya kept its registry in a process-global map filled at start, crashed on a duplicate registration
//! and built a fresh instance on every lookup. Here the registry is a small REST service over SQLite:
//! registrations are idempotent, survive restarts, carry a resourceVersion for optimistic concurrency,
//! and exactly one of them may be the default that storage-ops falls back on.
//!
//! # Layout
//! - [`Config`]: settings from `BERTH_*` variables (and the three detection variables).
//! - [`api`]: the HTTP API, one handler per route, each in the OpenAPI document.
//! - [`store`]: the SQLite store (WAL, `BEGIN IMMEDIATE` writes, one-default index).
//! - [`detect`]: which kind the environment implies; the Docker Engine probe is injectable.
//! - [`router`]: the whole router, a pure function of its state so tests can drive it with `oneshot`.
//! - [`build`]: opens the database, registers the detected default on a first start, binds the
//!   listener and assembles the [`Application`] that `main` (or `berth up`) runs.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use domain::OrchestratorKind;
use domain::orchestrator::{DockerConfig, LocalConfig, normalize_base_path};
use service_kit::config::{ConfigError, listen_addr, vars};
use service_kit::health::Check;
use service_kit::server::Application;
use service_kit::{Env, HttpConfig, ServiceApp};

pub mod api;
pub mod detect;
pub mod store;

use crate::api::AppState;
use crate::detect::{DetectionEnv, EngineProbe, PingProbe};
use crate::store::{Registration, Store};

/// The service's name in logs, metrics and traces.
pub const NAME: &str = "orchestrator-registry";
/// The port it listens on by default.
pub const DEFAULT_PORT: u16 = 8082;

/// Names of the variables this service reads besides the common ones.
pub mod env_vars {
    /// The SQLite database file.
    pub const REGISTRY_DB: &str = "BERTH_REGISTRY_DB";
    /// The `basePath` of the `local` orchestrator registered on a first start.
    pub const LOCAL_BASE_PATH: &str = "BERTH_LOCAL_BASE_PATH";
    /// How long detection waits for a Docker Engine to answer `GET /_ping`.
    pub const DOCKER_PING_TIMEOUT: &str = "BERTH_DOCKER_PING_TIMEOUT";
}

/// How long detection waits for a Docker Engine by default.
pub const DEFAULT_DOCKER_PING_TIMEOUT: Duration = Duration::from_millis(500);

/// The service's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen (`BERTH_LISTEN`, default `127.0.0.1:8082`).
    pub listen: std::net::SocketAddr,
    /// Timeouts, body limit, internal credential.
    pub http: HttpConfig,
    /// Where state lives (`BERTH_DATA_DIR`, default `./berth-data`).
    pub data_dir: PathBuf,
    /// The SQLite file (`BERTH_REGISTRY_DB`, default `<data dir>/registry.db`).
    pub db_path: PathBuf,
    /// The `basePath` of the `local` orchestrator a first start registers (`BERTH_LOCAL_BASE_PATH`,
    /// default `<data dir>/volumes`), made absolute and normalised.
    pub local_base_path: String,
    /// `KUBERNETES_SERVICE_HOST`, `NOMAD_ADDR`, `DOCKER_HOST`.
    pub detection: DetectionEnv,
    /// Decides whether a Docker Engine is reachable; [`PingProbe`] unless a test injects another.
    pub docker_probe: Arc<dyn EngineProbe>,
}

impl Config {
    /// Reads the settings; unset variables take their defaults.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let data_dir = service_kit::config::data_dir(env);
        let db_path = env
            .get(env_vars::REGISTRY_DB)
            .map(PathBuf::from)
            .unwrap_or_else(|| data_dir.join("registry.db"));
        let (base_var, base_text) = match env.get(env_vars::LOCAL_BASE_PATH) {
            Some(p) => (env_vars::LOCAL_BASE_PATH, PathBuf::from(p)),
            None => (vars::DATA_DIR, data_dir.join("volumes")),
        };
        let local_base_path = absolute_normalised(&base_text)
            .and_then(|p| normalize_base_path(base_var, &p).map_err(|s| s.message))
            .map_err(|problem| ConfigError {
                var: base_var.to_string(),
                value: base_text.display().to_string(),
                problem,
            })?;
        let ping_timeout =
            env.duration_or(env_vars::DOCKER_PING_TIMEOUT, DEFAULT_DOCKER_PING_TIMEOUT)?;
        Ok(Config {
            listen: listen_addr(env, DEFAULT_PORT)?,
            http: HttpConfig::from_env(env)?,
            data_dir,
            db_path,
            local_base_path,
            detection: DetectionEnv::from_env(env),
            docker_probe: Arc::new(PingProbe {
                timeout: ping_timeout,
            }),
        })
    }
}

/// `path` made absolute against the working directory, with `.` and `..` resolved lexically (the
/// operator meant the directory the text names, and the registry must store a path without `..`).
fn absolute_normalised(path: &Path) -> Result<String, String> {
    let absolute =
        std::path::absolute(path).map_err(|e| format!("cannot be made absolute: {e}"))?;
    let mut out = PathBuf::from("/");
    for component in absolute.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out.to_str()
        .map(str::to_string)
        .ok_or_else(|| "is not valid UTF-8".to_string())
}

/// The service's router over an opened store.
pub fn router(config: &Config, store: Store) -> axum::Router {
    let state = AppState {
        store: store.clone(),
        detection: Arc::new(config.detection.clone()),
        probe: config.docker_probe.clone(),
    };
    ServiceApp::new(NAME, api::routes(state))
        .http_config(config.http.clone())
        .readiness(Check::new("db", move || {
            let store = store.clone();
            async move {
                // What is wrong, not where: the database's path and error go to the log.
                store.ping().await.map_err(|e| {
                    tracing::warn!(error = %e, "readiness: the database does not answer");
                    "the database does not answer".to_string()
                })
            }
        }))
        .into_router()
}

/// On a first start (a database never bootstrapped and empty), registers the detected kind as the
/// default orchestrator, named after its kind.
pub async fn bootstrap(
    config: &Config,
    store: &Store,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    if store.is_bootstrapped().await? {
        return Ok(());
    }
    let detection = detect::detect(&config.detection, config.docker_probe.as_ref()).await;
    let kind = detection.kind;
    let config_value = match kind {
        OrchestratorKind::Local => LocalConfig {
            base_path: config.local_base_path.clone(),
            capacity: None,
        }
        .to_config(),
        OrchestratorKind::Docker => DockerConfig {
            // Detection only answers docker when this host was usable.
            host: config.detection.docker_host()?,
        }
        .to_config(),
        OrchestratorKind::Kubernetes | OrchestratorKind::Nomad => serde_json::json!({}),
    };
    let want = Registration {
        kind,
        label: String::new(),
        region: String::new(),
        config: kind.validate_config(Some(&config_value))?,
        default: Some(true),
    };
    if let Some(o) = store.bootstrap(kind.as_str(), &want).await? {
        tracing::info!(
            name = %o.name,
            kind = %o.kind,
            rule = ?detection.rule,
            reason = %detection.reason,
            "first start: registered the detected orchestrator as the default"
        );
    }
    Ok(())
}

/// Opens the database, bootstraps it on a first start, binds the listener and builds the application.
pub async fn build(
    config: Config,
) -> Result<Application, Box<dyn std::error::Error + Send + Sync>> {
    let store = Store::open(&config.db_path).await?;
    bootstrap(&config, &store).await?;
    let listener = service_kit::server::bind(config.listen, vars::LISTEN).await?;
    Ok(Application::new(router(&config, store), listener))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_live_under_the_data_directory() {
        let c =
            Config::from_env(&Env::default().with(vars::DATA_DIR, "/srv/berth/./x/..")).unwrap();
        assert_eq!(c.db_path, PathBuf::from("/srv/berth/./x/../registry.db"));
        assert_eq!(c.local_base_path, "/srv/berth/volumes");
        let c = Config::from_env(&Env::default()).unwrap();
        assert!(c.local_base_path.starts_with('/'));
        assert!(c.local_base_path.ends_with("/berth-data/volumes"));
        assert_eq!(c.db_path, PathBuf::from("./berth-data/registry.db"));
    }

    #[test]
    fn overrides_and_refusals() {
        let env = Env::default()
            .with(env_vars::REGISTRY_DB, "/tmp/r.db")
            .with(env_vars::LOCAL_BASE_PATH, "/mnt/vols/")
            .with("DOCKER_HOST", "tcp://d:2375");
        let c = Config::from_env(&env).unwrap();
        assert_eq!(c.db_path, PathBuf::from("/tmp/r.db"));
        assert_eq!(c.local_base_path, "/mnt/vols");
        assert_eq!(c.detection.docker_host.as_deref(), Some("tcp://d:2375"));
        let e = Config::from_env(&Env::default().with(env_vars::LOCAL_BASE_PATH, "/")).unwrap_err();
        assert_eq!(e.var, env_vars::LOCAL_BASE_PATH);
        let e = Config::from_env(&Env::default().with(env_vars::DOCKER_PING_TIMEOUT, "soon"))
            .unwrap_err();
        assert_eq!(e.var, env_vars::DOCKER_PING_TIMEOUT);
    }
}
