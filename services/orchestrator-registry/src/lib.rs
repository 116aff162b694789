//! The orchestrator-registry service: maya's `orchprovider` registry of orchestrator kinds and registered orchestrators, persisted in its own SQLite.
//!
//! maya kept its registry in a process-global map filled at start, crashed on a duplicate registration
//! and built a fresh instance on every lookup. Here the registry is a small REST service over SQLite:
//! registrations are idempotent, survive restarts, carry a resourceVersion for optimistic concurrency,
//! and exactly one of them may be the default that storage-ops falls back on.
//!
//! # Layout
//! - [`Config`]: settings from `BERTH_*` variables, and the three detection variables, which
//!   [`VARS`] declares with the others so the binary reads them from the process environment.
//! - [`api`]: the HTTP API, one handler per route, each in the OpenAPI document.
//! - [`store`]: the SQLite store (WAL, `BEGIN IMMEDIATE` writes, one-default index).
//! - [`detect`]: which kind the environment implies; the Docker Engine probe is injectable.
//! - [`router`]: the whole router, a pure function of its state so tests can drive it with `oneshot`.
//! - [`build`]: opens the database, registers the detected default on a first start, binds the
//!   listener and assembles the [`Application`] that `main` (or `berth up`) runs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use domain::OrchestratorKind;
use domain::orchestrator::{DockerConfig, KubernetesConfig, LocalConfig, OrchestratorLimits};
use service_kit::config::{ConfigError, SqliteServiceConfig, absolute_base_path, vars};
use service_kit::health::{Check, NotReady};
use service_kit::server::Application;
use service_kit::{Env, ServiceApp};

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

service_kit::declare_variables! {
    /// Every variable the registry reads besides the kit's
    /// ([`service_kit::config::vars::EVERY_SERVICE`]), detection's inputs from other programs among
    /// them: the binary refuses any other `BERTH_*` one, and a test checks every name this crate's
    /// sources spell is here.
    pub const VARS = [
        env_vars::REGISTRY_DB,
        env_vars::LOCAL_BASE_PATH,
        env_vars::LOCAL_ROOTS,
        env_vars::DOCKER_ENDPOINTS,
        env_vars::DOCKER_PING_TIMEOUT,
        env_vars::KUBERNETES_NAMESPACE,
        service_kit::config::vars::KUBERNETES_SERVERS,
        detect::KUBERNETES_SERVICE_HOST,
        detect::NOMAD_ADDR,
        detect::DOCKER_HOST,
        service_kit::watch::vars::MAX_WATCHES,
        service_kit::watch::vars::WATCH_HEARTBEAT,
        service_kit::watch::vars::WATCH_MAX_DURATION,
    ];
    /// The registry's names retired in this release: none.
    pub const RENAMED = [];
}

/// Names of the variables this service reads besides the common ones.
pub mod env_vars {
    /// The SQLite database file.
    pub const REGISTRY_DB: &str = "BERTH_REGISTRY_DB";
    /// The `basePath` of the `local` orchestrator registered on a first start.
    pub const LOCAL_BASE_PATH: &str = service_kit::config::vars::LOCAL_BASE_PATH;
    /// Directories `local` orchestrators may use (see [`Config::limits`]).
    pub const LOCAL_ROOTS: &str = service_kit::config::vars::LOCAL_ROOTS;
    /// Docker Engines `docker` orchestrators may use (see [`Config::limits`]).
    pub const DOCKER_ENDPOINTS: &str = service_kit::config::vars::DOCKER_ENDPOINTS;
    /// How long detection waits for a Docker Engine to answer `GET /_ping`.
    pub const DOCKER_PING_TIMEOUT: &str = "BERTH_DOCKER_PING_TIMEOUT";
    /// The Kubernetes namespace of the claims of the in-cluster orchestrator a first start in a pod
    /// registers (default: the pod's own namespace).
    pub const KUBERNETES_NAMESPACE: &str = "BERTH_KUBERNETES_NAMESPACE";
}

/// Where a pod's service account says which namespace the pod runs in.
pub const POD_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
/// The claims' namespace when neither `BERTH_KUBERNETES_NAMESPACE` nor the pod says one.
pub const DEFAULT_KUBERNETES_NAMESPACE: &str = "berth-volumes";

/// How long detection waits for a Docker Engine by default.
pub const DEFAULT_DOCKER_PING_TIMEOUT: Duration = Duration::from_millis(500);

/// The service's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listen address (port 8082 by default), HTTP settings, data directory and the SQLite file
    /// (`BERTH_REGISTRY_DB`, default `<data dir>/registry.db`).
    pub service: SqliteServiceConfig,
    /// The `basePath` of the `local` orchestrator a first start registers (`BERTH_LOCAL_BASE_PATH`,
    /// default `<data dir>/volumes/local`), made absolute and normalised.
    pub local_base_path: String,
    /// Where registrations may point: `BERTH_LOCAL_ROOTS` (default `<data dir>/volumes` and
    /// `BERTH_LOCAL_BASE_PATH`) and `BERTH_DOCKER_ENDPOINTS` (default the local socket and
    /// `DOCKER_HOST`).
    pub limits: OrchestratorLimits,
    /// `KUBERNETES_SERVICE_HOST`, `NOMAD_ADDR`, `DOCKER_HOST`.
    pub detection: DetectionEnv,
    /// The claims' namespace of the in-cluster `kubernetes` orchestrator a first start in a pod
    /// registers: `BERTH_KUBERNETES_NAMESPACE`, else the pod's own ([`POD_NAMESPACE_FILE`]), else
    /// [`DEFAULT_KUBERNETES_NAMESPACE`].
    pub kubernetes_namespace: String,
    /// Decides whether a Docker Engine is reachable; [`PingProbe`] unless a test injects another.
    pub docker_probe: Arc<dyn EngineProbe>,
    /// Watches of the list: heartbeat, longest stream, most open.
    pub watch: service_kit::watch::WatchLimits,
}

impl Config {
    /// Reads the settings; unset variables take their defaults.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let service =
            SqliteServiceConfig::from_env(env, DEFAULT_PORT, env_vars::REGISTRY_DB, "registry.db")?;
        let data_dir = &service.data_dir;
        let (base_var, base_text) = match env.get(env_vars::LOCAL_BASE_PATH) {
            Some(p) => (env_vars::LOCAL_BASE_PATH, PathBuf::from(p)),
            // In its own directory under the default root, not the root itself: so another `local`
            // orchestrator can sit beside it under the root (two base paths may not nest).
            None => (vars::DATA_DIR, data_dir.join("volumes").join("local")),
        };
        let local_base_path =
            absolute_base_path(base_var, &base_text).map_err(|problem| ConfigError {
                var: base_var.to_string(),
                value: base_text.display().to_string(),
                problem: problem.to_string(),
            })?;
        let limits = service_kit::config::orchestrator_limits(env)?;
        // The first start's own registration must be one the registry would accept.
        limits
            .check_base_path(base_var, &local_base_path)
            .map_err(|s| ConfigError {
                var: base_var.to_string(),
                value: base_text.display().to_string(),
                problem: s
                    .message
                    .trim_start_matches(&format!("{base_var}: "))
                    .to_string(),
            })?;
        let ping_timeout =
            env.duration_or(env_vars::DOCKER_PING_TIMEOUT, DEFAULT_DOCKER_PING_TIMEOUT)?;
        let kubernetes_namespace = match env.get(env_vars::KUBERNETES_NAMESPACE) {
            Some(ns) => {
                domain::names::validate_dns1123_label(env_vars::KUBERNETES_NAMESPACE, ns).map_err(
                    |s| ConfigError {
                        var: env_vars::KUBERNETES_NAMESPACE.to_string(),
                        value: ns.to_string(),
                        problem: s.message,
                    },
                )?;
                ns.to_string()
            }
            None => pod_namespace().unwrap_or_else(|| DEFAULT_KUBERNETES_NAMESPACE.to_string()),
        };
        Ok(Config {
            service,
            local_base_path,
            kubernetes_namespace,
            limits,
            detection: DetectionEnv::from_env(env),
            docker_probe: Arc::new(PingProbe {
                timeout: ping_timeout,
            }),
            watch: service_kit::watch::WatchLimits::from_env(env)?,
        })
    }
}

/// The service's router over an opened store.
pub fn router(config: &Config, store: Store) -> axum::Router {
    let state = AppState {
        limits: Arc::new(config.limits.clone()),
        store: store.clone(),
        detection: Arc::new(config.detection.clone()),
        probe: config.docker_probe.clone(),
        watch: config.watch.clone(),
    };
    ServiceApp::new(NAME, api::routes(state))
        .document_edits(api::document_links)
        .http_config(config.service.http.clone())
        .readiness(Check::new("db", move || {
            let store = store.clone();
            async move {
                // What is wrong, not where: the database's path and error go to the log.
                store.ping().await.map_err(|e| {
                    tracing::warn!(error = %e, "readiness: the database does not answer");
                    NotReady::new("the database does not answer")
                })
            }
        }))
        .into_router()
}

/// On a first start (a database never bootstrapped and empty), registers the detected kind as the
/// default orchestrator, named after its kind. In a pod that is an in-cluster `kubernetes` one, whose
/// claims go in [`Config::kubernetes_namespace`], so the volumes are claims pods can mount, not
/// directories inside Berth's pod. A detected kind that cannot serve volumes (nomad: Berth has no
/// StorageOps for it) would make every AddStorage without an orchestrator a 412, so `local` is
/// registered as the default in its place, on `BERTH_LOCAL_BASE_PATH`; detection itself still answers
/// the detected kind, and an operator switches with `berth orchestrator register NAME --kind K
/// --default`.
pub async fn bootstrap(
    config: &Config,
    store: &Store,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    if store.is_bootstrapped().await? {
        return Ok(());
    }
    let detection = detect::detect(&config.detection, config.docker_probe.as_ref()).await;
    let kind = if detection.kind.supports_storage_ops() {
        detection.kind
    } else {
        tracing::info!(
            detected = %detection.kind,
            "first start: the detected kind cannot serve volumes; registering local as the default instead"
        );
        OrchestratorKind::Local
    };
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
        // In a pod: claims in the cluster the pod runs in, through its service account.
        OrchestratorKind::Kubernetes => KubernetesConfig::from_config(&serde_json::json!({
            "namespace": config.kubernetes_namespace,
        }))?
        .to_config(),
        OrchestratorKind::Nomad => {
            unreachable!("a kind without StorageOps is never the first start's default")
        }
    };
    let config_value = kind.validate_config(Some(&config_value))?;
    // A detected Engine the operator does not allow is not registered behind their back.
    config.limits.check(kind, &config_value)?;
    let want = Registration {
        kind,
        label: String::new(),
        region: String::new(),
        config: config_value,
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
    let listener = service_kit::server::bind(config.service.listen, vars::LISTEN).await?;
    build_on(config, listener).await
}

/// Opens the database, bootstraps it on a first start, and builds the application on a listener
/// already bound (`berth up` binds every port before it builds any service, so a port the OS picks
/// is known to the others).
pub async fn build_on(
    config: Config,
    listener: tokio::net::TcpListener,
) -> Result<Application, Box<dyn std::error::Error + Send + Sync>> {
    let store = Store::open(&config.service.db_path).await?;
    bootstrap(&config, &store).await?;
    Ok(Application::new(router(&config, store), listener))
}

/// The pod's namespace, read from its service account's file: at most one DNS-1123 label, or none.
fn pod_namespace() -> Option<String> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(POD_NAMESPACE_FILE)
        .ok()?
        .take(64)
        .read_to_string(&mut text)
        .ok()?;
    let ns = text.trim();
    domain::names::validate_dns1123_label("namespace", ns)
        .is_ok()
        .then(|| ns.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_live_under_the_data_directory() {
        let c =
            Config::from_env(&Env::default().with(vars::DATA_DIR, "/srv/berth/./x/..")).unwrap();
        assert_eq!(
            c.service.db_path,
            PathBuf::from("/srv/berth/./x/../registry.db")
        );
        assert_eq!(c.local_base_path, "/srv/berth/volumes/local");
        let c = Config::from_env(&Env::default()).unwrap();
        assert!(c.local_base_path.starts_with('/'));
        assert!(c.local_base_path.ends_with("/berth-data/volumes/local"));
        assert_eq!(c.service.db_path, PathBuf::from("./berth-data/registry.db"));
    }

    #[test]
    fn overrides_and_refusals() {
        let env = Env::default()
            .with(env_vars::REGISTRY_DB, "/tmp/r.db")
            .with(env_vars::LOCAL_BASE_PATH, "/mnt/vols/")
            .with("DOCKER_HOST", "tcp://d:2375");
        let c = Config::from_env(&env).unwrap();
        assert_eq!(c.service.db_path, PathBuf::from("/tmp/r.db"));
        assert_eq!(c.local_base_path, "/mnt/vols");
        assert_eq!(c.detection.docker_host.as_deref(), Some("tcp://d:2375"));
        let e = Config::from_env(&Env::default().with(env_vars::LOCAL_BASE_PATH, "/")).unwrap_err();
        assert_eq!(e.var, env_vars::LOCAL_BASE_PATH);
        let e = Config::from_env(&Env::default().with(env_vars::DOCKER_PING_TIMEOUT, "soon"))
            .unwrap_err();
        assert_eq!(e.var, env_vars::DOCKER_PING_TIMEOUT);
    }

    #[test]
    fn the_first_start_base_path_must_be_under_the_roots() {
        let c =
            Config::from_env(&Env::default().with(env_vars::LOCAL_BASE_PATH, "/mnt/vols")).unwrap();
        assert!(c.limits.local_roots.contains(&"/mnt/vols".to_string()));
        let e = Config::from_env(
            &Env::default()
                .with(env_vars::LOCAL_BASE_PATH, "/mnt/vols")
                .with(env_vars::LOCAL_ROOTS, "/srv"),
        )
        .unwrap_err();
        assert_eq!(e.var, env_vars::LOCAL_BASE_PATH);
        assert!(e.problem.contains(env_vars::LOCAL_ROOTS), "{e}");
        Config::from_env(
            &Env::default()
                .with(env_vars::LOCAL_BASE_PATH, "/srv/vols")
                .with(env_vars::LOCAL_ROOTS, "/srv"),
        )
        .unwrap();
    }
}
