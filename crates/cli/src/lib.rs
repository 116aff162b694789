//! `berth`: the Berth CLI. The commands that reach a running stack through the gateway are
//! `berth-commands`' (they link no server); `berth up`, `berth backup`/`restore` and the tokens file
//! are `berth-stack`'s. This crate sits above both: it parses the command line, runs the stack's
//! commands and `completions` itself, and hands the rest to `berth-commands`.
//!
//! Exit codes: 0 done, [`EXIT_REFUSED`] (1), [`EXIT_USAGE`] (2), [`EXIT_FAILED`] (3).

pub mod token;

use std::ffi::OsString;
use std::process::ExitCode;

use berth_commands::args::{self, Command};
use berth_commands::{CliError, HintContext};
use clap::{CommandFactory, Parser};

pub use berth_commands::{EXIT_FAILED, EXIT_REFUSED, EXIT_USAGE};

/// Parses `argv` and runs the command.
pub async fn run(argv: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = match args::Cli::try_parse_from(args::options_anywhere(argv)) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let mut context = HintContext::default();
    let result = match &cli.command {
        Command::Up(up_args) => {
            return berth_stack::up::run(berth_stack::up::UpOptions {
                data_dir: up_args.data_dir.clone(),
                port_base: up_args.port_base,
                bind: up_args.bind,
                expose_services: up_args.expose_services,
            })
            .await;
        }
        Command::Completions { shell } => {
            // Rendered whole first: clap_complete panics on a failed write, and a reader that stops
            // early (`| head -1`) is not a failure.
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut args::Cli::command(), "berth", &mut script);
            let _ = berth_commands::output::write_stdout(&String::from_utf8_lossy(&script));
            Ok(())
        }
        Command::Token(c) => token::run(c),
        Command::Backup { data_dir, to } => said(berth_stack::backup::backup(data_dir, to)),
        Command::Restore {
            from,
            data_dir,
            same_instance,
        } => said(berth_stack::backup::restore(from, data_dir, *same_instance).await),
        command => berth_commands::run(command, &mut context).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", e.line(&context));
            ExitCode::from(e.exit_code())
        }
    }
}

/// What a stack command said, printed; its refusal or failure as the CLI's.
fn said(result: Result<String, domain::Status>) -> Result<(), CliError> {
    let text = result.map_err(CliError::Local)?;
    berth_commands::output::write_stdout(&text).map_err(|e| {
        CliError::Local(domain::Status::new(
            domain::Code::Internal,
            format!("writing: {e}"),
        ))
    })
}
