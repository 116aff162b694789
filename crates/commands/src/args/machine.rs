//! The arguments of `berth machine …`: a machine's files, and what each subcommand takes. Apart
//! because the machine driver's calls take whole objects from files, not flags, and that shapes
//! every one of these commands.

use std::path::PathBuf;

use clap::Subcommand;

use super::Wait;

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
