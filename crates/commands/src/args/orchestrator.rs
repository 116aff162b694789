//! The arguments of `berth orchestrator …`. Apart because registering one takes its kind's own
//! config entries, a family of its own beside volumes and machines.

use clap::Subcommand;

use super::parse::parse_pair;

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
