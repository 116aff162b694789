//! The stack as separate processes, for the suites that kill them: the six binaries started on
//! one data directory, each on its own port, and killed (SIGKILL) and started again one by one.
//!
//! [`ProcessStack::start`] wires them as production does — the gateway in front with a tokens file,
//! the services behind it with the internal credential, the machine driver pointed at the ECS
//! emulator, which keeps its account in a state directory so it outlives the others' crashes — and
//! with no Docker Engine (the registry's detection picks `local`).

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berth_stack::up::{Caller, ServiceUrls, wiring};
use gateway::auth::tokens_file_line;
use gateway::routes::Scope;

/// One of the stack's binaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Service {
    /// `ecs-emulator`.
    Emulator,
    /// `orchestrator-registry`.
    Registry,
    /// `storage-ops`.
    StorageOps,
    /// `machine-driver`.
    MachineDriver,
    /// `machine-controller`.
    MachineController,
    /// `gateway`.
    Gateway,
}

impl Service {
    /// Every service, in the order they start (each one's dependencies first).
    pub const ALL: [Service; 6] = [
        Service::Emulator,
        Service::Registry,
        Service::StorageOps,
        Service::MachineDriver,
        Service::MachineController,
        Service::Gateway,
    ];

    /// The binary's name.
    pub fn binary(self) -> &'static str {
        match self {
            Service::Emulator => "ecs-emulator",
            Service::Registry => "orchestrator-registry",
            Service::StorageOps => "storage-ops",
            Service::MachineDriver => "machine-driver",
            Service::MachineController => "machine-controller",
            Service::Gateway => "gateway",
        }
    }
}

/// The credentials a stack is started with.
#[derive(Debug, Clone)]
pub struct Credentials {
    /// The one bearer token in the gateway's tokens file, with the admin scope.
    pub admin_token: String,
    /// The internal credential between the gateway and the services.
    pub internal_token: String,
    /// The emulator's access key id.
    pub ecs_key_id: String,
    /// The emulator's access key secret.
    pub ecs_key_secret: String,
}

/// One service's process: how to start it, and the running child.
pub struct Process {
    service: Service,
    port: u16,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<tokio::process::Child>,
}

impl Process {
    /// Starts the process (its output appended to its log in the data directory) and waits until
    /// it answers `/healthz`.
    pub async fn start(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let child = tokio::process::Command::new(&self.program)
            .args(&self.args)
            // Only what the stack sets: a caller's BERTH_* variables must not change the set-up.
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{}: {e}", self.program.display()))?;
        self.child = Some(child);
        let url = format!("http://127.0.0.1:{}/healthz", self.port);
        let started = Instant::now();
        let http = reqwest::Client::new();
        while started.elapsed() < Duration::from_secs(30) {
            if let Ok(r) = http.get(&url).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(format!(
                    "{} exited at start ({status}); see {}",
                    self.service.binary(),
                    self.log.display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(format!(
            "{} did not answer /healthz within 30s; see {}",
            self.service.binary(),
            self.log.display()
        ))
    }

    /// SIGSTOP: the process keeps its sockets, so the kernel still accepts connections for it,
    /// but it answers nothing — a hung dependency, not a dead one.
    pub fn pause(&self) -> Result<(), String> {
        self.signal("-STOP")
    }

    /// SIGCONT after [`Process::pause`].
    pub fn resume(&self) -> Result<(), String> {
        self.signal("-CONT")
    }

    fn signal(&self, signal: &str) -> Result<(), String> {
        let pid = self
            .child
            .as_ref()
            .and_then(tokio::process::Child::id)
            .ok_or_else(|| format!("{} is not running", self.service.binary()))?;
        let status = std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .map_err(|e| format!("kill {signal}: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("kill {signal} {pid}: {status}"))
        }
    }

    /// SIGKILL, and wait until the process is gone.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
}

/// A port free now, below Linux's ephemeral range (32768–60999 by default). A port the OS picks
/// for `:0` comes from that range, which every outgoing connection also draws from, so one could
/// take it between this check and the service's start, or while a killed service restarts (a
/// crash round once lost the driver's port so). Below the range only another listener can.
fn free_port() -> Result<u16, String> {
    use rand::Rng as _;
    let mut rng = rand::rng();
    for _ in 0..200 {
        let port = rng.random_range(20_000..32_768);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port on 127.0.0.1: {e}"))
}

/// The six processes of one stack.
pub struct ProcessStack {
    procs: BTreeMap<Service, Process>,
    /// The gateway's URL.
    pub gateway: String,
    /// The emulator's URL (its `/_emulator/state` shows the account).
    pub emulator: String,
    /// Where the registry's first-start `local` orchestrator keeps volumes.
    pub volumes_root: PathBuf,
}

impl ProcessStack {
    /// Starts the binaries found in `bin_dir` on the data directory `data`. The emulator's
    /// lifecycle is shortened (30 ms a state), so a machine settles within a suite's patience.
    ///
    /// `settings` adds (or replaces) variables of one service's environment.
    pub async fn start(
        bin_dir: &Path,
        data: &Path,
        credentials: &Credentials,
        settings: &[(Service, &str, &str)],
    ) -> Result<ProcessStack, String> {
        let mut ports = BTreeMap::new();
        for s in Service::ALL {
            ports.insert(s, free_port()?);
        }
        let url = |s: Service| format!("http://127.0.0.1:{}", ports[&s]);
        let urls = ServiceUrls {
            registry: url(Service::Registry),
            storage_ops: url(Service::StorageOps),
            machine_driver: url(Service::MachineDriver),
            machine_controller: url(Service::MachineController),
            ecs: url(Service::Emulator),
        };
        let tokens = data.join("tokens");
        std::fs::write(
            &tokens,
            tokens_file_line("suite-admin", &credentials.admin_token, &[Scope::Admin]),
        )
        .map_err(|e| e.to_string())?;
        let data_dir = data.display().to_string();
        let mut procs = BTreeMap::new();
        for s in Service::ALL {
            let port = ports[&s];
            let mut args = Vec::new();
            let mut env: Vec<(&str, String)> = vec![
                ("BERTH_LISTEN", format!("127.0.0.1:{port}")),
                ("BERTH_DATA_DIR", data_dir.clone()),
                ("BERTH_INTERNAL_TOKEN", credentials.internal_token.clone()),
                ("BERTH_LOG", "warn".into()),
                // No Docker Engine: detection picks `local`, and nothing reaches one this host has.
                (
                    "DOCKER_HOST",
                    format!("unix://{data_dir}/no-docker-engine.sock"),
                ),
            ];
            match s {
                Service::Emulator => {
                    env.clear();
                    let ecs = data.join("ecs").display().to_string();
                    args = vec![
                        "--port".to_string(),
                        port.to_string(),
                        "--state-dir".into(),
                        ecs,
                        "--access-key-id".into(),
                        credentials.ecs_key_id.clone(),
                        "--access-key-secret".into(),
                        credentials.ecs_key_secret.clone(),
                        "--pending".into(),
                        "30ms".into(),
                        "--starting".into(),
                        "30ms".into(),
                        "--stopping".into(),
                        "30ms".into(),
                    ];
                }
                Service::Registry => {}
                Service::StorageOps => {
                    env.extend(wiring(Caller::StorageOps, &urls, &tokens));
                    env.push(("BERTH_RECONCILE_INTERVAL", "1s".into()));
                }
                Service::MachineDriver => {
                    env.extend(wiring(Caller::MachineDriver, &urls, &tokens));
                }
                Service::MachineController => {
                    env.extend(wiring(Caller::MachineController, &urls, &tokens));
                }
                Service::Gateway => {
                    env.extend(wiring(Caller::Gateway, &urls, &tokens));
                    env.push(("BERTH_RATE_LIMIT_RPS", "0".into()));
                    // A killed upstream is back within a second: a breaker held open longer would
                    // only slow the suite down.
                    env.push(("BERTH_BREAKER_OPEN", "100ms".into()));
                }
            }
            for (_, key, value) in settings.iter().filter(|(to, _, _)| *to == s) {
                env.retain(|(k, _)| k != key);
                env.push((key, value.to_string()));
            }
            procs.insert(
                s,
                Process {
                    service: s,
                    port,
                    program: bin_dir.join(s.binary()),
                    args,
                    env: env.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                    log: data.join(format!("{}.log", s.binary())),
                    child: None,
                },
            );
        }
        let mut stack = ProcessStack {
            procs,
            gateway: url(Service::Gateway),
            emulator: url(Service::Emulator),
            volumes_root: data.join("volumes/local"),
        };
        for s in Service::ALL {
            stack.process(s).start().await?;
        }
        Ok(stack)
    }

    /// Every service's URL.
    pub fn urls(&self) -> Vec<(Service, String)> {
        self.procs
            .values()
            .map(|p| (p.service, format!("http://127.0.0.1:{}", p.port)))
            .collect()
    }

    /// Every running service's process id (for reading its `/proc` entries).
    pub fn pids(&self) -> BTreeMap<Service, u32> {
        self.procs
            .iter()
            .filter_map(|(s, p)| Some((*s, p.child.as_ref()?.id()?)))
            .collect()
    }

    /// One service's process.
    pub fn process(&mut self, service: Service) -> &mut Process {
        self.procs
            .get_mut(&service)
            .expect("a stack has every service")
    }

    /// Kills every process.
    pub async fn stop(&mut self) {
        for p in self.procs.values_mut() {
            p.kill().await;
        }
    }
}

/// Whether every binary of the stack is built in `bin_dir`; the refusal names the first that is
/// not, as `suite` says it.
pub fn check_built(suite: &str, bin_dir: &Path) -> Result<(), String> {
    match Service::ALL
        .into_iter()
        .find(|s| !bin_dir.join(s.binary()).is_file())
    {
        None => Ok(()),
        Some(s) => Err(format!(
            "{suite}: {} is not built (looked in {}; --bin-dir names another)",
            s.binary(),
            bin_dir.display()
        )),
    }
}

/// The directory of the stack's binaries for a suite whose only option is `--bin-dir DIR`: that
/// directory, else the suite's own (`cargo build` puts them side by side). `Err` is the usage line,
/// for the suite to print before exiting 2.
pub fn bin_dir_from_args(suite: &str) -> Result<PathBuf, String> {
    let mut bin_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(PathBuf::from))
        .unwrap_or_default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--bin-dir", Some(d)) => bin_dir = PathBuf::from(d),
            _ => return Err(format!("{suite}: usage: {suite} [--bin-dir DIR]")),
        }
    }
    Ok(bin_dir)
}
