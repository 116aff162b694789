//! Building the stack: every service configured, bound to its port and ready to serve, the
//! gateway last once the admin token is written. Apart because it decides where each service
//! listens and what each is told of the others, the heart of `up`.

use std::net::SocketAddr;

use service_kit::Env;
use service_kit::config::vars;
use service_kit::server::Application;

use super::config::{configure, emulator_lifecycle};
use super::credentials::internal_token_of;
use super::instance::{DOCKER_INSTANCE, docker_instance_of};
use super::{BoxError, Ports, UpOptions};

/// A stack whose every listener is bound, not yet serving.
pub struct Built {
    /// The services, by name, in start order; the gateway joins them last, built by
    /// [`Built::add_gateway`] once the admin token is written.
    pub apps: Vec<(&'static str, Application)>,
    /// The gateway's configuration and its bound listener, until [`Built::add_gateway`].
    gateway: Option<(gateway::Config, tokio::net::TcpListener)>,
    /// The data directory, absolute.
    pub data_dir: std::path::PathBuf,
    /// The tokens file the gateway serves.
    pub tokens_file: std::path::PathBuf,
    /// The emulator's throwaway access key (id, secret).
    pub emulator_key: (String, String),
    /// The stack's Docker instance, if it has one ([`docker_instance_of`]).
    pub docker_instance: Option<String>,
    /// The credential the services of this run share; `up` uses it to ask the registry for the banner.
    pub(super) internal_token: String,
    /// The registry's URL.
    pub(super) registry_url: String,
}

/// Builds every service of the stack, each bound to its port and ready to serve. Writes no
/// credentials: that is for the caller, once this has succeeded.
pub async fn build_stack(args: &UpOptions, base_env: &Env) -> Result<Built, BoxError> {
    let ports = Ports::from_base(args.port_base)
        .ok_or("--port-base leaves no room for the ports above it")?;
    std::fs::create_dir_all(&args.data_dir).map_err(|e| {
        format!(
            "cannot create the data directory {}: {e}",
            args.data_dir.display()
        )
    })?;
    let data_dir = std::fs::canonicalize(&args.data_dir)?;
    let tokens_file = crate::tokens::tokens_file_in(&data_dir);
    // The emulator keeps its instances and its key in the data directory, so machines survive a
    // restart as volumes do, and the key in a user's machine Secret keeps working.
    let emulator_dir = data_dir.join("ecs-emulator");
    let stored_key = ecs_emulator::stored_access_key(&emulator_dir)?;
    let emulator_key = (stored_key.id.clone(), stored_key.secret.clone());
    let internal_token = internal_token_of(base_env)?;
    let docker_instance = docker_instance_of(&data_dir, base_env)?;
    // Only the gateway listens on --bind: the services take no caller's token, and under one
    // process every port shares one descriptor table, so they listen on loopback unless
    // --expose-services says otherwise. The emulator listens on loopback whatever is said: only the
    // machine driver, in this process, needs to reach it, and its admin endpoints
    // (`/_emulator/reset` empties the account) take no credential.
    let loopback = if args.bind.is_ipv6() {
        std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
    } else {
        std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
    };
    let service_ip = if args.expose_services {
        args.bind
    } else {
        loopback
    };
    let at = |port: u16| {
        let ip = if port == ports.gateway {
            args.bind
        } else {
            service_ip
        };
        SocketAddr::new(ip, port).to_string()
    };
    let emulator_addr = SocketAddr::new(loopback, ports.ecs_emulator);
    let url = |port: u16| {
        let ip = if service_ip.is_unspecified() {
            loopback
        } else {
            service_ip
        };
        format!("http://{}", SocketAddr::new(ip, port))
    };
    let shared = base_env
        .clone()
        .with(vars::DATA_DIR, data_dir.display().to_string())
        .with(vars::INTERNAL_TOKEN, internal_token.clone())
        .with("BERTH_REGISTRY_URL", url(ports.registry))
        .with("BERTH_STORAGE_OPS_URL", url(ports.storage_ops))
        .with("BERTH_MACHINE_DRIVER_URL", url(ports.machine_driver))
        .with(
            "BERTH_MACHINE_CONTROLLER_URL",
            url(ports.machine_controller),
        )
        .with("BERTH_TOKENS_FILE", tokens_file.display().to_string())
        .with("BERTH_ALICLOUD_ENDPOINT", format!("http://{emulator_addr}"));
    let env_for = |port: u16| shared.clone().with(vars::LISTEN, at(port));
    // Every configuration is read before anything binds a port, so one that is refused stops the
    // start with its reason and nothing half-started.
    let mut configs = configure(
        &env_for(ports.gateway),
        &env_for(ports.registry),
        &env_for(ports.storage_ops),
        &match &docker_instance {
            Some(instance) => env_for(ports.machine_driver).with(DOCKER_INSTANCE, instance.clone()),
            None => env_for(ports.machine_driver),
        },
        &env_for(ports.machine_controller),
    )?;

    let mut apps = Vec::new();
    let emulator = ecs_emulator::Emulator::open(ecs_emulator::Config {
        access_keys: vec![stored_key],
        state_dir: Some(emulator_dir),
        lifecycle: emulator_lifecycle(base_env)?,
        ..ecs_emulator::Config::default()
    })?;
    let emulator_listener = service_kit::server::bind(emulator_addr, "--port-base").await?;
    apps.push((
        "ecs-emulator",
        Application::new(emulator.router(), emulator_listener),
    ));
    apps.push((
        orchestrator_registry::NAME,
        orchestrator_registry::build(configs.registry)
            .await
            .map_err(under_port_base)?,
    ));
    apps.push((
        storage_ops::NAME,
        storage_ops::build(configs.storage_ops)
            .await
            .map_err(under_port_base)?,
    ));
    apps.push((
        machine_driver::NAME,
        machine_driver::build(configs.machine_driver)
            .await
            .map_err(under_port_base)?,
    ));
    apps.push((
        machine_controller::NAME,
        machine_controller::build(configs.machine_controller)
            .await
            .map_err(under_port_base)?,
    ));
    // Each service's head-read limit, as its own binary reads it (the gateway reads its own).
    let idle_timeout = base_env.duration_or(
        vars::IDLE_TIMEOUT,
        service_kit::server::DEFAULT_IDLE_TIMEOUT,
    )?;
    if idle_timeout.is_zero() {
        return Err(format!("{} must be more than 0", vars::IDLE_TIMEOUT).into());
    }
    // One process, one descriptor table: unless BERTH_MAX_CONNECTIONS says otherwise, the gateway
    // may spend half of the file limit (two descriptors per caller: its own and an upstream one)
    // and each of the other five listeners a tenth, so no listener's callers can take the
    // descriptors another needs to accept.
    let max_connections = service_kit::server::max_connections(base_env)?;
    for (_, app) in &mut apps {
        app.idle_timeout = idle_timeout;
        app.max_connections =
            Some(max_connections.unwrap_or_else(|| service_kit::connections::default_cap(0.1, 1)));
    }
    if configs.gateway.max_connections.is_none() {
        configs.gateway.max_connections = Some(service_kit::connections::default_cap(0.5, 2));
    }
    // Bound now, built once the credentials are written ([`Built::add_gateway`]): the gateway then
    // reads a tokens file that holds the admin token already.
    let gateway_listener = service_kit::server::bind(configs.gateway.listen, "--port-base").await?;
    Ok(Built {
        apps,
        gateway: Some((configs.gateway, gateway_listener)),
        data_dir,
        tokens_file,
        emulator_key,
        docker_instance,
        internal_token,
        registry_url: url(ports.registry),
    })
}

/// A service's own binary says which variable to change when its port is taken (`BERTH_LISTEN`);
/// under `berth up` every port comes from --port-base and --bind, so the message says those.
fn under_port_base(e: BoxError) -> BoxError {
    match e.downcast::<std::io::Error>() {
        Ok(io) => {
            let text = io.to_string().replace(
                &format!("set {} to another address", vars::LISTEN),
                "choose another --port-base (or --bind)",
            );
            Box::new(std::io::Error::new(io.kind(), text))
        }
        Err(e) => e,
    }
}

impl Built {
    /// Builds the gateway on its bound listener and adds it, last. Called once the admin token is
    /// in the tokens file, so the gateway loads it at start: the token works from the first call,
    /// with no probe that the gateway would log as a stream of 401s while its reload caught up.
    pub fn add_gateway(&mut self) -> Result<(), BoxError> {
        if let Some((config, listener)) = self.gateway.take() {
            let app = gateway::build_on(config, listener)?;
            self.apps.push((gateway::NAME, app));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_taken_port_is_told_as_the_port_base_to_change() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let e = service_kit::server::bind(taken.local_addr().unwrap(), vars::LISTEN)
            .await
            .unwrap_err();
        let told = under_port_base(Box::new(e)).to_string();
        assert!(told.contains("choose another --port-base"), "{told}");
        assert!(!told.contains(vars::LISTEN), "{told}");
    }

    #[tokio::test]
    async fn a_contradicting_configuration_stops_the_start_before_any_port_is_bound() {
        let dir = tempfile::tempdir().unwrap();
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let args = UpOptions {
            data_dir: dir.path().to_path_buf(),
            // The gateway's port is taken: a start that got as far as binding would say so instead.
            port_base: taken.local_addr().unwrap().port(),
            bind: "127.0.0.1".parse().unwrap(),
            expose_services: false,
        };
        let env = Env::default()
            .with("BERTH_UPSTREAM_TIMEOUT", "2s")
            .with("BERTH_REGISTRY_TIMEOUT", "5s");
        let e = build_stack(&args, &env)
            .await
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("BERTH_REGISTRY_TIMEOUT"), "{e}");
    }

    /// A base port whose eleven ports are free now (the stack binds B..B+4 and B+10), below the
    /// ephemeral range so no outgoing connection takes one meanwhile.
    fn free_port_base() -> u16 {
        let start = 20_000 + (std::process::id() % 500) as u16 * 20;
        (0..1_000u16)
            .map(|k| 20_000 + (start - 20_000 + k * 20) % 10_000)
            .find(|&base| {
                (0..=10).all(|i| std::net::TcpListener::bind(("0.0.0.0", base + i)).is_ok())
            })
            .expect("a free run of ports")
    }

    async fn addresses(bind: &str, expose_services: bool) -> Vec<(&'static str, SocketAddr)> {
        let dir = tempfile::tempdir().unwrap();
        let args = UpOptions {
            data_dir: dir.path().to_path_buf(),
            port_base: free_port_base(),
            bind: bind.parse().unwrap(),
            expose_services,
        };
        let built = build_stack(&args, &Env::default()).await.unwrap();
        let mut addresses: Vec<_> = built
            .apps
            .iter()
            .map(|(name, app)| (*name, app.local_addr()))
            .collect();
        let (_, gateway) = built.gateway.as_ref().expect("the gateway's listener");
        addresses.push((gateway::NAME, gateway.local_addr().unwrap()));
        addresses
    }

    #[tokio::test]
    async fn bind_exposes_only_the_gateway_unless_the_services_are_exposed_too() {
        let everywhere: std::net::IpAddr = "0.0.0.0".parse().unwrap();
        let loopback: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        let gateway_only = addresses("0.0.0.0", false).await;
        assert_eq!(gateway_only.len(), 6, "{gateway_only:?}");
        for (name, addr) in &gateway_only {
            let expected = if *name == gateway::NAME {
                everywhere
            } else {
                loopback
            };
            assert_eq!(addr.ip(), expected, "{name} listens on {addr}");
        }
        for (name, addr) in addresses("0.0.0.0", true).await {
            let expected = if name == "ecs-emulator" {
                loopback
            } else {
                everywhere
            };
            assert_eq!(addr.ip(), expected, "{name} listens on {addr}");
        }
    }
}
