//! The command tree.
//!
//! The options that say how to reach the gateway and how to print ([`Connection`], [`Format`]) belong
//! to the commands that call it, not to the whole program: `berth up --help` then shows only what `up`
//! reads, and `berth up --server …` is refused instead of silently ignored. They are `global` below
//! their command, so `berth volume list -o json` and `berth volume -o json list` both work.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Parser, Subcommand};

/// Berth: machines and storage volumes behind one REST control plane.
#[derive(Debug, Parser)]
#[command(
    name = "berth",
    version,
    about,
    propagate_version = true,
    after_help = "Exit codes: 0 done; 1 the request was refused (not found, invalid, not allowed); \
                  2 the command line is wrong (usage); 3 the server failed, could not be reached, \
                  or did not finish in time (retrying may help)."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How to reach the gateway.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Connection options")]
pub struct Connection {
    /// The gateway's URL; `host:port` means `http://host:port`.
    #[arg(
        long,
        global = true,
        env = "BERTH_URL",
        hide_env_values = true,
        default_value = "http://127.0.0.1:8080"
    )]
    pub server: String,
    /// A bearer token (`berth up` prints an admin token on its first start).
    #[arg(long, global = true, env = "BERTH_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// How long one call to the gateway may take.
    #[arg(long, global = true, default_value = "60s", value_parser = parse_timeout)]
    pub request_timeout: Duration,
}

/// How to print results.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct Format {
    /// How to print results: table, wide, json, yaml, name (`volume/data`, one a line), or
    /// jsonpath=TEMPLATE (kubectl's: `{.items[*].metadata.name}`, `{range .items[*]}{.spec.capacity}{"\n"}{end}`).
    #[arg(short = 'o', long = "output", global = true, default_value = "table", value_parser = parse_shape)]
    pub shape: Shape,
    /// Tables without their header line.
    #[arg(long, global = true)]
    pub no_headers: bool,
}

impl Format {
    /// What the commands print with.
    pub fn output(&self) -> Output {
        Output {
            shape: self.shape,
            headers: !self.no_headers,
        }
    }
}

/// The forms a result can be printed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Aligned columns for people.
    Table,
    /// The table with more columns (labels, replicas, location).
    Wide,
    /// The API's JSON.
    Json,
    /// The API's objects as YAML.
    Yaml,
    /// `kind/name`, one a line, as `kubectl get -o name` prints.
    Name,
    /// The API's JSON through a kubectl JSONPath template (checked when parsed). Held for the whole
    /// run, so leaked once rather than cloned through every call.
    JsonPath(&'static str),
}

/// How a command prints: the shape, and whether tables have their header line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Output {
    /// The form.
    pub shape: Shape,
    /// Tables print their header line (not with `--no-headers`).
    pub headers: bool,
}

impl Output {
    /// A plain table with headers.
    pub const TABLE: Output = Output {
        shape: Shape::Table,
        headers: true,
    };

    /// Whether this is one of the two table forms.
    pub fn is_table(self) -> bool {
        matches!(self.shape, Shape::Table | Shape::Wide)
    }

    /// Whether tables have their extra columns.
    pub fn is_wide(self) -> bool {
        self.shape == Shape::Wide
    }
}

/// `-o`: one of the shapes, with `jsonpath=` followed by its template.
fn parse_shape(s: &str) -> Result<Shape, String> {
    Ok(match s {
        "table" => Shape::Table,
        "wide" => Shape::Wide,
        "json" => Shape::Json,
        "yaml" => Shape::Yaml,
        "name" => Shape::Name,
        _ => match s.strip_prefix("jsonpath=") {
            Some(template) => {
                crate::jsonpath::Template::parse(template)?;
                Shape::JsonPath(Box::leak(template.to_owned().into_boxed_str()))
            }
            None => {
                return Err(
                    "must be table, wide, json, yaml, name or jsonpath=TEMPLATE".to_string()
                );
            }
        },
    })
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run Berth on this machine: the gateway and every service in one process, state in one directory.
    #[command(
        after_help = "The services also read their own BERTH_* settings from the environment (log \
                      level, rate limits, timeouts: see docs/configuration.md), except \
                      what `up` decides itself: listen addresses, upstream URLs, the data directory, \
                      the tokens file and the internal credential."
    )]
    Up(UpArgs),
    /// Create, inspect, list and delete machines (VMs) on a cloud.
    #[command(visible_alias = "machines")]
    Machine(Group<MachineCommand>),
    /// Create, inspect, list and delete storage volumes.
    #[command(visible_aliases = ["volumes", "vol"])]
    Volume(Group<VolumeCommand>),
    /// Register, inspect and remove the orchestrators that hold volumes.
    #[command(visible_aliases = ["orchestrators", "orch"])]
    Orchestrator(Group<OrchestratorCommand>),
    /// Show volumes, orchestrators, or what the machine controller keeps (machines, machine sets and
    /// deployments, classes, secrets), kubectl-style: `berth get volumes`, `berth get machine w-1`.
    Get(Group<GetCommand>),
    /// Make or update Volumes, orchestrators and machine-controller objects from YAML or JSON files
    /// (what `get -o yaml` prints), all checked before any is written.
    Apply(Call<ApplyArgs>),
    /// Delete a machine-controller object: `berth delete machinedeployment pool`.
    Delete(Call<DeleteArgs>),
    /// Set how many machines a machine set or deployment keeps.
    Scale(Call<ScaleArgs>),
    /// Follow a machine deployment's roll.
    Rollout(Group<RolloutCommand>),
    /// Take a consistent copy of a data directory's state while the stack runs (SQLite's online
    /// backup), into one archive.
    #[command(
        after_help = "The archive holds every service's database, the emulator's state, the key the \
                      controller seals secrets with and the tokens' hashes; not the volumes' data. \
                      It is written whole or not at all, readable by you alone."
    )]
    Backup {
        /// The data directory `berth up` runs on.
        #[arg(long, env = "BERTH_DATA_DIR", hide_env_values = true, default_value = domain::DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
        /// The archive to write (a tar file; one there before is replaced once the new one is whole).
        #[arg(long)]
        to: PathBuf,
    },
    /// Bring a backup back into a new data directory, as a copy that can run beside the original.
    #[command(
        after_help = "By default the copy takes a new Docker instance and moves local orchestrators \
                      and volumes into its own directory, so it never touches what the original made; \
                      it is refused, with the reason, where that cannot be done. --same-instance keeps \
                      every identity, to replace an original that is gone."
    )]
    Restore {
        /// The archive `berth backup` wrote.
        #[arg(long)]
        from: PathBuf,
        /// A new or empty directory to restore into.
        #[arg(long)]
        data_dir: PathBuf,
        /// Keep the original's identity (its Docker instance, its local paths): for replacing the
        /// original, which must then never run beside the copy.
        #[arg(long)]
        same_instance: bool,
    },
    /// Make tokens for the gateway.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Print a shell completion script (`berth completions bash > /etc/bash_completion.d/berth`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// A command that talks to the gateway: its connection and output options, and its subcommand.
#[derive(Debug, clap::Args)]
pub struct Group<C: Subcommand> {
    /// How to reach the gateway.
    #[command(flatten)]
    pub connection: Connection,
    /// How to print.
    #[command(flatten)]
    pub format: Format,
    /// The subcommand.
    #[command(subcommand)]
    pub command: C,
}

/// A command without subcommands that talks to the gateway: its connection and output options, and
/// its own arguments.
#[derive(Debug, clap::Args)]
pub struct Call<A: clap::Args> {
    /// How to reach the gateway.
    #[command(flatten)]
    pub connection: Connection,
    /// How to print.
    #[command(flatten)]
    pub format: Format,
    /// Its arguments.
    #[command(flatten)]
    pub command: A,
}

/// `berth up`.
#[derive(Debug, Clone, clap::Args)]
pub struct UpArgs {
    /// Where all state goes: SQLite files, local volumes, the tokens file.
    #[arg(long, env = "BERTH_DATA_DIR", hide_env_values = true, default_value = domain::DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// The gateway's port; the services take the next ones (+1 machine-driver, +2 registry,
    /// +3 storage-ops, +10 ECS emulator).
    #[arg(long, default_value_t = 8080)]
    pub port_base: u16,
    /// The address the gateway binds; the services listen on loopback unless --expose-services.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: std::net::IpAddr,
    /// Bind the services (machine-driver, registry, storage-ops) on --bind too, not only the
    /// gateway: for callers that must reach a service past the gateway from another host. The
    /// embedded ECS emulator stays on loopback regardless.
    #[arg(long)]
    pub expose_services: bool,
}

/// Where the machine, its class and its secret come from.
#[derive(Debug, Clone, clap::Args)]
pub struct MachineFiles {
    /// YAML or JSON files holding the Machine, MachineClass and Secret (as Kubernetes objects with
    /// `kind`, several per file separated by `---`), or one `{machine, machineClass, secret}` body.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
}

/// Waiting for an operation to finish.
#[derive(Debug, Clone, clap::Args)]
pub struct Wait {
    /// Wait until it is done, retrying as the server asks (Retry-After) while it settles.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: how long to wait before giving up (exit 3).
    #[arg(long, requires = "wait", default_value = "5m", value_parser = parse_timeout)]
    pub timeout: Duration,
}

/// Machine commands.
#[derive(Debug, Subcommand)]
pub enum MachineCommand {
    /// Create the VM backing a machine, or adopt the one that already does; --wait until it runs.
    Create {
        /// The machine's files.
        #[command(flatten)]
        files: MachineFiles,
        /// Waiting until the VM runs.
        #[command(flatten)]
        wait: Wait,
    },
    /// Show whether a VM backs a machine, and its state and addresses.
    Status(MachineFiles),
    /// Delete the VM backing a machine and what it left behind; --wait until it is gone.
    #[command(visible_alias = "rm")]
    Delete {
        /// The machine's files.
        #[command(flatten)]
        files: MachineFiles,
        /// Waiting until the VM is gone.
        #[command(flatten)]
        wait: Wait,
    },
    /// Finish setting up a machine's VM once it runs (fails with Uninitialized until then).
    Init(MachineFiles),
    /// List the VMs a machine class owns (needs the class and secret).
    #[command(visible_alias = "ls")]
    List(MachineFiles),
    /// List the cloud providers machines can be made on.
    Providers,
    /// Show a machine the machine controller keeps, by its name alone (`berth apply` made it, or a
    /// machine set did).
    Get {
        /// The machine's name.
        name: String,
        /// The namespace (default: `default`).
        #[arg(short, long)]
        namespace: Option<String>,
        /// After showing it, keep printing its changes until interrupted (Ctrl-C).
        #[arg(short, long)]
        watch: bool,
    },
    /// Show the cloud volume ids behind persistent volumes (the ones the provider can map).
    VolumeIds {
        /// YAML or JSON files holding PersistentVolumes (`kind: PersistentVolume`), bare
        /// PersistentVolume specs, or one `{pvSpecs: [...]}` body.
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<PathBuf>,
    },
}

/// Which volumes to list.
#[derive(Debug, Clone, clap::Args)]
pub struct VolumeQuery {
    /// The namespace (default: `default`).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// List volumes in every namespace.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// A label selector (`app=db,tier in (a,b)`).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// At most this many volumes (one page); all pages when absent. When more exist, the table
    /// says so on stderr with the `--continue` token for the next page (JSON and YAML carry it as
    /// `continue`).
    #[arg(long)]
    pub limit: Option<u32>,
    /// The next page of an earlier `--limit` listing (its `continue` token), with the same
    /// namespace and selector.
    #[arg(
        long = "continue",
        value_name = "TOKEN",
        requires = "limit",
        conflicts_with = "watch"
    )]
    pub continue_token: Option<String>,
    /// After listing, keep printing changes until interrupted (Ctrl-C).
    #[arg(short, long)]
    pub watch: bool,
}

/// Which volume.
#[derive(Debug, Clone, clap::Args)]
pub struct VolumeName {
    /// `name` or `namespace/name`.
    pub name: String,
    /// The namespace (default: `default`); must agree with a `namespace/` in the name.
    #[arg(short, long)]
    pub namespace: Option<String>,
}

/// Volume commands.
#[derive(Debug, Subcommand)]
pub enum VolumeCommand {
    /// Create a volume (the same request again changes nothing).
    Create {
        /// The volume's name, or `namespace/name` (or give `-f`).
        name: Option<String>,
        /// A volume profile in YAML or JSON (`name`, `namespace`, `capacity`, …) instead of flags.
        #[arg(short = 'f', long = "filename", conflicts_with = "name")]
        file: Option<PathBuf>,
        /// The namespace (default: `default`); with -f, must agree with the profile's.
        #[arg(short, long)]
        namespace: Option<String>,
        /// The capacity (`10Gi`, `500M`).
        #[arg(long, conflicts_with = "file")]
        capacity: Option<String>,
        /// The orchestrator to hold it (the default orchestrator when absent).
        #[arg(long, conflicts_with = "file")]
        orchestrator: Option<String>,
        /// How many replicas.
        #[arg(long, conflicts_with = "file")]
        replicas: Option<u32>,
        /// A label `key=value` (repeatable).
        #[arg(short, long = "label", value_parser = parse_pair, conflicts_with = "file")]
        labels: Vec<(String, String)>,
        /// A backend parameter `key=value` (repeatable): `format=file`, `reclaimPolicy=Retain`.
        #[arg(short = 'p', long = "param", value_parser = parse_pair, conflicts_with = "file")]
        params: Vec<(String, String)>,
        /// Waiting until the volume is Ready (fails if it ends Failed).
        #[command(flatten)]
        wait: Wait,
    },
    /// Show a volume.
    Get {
        /// Which volume.
        #[command(flatten)]
        volume: VolumeName,
        /// After showing it, keep printing its changes until interrupted (Ctrl-C).
        #[arg(short, long)]
        watch: bool,
    },
    /// List volumes (in the namespace `default` unless -n or -A says otherwise).
    #[command(visible_alias = "ls")]
    List(VolumeQuery),
    /// Delete a volume (and, unless it says `reclaimPolicy=Retain`, its data); --wait until it is
    /// gone.
    #[command(visible_alias = "rm")]
    Delete {
        /// Which volume.
        #[command(flatten)]
        volume: VolumeName,
        /// Waiting until the volume is gone.
        #[command(flatten)]
        wait: Wait,
    },
    /// Set or remove a volume's labels, kubectl's way: `tier=gold` sets, `tier-` removes; changing
    /// a label's value needs --overwrite.
    Label {
        /// Which volume.
        #[command(flatten)]
        volume: VolumeName,
        /// `key=value` to set, `key-` to remove.
        #[arg(required = true, value_parser = parse_label_change)]
        changes: Vec<(String, Option<String>)>,
        /// Allow changing the value of a label the volume has.
        #[arg(long)]
        overwrite: bool,
        /// Apply only if the volume is still at this resourceVersion (as a read gave it).
        #[arg(long)]
        resource_version: Option<String>,
    },
    /// Grow a volume's capacity, where its backend can (a local file or directory, a Kubernetes
    /// claim whose StorageClass allows expansion; not a Docker volume).
    Resize {
        /// Which volume.
        #[command(flatten)]
        volume: VolumeName,
        /// The new capacity (`20Gi`); a volume only grows.
        #[arg(long)]
        capacity: String,
        /// Apply only if the volume is still at this resourceVersion (as a read gave it).
        #[arg(long)]
        resource_version: Option<String>,
    },
    /// Show a volume's capacity and how much of it is used.
    Stats(VolumeName),
    /// List storage Berth made that no volume owns any more (left by a crash or a manual change).
    Orphans,
}

/// Orchestrator commands.
#[derive(Debug, Subcommand)]
pub enum OrchestratorCommand {
    /// Register an orchestrator, or change one (the same request again changes nothing).
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
        /// A config entry `key=value` (repeatable): `basePath=/srv/vols`, `capacity=100Gi`, `host=unix:///var/run/docker.sock`, `namespace=berth-volumes`, `accessModes=["ReadWriteMany"]` (a value in `[...]` is a JSON list).
        #[arg(short, long = "config", value_parser = parse_pair)]
        config: Vec<(String, String)>,
        /// Make it the default orchestrator (the one new volumes go to).
        #[arg(long)]
        default: bool,
    },
    /// Show an orchestrator.
    Get {
        /// The name.
        name: String,
        /// After showing it, keep printing its changes until interrupted (Ctrl-C).
        #[arg(short, long)]
        watch: bool,
    },
    /// List orchestrators.
    #[command(visible_alias = "ls")]
    List {
        /// After listing, keep printing changes until interrupted (Ctrl-C).
        #[arg(short, long)]
        watch: bool,
    },
    /// Remove an orchestrator (its volumes stay where they are).
    #[command(visible_alias = "rm")]
    Delete {
        /// The name.
        name: String,
    },
    /// Show which orchestrator kind the registry's environment implies, and why.
    Detect,
    /// List the kinds of orchestrator Berth can use, and which can hold volumes.
    Kinds,
}

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
    /// The kind (machine, machineset/ms, machinedeployment/md, machineclass/mcc, secret), or
    /// `kind/name`.
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

/// Token commands.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a new token: print it once, with the line for the gateway's tokens file.
    ///
    /// A token acts in the namespaces --namespaces names, or in every namespace with --cluster-wide
    /// (admin tokens always do); one of the two is required unless the scopes include admin, so no
    /// token is cluster-wide by accident. With --data-dir (or --tokens-file) the line is also added
    /// to the file, which a running gateway picks up within a second: the way back in when the
    /// admin token is lost. Names are unique in a file.
    #[command(group(ArgGroup::new("grant").required(true).args(["scopes", "admin"])))]
    Create {
        /// The token's name, for people, logs and `token revoke` (default: `admin` with --admin,
        /// else `token`, or the first of `admin-2`, `admin-3`, … free in the file).
        #[arg(conflicts_with = "name")]
        token_name: Option<String>,
        /// Comma-separated scopes: machines:read, machines:write, volumes:read, volumes:write,
        /// orchestrators:read, orchestrators:write, metrics:read (the gateway's /metrics, for a
        /// scraper; cluster-wide only), admin.
        #[arg(long, value_delimiter = ',')]
        scopes: Vec<String>,
        /// The `admin` scope: everything, in every namespace (the same as `--scopes admin`).
        #[arg(long)]
        admin: bool,
        /// The namespaces the token may see and act in, comma-separated (`team-a,team-b`); `*` is
        /// every namespace, as --cluster-wide.
        #[arg(long, conflicts_with = "cluster_wide")]
        namespaces: Option<String>,
        /// The token may see and act in every namespace.
        #[arg(long)]
        cluster_wide: bool,
        /// When the token stops being accepted: a time from now (`90m`, `12h`, `30d`, `8w`) or an
        /// RFC 3339 time (`2026-12-31T00:00:00Z`). Default: never.
        #[arg(long)]
        expires: Option<String>,
        /// The same as the positional name.
        #[arg(long)]
        name: Option<String>,
        /// Add the token to `<DATA_DIR>/tokens`, the file `berth up --data-dir DATA_DIR` serves.
        #[arg(long, conflicts_with = "tokens_file")]
        data_dir: Option<PathBuf>,
        /// Add the token to this tokens file (a gateway's BERTH_TOKENS_FILE).
        #[arg(long)]
        tokens_file: Option<PathBuf>,
        /// How to print the result.
        #[command(flatten)]
        format: Format,
    },
    /// The tokens in a tokens file: name, scopes, namespaces, created, last used, expiry. Never a
    /// token or its hash.
    #[command(visible_alias = "ls")]
    List {
        /// The tokens file is `<DATA_DIR>/tokens`, as `berth up --data-dir DATA_DIR` serves it.
        #[arg(long, conflicts_with = "tokens_file")]
        data_dir: Option<PathBuf>,
        /// This tokens file (a gateway's BERTH_TOKENS_FILE).
        #[arg(long)]
        tokens_file: Option<PathBuf>,
        /// How to print the result.
        #[command(flatten)]
        format: Format,
    },
    /// Remove a token from a tokens file; a running gateway refuses it within a second.
    #[command(visible_alias = "rm")]
    Revoke {
        /// The token's name.
        name: String,
        /// The tokens file is `<DATA_DIR>/tokens`, as `berth up --data-dir DATA_DIR` serves it.
        #[arg(long, conflicts_with = "tokens_file")]
        data_dir: Option<PathBuf>,
        /// This tokens file (a gateway's BERTH_TOKENS_FILE).
        #[arg(long)]
        tokens_file: Option<PathBuf>,
    },
}

/// `key=value` sets a label, `key-` removes it.
fn parse_label_change(s: &str) -> Result<(String, Option<String>), String> {
    match s.split_once('=') {
        Some((k, v)) => Ok((k.to_string(), Some(v.to_string()))),
        None => s
            .strip_suffix('-')
            .filter(|k| !k.is_empty())
            .map(|k| (k.to_string(), None))
            .ok_or_else(|| format!("{s:?} is neither key=value (to set) nor key- (to remove)")),
    }
}

fn parse_pair(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{s:?} is not key=value"))
}

/// A time limit: a duration above zero (a zero one would fail every call at once).
fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("{s:?} is no time at all; give a limit such as 30s"));
    }
    Ok(d)
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    domain::duration::parse_duration(s)
        .ok_or_else(|| format!("{s:?} is not a duration like 30s or 5m"))
}

/// The options of the commands that reach the gateway and print ([`args::Connection`],
/// [`args::Format`]) taking a value, and those that take none.
const OPTIONS_WITH_VALUE: &[&str] = &["--server", "--token", "--request-timeout", "--output", "-o"];
const FLAGS: &[&str] = &["--no-headers"];

/// `argv` with the connection and output options given before the command moved to its end, so
/// that `berth --server URL volume list` works as kubectl's global flags do. They belong to the
/// commands that use them (see this module), so a command that does not (`berth --server URL up`) is
/// still refused with clap's usual error. Anything else stays where it is; nothing after a `--` is
/// touched.
pub fn options_anywhere(argv: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut argv = argv.into_iter();
    let mut out: Vec<OsString> = argv.next().into_iter().collect();
    let mut hoisted = Vec::new();
    let mut rest: Vec<OsString> = Vec::new();
    let mut before_command = true;
    while let Some(arg) = argv.next() {
        let text = arg.to_string_lossy();
        if !before_command || text == "--" {
            rest.push(arg);
            rest.extend(argv.by_ref());
            break;
        }
        let takes_value = OPTIONS_WITH_VALUE.contains(&text.as_ref());
        let inline = OPTIONS_WITH_VALUE
            .iter()
            .any(|o| o.starts_with("--") && text.starts_with(&format!("{o}=")))
            || (text.starts_with("-o") && text.len() > 2 && !text.starts_with("--"));
        if takes_value {
            hoisted.push(arg);
            hoisted.extend(argv.next());
        } else if inline || FLAGS.contains(&text.as_ref()) {
            hoisted.push(arg);
        } else {
            before_command = text.starts_with('-');
            out.push(arg);
        }
    }
    let end = rest.iter().position(|a| a == "--").unwrap_or(rest.len());
    out.extend(rest.drain(..end));
    out.extend(hoisted);
    out.extend(rest);
    out
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Every command, subcommands included, depth first.
    fn every_command(cmd: &clap::Command) -> Vec<clap::Command> {
        let mut all = vec![cmd.clone()];
        for sub in cmd.get_subcommands() {
            all.extend(every_command(sub));
        }
        all
    }

    #[test]
    fn the_tree_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn no_option_a_variable_can_supply_is_required() {
        let mut cli = Cli::command();
        cli.build();
        for cmd in every_command(&cli) {
            for arg in cmd.get_arguments() {
                if arg.get_env().is_some() {
                    assert!(
                        !arg.is_required_set(),
                        "{} --{} has a variable and is required",
                        cmd.get_name(),
                        arg.get_id()
                    );
                }
            }
        }
    }

    #[test]
    fn help_says_what_a_command_does_not_which_method_it_calls() {
        const METHODS: [&str; 13] = [
            "AddStorage",
            "ReadStorage",
            "ListStorage",
            "DeleteStorage",
            "CreateMachine",
            "GetMachineStatus",
            "DeleteMachine",
            "InitializeMachine",
            "ListMachines",
            "GetVolumeIDs",
            "RegisterOrchestrator",
            "GetOrchestrator",
            "Deregister",
        ];
        let mut cli = Cli::command();
        cli.build();
        for cmd in every_command(&cli) {
            let about = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
            assert!(!about.is_empty(), "{} has no help", cmd.get_name());
            for method in METHODS {
                assert!(
                    !about.contains(method),
                    "{}: {about:?} names {method}",
                    cmd.get_name()
                );
            }
        }
    }

    fn moved(line: &str) -> String {
        let argv = line.split(' ').map(OsString::from);
        let out: Vec<String> = options_anywhere(argv)
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        out.join(" ")
    }

    #[test]
    fn connection_and_output_options_may_come_before_the_command() {
        assert_eq!(
            moved("berth --server http://h:1 -o json volume list -A"),
            "berth volume list -A --server http://h:1 -o json"
        );
        assert_eq!(
            moved("berth --token=t -ojson --no-headers get volumes"),
            "berth get volumes --token=t -ojson --no-headers"
        );
        // Where they already are, and after `--`, nothing moves.
        assert_eq!(
            moved("berth volume list --server x"),
            "berth volume list --server x"
        );
        assert_eq!(
            moved("berth --server x machine create -f a -- --server y"),
            "berth machine create -f a --server x -- --server y"
        );
        // A command that takes none of them still gets them, to refuse.
        assert_eq!(moved("berth --server x up"), "berth up --server x");
        assert_eq!(moved("berth --version"), "berth --version");
    }
}
