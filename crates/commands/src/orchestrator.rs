//! `berth orchestrator …` and `berth get orchestrators`.

use std::collections::BTreeMap;

use domain::orchestrator::{OrchestratorKind, RegisterOrchestrator};

use super::watch::{Changes, STREAM_SECONDS, Source, watch};
use super::{CliError, Ctx};
use crate::args::{Format, OrchestratorCommand, Output};
use crate::output::{Printable, print, print_list};

/// `berth orchestrator …`.
pub async fn run(
    ctx: &Ctx,
    format: &Format,
    command: &OrchestratorCommand,
) -> Result<(), CliError> {
    let registry = client::registry::Client::new(ctx.client());
    let output = format.output();
    let wide = output.is_wide();
    match command {
        OrchestratorCommand::Register {
            name,
            kind,
            label,
            region,
            config,
            default,
        } => {
            let kind = OrchestratorKind::parse_field("kind", kind).map_err(CliError::Local)?;
            // A value written as a JSON list (`accessModes=["ReadWriteMany"]`) is that list;
            // every other value is the text as given.
            let config: BTreeMap<String, serde_json::Value> = config
                .iter()
                .map(|(k, v)| {
                    let list = v
                        .starts_with('[')
                        .then(|| serde_json::from_str::<serde_json::Value>(v).ok())
                        .flatten();
                    (
                        k.clone(),
                        list.unwrap_or_else(|| serde_json::Value::String(v.clone())),
                    )
                })
                .collect();
            let request = RegisterOrchestrator {
                kind,
                label: label.clone(),
                region: region.clone(),
                config: (!config.is_empty())
                    .then(|| serde_json::to_value(&config).unwrap_or_default()),
                default: default.then_some(true),
            };
            let o = registry.register(name, &request).await?;
            print(&Printable::of(&o, std::slice::from_ref(&o), wide), output);
        }
        OrchestratorCommand::Get { name, watch: w } => get(&registry, name, *w, output).await?,
        OrchestratorCommand::List { watch: w } => list(&registry, *w, output).await?,
        OrchestratorCommand::Delete { name } => {
            let existed = registry.deregister_reporting(name).await?;
            let said = if existed {
                "removed"
            } else {
                "not registered (nothing to do)"
            };
            print(
                &Printable::new(
                    &serde_json::json!({"deleted": existed}),
                    vec!["ORCHESTRATOR", "RESULT"],
                    vec![vec![name.clone(), said.into()]],
                ),
                output,
            );
        }
        OrchestratorCommand::Detect => {
            let d = registry.detect().await?;
            let rule = serde_json::to_value(d.rule)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            print(
                &Printable::new(
                    &d,
                    vec!["KIND", "RULE", "REASON"],
                    vec![vec![d.kind.to_string(), rule, d.reason.clone()]],
                ),
                output,
            );
        }
        OrchestratorCommand::Kinds => {
            let kinds = registry.kinds().await?;
            let rows = kinds
                .iter()
                .map(|k| {
                    vec![
                        k.kind.to_string(),
                        k.storage_ops.to_string(),
                        k.description.clone(),
                    ]
                })
                .collect();
            print(
                &Printable::new(&kinds, vec!["KIND", "STORAGE-OPS", "DESCRIPTION"], rows),
                output,
            );
        }
    }
    Ok(())
}

/// `berth orchestrator get` (and `berth get orchestrator NAME`).
pub async fn get(
    registry: &client::registry::Client,
    name: &str,
    watching: bool,
    output: Output,
) -> Result<(), CliError> {
    if watching {
        let changes: Changes<'_> = Box::new(|| {
            let registry = registry.clone();
            Box::pin(async move { registry.watch(None, STREAM_SECONDS).await })
        });
        return watch(
            Source::One(Box::new(move || {
                let (registry, name) = (registry.clone(), name.to_string());
                Box::pin(async move { registry.get(&name).await })
            })),
            Some(changes),
            output,
        )
        .await;
    }
    let o = registry.get(name).await?;
    print(
        &Printable::of(&o, std::slice::from_ref(&o), output.is_wide()),
        output,
    );
    Ok(())
}

/// `berth orchestrator list` (and `berth get orchestrators`).
pub async fn list(
    registry: &client::registry::Client,
    watching: bool,
    output: Output,
) -> Result<(), CliError> {
    if watching {
        let changes: Changes<'_> = Box::new(|| {
            let registry = registry.clone();
            Box::pin(async move { registry.watch(None, STREAM_SECONDS).await })
        });
        return watch(
            Source::Many(Box::new(move || {
                let registry = registry.clone();
                Box::pin(async move { registry.list().await.map(|l| l.items) })
            })),
            Some(changes),
            output,
        )
        .await;
    }
    let list = registry.list().await?;
    print_list(
        &Printable::of(&list, &list.items, output.is_wide()),
        output,
        "No orchestrators found.",
    );
    Ok(())
}
