//! The arguments of `berth volume …`, and the volume names and queries `berth get volumes` takes
//! too. Apart because volumes have the most flags of any family (labels, parameters, pages), which
//! would bury the rest of the tree.

use std::path::PathBuf;

use clap::Subcommand;

use super::Wait;
use super::parse::{parse_label_change, parse_pair};

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
