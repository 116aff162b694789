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
        crate::until(
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
        .await?;
        say(output, &format!("{shown} deleted"));
    } else {
        say(
            output,
            &format!("{shown} deleted (it goes once its finalizers are done: add --wait to wait)"),
        );
    }
    Ok(())
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
