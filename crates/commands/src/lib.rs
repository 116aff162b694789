//! The `berth` commands that talk to a running stack through the gateway: the clap command tree,
//! the typed clients' calls, and what they print. It links no server: `berth up`, backup and the
//! tokens file are `berth-stack`'s, and the `berth` binary sits above both.
//!
//! # Layout
//! - [`args`]: the whole clap command tree (the stack's commands too: parsing them needs no server),
//!   and [`args::options_anywhere`], kubectl's global flags before the command.
//! - this file: [`run`] (a client command, dispatched) and `berth get`'s choice among the families.
//! - `error`: [`CliError`], its exit codes and the hints of its error line.
//! - `connection`: [`Ctx`], the checked connection (`--server`, `--token`).
//! - `input`: reading YAML/JSON input files, and `namespace/name`.
//! - `wait`: [`until`], the one loop every `--wait` runs.
//! - [`machine`], [`volume`], [`orchestrator`]: one module per command family.
//! - [`objects`]: what the machine controller keeps: `get`, `delete`, `scale`, `rollout status`,
//!   following the server's watch. [`apply`]: `apply -f` of every kind, checked before it writes.
//! - [`watch`]: `--watch` of volumes and orchestrators, printing what changed.
//! - [`output`]: tables, JSON, YAML; sizes and ages for people. [`jsonpath`]: `-o jsonpath=`.
//!
//! Exit codes: 0 done, [`EXIT_REFUSED`] (1), [`EXIT_USAGE`] (2), [`EXIT_FAILED`] (3).

pub mod apply;
pub mod args;
pub mod jsonpath;
pub mod machine;
pub mod objects;
pub mod orchestrator;
pub mod output;
pub mod volume;
pub mod watch;

mod connection;
mod error;
mod input;
mod wait;

use std::future::Future;

pub use connection::{Ctx, normalise_server};
pub use error::{CliError, EXIT_FAILED, EXIT_REFUSED, EXIT_USAGE, HintContext};
pub use input::{decode, parse_structured, read_structured, split_name};
pub use wait::{POLL, Step, not_now, until};

use crate::args::{Command, GetCommand, MachineCommand, VolumeName};

/// Runs a command that reaches the gateway (every command but `up`, `completions`, `token`,
/// `backup` and `restore`, which the `berth` binary runs itself), noting in `context` what its
/// error line's hints may refer to.
pub async fn run(command: &Command, context: &mut HintContext) -> Result<(), CliError> {
    match command {
        Command::Machine(group) => {
            context.wait_for = match &group.command {
                MachineCommand::Create { wait, .. } if !wait.wait => Some("until it runs"),
                MachineCommand::Delete { wait, .. } if !wait.wait => Some("until it is gone"),
                _ => None,
            };
            connected(&group.connection, context, |ctx| async move {
                crate::machine::run(&ctx, &group.format, &group.command).await
            })
            .await
        }
        Command::Volume(group) => {
            // No `--wait` hint: a volume's `--wait` waits for Ready once the add is accepted; it
            // does not repeat an add that was refused (a full orchestrator's 429, say).
            connected(&group.connection, context, |ctx| async move {
                crate::volume::run(&ctx, &group.format, &group.command).await
            })
            .await
        }
        Command::Orchestrator(group) => {
            connected(&group.connection, context, |ctx| async move {
                crate::orchestrator::run(&ctx, &group.format, &group.command).await
            })
            .await
        }
        Command::Get(group) => {
            connected(&group.connection, context, |ctx| async move {
                get(&ctx, group.format.output(), &group.command).await
            })
            .await
        }
        Command::Apply(group) => {
            connected(&group.connection, context, |ctx| async move {
                crate::apply::apply(&ctx, group.format.output(), &group.command).await
            })
            .await
        }
        Command::Delete(group) => {
            if !group.command.wait.wait {
                context.wait_for = Some("until it is gone");
            }
            connected(&group.connection, context, |ctx| async move {
                crate::objects::delete(&ctx, group.format.output(), &group.command).await
            })
            .await
        }
        Command::Scale(group) => {
            connected(&group.connection, context, |ctx| async move {
                let args = &group.command;
                crate::objects::scale(&ctx, group.format.output(), &args.object, args.replicas)
                    .await
            })
            .await
        }
        Command::Rollout(group) => {
            connected(&group.connection, context, |ctx| async move {
                match &group.command {
                    args::RolloutCommand::Status { object, timeout } => {
                        crate::objects::rollout_status(&ctx, object, *timeout).await
                    }
                }
            })
            .await
        }
        Command::Up(_)
        | Command::Completions { .. }
        | Command::Token(_)
        | Command::Backup { .. }
        | Command::Restore { .. } => Err(CliError::Usage(
            "this command does not reach a gateway; the berth binary runs it".into(),
        )),
    }
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
            crate::objects::get(ctx, output, kind, name.as_deref(), query).await
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
                    crate::volume::get(&storage, &volume, query.watch, output).await
                }
                None => crate::volume::list(&storage, query, output).await,
            }
        }
        GetCommand::Orchestrators { name, watch } => {
            let registry = client::registry::Client::new(ctx.client());
            match name {
                Some(name) => crate::orchestrator::get(&registry, name, *watch, output).await,
                None => crate::orchestrator::list(&registry, *watch, output).await,
            }
        }
    }
}
