//! `berth up`: every service in one process, each on its own listener and still talking HTTP to the
//! others exactly as in production, so what works here works in compose and Kubernetes.
//!
//! The services get their configuration the way their binaries do, as `BERTH_*` variables: the
//! process's own, overridden by what `up` decides (ports, data directory, upstream URLs, a fresh
//! internal credential shared by the services of this run, unless `BERTH_INTERNAL_TOKEN` or
//! `BERTH_INTERNAL_TOKEN_FILE` gives one).
//!
//! Credentials are written only once every listener is bound: a start that fails (a port in use)
//! leaves no admin token behind that nobody was shown. The banner says where everything is, which
//! orchestrator new volumes go to and why that one, and how to get back in when the token is lost.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use service_kit::Env;
use service_kit::config::vars;
use service_kit::server::Application;
use tokio::sync::watch;

/// What `berth up` is asked for (its command-line options).
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// Where all state goes: SQLite files, local volumes, the tokens file.
    pub data_dir: std::path::PathBuf,
    /// The gateway's port; the services take the next ones ([`Ports::from_base`]).
    pub port_base: u16,
    /// The address the gateway binds; the services listen on loopback unless `expose_services`.
    pub bind: std::net::IpAddr,
    /// The services bind on `bind` too, not only the gateway.
    pub expose_services: bool,
}

/// The ports of one run, in the order of docs/architecture.md's table.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    /// The gateway.
    pub gateway: u16,
    /// The machine driver.
    pub machine_driver: u16,
    /// The orchestrator registry.
    pub registry: u16,
    /// Storage ops.
    pub storage_ops: u16,
    /// The machine controller.
    pub machine_controller: u16,
    /// The ECS emulator.
    pub ecs_emulator: u16,
}

impl Ports {
    /// B, B+1, B+2, B+3, B+4 and B+10.
    pub fn from_base(base: u16) -> Option<Ports> {
        Some(Ports {
            gateway: base,
            machine_driver: base.checked_add(1)?,
            registry: base.checked_add(2)?,
            storage_ops: base.checked_add(3)?,
            machine_controller: base.checked_add(4)?,
            ecs_emulator: base.checked_add(10)?,
        })
    }
}

fn random_token() -> String {
    crate::tokens::new_token()
}

/// The internal credential of this run: the one `BERTH_INTERNAL_TOKEN` or `BERTH_INTERNAL_TOKEN_FILE`
/// gives (the file made with a random one when missing), else a fresh random one. Whoever must call
/// the services directly, past the gateway (the Python harness fuzzing each service's own API), sets
/// the file and reads it; nobody else ever needs to know it.
fn internal_token_of(env: &Env) -> Result<String, BoxError> {
    let env = service_kit::config::resolve_internal_token_file(env.clone())?;
    Ok(env
        .get(vars::INTERNAL_TOKEN)
        .map(str::to_string)
        .unwrap_or_else(random_token))
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

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
    internal_token: String,
    /// The registry's URL.
    registry_url: String,
}

/// Creates the tokens file with one admin token when there is none yet (mode 0600, only the hash
/// stored), and returns the token to show once; `None` when the file already exists.
pub fn ensure_admin_token(path: &std::path::Path) -> Result<Option<String>, BoxError> {
    gateway::auth::ensure_admin_token(path)
        .map_err(|e| format!("cannot create the tokens file {}: {e}", path.display()).into())
}

/// Builds every service of the stack, each bound to its port and ready to serve. Writes no
/// credentials: that is for the caller, once this has succeeded.
/// The machine driver's setting that keeps this stack's Docker machines apart from another's.
const DOCKER_INSTANCE: &str = machine_driver::env_vars::DOCKER_INSTANCE;
/// Where `berth up` keeps the stack's Docker instance, beside the state it names.
const DOCKER_INSTANCE_FILE: &str = "docker-instance";
/// The files a data directory holds once a stack has run in it.
const STATE_FILES: [&str; 3] = ["registry.db", "storage.db", "controller.db"];

/// The stack's Docker instance (`BERTH_DOCKER_INSTANCE`): the one the environment gives, else the
/// one kept in the data directory, made on its first start. Two `berth up`s on one Engine then never
/// list, block or touch each other's Docker machines, as their volumes are kept apart. A data
/// directory a stack ran in before it kept one (an earlier release) gets none, recorded as an empty
/// file: its Docker machines were made without one and must stay this stack's.
fn docker_instance_of(data_dir: &std::path::Path, env: &Env) -> Result<Option<String>, BoxError> {
    if let Some(given) = env.get(DOCKER_INSTANCE) {
        return Ok(Some(given.to_owned()));
    }
    let file = data_dir.join(DOCKER_INSTANCE_FILE);
    match std::fs::read_to_string(&file) {
        Ok(kept) => {
            let kept = kept.trim();
            if kept.is_empty() {
                return Ok(None);
            }
            domain::names::validate_dns1123_label("its content", kept).map_err(|e| {
                format!(
                    "{} holds no Docker instance ({DOCKER_INSTANCE}): {}",
                    file.display(),
                    e.message
                )
            })?;
            return Ok(Some(kept.to_owned()));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot read {}: {e}", file.display()).into()),
    }
    let used_before = STATE_FILES.iter().any(|f| data_dir.join(f).exists());
    let instance = (!used_before).then(new_docker_instance);
    // Written whole or not at all: a crash mid-write must not leave a stack with half an instance.
    let partial = data_dir.join(format!("{DOCKER_INSTANCE_FILE}.partial"));
    std::fs::write(&partial, instance.as_deref().unwrap_or_default())?;
    std::fs::rename(&partial, &file)?;
    Ok(instance)
}

/// A new stack's Docker instance: a DNS-1123 label, unlikely to be any other stack's.
pub fn new_docker_instance() -> String {
    format!("b{}", hex::encode(rand::random::<[u8; 6]>()))
}

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

/// The embedded emulator's lifecycle delays: `BERTH_ECS_EMULATOR_PENDING`, `_STARTING` and
/// `_STOPPING` (durations, `250ms`), as the standalone `ecs-emulator` reads them, each 1s by default
/// so instances move Pending → Starting → Running in a couple of seconds, as a person can follow.
/// A harness that fuzzes the API sets them to 0, so no case finds a machine between states (where
/// the driver's answer is MCM's retry, 503) only because an earlier case made it a moment before.
/// The last release's `_MS` names are carried over by [`stack_variables`]' renames.
pub fn emulator_lifecycle(env: &Env) -> Result<ecs_emulator::Lifecycle, BoxError> {
    let delay = |var: &str| -> Result<u64, BoxError> {
        let d = env.duration_or(var, Duration::from_secs(1))?;
        Ok(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    };
    Ok(ecs_emulator::Lifecycle {
        pending_ms: delay(EMULATOR_LIFECYCLE[0])?,
        starting_ms: delay(EMULATOR_LIFECYCLE[1])?,
        stopping_ms: delay(EMULATOR_LIFECYCLE[2])?,
    })
}

/// The embedded emulator's delays in Pending, Starting and Stopping (the standalone emulator's
/// variables).
pub const EMULATOR_LIFECYCLE: [&str; 3] = [
    ecs_emulator::cli::env_vars::PENDING,
    ecs_emulator::cli::env_vars::STARTING,
    ecs_emulator::cli::env_vars::STOPPING,
];

/// Writes one banner line; a stdout nobody reads (`berth up | head -3`) does not stop the stack.
fn say(line: impl AsRef<str>) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_all(format!("{}\n", line.as_ref()).as_bytes())
        .and_then(|()| out.flush());
}

/// The banner's orchestrator lines: which one new volumes go to, what the registry detects in this
/// environment and why, and how to choose otherwise.
async fn orchestrator_lines(built: &Built) -> Vec<String> {
    let registry = client::registry::Client::new(client::ServiceClient::new(
        &built.registry_url,
        client::ClientOptions {
            timeout: Duration::from_secs(5),
            bearer: Some(service_kit::SecretString::new(built.internal_token.clone())),
            attempts: 3,
            propagation: None,
        },
    ));
    let mut lines = Vec::new();
    let default = registry.default_orchestrator().await;
    match &default {
        Ok(o) => lines.push(format!(
            "default orchestrator: {} (kind {}); new volumes go there unless --orchestrator names another",
            o.name, o.kind
        )),
        Err(e) => lines.push(format!("default orchestrator: none ({})", e.status.message)),
    }
    match registry.detect().await {
        Ok(d) => lines.push(format!(
            "  detected kind: {}, because {} (checked in order: KUBERNETES_SERVICE_HOST, NOMAD_ADDR, a Docker Engine, else local directories)",
            d.kind, d.reason
        )),
        Err(e) => lines.push(format!("  detection failed: {}", e.status.message)),
    }
    if !matches!(&default, Ok(o) if o.kind == domain::OrchestratorKind::Local) {
        lines.push(format!(
            "  to keep volumes in local directories instead: berth orchestrator register local --kind local --config basePath={} --default",
            // Its own directory under the default root, as the first-start one is: a second local
            // orchestrator then fits beside it (two base paths may not nest).
            built.data_dir.join("volumes").join("local").display()
        ));
    }
    lines
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

/// SIGINT (Ctrl-C) and SIGTERM, listened for from the moment this is made.
struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn listen() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => tracing::info!("SIGINT received; draining"),
            _ = self.terminate.recv() => tracing::info!("SIGTERM received; draining"),
        }
    }
}

/// The configuration of each service of one run.
pub struct Configs {
    /// The gateway's.
    pub gateway: gateway::Config,
    /// The registry's.
    pub registry: orchestrator_registry::Config,
    /// Storage-ops', whose registry timeout fits in the gateway's upstream timeout.
    pub storage_ops: storage_ops::Config,
    /// The machine driver's.
    pub machine_driver: machine_driver::Config,
    /// The machine controller's.
    pub machine_controller: machine_controller::Config,
}

/// Reads every service's configuration from its environment. Storage-ops is told how long the
/// gateway waits for it (`BERTH_UPSTREAM_TIMEOUT`, set or the gateway's default), so its registry
/// timeout is derived from that, or, when set to something the gateway would not wait for, refused
/// here: a hung registry must reach callers as storage-ops' 503 with Retry-After, not the gateway's
/// 504.
pub fn configure(
    gateway_env: &Env,
    registry_env: &Env,
    storage_ops_env: &Env,
    machine_driver_env: &Env,
    machine_controller_env: &Env,
) -> Result<Configs, BoxError> {
    let gateway = gateway::Config::from_env(gateway_env)?;
    let storage_ops_env = storage_ops_env.clone().with(
        storage_ops::env_vars::UPSTREAM_TIMEOUT,
        format!("{}ms", gateway.upstream_timeout.as_millis()),
    );
    Ok(Configs {
        registry: orchestrator_registry::Config::from_env(registry_env)?,
        storage_ops: storage_ops::Config::from_env(&storage_ops_env)?,
        machine_driver: machine_driver::Config::from_env(machine_driver_env)?,
        machine_controller: machine_controller::Config::from_env(machine_controller_env)?,
        gateway,
    })
}

/// What `berth up` reads and retires: one process runs every service, so it reads what any of them
/// reads (the union of their `VARS` and the kit's), and a name none of them reads is refused.
pub fn stack_variables() -> (Vec<&'static str>, Vec<service_kit::config::Renamed>) {
    let reads = [
        vars::EVERY_SERVICE,
        gateway::VARS,
        machine_driver::VARS,
        orchestrator_registry::VARS,
        storage_ops::VARS,
        machine_controller::VARS,
        &EMULATOR_LIFECYCLE,
    ]
    .concat();
    let mut renamed = [
        gateway::RENAMED,
        machine_driver::RENAMED,
        orchestrator_registry::RENAMED,
        storage_ops::RENAMED,
        machine_controller::RENAMED,
    ]
    .concat();
    // Of the embedded emulator's settings, `berth up` reads only its lifecycle delays.
    renamed.extend(
        ecs_emulator::cli::RENAMED
            .iter()
            .filter(|r| EMULATOR_LIFECYCLE.contains(&r.new))
            .cloned(),
    );
    (reads, renamed)
}

/// Runs the stack until Ctrl-C or SIGTERM, then drains every service and exits 0.
pub async fn run(args: UpOptions) -> ExitCode {
    service_kit::memory::limit_footprint();
    let (reads, renamed) = stack_variables();
    let env = Env::from_process(&reads);
    match service_kit::config::check_names(&env, &reads, &renamed) {
        Ok(warnings) => warnings
            .iter()
            .for_each(|w| eprintln!("berth up: warning: {w}")),
        Err(e) => {
            eprintln!("berth up: {e}");
            return ExitCode::from(2);
        }
    }
    let _telemetry = match service_kit::telemetry::init_or_exit("berth up", "berth", &env) {
        Ok(g) => g,
        Err(code) => return code,
    };
    // After telemetry, so the warnings for retired names are seen.
    let env = match env.migrate(&renamed) {
        Ok(env) => env,
        Err(e) => {
            eprintln!("berth up: {e}");
            return ExitCode::from(2);
        }
    };
    let mut built = match build_stack(&args, &env).await {
        Ok(built) => built,
        Err(e) => {
            eprintln!("berth up: {e}");
            // A refused setting is the command line's (and environment's) mistake, exit code 2 as
            // every service binary says it; anything else (a port taken, a disk) is 1.
            return if e
                .downcast_ref::<service_kit::config::ConfigError>()
                .is_some()
            {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            };
        }
    };
    // Every listener is bound: from here on the stack will serve, so a token made now will be shown.
    let new_admin_token = match ensure_admin_token(&built.tokens_file) {
        Ok(token) => token,
        Err(e) => {
            eprintln!("berth up: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = built.add_gateway() {
        eprintln!("berth up: {e}");
        return ExitCode::FAILURE;
    }
    let addresses: Vec<(&'static str, SocketAddr)> = built
        .apps
        .iter()
        .map(|(name, app)| (*name, app.local_addr()))
        .collect();
    let gateway_url = addresses
        .iter()
        .find(|(n, _)| *n == gateway::NAME)
        .map(|(_, a)| format!("http://{a}"))
        .unwrap_or_default();

    // Listening for Ctrl-C and SIGTERM starts before the banner: whoever reads "Ctrl-C stops
    // everything" and presses it at once must get a drained stop, not the default kill.
    let mut stop_signals = match StopSignals::listen() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("berth up: cannot listen for Ctrl-C: {e}");
            return ExitCode::FAILURE;
        }
    };
    // One stop signal and one set of tasks per tier of [`stop_tier`].
    let stops: Vec<_> = (0..STOP_TIERS).map(|_| watch::channel(false)).collect();
    let mut tiers: Vec<Vec<_>> = (0..STOP_TIERS).map(|_| Vec::new()).collect();
    let apps = std::mem::take(&mut built.apps);
    for (name, app) in apps {
        let tier = stop_tier(name);
        let mut stop = stops[tier].1.clone();
        tiers[tier].push(tokio::spawn(async move {
            let shutdown = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            if let Err(e) = app.run_until(shutdown).await {
                eprintln!("berth up: {name} failed: {e}");
            }
        }));
    }

    say(format!(
        "Berth is up. State lives in {}",
        args.data_dir.display()
    ));
    for (name, addr) in &addresses {
        say(format!("  {name:<22} http://{addr}"));
    }
    say(format!("gateway url: {gateway_url}"));
    say(format!(
        "api docs: {gateway_url}/docs (every operation, to browse and try with a token)"
    ));
    match &new_admin_token {
        Some(token) => {
            say(format!("admin token: {token}"));
            say(format!(
                "  (shown once; only its hash is kept, in {})",
                built.tokens_file.display()
            ));
        }
        None => say(format!(
            "tokens file: {} (the admin token was shown when it was created; lost it? `berth token create --admin --data-dir {}` adds a new one)",
            built.tokens_file.display(),
            args.data_dir.display()
        )),
    }
    say(format!(
        "  for the CLI and curl: export BERTH_URL={gateway_url} BERTH_TOKEN=<the admin token>"
    ));
    for line in orchestrator_lines(&built).await {
        say(line);
    }
    say("Machines go to a SIMULATED Alibaba Cloud: the embedded ECS emulator, not a real cloud.");
    say(format!("emulator access key id: {}", built.emulator_key.0));
    say(format!(
        "emulator access key secret: {}",
        built.emulator_key.1
    ));
    say(format!(
        "  (the emulator's local credentials, kept with its instances in {} across restarts; put them in your machine Secret)",
        built.data_dir.join("ecs-emulator").display()
    ));
    match &built.docker_instance {
        Some(instance) => say(format!(
            "docker instance: {instance} (this stack's Docker machines carry it, in their label berth.io/instance and as their container name's last part: <namespace>_<machine>_{instance}; another stack's are not this one's)"
        )),
        None => say(format!(
            "docker instance: none (this data directory's Docker machines were made before stacks had one; {DOCKER_INSTANCE} sets one, and then those made without it are no longer this stack's)"
        )),
    }
    say("The gateway is the front door; Ctrl-C stops everything.");

    stop_signals.recv().await;
    say("Stopping: draining in-flight requests…");
    // Tier by tier, each drained before the next is told to stop, all within one deadline.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    for ((stop, _), tasks) in stops.iter().zip(tiers) {
        let _ = stop.send(true);
        let drained = tokio::time::timeout_at(deadline, futures::future::join_all(tasks)).await;
        if drained.is_err() {
            eprintln!("berth up: some requests did not finish within 30s; exiting anyway");
            break;
        }
    }
    say("Stopped.");
    ExitCode::SUCCESS
}

/// How many tiers [`stop_tier`] puts the services in.
const STOP_TIERS: usize = 4;

/// When a service stops on Ctrl-C: the gateway first, then the services only it calls (storage-ops,
/// the machine controller), then the machine driver the controller calls, then the registry and
/// the ECS emulator. Each tier drains its in-flight requests before the next tier is
/// told to stop, so a request accepted before the signal never finds a service it still needs
/// already gone (stopped all at once, a volume add in flight could find the registry closed and be
/// answered 503).
fn stop_tier(name: &str) -> usize {
    match name {
        gateway::NAME => 0,
        storage_ops::NAME | machine_controller::NAME => 1,
        machine_driver::NAME => 2,
        _ => 3,
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

    /// Each service stops only after everything that calls it has drained.
    #[test]
    fn services_stop_after_the_services_that_call_them() {
        for (caller, callee) in [
            (gateway::NAME, storage_ops::NAME),
            (gateway::NAME, machine_driver::NAME),
            (gateway::NAME, machine_controller::NAME),
            (machine_controller::NAME, machine_driver::NAME),
            (storage_ops::NAME, orchestrator_registry::NAME),
            (machine_driver::NAME, orchestrator_registry::NAME),
            (machine_driver::NAME, "ecs-emulator"),
        ] {
            assert!(
                stop_tier(caller) < stop_tier(callee),
                "{caller} before {callee}"
            );
            assert!(stop_tier(callee) < STOP_TIERS);
        }
    }

    #[test]
    fn every_variable_up_sets_or_reads_is_one_a_service_reads() {
        let (reads, renamed) = stack_variables();
        let src = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
        let undeclared = service_kit::config::undeclared_names(src, &reads, &renamed);
        assert!(undeclared.is_empty(), "no service reads {undeclared:?}");
        // One process, one environment: every service's names and retired names are accepted.
        let env = Env::from_pairs([
            ("BERTH_RATE_LIMIT_RPS", "5"),
            ("BERTH_ALICLOUD_TIMEOUT_MS", "1500"),
            ("BERTH_LOCAL_ROOTS", "/srv"),
            ("BERTH_ORPHAN_POLICY", "report"),
            ("BERTH_URL", "http://127.0.0.1:8080"),
        ]);
        service_kit::config::check_names(&env, &reads, &renamed).unwrap();
        let e = service_kit::config::check_names(
            // Spelled at run time: the scan above reads this file's literals.
            &Env::from_pairs([(format!("{}_RATE_LIMIT_RSP", "BERTH"), "5")]),
            &reads,
            &renamed,
        )
        .unwrap_err();
        assert!(
            e.problem.contains("did you mean BERTH_RATE_LIMIT_RPS?"),
            "{e}"
        );
    }

    fn configs(extra: &[(&str, &str)]) -> Result<Configs, BoxError> {
        let dir = tempfile::tempdir().unwrap();
        let mut env = Env::default().with(vars::DATA_DIR, dir.path().display().to_string());
        for (k, v) in extra {
            env = env.with(k, *v);
        }
        configure(&env, &env, &env, &env, &env)
    }

    #[test]
    fn the_emulators_lifecycle_is_a_person_s_pace_unless_the_variables_say_otherwise() {
        let slow = emulator_lifecycle(&Env::default()).unwrap();
        assert_eq!(
            (slow.pending_ms, slow.starting_ms, slow.stopping_ms),
            (1000, 1000, 1000)
        );
        let env = Env::default()
            .with(EMULATOR_LIFECYCLE[0], "0")
            .with(EMULATOR_LIFECYCLE[1], "0s")
            .with(EMULATOR_LIFECYCLE[2], "5ms");
        assert_eq!(
            emulator_lifecycle(&env).unwrap(),
            ecs_emulator::Lifecycle {
                pending_ms: 0,
                starting_ms: 0,
                stopping_ms: 5
            }
        );
        let e = emulator_lifecycle(&Env::default().with(EMULATOR_LIFECYCLE[2], "5")).unwrap_err();
        assert!(e.to_string().contains(EMULATOR_LIFECYCLE[2]), "{e}");
    }

    #[test]
    fn storage_ops_waits_for_the_registry_less_than_the_gateway_waits_for_it() {
        // Nothing set: the gateway's default (30s) bounds the registry's time.
        let c = configs(&[]).unwrap();
        let registry_total = c.storage_ops.registry_timeout * storage_ops::REGISTRY_ATTEMPTS;
        assert!(registry_total <= c.gateway.upstream_timeout / 2);
        // A short gateway timeout alone: the registry's follows it.
        let c = configs(&[("BERTH_UPSTREAM_TIMEOUT", "2s")]).unwrap();
        assert_eq!(c.storage_ops.registry_timeout, Duration::from_millis(500));
        // Both set so that they contradict: refused at start, naming both.
        let e = configs(&[
            ("BERTH_UPSTREAM_TIMEOUT", "2s"),
            ("BERTH_REGISTRY_TIMEOUT", "5s"),
        ])
        .err()
        .expect("refused")
        .to_string();
        assert!(e.contains("BERTH_REGISTRY_TIMEOUT"), "{e}");
        assert!(e.contains("BERTH_UPSTREAM_TIMEOUT"), "{e}");
    }

    #[test]
    fn the_internal_credential_is_the_one_given_or_a_fresh_one() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = internal_token_of(&Env::default()).unwrap();
        assert!(fresh.len() >= 32, "a random credential");
        assert_ne!(fresh, internal_token_of(&Env::default()).unwrap());
        let given = Env::default().with(vars::INTERNAL_TOKEN, "given-credential");
        assert_eq!(internal_token_of(&given).unwrap(), "given-credential");
        // A file that does not exist yet is made, and the next run reads the same credential back.
        let file = dir.path().join("internal-token");
        let with_file = Env::default().with(vars::INTERNAL_TOKEN_FILE, file.display().to_string());
        let made = internal_token_of(&with_file).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), made);
        assert_eq!(internal_token_of(&with_file).unwrap(), made);
        // Both at once is refused, as every service refuses it.
        let both = with_file.with(vars::INTERNAL_TOKEN, "given-credential");
        let e = internal_token_of(&both).expect_err("refused").to_string();
        assert!(e.contains("BERTH_INTERNAL_TOKEN"), "{e}");
        assert!(!e.contains("given-credential"), "never the secret: {e}");
    }

    #[test]
    fn each_data_directory_keeps_one_docker_instance_and_an_old_one_keeps_none() {
        let env = Env::default();
        let fresh = tempfile::tempdir().unwrap();
        let made = docker_instance_of(fresh.path(), &env)
            .unwrap()
            .expect("an instance");
        assert!(
            domain::names::validate_dns1123_label("instance", &made).is_ok(),
            "{made}"
        );
        assert_eq!(
            docker_instance_of(fresh.path(), &env).unwrap(),
            Some(made.clone())
        );
        let other = tempfile::tempdir().unwrap();
        assert_ne!(
            docker_instance_of(other.path(), &env).unwrap(),
            Some(made),
            "two stacks, two instances"
        );
        // A directory a stack ran in before instances existed: its machines have none, and keep it.
        let old = tempfile::tempdir().unwrap();
        std::fs::write(old.path().join("registry.db"), b"").unwrap();
        assert_eq!(docker_instance_of(old.path(), &env).unwrap(), None);
        assert_eq!(docker_instance_of(old.path(), &env).unwrap(), None);
        // The operator's own wins; a damaged file stops the start with its path.
        let given = Env::default().with(DOCKER_INSTANCE, "mine");
        assert_eq!(
            docker_instance_of(old.path(), &given).unwrap().as_deref(),
            Some("mine")
        );
        std::fs::write(old.path().join(DOCKER_INSTANCE_FILE), "../x").unwrap();
        let e = docker_instance_of(old.path(), &env)
            .unwrap_err()
            .to_string();
        assert!(e.contains(DOCKER_INSTANCE_FILE), "{e}");
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
