//! `berth up`: every service in one process, each on its own listener and still talking HTTP to the
//! others exactly as in production, so what works here works in compose and Kubernetes.
//!
//! The services get their configuration the way their binaries do, as `BERTH_*` variables: the
//! process's own, overridden by what `up` decides (ports, data directory, upstream URLs, a fresh
//! internal credential shared by the services of this run).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use service_kit::Env;
use service_kit::config::vars;
use service_kit::server::Application;
use tokio::sync::watch;

use crate::args::UpArgs;

/// The ports of one run, in DESIGN.md's order.
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
    /// The ECS emulator.
    pub ecs_emulator: u16,
}

impl Ports {
    /// B, B+1, B+2, B+3 and B+10.
    pub fn from_base(base: u16) -> Option<Ports> {
        Some(Ports {
            gateway: base,
            machine_driver: base.checked_add(1)?,
            registry: base.checked_add(2)?,
            storage_ops: base.checked_add(3)?,
            ecs_emulator: base.checked_add(10)?,
        })
    }
}

fn random_token() -> String {
    crate::commands::new_token()
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What `up` tells the person who started it.
pub struct Banner {
    /// The admin token, when this start created it (shown once).
    pub new_admin_token: Option<String>,
    /// The tokens file.
    pub tokens_file: std::path::PathBuf,
    /// The emulator's throwaway access key (id, secret).
    pub emulator_key: (String, String),
}

/// Creates the tokens file with one admin token on first start (mode 0600, only the hash stored), and
/// returns the token to show once; later starts return `None`.
pub fn ensure_admin_token(path: &std::path::Path) -> Result<Option<String>, BoxError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if path.exists() {
        return Ok(None);
    }
    let token = random_token();
    let line = gateway::auth::tokens_file_line("admin", &token, &[gateway::routes::Scope::Admin]);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot create the tokens file {}: {e}", path.display()))?;
    writeln!(
        file,
        "# Berth gateway tokens: <name> sha256:<hash> <scopes>. Add lines with `berth token create`."
    )?;
    writeln!(file, "{line}")?;
    file.sync_all()?;
    Ok(Some(token))
}

/// Builds every service of the stack, bound and ready to serve.
pub async fn build_stack(
    args: &UpArgs,
    base_env: &Env,
) -> Result<(Vec<(&'static str, Application)>, Banner), BoxError> {
    let ports = Ports::from_base(args.port_base)
        .ok_or("--port-base leaves no room for the ports above it")?;
    std::fs::create_dir_all(&args.data_dir).map_err(|e| {
        format!(
            "cannot create the data directory {}: {e}",
            args.data_dir.display()
        )
    })?;
    let data_dir = std::fs::canonicalize(&args.data_dir)?;
    let tokens_file = data_dir.join("tokens");
    let new_admin_token = ensure_admin_token(&tokens_file)?;
    // The emulator's key is throwaway and local: fresh each start, printed in the banner.
    let emulator_key = (
        format!("LTAI{}", &random_token()[6..22]),
        random_token()[6..38].to_string(),
    );
    let at = |port: u16| SocketAddr::new(args.bind, port).to_string();
    let url = |port: u16| {
        let host = if args.bind.is_unspecified() {
            "127.0.0.1".to_string()
        } else {
            args.bind.to_string()
        };
        format!(
            "http://{}",
            SocketAddr::new(host.parse().expect("an IP"), port)
        )
    };
    let shared = base_env
        .clone()
        .with(vars::DATA_DIR, data_dir.display().to_string())
        .with(vars::INTERNAL_TOKEN, random_token())
        .with("BERTH_REGISTRY_URL", url(ports.registry))
        .with("BERTH_STORAGE_OPS_URL", url(ports.storage_ops))
        .with("BERTH_MACHINE_DRIVER_URL", url(ports.machine_driver))
        .with("BERTH_TOKENS_FILE", tokens_file.display().to_string())
        .with("BERTH_ALICLOUD_ENDPOINT", url(ports.ecs_emulator));
    let env_for = |port: u16| shared.clone().with(vars::LISTEN, at(port));
    // Every configuration is read before anything binds a port, so one that is refused stops the
    // start with its reason and nothing half-started.
    let configs = configure(
        &env_for(ports.gateway),
        &env_for(ports.registry),
        &env_for(ports.storage_ops),
        &env_for(ports.machine_driver),
    )?;

    let mut apps = Vec::new();
    // Instances move Pending → Starting → Running in a couple of seconds, as a person can follow.
    let emulator = ecs_emulator::Emulator::new(ecs_emulator::Config {
        access_keys: vec![ecs_emulator::AccessKey::new(
            emulator_key.0.clone(),
            emulator_key.1.clone(),
        )],
        lifecycle: ecs_emulator::Lifecycle {
            pending_ms: 1000,
            starting_ms: 1000,
            stopping_ms: 1000,
        },
        ..ecs_emulator::Config::default()
    });
    let emulator_listener = service_kit::server::bind(
        SocketAddr::new(args.bind, ports.ecs_emulator),
        "--port-base",
    )
    .await?;
    apps.push((
        "ecs-emulator",
        Application::new(emulator.router(), emulator_listener),
    ));
    apps.push((
        orchestrator_registry::NAME,
        orchestrator_registry::build(configs.registry).await?,
    ));
    apps.push((
        storage_ops::NAME,
        storage_ops::build(configs.storage_ops).await?,
    ));
    apps.push((
        machine_driver::NAME,
        machine_driver::build(configs.machine_driver).await?,
    ));
    apps.push((gateway::NAME, gateway::build(configs.gateway).await?));
    Ok((
        apps,
        Banner {
            new_admin_token,
            tokens_file,
            emulator_key,
        },
    ))
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
        gateway,
    })
}

/// Runs the stack until Ctrl-C or SIGTERM, then drains every service and exits 0.
pub async fn run(args: UpArgs) -> ExitCode {
    let env = Env::from_process();
    let _telemetry = match service_kit::telemetry::init("berth", &env) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("berth up: telemetry setup failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (apps, banner) = match build_stack(&args, &env).await {
        Ok(built) => built,
        Err(e) => {
            eprintln!("berth up: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("Berth is up. State lives in {}", args.data_dir.display());
    for (name, app) in &apps {
        println!("  {name:<22} http://{}", app.local_addr());
    }
    let gateway_url = apps
        .iter()
        .find(|(n, _)| *n == gateway::NAME)
        .map(|(_, a)| format!("http://{}", a.local_addr()))
        .unwrap_or_default();
    println!("gateway url: {gateway_url}");
    match &banner.new_admin_token {
        Some(token) => {
            println!("admin token: {token}");
            println!(
                "  (shown once; only its hash is kept, in {})",
                banner.tokens_file.display()
            );
        }
        None => println!(
            "tokens file: {} (the admin token was printed when it was created; `berth token create` makes more)",
            banner.tokens_file.display()
        ),
    }
    println!(
        "Machines go to a SIMULATED Alibaba Cloud: the embedded ECS emulator, not a real cloud."
    );
    println!("emulator access key id: {}", banner.emulator_key.0);
    println!("emulator access key secret: {}", banner.emulator_key.1);
    println!("  (throwaway local credentials for the emulator; put them in your machine Secret)");
    println!("The gateway is the front door; Ctrl-C stops everything.");

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    for (name, app) in apps {
        let mut stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            let shutdown = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            if let Err(e) = app.run_until(shutdown).await {
                eprintln!("berth up: {name} failed: {e}");
            }
        }));
    }
    service_kit::shutdown_signal().await;
    println!("Stopping: draining in-flight requests…");
    let _ = stop_tx.send(true);
    let drained =
        tokio::time::timeout(Duration::from_secs(30), futures::future::join_all(tasks)).await;
    if drained.is_err() {
        eprintln!("berth up: some requests did not finish within 30s; exiting anyway");
    }
    println!("Stopped.");
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configs(extra: &[(&str, &str)]) -> Result<Configs, BoxError> {
        let dir = tempfile::tempdir().unwrap();
        let mut env = Env::default().with(vars::DATA_DIR, dir.path().display().to_string());
        for (k, v) in extra {
            env = env.with(k, *v);
        }
        configure(&env, &env, &env, &env)
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

    #[tokio::test]
    async fn a_contradicting_configuration_stops_the_start_before_any_port_is_bound() {
        let dir = tempfile::tempdir().unwrap();
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let args = UpArgs {
            data_dir: dir.path().to_path_buf(),
            // The gateway's port is taken: a start that got as far as binding would say so instead.
            port_base: taken.local_addr().unwrap().port(),
            bind: "127.0.0.1".parse().unwrap(),
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
}
