//! The command tree.
//!
//! The options that say how to reach the gateway and how to print ([`Connection`], [`Format`]) belong
//! to the commands that call it, not to the whole program: `berth up --help` then shows only what `up`
//! reads, and `berth up --server …` is refused instead of silently ignored. They are `global` below
//! their command, so `berth volume list -o json` and `berth volume -o json list` both work.
//!
//! # Layout
//! This file holds the top of the tree: [`Cli`] and [`Command`], the wrappers every command that
//! reaches the gateway shares ([`Group`], [`Call`]), their option groups ([`Connection`], [`Format`]
//! with [`Output`] and [`Shape`], [`Wait`]), and [`options_anywhere`]. Each command family's
//! arguments are in a file of their own, all re-exported here:
//! - `machine`: `berth machine …`.
//! - `volume`: `berth volume …`, and the volume names and queries `get volumes` shares.
//! - `orchestrator`: `berth orchestrator …`.
//! - `objects`: kubectl's verbs, `get`, `apply`, `delete`, `scale` and `rollout`.
//! - `stack`: `up` and `token`, which the `berth` binary runs itself.
//! - `parse`: the value parsers clap calls (`-o`, timeouts, `key=value`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

mod machine;
mod objects;
mod orchestrator;
mod parse;
mod stack;
mod volume;

pub use machine::{MachineCommand, MachineFiles};
pub use objects::{
    ApplyArgs, DeleteArgs, GetCommand, ObjectQuery, ObjectRef, RolloutCommand, ScaleArgs,
};
pub use orchestrator::OrchestratorCommand;
pub use stack::{TokenCommand, UpArgs};
pub use volume::{VolumeCommand, VolumeName, VolumeQuery};

use parse::{parse_shape, parse_timeout};

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
    #[command(
        after_help = "kubectl's forms work too: `berth get machine/w-1` (a volume's \
                      `volume/NAMESPACE/NAME`), and several kinds at once, `berth get md,ms`: \
                      tables one after the other, or one List with -o json, yaml or jsonpath."
    )]
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
    /// Its arguments. First: the connection's help heading holds for every argument after it, so
    /// these would be listed under "Connection options", positionals last and out of order.
    #[command(flatten)]
    pub command: A,
    /// How to reach the gateway.
    #[command(flatten)]
    pub connection: Connection,
    /// How to print.
    #[command(flatten)]
    pub format: Format,
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

/// `berth get`'s kubectl forms, as argument lists clap parses: `get machine/w-1` is `get machine
/// w-1`, and `get md,ms` is two commands, `get md` then `get ms` (each element one command line to
/// run in turn; a kind named twice runs once). Any other command line is returned as it is, alone.
/// A form that is malformed is refused here, saying why; in particular the part after `/` is
/// always a name, never an option (`get 'md/--server=…'` would otherwise send the token elsewhere).
pub fn per_kind(argv: Vec<OsString>) -> Result<Vec<Vec<OsString>>, String> {
    if argv.get(1).is_none_or(|a| a != "get") {
        return Ok(vec![argv]);
    }
    // The kind is the first argument after `get` that is neither an option nor an option's value.
    let mut at = 2;
    while let Some(arg) = argv.get(at) {
        let text = arg.to_string_lossy();
        if text == "--" || !text.starts_with('-') {
            break;
        }
        at += if OPTIONS_WITH_VALUE.contains(&text.as_ref()) {
            2
        } else {
            1
        };
    }
    let Some(target) = argv.get(at).and_then(|a| a.to_str()) else {
        return Ok(vec![argv]);
    };
    if !target.contains([',', '/']) {
        return Ok(vec![argv]);
    }
    let mut seen = Vec::new();
    for piece in target.split(',') {
        if piece.is_empty() {
            return Err(format!("{target:?}: a kind is missing between the commas"));
        }
        let (kind, name) = match piece.split_once('/') {
            None => (piece, None),
            Some(("", _)) => return Err(format!("{piece:?}: the kind is missing before the `/`")),
            Some((_, "")) => return Err(format!("{piece:?}: the name is missing after the `/`")),
            Some((kind, name)) => (kind, Some(name)),
        };
        if let Some(name) = name {
            if name.starts_with('-') {
                return Err(format!(
                    "{piece:?}: the part after the `/` is a name, and a name does not start with `-`"
                ));
            }
            // A volume's name may carry its namespace (`volume/team-a/data`); nothing else has one.
            let volume = matches!(kind, "volume" | "volumes" | "vol");
            if name.matches('/').count() > usize::from(volume) {
                return Err(format!(
                    "{piece:?}: `KIND/NAME` has one `/` (a volume's `volume/NAMESPACE/NAME` two)"
                ));
            }
        }
        // A kind named twice, by any of its names (`md,machinedeployment`), is shown once.
        let canonical = get_kind_name(kind);
        if !seen
            .iter()
            .any(|&(k, n): &(&str, Option<&str>)| get_kind_name(k) == canonical && n == name)
        {
            seen.push((kind, name));
        }
    }
    Ok(seen
        .into_iter()
        .map(|(kind, name)| {
            let mut one = argv[..at].to_vec();
            one.push(OsString::from(kind));
            one.extend(name.map(OsString::from));
            one.extend(argv[at + 1..].iter().cloned());
            one
        })
        .collect())
}

/// The name of `get`'s subcommand that `kind` names (any alias, any case kubectl takes), or `kind`
/// itself when none does (clap refuses it later, naming it).
fn get_kind_name(kind: &str) -> String {
    use clap::CommandFactory;
    let lower = kind.to_ascii_lowercase();
    Cli::command()
        .find_subcommand("get")
        .and_then(|get| get.find_subcommand(&lower))
        .map_or(lower, |sub| sub.get_name().to_string())
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
    fn only_connection_and_output_options_are_under_their_heading() {
        let mut cli = Cli::command();
        cli.build();
        let connection = ["server", "token", "request_timeout", "shape", "no_headers"];
        for cmd in every_command(&cli) {
            for arg in cmd.get_arguments() {
                let under = arg.get_help_heading() == Some("Connection options");
                let id = arg.get_id().as_str();
                assert!(
                    !under || connection.contains(&id),
                    "{}: {id} is listed under \"Connection options\"",
                    cmd.get_name()
                );
            }
        }
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

    fn split(line: &str) -> Vec<String> {
        let argv = line.split(' ').map(OsString::from).collect();
        per_kind(argv)
            .unwrap()
            .into_iter()
            .map(|one| {
                one.iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    #[test]
    fn get_takes_kind_slash_name_and_several_kinds_as_kubectl_does() {
        assert_eq!(
            split("berth get machine/w-1 -o json"),
            ["berth get machine w-1 -o json"]
        );
        assert_eq!(
            split("berth get -o name md,ms -n x"),
            ["berth get -o name md -n x", "berth get -o name ms -n x"]
        );
        assert_eq!(
            split("berth get --server h volume/ns/v"),
            ["berth get --server h volume ns/v"]
        );
        assert_eq!(split("berth get md,md"), ["berth get md"]);
        assert_eq!(
            split("berth get md,machinedeployment,ms"),
            ["berth get md", "berth get ms"]
        );
        assert_eq!(
            split("berth get md/w,machinedeployments/w,md/x"),
            ["berth get md w", "berth get md x"]
        );
        // Anything else as it is.
        for line in ["berth volume get a/b", "berth get", "berth get md -o name"] {
            assert_eq!(split(line), [line]);
        }
        // Malformed forms are refused before anything runs; a name is never an option.
        let refused =
            |line: &str| per_kind(line.split(' ').map(OsString::from).collect()).unwrap_err();
        assert!(refused("berth get md,").contains("a kind is missing"));
        assert!(refused("berth get machine/").contains("the name is missing"));
        assert!(refused("berth get md/workers,/x").contains("the kind is missing"));
        assert!(
            refused("berth get md/--server=http://elsewhere").contains("does not start with `-`")
        );
        assert!(refused("berth get md,ms/-o").contains("does not start with `-`"));
        assert!(refused("berth get md/default/workers").contains("has one `/`"));
        assert!(refused("berth get volume/a/b/c").contains("has one `/`"));
    }
}
