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

/// Parses `argv` and runs the command (`berth get md,ms`: one per kind, in turn, every one parsed
/// before any runs).
pub async fn run(argv: impl IntoIterator<Item = OsString>) -> ExitCode {
    let commands = match args::per_kind(args::options_anywhere(argv)) {
        Ok(commands) => commands,
        Err(usage) => {
            eprintln!("error: {usage}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    if commands.len() == 1 {
        return run_one(commands.into_iter().next().unwrap_or_default()).await;
    }
    let mut parsed = Vec::new();
    for argv in commands {
        match args::Cli::try_parse_from(argv) {
            Ok(cli) => parsed.push(cli),
            Err(e) => return clap_said(&e),
        }
    }
    let shape = match &parsed[0].command {
        Command::Get(group) if group.command.watches() => {
            // As kubectl: one watch follows one kind's stream, and the first would never end.
            eprintln!("error: --watch follows one kind at a time; give one kind, not several");
            return ExitCode::from(EXIT_USAGE);
        }
        Command::Get(group) => group.format.output(),
        _ => args::Output::TABLE,
    };
    let each = async {
        for (i, cli) in parsed.into_iter().enumerate() {
            // Tables stand apart after a blank line, as kubectl's do; names simply follow.
            if i > 0 && shape.is_table() {
                let _ = berth_commands::output::write_stdout("\n");
            }
            let code = run_parsed(cli).await;
            if code != ExitCode::SUCCESS {
                return code;
            }
        }
        ExitCode::SUCCESS
    };
    if matches!(
        shape.shape,
        args::Shape::Table | args::Shape::Wide | args::Shape::Name
    ) {
        each.await
    } else {
        berth_commands::output::gather(shape, each).await
    }
}

/// What clap said of a command line it refused (or of `--help`), and the exit code.
fn clap_said(e: &clap::Error) -> ExitCode {
    let _ = e.print();
    if e.use_stderr() {
        ExitCode::from(EXIT_USAGE)
    } else {
        ExitCode::SUCCESS
    }
}

/// Parses one command line and runs it.
async fn run_one(argv: Vec<OsString>) -> ExitCode {
    match args::Cli::try_parse_from(argv) {
        Ok(cli) => run_parsed(cli).await,
        Err(e) => clap_said(&e),
    }
}

/// Runs a parsed command line.
async fn run_parsed(cli: args::Cli) -> ExitCode {
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
