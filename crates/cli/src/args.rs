//! The command tree.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Berth: machines and storage volumes behind one REST control plane.
#[derive(Debug, Parser)]
#[command(name = "berth", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the whole stack (gateway, machine driver, registry, storage ops, ECS emulator) in one process.
    Up(UpArgs),
}

/// `berth up`.
#[derive(Debug, Clone, clap::Args)]
pub struct UpArgs {
    /// Where all state goes: SQLite files, local volumes, the tokens file.
    #[arg(long, env = "BERTH_DATA_DIR", default_value = "./berth-data")]
    pub data_dir: PathBuf,
    /// The gateway's port; the services take the next ones (+1 machine-driver, +2 registry,
    /// +3 storage-ops, +10 ECS emulator).
    #[arg(long, default_value_t = 8080)]
    pub port_base: u16,
    /// The address every listener binds.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: std::net::IpAddr,
}
