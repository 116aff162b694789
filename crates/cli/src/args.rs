//! The command tree.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Berth: machines and storage volumes behind one REST control plane.
#[derive(Debug, Parser)]
#[command(name = "berth", version, about, propagate_version = true)]
pub struct Cli {
    /// The gateway's URL.
    #[arg(
        long,
        global = true,
        env = "BERTH_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub server: String,
    /// A bearer token (`berth up` prints an admin token on first start).
    #[arg(long, global = true, env = "BERTH_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// How to print results.
    #[arg(short, long, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// How long one call may take.
    #[arg(long, global = true, default_value = "60s", value_parser = parse_duration)]
    pub timeout: std::time::Duration,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns for people.
    Table,
    /// The API's JSON.
    Json,
    /// The API's objects as YAML.
    Yaml,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the whole stack (gateway, machine driver, registry, storage ops, ECS emulator) in one process.
    Up(UpArgs),
    /// Create, inspect, list and delete machines (the MCM driver contract).
    #[command(subcommand)]
    Machine(MachineCommand),
    /// Create, inspect, list and delete storage volumes.
    #[command(subcommand)]
    Volume(VolumeCommand),
    /// Register, inspect and remove orchestrators.
    #[command(subcommand)]
    Orchestrator(OrchestratorCommand),
    /// Manage gateway tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Print a shell completion script.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `berth up`.
#[derive(Debug, Clone, clap::Args)]
pub struct UpArgs {
    /// Where all state goes: SQLite files, local volumes, the tokens file.
    #[arg(long, env = "BERTH_DATA_DIR", default_value = service_kit::config::DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// The gateway's port; the services take the next ones (+1 machine-driver, +2 registry,
    /// +3 storage-ops, +10 ECS emulator).
    #[arg(long, default_value_t = 8080)]
    pub port_base: u16,
    /// The address every listener binds.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: std::net::IpAddr,
}

/// Where the machine, its class and its secret come from.
#[derive(Debug, Clone, clap::Args)]
pub struct MachineFiles {
    /// YAML or JSON files holding the Machine, MachineClass and Secret (as Kubernetes objects with
    /// `kind`, several per file separated by `---`), or one `{machine, machineClass, secret}` body.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
}

/// Machine commands.
#[derive(Debug, Subcommand)]
pub enum MachineCommand {
    /// CreateMachine: make (or adopt) the VM backing a Machine.
    Create(MachineFiles),
    /// GetMachineStatus.
    Status(MachineFiles),
    /// DeleteMachine.
    Delete(MachineFiles),
    /// InitializeMachine.
    Init(MachineFiles),
    /// ListMachines: the VMs a MachineClass's tags identify (needs the class and secret).
    List(MachineFiles),
}

/// Volume commands.
#[derive(Debug, Subcommand)]
pub enum VolumeCommand {
    /// AddStorage.
    Create {
        /// The volume's name (or give `-f`).
        name: Option<String>,
        /// A VolumeProvisionerProfile in YAML or JSON instead of flags.
        #[arg(short = 'f', long = "filename", conflicts_with = "name")]
        file: Option<PathBuf>,
        /// The namespace.
        #[arg(short, long)]
        namespace: Option<String>,
        /// The capacity (`10Gi`, `500M`).
        #[arg(long)]
        capacity: Option<String>,
        /// The orchestrator (the registry's default when absent).
        #[arg(long)]
        orchestrator: Option<String>,
        /// Replicas.
        #[arg(long)]
        replicas: Option<u32>,
        /// A label `key=value` (repeatable).
        #[arg(short, long = "label", value_parser = parse_pair)]
        labels: Vec<(String, String)>,
        /// A backend parameter `key=value` (repeatable): `format=file`, `reclaimPolicy=Retain`.
        #[arg(short = 'p', long = "param", value_parser = parse_pair)]
        params: Vec<(String, String)>,
        /// Wait until the volume is Ready (fails if it ends Failed).
        #[arg(long)]
        wait: bool,
    },
    /// ReadStorage.
    Get {
        /// `name` or `namespace/name`.
        name: String,
        /// The namespace.
        #[arg(short, long)]
        namespace: Option<String>,
    },
    /// ListStorage (every page).
    List {
        /// Only this namespace.
        #[arg(short, long)]
        namespace: Option<String>,
        /// A label selector (`app=db,tier in (a,b)`).
        #[arg(short = 'l', long)]
        selector: Option<String>,
        /// At most this many volumes (one page); all pages when absent.
        #[arg(long)]
        limit: Option<u32>,
    },
    /// DeleteStorage.
    Delete {
        /// `name` or `namespace/name`.
        name: String,
        /// The namespace.
        #[arg(short, long)]
        namespace: Option<String>,
    },
    /// Capacity and bytes used.
    Stats {
        /// `name` or `namespace/name`.
        name: String,
        /// The namespace.
        #[arg(short, long)]
        namespace: Option<String>,
    },
}

/// Orchestrator commands.
#[derive(Debug, Subcommand)]
pub enum OrchestratorCommand {
    /// RegisterOrchestrator (idempotent; replaces a different registration).
    Register {
        /// The orchestrator's name.
        name: String,
        /// Its kind: local, docker, kubernetes, nomad.
        #[arg(long)]
        kind: String,
        /// A free label.
        #[arg(long)]
        label: Option<String>,
        /// The region it serves.
        #[arg(long)]
        region: Option<String>,
        /// A config entry `key=value` (repeatable): `basePath=/srv/vols`, `capacity=100Gi`, `host=unix:///var/run/docker.sock`.
        #[arg(short, long = "config", value_parser = parse_pair)]
        config: Vec<(String, String)>,
        /// Make it the default orchestrator.
        #[arg(long)]
        default: bool,
    },
    /// GetOrchestrator.
    Get {
        /// The name.
        name: String,
    },
    /// Every registered orchestrator.
    List,
    /// Deregister.
    Delete {
        /// The name.
        name: String,
    },
    /// Which kind the registry's environment implies.
    Detect,
    /// The kinds the registry can build.
    Kinds,
}

/// Token commands.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a new token: prints it once, and the line for the gateway's tokens file.
    Create {
        /// Comma-separated scopes: machines:read, machines:write, volumes:read, volumes:write,
        /// orchestrators:read, orchestrators:write, admin.
        #[arg(long, value_delimiter = ',', required = true)]
        scopes: Vec<String>,
        /// A name for the token in logs.
        #[arg(long, default_value = "token")]
        name: String,
    },
}

fn parse_pair(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{s:?} is not key=value"))
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    service_kit::config::parse_duration(s)
        .ok_or_else(|| format!("{s:?} is not a duration like 30s"))
}
