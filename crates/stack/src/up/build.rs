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
use super::wiring::{Caller, ServiceUrls, wiring};
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
    /// The embedded ECS emulator, for a test that inspects what the cloud holds.
    pub emulator: ecs_emulator::Emulator,
    /// The data directory's lock ([`lock_data_dir`]), held for as long as the stack lives.
    _data_dir_lock: std::fs::File,
}

/// The file whose lock says a stack runs on a data directory; it holds that stack's process id.
pub(super) const LOCK_FILE: &str = "berth-up.lock";

/// Takes the data directory's lock, or says which process holds it. The lock is the operating
/// system's (`flock`), so it goes with the process however that ends: no stale lock after a crash.
fn lock_data_dir(data_dir: &std::path::Path) -> Result<std::fs::File, BoxError> {
    use std::io::{Read as _, Seek as _, Write as _};
    let path = data_dir.join(LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            // Bounded: the file is ours, but a read of it must never be a size to trust.
            let mut holder = String::new();
            let _ = (&mut file).take(32).read_to_string(&mut holder);
            let holder = holder.trim();
            let who = if !holder.is_empty() && holder.bytes().all(|b| b.is_ascii_digit()) {
                format!("process {holder}")
            } else {
                "another process".to_owned()
            };
            return Err(format!(
                "another berth up ({who}) runs on the data directory {}: stop it first, or give \
                 this one another --data-dir (a copy is made with `berth backup` and `berth restore`)",
                data_dir.display()
            )
            .into());
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(format!("cannot lock {}: {e}", path.display()).into());
        }
    }
    file.set_len(0)?;
    file.rewind()?;
    write!(file, "{}", std::process::id())?;
    Ok(file)
}

/// Where each service of a run listens.
struct Addresses {
    gateway: SocketAddr,
    registry: SocketAddr,
    storage_ops: SocketAddr,
    machine_driver: SocketAddr,
    machine_controller: SocketAddr,
    ecs_emulator: SocketAddr,
}

/// Builds every service of the stack, each bound to its port and ready to serve. Writes no
/// credentials: that is for the caller, once this has succeeded.
pub async fn build_stack(args: &UpOptions, base_env: &Env) -> Result<Built, BoxError> {
    let ports = Ports::from_base(args.port_base)
        .ok_or("--port-base leaves no room for the ports above it: at most 65525 (the emulator takes base+10)")?;
    std::fs::create_dir_all(&args.data_dir).map_err(|e| {
        format!(
            "cannot create the data directory {}: {e}",
            args.data_dir.display()
        )
    })?;
    let data_dir = std::fs::canonicalize(&args.data_dir)?;
    // Before anything in it is read: two stacks on one data directory would each believe they own
    // its databases, the emulator's state and its Docker things, and each overwrite the other's.
    let data_dir_lock = lock_data_dir(&data_dir)?;
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
    let planned = Addresses {
        gateway: SocketAddr::new(args.bind, ports.gateway),
        registry: SocketAddr::new(service_ip, ports.registry),
        storage_ops: SocketAddr::new(service_ip, ports.storage_ops),
        machine_driver: SocketAddr::new(service_ip, ports.machine_driver),
        machine_controller: SocketAddr::new(service_ip, ports.machine_controller),
        ecs_emulator: SocketAddr::new(loopback, ports.ecs_emulator),
    };
    let url = |addr: SocketAddr| {
        let ip = if addr.ip().is_unspecified() {
            loopback
        } else {
            addr.ip()
        };
        format!("http://{}", SocketAddr::new(ip, addr.port()))
    };
    let configs_for = |at: &Addresses| {
        let urls = ServiceUrls {
            registry: url(at.registry),
            storage_ops: url(at.storage_ops),
            machine_driver: url(at.machine_driver),
            machine_controller: url(at.machine_controller),
            ecs: url(at.ecs_emulator),
        };
        // One process, one environment: every caller's wiring in it (where two callers name one
        // variable, they give it the same value).
        let shared = Caller::ALL
            .into_iter()
            .flat_map(|caller| wiring(caller, &urls, &tokens_file))
            .fold(
                base_env
                    .clone()
                    .with(vars::DATA_DIR, data_dir.display().to_string())
                    .with(vars::INTERNAL_TOKEN, internal_token.clone()),
                |env, (var, value)| env.with(var, value),
            );
        let env_for = |addr: SocketAddr| shared.clone().with(vars::LISTEN, addr.to_string());
        configure(
            &env_for(at.gateway),
            &env_for(at.registry),
            &env_for(at.storage_ops),
            &match &docker_instance {
                Some(instance) => {
                    env_for(at.machine_driver).with(DOCKER_INSTANCE, instance.clone())
                }
                None => env_for(at.machine_driver),
            },
            &env_for(at.machine_controller),
        )
    };
    // Every configuration is read before anything binds a port, so one that is refused stops the
    // start with its reason and nothing half-started. Read again once every port is bound: with
    // --port-base 0 the OS picks the ports, and each service must be told where the others are.
    configs_for(&planned)?;
    let bind = |addr: SocketAddr| async move {
        service_kit::server::bind(addr, vars::LISTEN)
            .await
            .map_err(|e| under_port_base(Box::new(e)))
    };
    let gateway_listener = bind(planned.gateway).await?;
    let registry_listener = bind(planned.registry).await?;
    let storage_ops_listener = bind(planned.storage_ops).await?;
    let machine_driver_listener = bind(planned.machine_driver).await?;
    let machine_controller_listener = bind(planned.machine_controller).await?;
    let emulator_listener = bind(planned.ecs_emulator).await?;
    let bound = Addresses {
        gateway: gateway_listener.local_addr()?,
        registry: registry_listener.local_addr()?,
        storage_ops: storage_ops_listener.local_addr()?,
        machine_driver: machine_driver_listener.local_addr()?,
        machine_controller: machine_controller_listener.local_addr()?,
        ecs_emulator: emulator_listener.local_addr()?,
    };
    let mut configs = configs_for(&bound)?;

    let mut apps = Vec::new();
    let emulator = ecs_emulator::Emulator::open(ecs_emulator::Config {
        access_keys: vec![stored_key],
        state_dir: Some(emulator_dir),
        lifecycle: emulator_lifecycle(base_env)?,
        ..ecs_emulator::Config::default()
    })?;
    apps.push((
        "ecs-emulator",
        Application::new(emulator.router(), emulator_listener),
    ));
    apps.push((
        orchestrator_registry::NAME,
        orchestrator_registry::build_on(configs.registry, registry_listener).await?,
    ));
    apps.push((
        storage_ops::NAME,
        storage_ops::build_on(configs.storage_ops, storage_ops_listener).await?,
    ));
    apps.push((
        machine_driver::NAME,
        machine_driver::build_on(configs.machine_driver, machine_driver_listener)?,
    ));
    apps.push((
        machine_controller::NAME,
        machine_controller::build_on(configs.machine_controller, machine_controller_listener)
            .await?,
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
    // The gateway's listener is kept for [`Built::add_gateway`], once the credentials are written:
    // the gateway then reads a tokens file that holds the admin token already.
    Ok(Built {
        apps,
        gateway: Some((configs.gateway, gateway_listener)),
        data_dir,
        tokens_file,
        emulator_key,
        docker_instance,
        internal_token,
        registry_url: url(bound.registry),
        emulator,
        _data_dir_lock: data_dir_lock,
    })
}

/// A service's own binary says which variable to change when its port is taken (`BERTH_LISTEN`);
/// under `berth up` every port comes from --port-base and --bind, so the message says those.
fn under_port_base(e: BoxError) -> BoxError {
    match e.downcast::<std::io::Error>() {
        Ok(io) => {
            // An address this host does not have is not cured by another port.
            let instead = if io.kind() == std::io::ErrorKind::AddrNotAvailable {
                "give --bind an address of this host"
            } else {
                "choose another --port-base (or --bind)"
            };
            let text = io
                .to_string()
                .replace(&format!("set {} to another address", vars::LISTEN), instead);
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

    /// A stack on `dir`, the gateway on loopback at `port_base`.
    fn on_loopback(dir: &std::path::Path, port_base: u16) -> UpOptions {
        UpOptions {
            data_dir: dir.to_path_buf(),
            port_base,
            bind: "127.0.0.1".parse().unwrap(),
            expose_services: false,
        }
    }

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
    async fn a_data_directory_takes_one_stack_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let args = on_loopback(dir.path(), 0);
        let first = build_stack(&args, &Env::default()).await.unwrap();
        let refused = build_stack(&args, &Env::default())
            .await
            .err()
            .expect("a second stack on the same directory is refused")
            .to_string();
        assert!(refused.contains("another berth up"), "{refused}");
        assert!(
            refused.contains(&format!("process {}", std::process::id())),
            "{refused}"
        );
        // Once the first is gone, the directory is free again.
        drop(first);
        build_stack(&args, &Env::default()).await.unwrap();
    }

    #[tokio::test]
    async fn port_base_zero_lets_the_os_pick_every_port() {
        let dir = tempfile::tempdir().unwrap();
        let args = on_loopback(dir.path(), 0);
        let mut built = build_stack(&args, &Env::default()).await.unwrap();
        built.add_gateway().unwrap();
        let ports: std::collections::BTreeSet<u16> = built
            .apps
            .iter()
            .map(|(_, app)| app.local_addr().port())
            .collect();
        assert_eq!(ports.len(), 6, "six listeners, six ports: {ports:?}");
        assert!(!ports.contains(&0), "{ports:?}");
        // The services were told where the others are: the registry's URL is its bound port.
        let registry = built
            .apps
            .iter()
            .find(|(name, _)| *name == orchestrator_registry::NAME)
            .map(|(_, app)| app.local_addr())
            .unwrap();
        assert_eq!(built.registry_url, format!("http://{registry}"));
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
