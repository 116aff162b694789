//! `berth delete` and `berth scale`: the verbs that change one object. Apart because they write,
//! and a delete's `--wait` waits on the object's finalizers, not on a table.

use std::time::Duration;

use client::controller::Client;
use domain::Code;
use domain::resources::Kind;
use serde_json::json;

use super::table::printable;
use super::{lower, resolve};
use crate::args::{DeleteArgs, ObjectRef, Output, Shape};
use crate::output::print;
use crate::{CliError, Ctx};

/// `berth delete KIND NAME`.
pub async fn delete(ctx: &Ctx, output: Output, args: &DeleteArgs) -> Result<(), CliError> {
    let (kind, name, namespace) = resolve(&args.object)?;
    let client = Client::new(ctx.client());
    let shown = format!("{}/{name}", lower(kind));
    match client.delete(kind, &namespace, &name).await {
        Ok(_) => {}
        Err(e) if e.code() == Code::NotFound && args.ignore_not_found => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    if args.wait.wait {
        let waited = crate::until(
            &format!("{shown} to be gone"),
            args.wait.timeout,
            || async {
                match client.get(kind, &namespace, &name).await {
                    Err(e) if e.code() == Code::NotFound => Ok(crate::Step::Done(())),
                    Ok(o) => Ok(crate::Step::Pending {
                        after: Duration::from_secs(1),
                        state: format!("finalizers {}", o["metadata"]["finalizers"]),
                    }),
                    Err(e) => crate::not_now(e),
                }
            },
        )
        .await;
        // The finalizers say only that the delete is not done; the machines say why (a VM the
        // cloud will not delete, a secret that cannot reach it), as rollout status says it (a
        // break-it finding).
        if let Err(CliError::Local(status)) = &waited
            && status.code == Code::DeadlineExceeded
        {
            let why = why_not_gone(&client, kind, &namespace, &name).await;
            return Err(CliError::Local(domain::Status::new(
                status.code,
                format!("{}{why}", status.message),
            )));
        }
        waited?;
        say(output, &format!("{shown} deleted"));
    } else {
        say(
            output,
            &format!("{shown} deleted (it goes once its finalizers are done: add --wait to wait)"),
        );
    }
    Ok(())
}

/// Why an object's delete is not done, as its machines' last operations say it (empty when they
/// say nothing, or cannot be read).
async fn why_not_gone(client: &Client, kind: Kind, namespace: &str, name: &str) -> String {
    let Ok(object) = client.get(kind, namespace, name).await else {
        return String::new();
    };
    match kind {
        Kind::Machine => super::rollout::failed_machines(&json!({ "items": [object] })),
        Kind::MachineSet | Kind::MachineDeployment => {
            super::rollout::stuck_machines(client, namespace, &object).await
        }
        _ => String::new(),
    }
}

fn say(output: Output, line: &str) {
    if output.shape == Shape::Name {
        let name = line.split(' ').next().unwrap_or_default();
        println!("{name}");
    } else {
        println!("{line}");
    }
}

/// `berth scale KIND NAME --replicas N`.
pub async fn scale(
    ctx: &Ctx,
    output: Output,
    object: &ObjectRef,
    replicas: u32,
) -> Result<(), CliError> {
    let (kind, name, namespace) = resolve(object)?;
    if !matches!(kind, Kind::MachineSet | Kind::MachineDeployment) {
        return Err(CliError::Usage(format!(
            "only a machineset or machinedeployment has replicas, not a {}",
            lower(kind)
        )));
    }
    let client = Client::new(ctx.client());
    let scaled = client
        .patch(
            kind,
            &namespace,
            &name,
            &json!({"spec": {"replicas": replicas}}),
        )
        .await?;
    if matches!(output.shape, Shape::Json | Shape::Yaml | Shape::JsonPath(_)) {
        // As kubectl's `scale -o yaml`: the object as it is now.
        let one = std::slice::from_ref(&scaled);
        print(&printable(kind, scaled.clone(), one, false), output);
    } else {
        say(output, &format!("{}/{name} scaled", lower(kind)));
    }
    Ok(())
}
