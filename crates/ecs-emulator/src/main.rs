//! `ecs-emulator`: serves the ECS emulator until SIGINT/SIGTERM.
//!
//! ```text
//! ecs-emulator [--host 127.0.0.1] [--port 8090] [--access-key-id emulator] [--access-key-secret ...]
//!              [--throttle-rate 0.2] [--server-error-rate 0.05] [--latency-ms 20]
//!              [--no-stock-zone cn-shanghai-b]... [--pending-ms 1000] [--starting-ms 1000]
//!              [--stopping-ms 1000] [--seed-instances 10000] [--state-dir /var/lib/ecs-emulator]
//! ecs-emulator healthcheck [--host ...] [--port ...]
//! ```
//! Every flag can also be set by the `BERTH_ECS_EMULATOR_*` variable named in `--help`. The admin
//! endpoints under `/_emulator/` are unauthenticated: keep the default loopback host unless the
//! emulator runs in an isolated network (a compose stack).
//!
//! With `--state-dir` (a volume, in a compose stack) the account survives restarts: instances keep
//! their ids, statuses and tags, and so does the access key when no flag gives one: a random one is
//! made on the first start, kept in the directory and logged at every start (it signs calls to a
//! simulated cloud, and the log is where a container's operator can read it).

/// The binary picks the allocator, not a library it links: mimalloc, since under load the services
/// allocate small, short-lived buffers on many threads, where glibc's allocator showed up as the
/// gateway's largest cost (arena lock contention, in a `perf` profile of `bench/gateway.sh`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use clap::Parser;
use ecs_emulator::{AccessKey, Config, Emulator, Faults, Lifecycle, Seed};

#[derive(Parser, Debug)]
#[command(
    name = "ecs-emulator",
    version,
    about = "A wire-compatible Alibaba Cloud ECS emulator"
)]
struct Args {
    /// `healthcheck`: probe a running emulator's /healthz and exit 0 if it answers.
    #[arg(value_parser = ["healthcheck"])]
    command: Option<String>,
    /// Address to listen on.
    #[arg(long, env = "BERTH_ECS_EMULATOR_HOST", default_value = "127.0.0.1")]
    host: IpAddr,
    /// Port to listen on.
    #[arg(long, env = "BERTH_ECS_EMULATOR_PORT", default_value_t = 8090)]
    port: u16,
    /// The access key id requests must be signed with. Default: with a state dir, the key kept
    /// there (made at random on its first start and logged at every start); without one, `emulator`.
    #[arg(long, env = "BERTH_ECS_EMULATOR_ACCESS_KEY_ID")]
    access_key_id: Option<String>,
    /// The access key secret requests must be signed with (default: the state dir's, as for the id).
    #[arg(
        long,
        env = "BERTH_ECS_EMULATOR_ACCESS_KEY_SECRET",
        hide_env_values = true
    )]
    access_key_secret: Option<String>,
    /// Share of calls answered `Throttling` (0–1).
    #[arg(long, env = "BERTH_ECS_EMULATOR_THROTTLE_RATE", default_value_t = 0.0)]
    throttle_rate: f64,
    /// `TimeLeft` advertised by throttled answers, in milliseconds.
    #[arg(
        long,
        env = "BERTH_ECS_EMULATOR_THROTTLE_TIME_LEFT_MS",
        default_value_t = 50
    )]
    throttle_time_left_ms: u64,
    /// Share of calls answered 500/503 (0–1).
    #[arg(
        long,
        env = "BERTH_ECS_EMULATOR_SERVER_ERROR_RATE",
        default_value_t = 0.0
    )]
    server_error_rate: f64,
    /// Latency added to every call, in milliseconds.
    #[arg(long, env = "BERTH_ECS_EMULATOR_LATENCY_MS", default_value_t = 0)]
    latency_ms: u64,
    /// A zone where RunInstances answers `OperationDenied.NoStock` (repeatable; comma-separated in the variable).
    #[arg(long, env = "BERTH_ECS_EMULATOR_NO_STOCK_ZONES", value_delimiter = ',')]
    no_stock_zone: Vec<String>,
    /// Leave disks and network interfaces behind when an instance is deleted.
    #[arg(long, env = "BERTH_ECS_EMULATOR_LEAK_ON_DELETE")]
    leak_on_delete: bool,
    /// Milliseconds an instance stays Pending.
    #[arg(long, env = "BERTH_ECS_EMULATOR_PENDING_MS", default_value_t = 1000)]
    pending_ms: u64,
    /// Milliseconds an instance stays Starting.
    #[arg(long, env = "BERTH_ECS_EMULATOR_STARTING_MS", default_value_t = 1000)]
    starting_ms: u64,
    /// Milliseconds an instance stays Stopping.
    #[arg(long, env = "BERTH_ECS_EMULATOR_STOPPING_MS", default_value_t = 1000)]
    stopping_ms: u64,
    /// Create this many Running instances at start (for list benchmarks); with a state dir, only
    /// into an empty account.
    #[arg(long, env = "BERTH_ECS_EMULATOR_SEED_INSTANCES", default_value_t = 0)]
    seed_instances: usize,
    /// Keep the account (instances, disks, network interfaces, ClientTokens) in this directory,
    /// written crash-safely after every change, and load it at start. Without it the account lives
    /// in memory and a restart empties it.
    #[arg(long, env = "BERTH_ECS_EMULATOR_STATE_DIR")]
    state_dir: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let addr = SocketAddr::new(args.host, args.port);
    if args.command.as_deref() == Some("healthcheck") {
        let probe = if addr.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], addr.port()))
        } else {
            addr
        };
        return if service_kit::server::healthcheck(probe).await {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    // Only its logging and tracing settings: the emulator's own are its flags.
    let env = service_kit::Env::from_process(&[]);
    let _telemetry = match service_kit::telemetry::init("ecs-emulator", &env) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("ecs-emulator: telemetry setup failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let faults = Faults {
        throttle_rate: args.throttle_rate,
        throttle_time_left_ms: args.throttle_time_left_ms,
        server_error_rate: args.server_error_rate,
        latency_ms: args.latency_ms,
        no_stock_zones: args
            .no_stock_zone
            .iter()
            .map(|z| z.trim().to_owned())
            .collect(),
        leak_on_delete: args.leak_on_delete,
    };
    if let Err(e) = faults.validate() {
        eprintln!("ecs-emulator: {e}");
        return ExitCode::FAILURE;
    }
    let (access_key, show_secret) = match (args.access_key_id, args.access_key_secret) {
        (None, None) if args.state_dir.is_some() => {
            let dir = args.state_dir.as_deref().expect("checked above");
            match ecs_emulator::stored_access_key(dir) {
                Ok(key) => (key, true),
                Err(e) => {
                    eprintln!("ecs-emulator: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        (id, secret) => (
            AccessKey::new(
                id.unwrap_or_else(|| "emulator".into()),
                secret.unwrap_or_else(|| "emulator-secret".into()),
            ),
            false,
        ),
    };
    let access_key_id = access_key.id.clone();
    let stored_secret = show_secret.then(|| access_key.secret.clone());
    let config = Config {
        access_keys: vec![access_key],
        lifecycle: Lifecycle {
            pending_ms: args.pending_ms,
            starting_ms: args.starting_ms,
            stopping_ms: args.stopping_ms,
        },
        faults,
        state_dir: args.state_dir.clone(),
        ..Config::default()
    };
    let emulator = match Emulator::open(config) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("ecs-emulator: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.seed_instances > 0 && emulator.instance_count() == 0 {
        match emulator.seed(&Seed {
            count: args.seed_instances,
            ..Seed::default()
        }) {
            Ok(ids) => tracing::info!(count = ids.len(), "seeded instances"),
            Err(e) => {
                eprintln!("ecs-emulator: seeding failed: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let listener = match service_kit::server::bind(addr, "BERTH_ECS_EMULATOR_PORT").await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ecs-emulator: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(secret) = stored_secret {
        // The throwaway key of a simulated cloud, kept in the state dir: the tour puts it into a
        // machine Secret, and the log is all a container offers to read it from.
        tracing::info!("emulator access key id: {access_key_id}");
        tracing::info!("emulator access key secret: {secret} (kept in the state dir)");
    }
    tracing::info!(
        %addr,
        %access_key_id,
        "ECS emulator listening (simulated cloud, not Alibaba Cloud)"
    );
    match service_kit::serve(emulator.router(), listener, service_kit::shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "ecs-emulator failed");
            ExitCode::FAILURE
        }
    }
}
