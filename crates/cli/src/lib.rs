//! The `berth` command line: `berth up` runs the whole stack in one process; the other commands
//! drive a running stack through the gateway, as platform tooling does.
//!
//! # Layout
//! - [`args`]: the clap command tree.
//! - [`jsonpath`]: kubectl's `-o jsonpath=` templates.
//! - [`commands`]: machine, volume, orchestrator, `get` and token commands over the typed clients;
//!   errors, exit codes and hints; `--wait` and `--watch`.
//! - [`output`]: tables, JSON, YAML; sizes and ages for people.
//! - [`backup`]: `berth backup` and `berth restore` of a data directory's state.
//! - [`up`]: `berth up` — every service on its own listener, still talking HTTP, state under one
//!   data directory.
//!
//! Exit codes: 0 done, [`commands::EXIT_REFUSED`] (1), [`commands::EXIT_USAGE`] (2),
//! [`commands::EXIT_FAILED`] (3).

pub mod args;
pub mod backup;
pub mod commands;
pub mod jsonpath;
pub mod output;
pub mod up;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::args::{Command, GetCommand, MachineCommand, VolumeName};
use crate::commands::{CliError, Ctx, EXIT_USAGE, HintContext};

/// Parses `argv` and runs the command.
pub async fn run(argv: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = match args::Cli::try_parse_from(options_anywhere(argv)) {
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
        Command::Up(up_args) => return up::run(up_args.clone()).await,
        Command::Completions { shell } => {
            // Rendered whole first: clap_complete panics on a failed write, and a reader that stops
            // early (`| head -1`) is not a failure.
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut args::Cli::command(), "berth", &mut script);
            let _ = output::write_stdout(&String::from_utf8_lossy(&script));
            Ok(())
        }
        Command::Token(c) => commands::token::run(c),
        Command::Backup { data_dir, to } => backup::backup(data_dir, to),
        Command::Restore {
            from,
            data_dir,
            same_instance,
        } => backup::restore(from, data_dir, *same_instance).await,
        Command::Machine(group) => {
            context.wait_for = match &group.command {
                MachineCommand::Create { wait, .. } if !wait.wait => Some("until it runs"),
                MachineCommand::Delete { wait, .. } if !wait.wait => Some("until it is gone"),
                _ => None,
            };
            connected(&group.connection, &mut context, |ctx| async move {
                commands::machine::run(&ctx, &group.format, &group.command).await
            })
            .await
        }
        Command::Volume(group) => {
            // No `--wait` hint: a volume's `--wait` waits for Ready once the add is accepted; it
            // does not repeat an add that was refused (a full orchestrator's 429, say).
            connected(&group.connection, &mut context, |ctx| async move {
                commands::volume::run(&ctx, &group.format, &group.command).await
            })
            .await
        }
        Command::Orchestrator(group) => {
            connected(&group.connection, &mut context, |ctx| async move {
                commands::orchestrator::run(&ctx, &group.format, &group.command).await
            })
            .await
        }
        Command::Get(group) => {
            connected(&group.connection, &mut context, |ctx| async move {
                get(&ctx, group.format.output(), &group.command).await
            })
            .await
        }
        Command::Apply(group) => {
            connected(&group.connection, &mut context, |ctx| async move {
                commands::objects::apply(&ctx, &group.command).await
            })
            .await
        }
        Command::Delete(group) => {
            if !group.command.wait.wait {
                context.wait_for = Some("until it is gone");
            }
            connected(&group.connection, &mut context, |ctx| async move {
                commands::objects::delete(&ctx, group.format.output(), &group.command).await
            })
            .await
        }
        Command::Scale(group) => {
            connected(&group.connection, &mut context, |ctx| async move {
                let args = &group.command;
                commands::objects::scale(&ctx, group.format.output(), &args.object, args.replicas)
                    .await
            })
            .await
        }
        Command::Rollout(group) => {
            connected(&group.connection, &mut context, |ctx| async move {
                match &group.command {
                    args::RolloutCommand::Status { object, timeout } => {
                        commands::objects::rollout_status(&ctx, object, *timeout).await
                    }
                }
            })
            .await
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", e.line(&context));
            ExitCode::from(e.exit_code())
        }
    }
}

/// The options of the commands that reach the gateway and print ([`args::Connection`],
/// [`args::Format`]) taking a value, and those that take none.
const OPTIONS_WITH_VALUE: &[&str] = &["--server", "--token", "--request-timeout", "--output", "-o"];
const FLAGS: &[&str] = &["--no-headers"];

/// `argv` with the connection and output options given before the command moved to its end, so
/// that `berth --server URL volume list` works as kubectl's global flags do. They belong to the
/// commands that use them (see [`args`]), so a command that does not (`berth --server URL up`) is
/// still refused with clap's usual error. Anything else stays where it is; nothing after a `--` is
/// touched.
fn options_anywhere(argv: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
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

/// Checks the connection options, then runs `command` with them.
async fn connected<F, Fut>(
    connection: &args::Connection,
    context: &mut HintContext,
    command: F,
) -> Result<(), CliError>
where
    F: FnOnce(Ctx) -> Fut,
    Fut: Future<Output = Result<(), CliError>>,
{
    let ctx = Ctx::new(connection)?;
    context.server = Some(ctx.server.clone());
    command(ctx).await
}

/// `berth get KIND [NAME]`: a name shows one, no name lists.
async fn get(ctx: &Ctx, output: args::Output, command: &GetCommand) -> Result<(), CliError> {
    use domain::resources::Kind;
    match command {
        GetCommand::Machines { name, query }
        | GetCommand::Machinesets { name, query }
        | GetCommand::Machinedeployments { name, query }
        | GetCommand::Machineclasses { name, query }
        | GetCommand::Secrets { name, query } => {
            let kind = match command {
                GetCommand::Machines { .. } => Kind::Machine,
                GetCommand::Machinesets { .. } => Kind::MachineSet,
                GetCommand::Machinedeployments { .. } => Kind::MachineDeployment,
                GetCommand::Machineclasses { .. } => Kind::MachineClass,
                _ => Kind::Secret,
            };
            commands::objects::get(ctx, output, kind, name.as_deref(), query).await
        }
        GetCommand::Volumes { name, query } => {
            let storage = client::storage::Client::new(ctx.client());
            match name {
                Some(name) => {
                    if query.all_namespaces || query.selector.is_some() || query.limit.is_some() {
                        return Err(CliError::Usage(
                            "-A, -l and --limit select a list; with a NAME, give only -n".into(),
                        ));
                    }
                    let volume = VolumeName {
                        name: name.clone(),
                        namespace: query.namespace.clone(),
                    };
                    commands::volume::get(&storage, &volume, query.watch, output).await
                }
                None => commands::volume::list(&storage, query, output).await,
            }
        }
        GetCommand::Orchestrators { name, watch } => {
            let registry = client::registry::Client::new(ctx.client());
            match name {
                Some(name) => commands::orchestrator::get(&registry, name, *watch, output).await,
                None => commands::orchestrator::list(&registry, *watch, output).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
