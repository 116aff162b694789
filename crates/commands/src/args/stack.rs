//! The arguments of the commands the `berth` binary runs itself, with `berth-stack`: `berth up` and
//! `berth token …` (`backup` and `restore` are few enough to sit in [`super::Command`]). Apart
//! because they reach no gateway: no connection options, only a data directory or a tokens file.

use std::path::PathBuf;

use clap::{ArgGroup, Subcommand};

use super::Format;

/// `berth up`.
#[derive(Debug, Clone, clap::Args)]
pub struct UpArgs {
    /// Where all state goes: SQLite files, local volumes, the tokens file.
    #[arg(long, env = "BERTH_DATA_DIR", hide_env_values = true, default_value = domain::DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// The gateway's port; the services take the next ones (+1 machine-driver, +2 registry,
    /// +3 storage-ops, +4 machine-controller, +10 ECS emulator), so at most 65525; 0 lets the OS
    /// pick every port, and the banner says which.
    #[arg(long, default_value_t = 8080, value_parser = clap::value_parser!(u16).range(0..=65525))]
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
