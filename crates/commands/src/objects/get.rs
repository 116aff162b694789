//! `berth get KIND [NAME]` for the machine controller's kinds, once or with `--watch`. Apart
//! because showing is the verb people use most, and its watch mode ties the table and the
//! following together.

use client::controller::Client;
use domain::resources::Kind;
use serde_json::Value;

use super::follow::follow;
use super::table::{EventPrinter, printable};
use super::{namespace_of, text};
use crate::args::{ObjectQuery, Output};
use crate::output::{print, print_list};
use crate::{CliError, Ctx};

/// `berth get KIND [NAME]` for the machine controller's kinds (and `berth machine get NAME`).
pub async fn get(
    ctx: &Ctx,
    output: Output,
    kind: Kind,
    name: Option<&str>,
    query: &ObjectQuery,
) -> Result<(), CliError> {
    let client = Client::new(ctx.client());
    let namespace = namespace_of(query.namespace.as_ref());
    let wide = output.is_wide();
    let (items, version) = match name {
        Some(_) if query.selector.is_some() => {
            return Err(CliError::Usage(
                "-l selects a list; with a NAME, give only -n".into(),
            ));
        }
        Some(name) => {
            let one = client.get(kind, &namespace, name).await?;
            let version = text(&one, "/metadata/resourceVersion").to_string();
            if !query.watch {
                print(
                    &printable(kind, one.clone(), std::slice::from_ref(&one), wide),
                    output,
                );
                return Ok(());
            }
            (vec![one], version)
        }
        None => {
            let list = client
                .list(kind, &namespace, query.selector.as_deref())
                .await?;
            let items: Vec<Value> = list["items"].as_array().cloned().unwrap_or_default();
            if !query.watch {
                let empty = format!("No {} found in namespace {namespace}.", kind.plural());
                print_list(&printable(kind, list.clone(), &items, wide), output, &empty);
                return Ok(());
            }
            (items, text(&list, "/metadata/resourceVersion").to_string())
        }
    };
    let mut printer = EventPrinter::new(kind, output);
    for item in &items {
        if !printer.print("ADDED", item) {
            return Ok(());
        }
    }
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let follow = follow(
        ctx,
        &client,
        kind,
        &namespace,
        query.selector.as_deref(),
        version,
        |event| {
            if name.is_some_and(|n| text(&event.object, "/metadata/name") != n) {
                return true;
            }
            printer.print(&event.event, &event.object)
        },
    );
    tokio::select! {
        _ = &mut interrupted => Ok(()),
        done = follow => done,
    }
}
