//! The machine-driver service: Gardener MCM's `driver.Driver` contract over REST, with provider plugins chosen by `MachineClass.provider`.
//!
//! The driver is stateless, as MCM's is: every call carries the machine, its class and the secret,
//! and the service keeps nothing between calls. A plugin ([`provider::Provider`]) does the cloud
//! work: [`alicloud::Alicloud`] (Alibaba Cloud ECS, or the ECS emulator when
//! `BERTH_ALICLOUD_ENDPOINT` points at one) and [`docker::Docker`] (a machine is a container on a
//! Docker Engine).
//!
//! # Layout
//! - [`Config`]: settings from `BERTH_*` variables and `DOCKER_HOST` ([`VARS`] names every one it
//!   reads, [`RENAMED`] the names it retires).
//! - [`provider`]: the [`provider::Provider`] trait and the [`provider::Providers`] registry; the
//!   calls every plugin answers the same way (GetVolumeIDs, ListMachines) are the trait's own, over
//!   the one piece each plugin supplies (`volume_id`, `machines`).
//! - [`alicloud`]: the `Alicloud` plugin and its provider spec.
//! - [`docker`]: the `Docker` plugin, its provider spec and its operator settings.
//! - [`api`]: the HTTP handlers and their OpenAPI descriptions, and the driver's call metrics
//!   (`metric-families` families, served on `/metrics` with the ECS client's).
//! - [`router`]: the HTTP API, a pure function of its state so tests can drive it with `oneshot`.
//! - [`build`]: binds the listener and assembles the [`Application`] that `main` (or `berth up`) runs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use service_kit::config::{ConfigError, Renamed, listen_addr, vars};
use service_kit::server::Application;
use service_kit::{Env, HttpConfig, ServiceApp};

pub mod alicloud;
pub mod api;
pub mod docker;
pub mod provider;

use provider::Providers;

/// The service's name in logs, metrics and traces.
pub const NAME: &str = "machine-driver";
/// The port it listens on by default.
pub const DEFAULT_PORT: u16 = 8081;

service_kit::declare_variables! {
    /// Every variable the machine driver reads besides the kit's
    /// ([`service_kit::config::vars::EVERY_SERVICE`]), Docker's own `DOCKER_HOST` (the Engine of
    /// machines whose secret names none) among them: the binary refuses any other `BERTH_*` one, and a
    /// test checks every name this crate's sources spell is here.
    pub const VARS = [
        ::alicloud::config::env_vars::ENDPOINT,
        ::alicloud::config::env_vars::QPS,
        ::alicloud::config::env_vars::SIGNATURE,
        ::alicloud::config::env_vars::TIMEOUT,
        ::alicloud::config::env_vars::MAX_ATTEMPTS,
        env_vars::CSI_DRIVERS,
        env_vars::REGIONS,
        env_vars::QUOTA_MACHINES,
        env_vars::DOCKER_HOST,
        env_vars::DOCKER_ENDPOINTS,
        env_vars::DOCKER_MOUNT_PATHS,
        env_vars::DOCKER_ALLOW_PRIVILEGED,
        env_vars::DOCKER_REGISTRIES,
        env_vars::DOCKER_MEMORY,
        env_vars::DOCKER_CPUS,
        env_vars::DOCKER_PIDS,
        env_vars::DOCKER_NETWORKS,
        env_vars::DOCKER_INSTANCE,
    ];
    /// The machine driver's names retired in this release: a duration takes a duration, not a bare
    /// number of milliseconds; the Engines Berth may use have one name in every service.
    pub const RENAMED = [
        Renamed::milliseconds(
            ::alicloud::config::env_vars::TIMEOUT_MS,
            ::alicloud::config::env_vars::TIMEOUT,
        ),
        Renamed::same("BERTH_DOCKER_HOSTS", env_vars::DOCKER_ENDPOINTS),
    ];
}

/// Names of the variables the machine driver reads besides the kit's and the ECS client's
/// (`alicloud::config::env_vars`).
pub mod env_vars {
    /// `BERTH_ALICLOUD_CSI_DRIVERS`: comma-separated CSI driver names whose `volumeHandle` is an ECS disk
    /// id, besides `diskplugin.csi.alibabacloud.com`.
    pub const CSI_DRIVERS: &str = "BERTH_ALICLOUD_CSI_DRIVERS";

    /// `BERTH_ALICLOUD_REGIONS`: comma-separated region ids the Alicloud provider may use (the
    /// operator's allow-list). Unset: any region ECS is known to serve, or, with
    /// `BERTH_ALICLOUD_ENDPOINT` set, any well-formed region id.
    pub const REGIONS: &str = "BERTH_ALICLOUD_REGIONS";

    /// `BERTH_QUOTA_MACHINES`: the most machines one namespace may have (unset: no limit). A
    /// CreateMachine that would make a new one past it is ResourceExhausted (429) naming the quota.
    pub const QUOTA_MACHINES: &str = "BERTH_QUOTA_MACHINES";

    /// `DOCKER_HOST`: the Engine machines go to when a class's secret names none (default: the local
    /// socket), as the Docker CLI reads it.
    pub const DOCKER_HOST: &str = "DOCKER_HOST";
    /// `BERTH_DOCKER_ENDPOINTS`: comma-separated Engine addresses a secret's `dockerHost` may name,
    /// besides the default Engine. Unset: the local socket only. The registry and storage-ops read the
    /// same name for the Engines a `docker` orchestrator may use: one list of the Engines Berth may use
    /// (it was `BERTH_DOCKER_HOSTS` here, still read for one release).
    pub const DOCKER_ENDPOINTS: &str = service_kit::config::vars::DOCKER_ENDPOINTS;
    /// `BERTH_DOCKER_MOUNT_PATHS`: comma-separated absolute host directories whose contents `mounts` may
    /// bind into machines. Unset: none.
    pub const DOCKER_MOUNT_PATHS: &str = "BERTH_DOCKER_MOUNT_PATHS";
    /// `BERTH_DOCKER_ALLOW_PRIVILEGED`: whether a class may ask for `privileged: true` (default false).
    pub const DOCKER_ALLOW_PRIVILEGED: &str = "BERTH_DOCKER_ALLOW_PRIVILEGED";
    /// `BERTH_DOCKER_REGISTRIES`: comma-separated registries (`host[:port]`) `pull: IfNotPresent` may
    /// pull from. Unset: `docker.io`.
    pub const DOCKER_REGISTRIES: &str = "BERTH_DOCKER_REGISTRIES";

    /// `BERTH_DOCKER_MEMORY`: the most memory a machine may have, and what it gets when its class names
    /// none (a quantity, default `512Mi`).
    pub const DOCKER_MEMORY: &str = "BERTH_DOCKER_MEMORY";
    /// `BERTH_DOCKER_CPUS`: the most CPUs a machine may have, and what it gets when its class names none
    /// (default `1`).
    pub const DOCKER_CPUS: &str = "BERTH_DOCKER_CPUS";
    /// `BERTH_DOCKER_PIDS`: the most processes (and threads) a machine may run at once, and its limit when
    /// its class names none (default `256`).
    pub const DOCKER_PIDS: &str = "BERTH_DOCKER_PIDS";
    /// `BERTH_DOCKER_INSTANCE`: the stack this driver's Docker machines belong to (a DNS-1123 label).
    /// Set, every container it makes carries it (a label, and its name), and it sees no container
    /// without it; unset, it sees only containers carrying none. Two stacks on one Engine, each with its
    /// own, never list, block or touch each other's machines (`berth up` gives each data directory one).
    pub const DOCKER_INSTANCE: &str = "BERTH_DOCKER_INSTANCE";
    /// `BERTH_DOCKER_NETWORKS`: comma-separated Docker networks a class's `network` may name. Unset:
    /// `bridge`, the Engine's default network (what a class naming none joins).
    pub const DOCKER_NETWORKS: &str = "BERTH_DOCKER_NETWORKS";
}

/// The `BERTH_ALICLOUD_*` variables the ECS client reads (its own parser decides what they mean).
const ECS_VARS: [&str; 5] = ::alicloud::config::env_vars::ALL;

/// How much of the request timeout a driver call leaves for answering: a call that runs out of
/// time says so itself (DeadlineExceeded, with what it was doing) instead of being cut off by the
/// timeout middleware.
const ANSWER_MARGIN: Duration = Duration::from_secs(1);

/// The service's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen (`BERTH_LISTEN`, default `127.0.0.1:8081`).
    pub listen: std::net::SocketAddr,
    /// Timeouts, body limit, internal credential.
    pub http: HttpConfig,
    /// The ECS client's settings (`BERTH_ALICLOUD_ENDPOINT`, `_QPS`, `_SIGNATURE`, `_TIMEOUT`,
    /// `_MAX_ATTEMPTS`; the deprecated `_TIMEOUT_MS` is carried over by [`RENAMED`]).
    pub ecs: ::alicloud::EcsConfig,
    /// Extra CSI driver names mapped by GetVolumeIDs (`BERTH_ALICLOUD_CSI_DRIVERS`).
    pub csi_drivers: Vec<String>,
    /// The regions the Alicloud provider may use (`BERTH_ALICLOUD_REGIONS`); empty = the default.
    pub regions: Vec<::alicloud::Region>,
    /// What the Docker provider may use (`DOCKER_HOST`, `BERTH_DOCKER_*`).
    pub docker: docker::settings::Settings,
    /// The most machines one namespace may have (`BERTH_QUOTA_MACHINES`); `None`: no limit.
    pub quota_machines: Option<u64>,
}

impl Config {
    /// Reads the settings; unset variables take their defaults.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let ecs_vars: HashMap<String, String> = ECS_VARS
            .iter()
            .filter_map(|k| env.get(k).map(|v| (k.to_string(), v.to_string())))
            .collect();
        let ecs = ::alicloud::EcsConfig::from_vars(&ecs_vars).map_err(|e| ConfigError {
            var: e.name.to_string(),
            value: e.value,
            problem: e.message,
        })?;
        let csi_drivers = env
            .get(env_vars::CSI_DRIVERS)
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let regions = env
            .get(env_vars::REGIONS)
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|r| {
                ::alicloud::Region::parse(r).map_err(|e| ConfigError {
                    var: env_vars::REGIONS.to_string(),
                    value: env.get(env_vars::REGIONS).unwrap_or_default().to_string(),
                    problem: format!("an entry {e}"),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Config {
            listen: listen_addr(env, DEFAULT_PORT)?,
            http: HttpConfig::from_env(env)?,
            ecs,
            csi_drivers,
            regions,
            docker: docker::settings::Settings::from_env(env)?,
            quota_machines: match env.get(env_vars::QUOTA_MACHINES) {
                None => None,
                Some(v) => Some(v.trim().parse::<u64>().map_err(|_| {
                    ConfigError {
                        var: env_vars::QUOTA_MACHINES.to_string(),
                        value: v.to_string(),
                        problem:
                            "expected a whole number of machines (0 or more); unset for no limit"
                                .to_string(),
                    }
                })?),
            },
        })
    }

    /// How long one driver call may take: the request timeout less a margin to answer in.
    pub fn operation_timeout(&self) -> Duration {
        self.http
            .request_timeout
            .saturating_sub(ANSWER_MARGIN)
            .max(Duration::from_millis(500))
    }
}

/// The provider plugins the configuration asks for.
pub fn providers(config: &Config) -> Result<Providers, ::alicloud::Error> {
    let ecs = ::alicloud::Ecs::new(config.ecs.clone())?;
    Ok(Providers::new()
        .with(Arc::new(
            alicloud::Alicloud::new(ecs, &config.csi_drivers, config.operation_timeout())
                .with_allowed_regions(config.regions.iter().cloned()),
        ))
        .with(Arc::new(docker::Docker::new(
            config.docker.clone(),
            config.operation_timeout(),
        ))))
}

/// The service's router over these providers.
pub fn router(config: &Config, providers: Providers) -> axum::Router {
    ServiceApp::new(
        NAME,
        api::routes(api::AppState::new(providers, config.quota_machines)),
    )
    .document_edits(api::document_links)
    // Its own calls, and the ECS calls its Alicloud provider makes.
    .metric_prefixes(&["berth_driver_", "berth_ecs_"])
    .http_config(config.http.clone())
    .into_router()
}

/// Binds the listener and builds the application.
pub async fn build(
    config: Config,
) -> Result<Application, Box<dyn std::error::Error + Send + Sync>> {
    let listener = service_kit::server::bind(config.listen, vars::LISTEN).await?;
    build_on(config, listener)
}

/// Builds the application on a listener already bound (`berth up` binds every port before it
/// builds any service, so a port the OS picks is known to the others).
pub fn build_on(
    config: Config,
    listener: tokio::net::TcpListener,
) -> Result<Application, Box<dyn std::error::Error + Send + Sync>> {
    let providers = providers(&config)?;
    match &config.ecs.endpoint {
        Some(endpoint) => {
            tracing::info!(endpoint = %endpoint, "Alicloud provider calls ECS at BERTH_ALICLOUD_ENDPOINT")
        }
        None => tracing::info!("Alicloud provider calls the regional ECS endpoints"),
    }
    if let Err(why) = &config.docker.default_host {
        tracing::warn!("{why}; Docker machines need an allowed dockerHost in their secret");
    }
    Ok(Application::new(router(&config, providers), listener))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_providers_are_this_drivers() {
        assert_eq!(
            domain::machine::PROVIDERS,
            [alicloud::NAME, docker::NAME],
            "the OpenAPI documents name the providers through domain::machine::PROVIDERS"
        );
    }

    #[test]
    fn the_retired_names_still_work_for_one_release() {
        let env = Env::default()
            .with("BERTH_ALICLOUD_TIMEOUT_MS", "1500")
            .with("BERTH_DOCKER_HOSTS", "tcp://b:2376")
            .migrate(RENAMED)
            .unwrap();
        let c = Config::from_env(&env).unwrap();
        assert_eq!(c.ecs.request_timeout, Duration::from_millis(1500));
        assert!(c.docker.allowed_hosts.contains("tcp://b:2376"));
        let both = Env::default()
            .with("BERTH_DOCKER_HOSTS", "tcp://b:2376")
            .with("BERTH_DOCKER_ENDPOINTS", "tcp://c:2376")
            .migrate(RENAMED)
            .unwrap_err();
        assert_eq!(both.var, "BERTH_DOCKER_HOSTS");
    }

    #[test]
    fn reads_the_alicloud_variables_through_the_client_parser() {
        let env = Env::default()
            .with("BERTH_ALICLOUD_ENDPOINT", "http://127.0.0.1:8090")
            .with("BERTH_ALICLOUD_QPS", "50")
            .with(env_vars::CSI_DRIVERS, " a.csi , ,b.csi ")
            .with("BERTH_REQUEST_TIMEOUT", "10s");
        let c = Config::from_env(&env).unwrap();
        assert_eq!(c.ecs.endpoint.as_deref(), Some("http://127.0.0.1:8090"));
        assert_eq!(c.ecs.qps, Some(50.0));
        assert_eq!(
            c.csi_drivers,
            vec!["a.csi".to_string(), "b.csi".to_string()]
        );
        assert_eq!(c.operation_timeout(), Duration::from_secs(9));
        let e = Config::from_env(&Env::default().with("BERTH_ALICLOUD_QPS", "fast")).unwrap_err();
        assert_eq!(e.var, "BERTH_ALICLOUD_QPS");
        assert_eq!(e.value, "fast");
        let d = Config::from_env(&Env::default()).unwrap();
        assert_eq!(d.ecs, ::alicloud::EcsConfig::default());
        assert!(d.csi_drivers.is_empty());
        assert!(d.regions.is_empty());
    }

    #[test]
    fn the_machine_quota_is_a_whole_number_or_unset() {
        assert_eq!(
            Config::from_env(&Env::default()).unwrap().quota_machines,
            None
        );
        let c = Config::from_env(&Env::default().with(env_vars::QUOTA_MACHINES, "3")).unwrap();
        assert_eq!(c.quota_machines, Some(3));
        let e = Config::from_env(&Env::default().with(env_vars::QUOTA_MACHINES, "-1")).unwrap_err();
        assert_eq!(e.var, env_vars::QUOTA_MACHINES);
        assert!(e.problem.contains("whole number"), "{e:?}");
    }

    #[test]
    fn the_region_allow_list_holds_region_ids_only() {
        let c =
            Config::from_env(&Env::default().with(env_vars::REGIONS, "cn-shanghai, eu-central-1,"))
                .unwrap();
        let regions: Vec<&str> = c.regions.iter().map(|r| r.as_str()).collect();
        assert_eq!(regions, ["cn-shanghai", "eu-central-1"]);
        let e =
            Config::from_env(&Env::default().with(env_vars::REGIONS, "cn-shanghai,x@127.0.0.1:1/"))
                .unwrap_err();
        assert_eq!(e.var, env_vars::REGIONS);
        assert!(e.problem.contains("is not an ECS region id"), "{e:?}");
    }
}
