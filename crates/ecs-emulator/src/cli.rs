//! The `ecs-emulator` binary's command line and start (the binary's `main` is [`main`]).
//!
//! ```text
//! ecs-emulator [--host 127.0.0.1] [--port 8090] [--access-key-id emulator] [--access-key-secret ...]
//!              [--throttle-rate 0.2] [--server-error-rate 0.05] [--latency 20ms]
//!              [--no-stock-zone cn-shanghai-b]... [--pending 1s] [--starting 1s]
//!              [--stopping 1s] [--seed-instances 10000] [--state-dir /var/lib/ecs-emulator]
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

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use service_kit::config::{ConfigError, Renamed};

use crate::{AccessKey, Config, Emulator, Faults, Lifecycle, Seed};

service_kit::declare_variables! {
    /// The variables the emulator reads besides the kit's logging ones
    /// ([`service_kit::config::vars::TELEMETRY`]): one per flag. The binary refuses any other `BERTH_*`
    /// one, and a test checks every name this crate's sources spell is here.
    pub const VARS = [
        env_vars::HOST,
        env_vars::PORT,
        env_vars::ACCESS_KEY_ID,
        env_vars::ACCESS_KEY_SECRET,
        env_vars::THROTTLE_RATE,
        env_vars::THROTTLE_TIME_LEFT,
        env_vars::SERVER_ERROR_RATE,
        env_vars::LATENCY,
        env_vars::NO_STOCK_ZONES,
        env_vars::LEAK_ON_DELETE,
        env_vars::PENDING,
        env_vars::STARTING,
        env_vars::STOPPING,
        env_vars::SEED_INSTANCES,
        env_vars::STATE_DIR,
    ];
    /// The emulator's names retired in this release: a duration takes a duration (`250ms`, `2s`), not a
    /// bare number of milliseconds, and no name carries a unit. The flags are retired alike
    /// ([`RENAMED_FLAGS`]).
    pub const RENAMED = [
        Renamed::milliseconds(
                "BERTH_ECS_EMULATOR_THROTTLE_TIME_LEFT_MS",
                env_vars::THROTTLE_TIME_LEFT,
            ),
            Renamed::milliseconds("BERTH_ECS_EMULATOR_LATENCY_MS", env_vars::LATENCY),
            Renamed::milliseconds("BERTH_ECS_EMULATOR_PENDING_MS", env_vars::PENDING),
            Renamed::milliseconds("BERTH_ECS_EMULATOR_STARTING_MS", env_vars::STARTING),
            Renamed::milliseconds("BERTH_ECS_EMULATOR_STOPPING_MS", env_vars::STOPPING),
    ];
}

/// The `--*-ms` flags retired for duration ones, by the same mechanism as the variables.
pub const RENAMED_FLAGS: &[Renamed] = &[
    Renamed::milliseconds("--throttle-time-left-ms", "--throttle-time-left"),
    Renamed::milliseconds("--latency-ms", "--latency"),
    Renamed::milliseconds("--pending-ms", "--pending"),
    Renamed::milliseconds("--starting-ms", "--starting"),
    Renamed::milliseconds("--stopping-ms", "--stopping"),
];

/// The variables' names, one per flag.
pub mod env_vars {
    /// `--host`.
    pub const HOST: &str = "BERTH_ECS_EMULATOR_HOST";
    /// `--port`.
    pub const PORT: &str = "BERTH_ECS_EMULATOR_PORT";
    /// `--access-key-id`.
    pub const ACCESS_KEY_ID: &str = "BERTH_ECS_EMULATOR_ACCESS_KEY_ID";
    /// `--access-key-secret`.
    pub const ACCESS_KEY_SECRET: &str = "BERTH_ECS_EMULATOR_ACCESS_KEY_SECRET";
    /// `--throttle-rate`.
    pub const THROTTLE_RATE: &str = "BERTH_ECS_EMULATOR_THROTTLE_RATE";
    /// `--throttle-time-left`.
    pub const THROTTLE_TIME_LEFT: &str = "BERTH_ECS_EMULATOR_THROTTLE_TIME_LEFT";
    /// `--server-error-rate`.
    pub const SERVER_ERROR_RATE: &str = "BERTH_ECS_EMULATOR_SERVER_ERROR_RATE";
    /// `--latency`.
    pub const LATENCY: &str = "BERTH_ECS_EMULATOR_LATENCY";
    /// `--no-stock-zone`.
    pub const NO_STOCK_ZONES: &str = "BERTH_ECS_EMULATOR_NO_STOCK_ZONES";
    /// `--leak-on-delete`.
    pub const LEAK_ON_DELETE: &str = "BERTH_ECS_EMULATOR_LEAK_ON_DELETE";
    /// `--pending`.
    pub const PENDING: &str = "BERTH_ECS_EMULATOR_PENDING";
    /// `--starting`.
    pub const STARTING: &str = "BERTH_ECS_EMULATOR_STARTING";
    /// `--stopping`.
    pub const STOPPING: &str = "BERTH_ECS_EMULATOR_STOPPING";
    /// `--seed-instances`.
    pub const SEED_INSTANCES: &str = "BERTH_ECS_EMULATOR_SEED_INSTANCES";
    /// `--state-dir`.
    pub const STATE_DIR: &str = "BERTH_ECS_EMULATOR_STATE_DIR";
}

/// The command line (every flag also has its variable, named in `--help`).
#[derive(Parser, Debug)]
#[command(
    name = "ecs-emulator",
    version,
    about = "A wire-compatible Alibaba Cloud ECS emulator",
    after_help = "Durations take their unit: 250ms, 2s, 1m (a bare 0 aside). The --*-ms flags and \
                  BERTH_ECS_EMULATOR_*_MS variables of the last release still work, with a warning, \
                  until the next one. A BERTH_* variable the emulator does not read stops it (exit 2)."
)]
pub struct Args {
    /// `healthcheck`: probe a running emulator's /healthz and exit 0 if it answers.
    #[arg(value_parser = ["healthcheck"])]
    command: Option<String>,
    /// Address to listen on.
    #[arg(long, env = env_vars::HOST, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Port to listen on.
    #[arg(long, env = env_vars::PORT, default_value_t = 8090)]
    port: u16,
    /// The access key id requests must be signed with. Default: with a state dir, the key kept
    /// there (made at random on its first start and logged at every start); without one, `emulator`.
    #[arg(long, env = env_vars::ACCESS_KEY_ID)]
    access_key_id: Option<String>,
    /// The access key secret requests must be signed with (default: the state dir's, as for the id).
    #[arg(long, env = env_vars::ACCESS_KEY_SECRET, hide_env_values = true)]
    access_key_secret: Option<String>,
    /// Share of calls answered `Throttling` (0–1).
    #[arg(long, env = env_vars::THROTTLE_RATE, default_value_t = 0.0)]
    throttle_rate: f64,
    /// `TimeLeft` advertised by throttled answers, a duration [default: 50ms].
    #[arg(long, env = env_vars::THROTTLE_TIME_LEFT, value_name = "DURATION")]
    throttle_time_left: Option<String>,
    /// Deprecated: --throttle-time-left in milliseconds.
    #[arg(long, hide = true)]
    throttle_time_left_ms: Option<String>,
    /// Share of calls answered 500/503 (0–1).
    #[arg(long, env = env_vars::SERVER_ERROR_RATE, default_value_t = 0.0)]
    server_error_rate: f64,
    /// Latency added to every call, a duration [default: 0s].
    #[arg(long, env = env_vars::LATENCY, value_name = "DURATION")]
    latency: Option<String>,
    /// Deprecated: --latency in milliseconds.
    #[arg(long, hide = true)]
    latency_ms: Option<String>,
    /// A zone where RunInstances answers `OperationDenied.NoStock` (repeatable; comma-separated in the variable).
    #[arg(long, env = env_vars::NO_STOCK_ZONES, value_delimiter = ',')]
    no_stock_zone: Vec<String>,
    /// Leave disks and network interfaces behind when an instance is deleted.
    #[arg(long, env = env_vars::LEAK_ON_DELETE)]
    leak_on_delete: bool,
    /// How long an instance stays Pending, a duration [default: 1s].
    #[arg(long, env = env_vars::PENDING, value_name = "DURATION")]
    pending: Option<String>,
    /// Deprecated: --pending in milliseconds.
    #[arg(long, hide = true)]
    pending_ms: Option<String>,
    /// How long an instance stays Starting, a duration [default: 1s].
    #[arg(long, env = env_vars::STARTING, value_name = "DURATION")]
    starting: Option<String>,
    /// Deprecated: --starting in milliseconds.
    #[arg(long, hide = true)]
    starting_ms: Option<String>,
    /// How long an instance stays Stopping, a duration [default: 1s].
    #[arg(long, env = env_vars::STOPPING, value_name = "DURATION")]
    stopping: Option<String>,
    /// Deprecated: --stopping in milliseconds.
    #[arg(long, hide = true)]
    stopping_ms: Option<String>,
    /// Create this many Running instances at start (for list benchmarks); with a state dir, only
    /// into an empty account.
    #[arg(long, env = env_vars::SEED_INSTANCES, default_value_t = 0)]
    seed_instances: usize,
    /// Keep the account (instances, disks, network interfaces, ClientTokens) in this directory,
    /// written crash-safely after every change, and load it at start. Without it the account lives
    /// in memory and a restart empties it.
    #[arg(long, env = env_vars::STATE_DIR)]
    state_dir: Option<std::path::PathBuf>,
}

/// The durations of one start, from the flags (new or retired) and the variables (the retired ones
/// already carried over by [`RENAMED`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durations {
    /// `--throttle-time-left`.
    pub throttle_time_left: Duration,
    /// `--latency`.
    pub latency: Duration,
    /// `--pending`, `--starting`, `--stopping`.
    pub lifecycle: [Duration; 3],
}

impl Args {
    /// The duration settings: a retired `--*-ms` flag is carried over to its new one (warning once;
    /// both at once refused), as a retired variable is by [`RENAMED`]; `env` holds the variables
    /// with those renames applied, for a setting only a retired variable gave (clap sees only the
    /// new names).
    pub fn durations(&self, env: &service_kit::Env) -> Result<Durations, ConfigError> {
        let pick = |flag: &Renamed,
                    new: &Option<String>,
                    old: &Option<String>,
                    var: &str,
                    default: Duration| {
            // clap reads the new variable into the new flag, so a value there came from either.
            let (name, text) = match flag.resolve(new.as_deref(), old.as_deref())? {
                Some(text) => (format!("{}/{var}", flag.new), text),
                None => match env.get(var) {
                    Some(text) => (var.to_string(), text.to_string()),
                    None => return Ok(default),
                },
            };
            service_kit::config::parse_duration(&text).ok_or_else(|| ConfigError {
                var: name,
                value: text,
                problem: format!(
                    "is not a duration: expected {}",
                    service_kit::config::DURATION_FORM
                ),
            })
        };
        let second = Duration::from_secs(1);
        Ok(Durations {
            throttle_time_left: pick(
                &RENAMED_FLAGS[0],
                &self.throttle_time_left,
                &self.throttle_time_left_ms,
                env_vars::THROTTLE_TIME_LEFT,
                Duration::from_millis(50),
            )?,
            latency: pick(
                &RENAMED_FLAGS[1],
                &self.latency,
                &self.latency_ms,
                env_vars::LATENCY,
                Duration::ZERO,
            )?,
            lifecycle: [
                pick(
                    &RENAMED_FLAGS[2],
                    &self.pending,
                    &self.pending_ms,
                    env_vars::PENDING,
                    second,
                )?,
                pick(
                    &RENAMED_FLAGS[3],
                    &self.starting,
                    &self.starting_ms,
                    env_vars::STARTING,
                    second,
                )?,
                pick(
                    &RENAMED_FLAGS[4],
                    &self.stopping,
                    &self.stopping_ms,
                    env_vars::STOPPING,
                    second,
                )?,
            ],
        })
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The whole `ecs-emulator` binary: flags, the check of the variables' names, serve until SIGINT or
/// SIGTERM.
pub async fn main() -> ExitCode {
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
    // Its logging and tracing settings, and its own (which clap also reads, under their new names).
    let reads = [service_kit::config::vars::TELEMETRY, VARS].concat();
    let env = service_kit::Env::from_process(&[]);
    match service_kit::config::check_names(&env, &reads, RENAMED) {
        Ok(warnings) => warnings
            .iter()
            .for_each(|w| eprintln!("ecs-emulator: warning: {w}")),
        Err(e) => {
            eprintln!("ecs-emulator: {e}");
            return ExitCode::from(2);
        }
    }
    let _telemetry =
        match service_kit::telemetry::init_or_exit("ecs-emulator", "ecs-emulator", &env) {
            Ok(g) => g,
            Err(code) => return code,
        };
    let durations = match env.migrate(RENAMED).and_then(|env| args.durations(&env)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("ecs-emulator: {e}");
            return ExitCode::from(2);
        }
    };
    let faults = Faults {
        throttle_rate: args.throttle_rate,
        throttle_time_left_ms: millis(durations.throttle_time_left),
        server_error_rate: args.server_error_rate,
        latency_ms: millis(durations.latency),
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
            match crate::stored_access_key(dir) {
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
            pending_ms: millis(durations.lifecycle[0]),
            starting_ms: millis(durations.lifecycle[1]),
            stopping_ms: millis(durations.lifecycle[2]),
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
    let listener = match service_kit::server::bind(addr, env_vars::PORT).await {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("ecs-emulator").chain(words.iter().copied())).unwrap()
    }

    #[test]
    fn durations_take_the_duration_form_and_the_ms_flags_for_one_release() {
        let none = service_kit::Env::default();
        let d = args(&[]).durations(&none).unwrap();
        assert_eq!(d.throttle_time_left, Duration::from_millis(50));
        assert_eq!(d.latency, Duration::ZERO);
        assert_eq!(d.lifecycle, [Duration::from_secs(1); 3]);
        let d = args(&[
            "--pending",
            "250ms",
            "--latency",
            "2s",
            "--stopping-ms",
            "40",
        ])
        .durations(&none)
        .unwrap();
        assert_eq!(d.lifecycle[0], Duration::from_millis(250));
        assert_eq!(d.latency, Duration::from_secs(2));
        assert_eq!(d.lifecycle[2], Duration::from_millis(40));
        // Both forms of one flag: refused, as for a variable.
        let e = args(&["--pending", "1s", "--pending-ms", "5"])
            .durations(&none)
            .unwrap_err();
        assert_eq!(e.var, "--pending-ms");
        // A bare number is no duration.
        let e = args(&["--latency", "20"]).durations(&none).unwrap_err();
        assert_eq!(e.var, "--latency/BERTH_ECS_EMULATOR_LATENCY");
        assert!(e.problem.contains("bare number"), "{e}");
        // A retired variable, carried over by RENAMED, when no flag gives the setting.
        let env = service_kit::Env::from_pairs([("BERTH_ECS_EMULATOR_STARTING_MS", "75")])
            .migrate(RENAMED)
            .unwrap();
        let d = args(&[]).durations(&env).unwrap();
        assert_eq!(d.lifecycle[1], Duration::from_millis(75));
    }
}
