//! The arguments of kubectl's verbs: `berth get`, `apply`, `delete`, `scale` and `rollout`, over
//! the machine controller's objects (and, for `get` and `apply`, volumes and orchestrators).
//! Apart because they name objects by kind and name, kubectl's way, rather than by family.

use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;

use super::Wait;
use super::parse::parse_timeout;
use super::volume::VolumeQuery;

/// `berth get …`.
#[derive(Debug, Subcommand)]
pub enum GetCommand {
    /// Volumes: one by name, or a list.
    #[command(visible_aliases = ["volume", "vol"])]
    Volumes {
        /// `name` or `namespace/name`: show this one instead of a list.
        name: Option<String>,
        /// Which volumes.
        #[command(flatten)]
        query: VolumeQuery,
    },
    /// Machines the machine controller keeps: one by name, or a list.
    #[command(visible_aliases = ["machine", "mach"])]
    Machines {
        /// Show this one instead of a list.
        name: Option<String>,
        /// Which ones.
        #[command(flatten)]
        query: ObjectQuery,
    },
    /// Machine sets: one by name, or a list.
    #[command(visible_aliases = ["machineset", "ms"])]
    Machinesets {
        /// Show this one instead of a list.
        name: Option<String>,
        /// Which ones.
        #[command(flatten)]
        query: ObjectQuery,
    },
    /// Machine deployments: one by name, or a list.
    #[command(visible_aliases = ["machinedeployment", "md"])]
    Machinedeployments {
        /// Show this one instead of a list.
        name: Option<String>,
        /// Which ones.
        #[command(flatten)]
        query: ObjectQuery,
    },
    /// Machine classes: one by name, or a list.
    #[command(visible_aliases = ["machineclass", "mcc"])]
    Machineclasses {
        /// Show this one instead of a list.
        name: Option<String>,
        /// Which ones.
        #[command(flatten)]
        query: ObjectQuery,
    },
    /// Secrets (their keys; values are never shown): one by name, or a list.
    #[command(visible_aliases = ["secret"])]
    Secrets {
        /// Show this one instead of a list.
        name: Option<String>,
        /// Which ones.
        #[command(flatten)]
        query: ObjectQuery,
    },
    /// Orchestrators: one by name, or a list.
    #[command(visible_aliases = ["orchestrator", "orch"])]
    Orchestrators {
        /// Show this one instead of a list.
        name: Option<String>,
        /// After listing, keep printing changes until interrupted (Ctrl-C).
        #[arg(short, long)]
        watch: bool,
    },
}

impl GetCommand {
    /// Whether it follows changes (`--watch`) rather than showing once.
    pub fn watches(&self) -> bool {
        match self {
            GetCommand::Volumes { query, .. } => query.watch,
            GetCommand::Orchestrators { watch, .. } => *watch,
            GetCommand::Machines { query, .. }
            | GetCommand::Machinesets { query, .. }
            | GetCommand::Machinedeployments { query, .. }
            | GetCommand::Machineclasses { query, .. }
            | GetCommand::Secrets { query, .. } => query.watch,
        }
    }
}

/// Which machine-controller objects, and where.
#[derive(Debug, Clone, clap::Args)]
pub struct ObjectQuery {
    /// The namespace (default: `default`).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// A label selector (`pool=workers`).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// After showing, keep printing changes (from the server's watch) until interrupted (Ctrl-C).
    #[arg(short, long)]
    pub watch: bool,
}

/// `KIND/NAME`, or `KIND NAME`: one machine-controller object.
#[derive(Debug, Clone, clap::Args)]
pub struct ObjectRef {
    /// The kind (machine, machineset/ms, machinedeployment/md, machineclass/mcc, secret; `scale`
    /// takes ms and md, `rollout status` md alone), or `kind/name`.
    pub target: String,
    /// The name, when not given as `kind/name`.
    pub name: Option<String>,
    /// The namespace (default: `default`).
    #[arg(short, long)]
    pub namespace: Option<String>,
}

/// `berth apply`.
#[derive(Debug, Clone, clap::Args)]
pub struct ApplyArgs {
    /// YAML or JSON files (`-`: standard input) of Volume, orchestrator, Secret, MachineClass,
    /// Machine, MachineSet and MachineDeployment objects (several per file, separated by `---`, or
    /// a list's `items`). A `resourceVersion` in one is a precondition.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// The namespace of objects that name none (default: `default`).
    #[arg(short, long)]
    pub namespace: Option<String>,
}

/// `berth delete`.
#[derive(Debug, Clone, clap::Args)]
pub struct DeleteArgs {
    /// Which object.
    #[command(flatten)]
    pub object: ObjectRef,
    /// An object that is not there is no error.
    #[arg(long)]
    pub ignore_not_found: bool,
    /// Waiting until it is gone (its VMs deleted first).
    #[command(flatten)]
    pub wait: Wait,
}

/// `berth scale`.
#[derive(Debug, Clone, clap::Args)]
pub struct ScaleArgs {
    /// Which machine set or deployment.
    #[command(flatten)]
    pub object: ObjectRef,
    /// How many machines it keeps.
    #[arg(long)]
    pub replicas: u32,
}

/// `berth rollout …`.
#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Wait until a machine deployment's machines are all of its current template and available,
    /// printing its progress.
    Status {
        /// Which deployment (`machinedeployment/NAME`, `md NAME`).
        #[command(flatten)]
        object: ObjectRef,
        /// How long to wait before giving up (exit 3).
        #[arg(long, default_value = "10m", value_parser = parse_timeout)]
        timeout: Duration,
    },
}
