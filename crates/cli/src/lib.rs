//! The `berth` command line: `berth up` runs the whole stack in one process; the other commands
//! drive a running stack through the gateway, as platform tooling does.
//!
//! # Layout
//! - [`args`]: the clap command tree.
//! - [`commands`]: machine, volume, orchestrator and token commands, over the typed clients.
//! - [`output`]: tables, JSON, YAML, and the one-line error.
//! - [`up`]: `berth up` — every service on its own listener, still talking HTTP, state under one
//!   data directory.

pub mod args;
pub mod commands;
pub mod output;
pub mod up;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};

/// Exit code for a refused request (bad input, not found, no permission).
pub const EXIT_CLIENT_ERROR: u8 = 2;
/// Exit code for a failure on the server side or an unreachable server.
pub const EXIT_SERVER_ERROR: u8 = 3;

/// Parses `argv` and runs the command.
pub async fn run(argv: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = match args::Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_CLIENT_ERROR)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let result = match &cli.command {
        args::Command::Up(up_args) => return up::run(up_args.clone()).await,
        args::Command::Completions { shell } => {
            clap_complete::generate(
                *shell,
                &mut args::Cli::command(),
                "berth",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        args::Command::Machine(c) => commands::machine(&cli, c).await,
        args::Command::Volume(c) => commands::volume(&cli, c).await,
        args::Command::Orchestrator(c) => commands::orchestrator(&cli, c).await,
        args::Command::Token(c) => commands::token(&cli, c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", e.line());
            ExitCode::from(e.exit_code())
        }
    }
}
