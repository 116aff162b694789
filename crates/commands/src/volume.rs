//! `berth volume …` and `berth get volumes`.

use domain::{Code, Status, Volume, VolumePhase, VolumeProvisionerProfile};

use super::watch::{Changes, STREAM_SECONDS, Source, watch};
use super::{CliError, Ctx, POLL, Step, decode, not_now, read_structured, split_name, until};
use crate::args::{Format, Output, VolumeCommand, VolumeName, VolumeQuery};
use crate::output::{Printable, print, print_list, quantity};

/// `berth volume …`.
pub async fn run(ctx: &Ctx, format: &Format, command: &VolumeCommand) -> Result<(), CliError> {
    let storage = client::storage::Client::new(ctx.client());
    let output = format.output();
    let wide = output.is_wide();
    match command {
        VolumeCommand::Create {
            name,
            file,
            namespace,
            capacity,
            orchestrator,
            replicas,
            labels,
            params,
            wait,
        } => {
            let profile = match file {
                Some(path) => {
                    let mut docs = read_structured(path)?;
                    if docs.len() != 1 {
                        return Err(CliError::Usage(format!(
                            "{}: expected one volume profile, found {}",
                            path.display(),
                            docs.len()
                        )));
                    }
                    let mut profile: VolumeProvisionerProfile = decode("profile", docs.remove(0))?;
                    match (&profile.namespace, namespace) {
                        (Some(inside), Some(flag)) if inside != flag => {
                            return Err(CliError::Usage(format!(
                                "{} says namespace {inside:?} but -n/--namespace says {flag:?}; give one of them",
                                path.display()
                            )));
                        }
                        (None, Some(flag)) => profile.namespace = Some(flag.clone()),
                        _ => {}
                    }
                    profile
                }
                None => {
                    let name = name.as_deref().ok_or_else(|| {
                        CliError::Usage("a volume name (or -f FILE) is required".into())
                    })?;
                    let (namespace, name) = split_name(name, namespace.as_deref())?;
                    VolumeProvisionerProfile {
                        name,
                        namespace: Some(namespace),
                        capacity: capacity.clone().ok_or_else(|| {
                            CliError::Usage("--capacity is required (like 10Gi)".into())
                        })?,
                        orchestrator: orchestrator.clone(),
                        replicas: *replicas,
                        labels: (!labels.is_empty()).then(|| labels.iter().cloned().collect()),
                        parameters: (!params.is_empty()).then(|| params.iter().cloned().collect()),
                    }
                }
            };
            // Checked here too, so a typo costs no round trip and reads the same as the server's
            // answer (and exits the same: refused).
            profile.validate().map_err(CliError::Local)?;
            let volume = if wait.wait {
                // With --wait the create itself is retried as the server asks (a 503 or 429
                // with Retry-After), within the same --timeout, as docs/cli.md says --wait does.
                let started = std::time::Instant::now();
                let made = until(
                    &format!("volume {} to be made", profile.name),
                    wait.timeout,
                    || async {
                        match storage.add(&profile).await {
                            Ok((volume, _)) => Ok(Step::Done(volume)),
                            Err(e) => not_now(e),
                        }
                    },
                )
                .await?;
                wait_ready(
                    &storage,
                    &made,
                    wait.timeout.saturating_sub(started.elapsed()),
                )
                .await?
            } else {
                storage.add(&profile).await?.0
            };
            print(
                &Printable::of(&volume, std::slice::from_ref(&volume), wide),
                output,
            );
        }
        VolumeCommand::Get { volume, watch: w } => get(&storage, volume, *w, output).await?,
        VolumeCommand::List(query) => list(&storage, query, output).await?,
        VolumeCommand::Delete {
            volume: VolumeName { name, namespace },
            wait,
        } => {
            let (ns, n) = split_name(name, namespace.as_deref())?;
            let r = storage.delete(&ns, &n).await?;
            if wait.wait && r.deleted {
                wait_gone(&storage, &ns, &n, wait.timeout).await?;
            }
            let said = match (r.deleted, wait.wait) {
                (true, true) => "deleted (gone)",
                (true, false) => "deleted",
                (false, _) => "not found (nothing to delete)",
            };
            let mut printed = Printable::new(
                &r,
                vec!["VOLUME", "RESULT"],
                vec![vec![format!("{ns}/{n}"), said.into()]],
            );
            // `-o name` is `volume/NAME`, as every other command prints it.
            printed.names = vec![format!("volume/{n}")];
            print(&printed, output);
        }
        VolumeCommand::Label {
            volume: VolumeName { name, namespace },
            changes,
            overwrite,
            resource_version,
        } => {
            let (ns, n) = split_name(name, namespace.as_deref())?;
            // kubectl's rule: one change per key (`a=1 a-` or `a=1 a=2` says two things).
            let mut seen = std::collections::BTreeSet::new();
            if let Some((key, _)) = changes.iter().find(|(k, _)| !seen.insert(k.as_str())) {
                return Err(CliError::Usage(format!(
                    "label {key:?} is changed twice in one command; give each key once"
                )));
            }
            if !overwrite {
                // kubectl's rule: a value already there is changed only when asked to.
                let current = storage.get(&ns, &n).await?;
                if let Some((key, value)) = changes.iter().find_map(|(k, v)| {
                    let v = v.as_ref()?;
                    let had = current.metadata.labels.get(k)?;
                    (had != v).then_some((k, had))
                }) {
                    return Err(CliError::Local(Status::invalid(
                        key,
                        format!(
                            "the volume has this label already (value {value:?}); --overwrite changes it"
                        ),
                    )));
                }
            }
            let labels: serde_json::Map<String, serde_json::Value> = changes
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.clone().map_or(serde_json::Value::Null, Into::into),
                    )
                })
                .collect();
            let mut metadata = serde_json::json!({ "labels": labels });
            if let Some(version) = resource_version {
                metadata["resourceVersion"] = version.clone().into();
            }
            let volume = storage
                .patch(&ns, &n, &serde_json::json!({ "metadata": metadata }))
                .await?;
            print(
                &Printable::of(&volume, std::slice::from_ref(&volume), true),
                output,
            );
        }
        VolumeCommand::Resize {
            volume: VolumeName { name, namespace },
            capacity,
            resource_version,
        } => {
            let (ns, n) = split_name(name, namespace.as_deref())?;
            // Checked here first, so a typo is named before anything is sent.
            domain::Quantity::parse_field("--capacity", capacity).map_err(CliError::Local)?;
            let mut patch = serde_json::json!({ "spec": { "capacity": capacity } });
            if let Some(version) = resource_version {
                patch["metadata"] = serde_json::json!({ "resourceVersion": version });
            }
            let volume = storage.patch(&ns, &n, &patch).await?;
            print(
                &Printable::of(&volume, std::slice::from_ref(&volume), wide),
                output,
            );
        }
        VolumeCommand::Stats(VolumeName { name, namespace }) => {
            let (ns, n) = split_name(name, namespace.as_deref())?;
            let s = storage.stats(&ns, &n).await?;
            let unknown = || "<unknown>".to_string();
            let row = vec![
                format!("{}/{}", s.namespace, s.name),
                quantity(s.capacity_bytes),
                s.used_bytes.map(quantity).unwrap_or_else(unknown),
                s.available_bytes.map(quantity).unwrap_or_else(unknown),
            ];
            print(
                &Printable::new(
                    &s,
                    vec!["VOLUME", "CAPACITY", "USED", "AVAILABLE"],
                    vec![row],
                ),
                output,
            );
        }
        VolumeCommand::Orphans => {
            let list = storage.orphans().await?;
            let rows = list
                .items
                .iter()
                .map(|o| {
                    vec![
                        o.orchestrator.clone(),
                        o.kind.to_string(),
                        format!("{}/{}", o.namespace, o.name),
                        o.location.clone(),
                    ]
                })
                .collect();
            for why in &list.unscanned {
                eprintln!("not scanned: {why}");
            }
            print_list(
                &Printable::new(
                    &list,
                    vec!["ORCHESTRATOR", "KIND", "WAS-FOR", "LOCATION"],
                    rows,
                ),
                output,
                &format!(
                    "No orphans found (policy: {}; `delete` makes the reconciler remove them).",
                    list.policy
                ),
            );
        }
    }
    Ok(())
}

/// `berth volume get` (and `berth get volume NAME`).
pub async fn get(
    storage: &client::storage::Client,
    volume: &VolumeName,
    watching: bool,
    output: Output,
) -> Result<(), CliError> {
    let (ns, n) = split_name(&volume.name, volume.namespace.as_deref())?;
    if watching {
        let changes: Changes<'_> = Box::new(|| {
            let (storage, ns) = (storage.clone(), ns.clone());
            Box::pin(async move { storage.watch(&ns, None, None, STREAM_SECONDS).await })
        });
        return watch(
            Source::One(Box::new(|| {
                let (storage, ns, n) = (storage.clone(), ns.clone(), n.clone());
                Box::pin(async move { storage.get(&ns, &n).await })
            })),
            Some(changes),
            output,
        )
        .await;
    }
    let v = storage.get(&ns, &n).await?;
    print(
        &Printable::of(&v, std::slice::from_ref(&v), output.is_wide()),
        output,
    );
    Ok(())
}

/// `berth volume list` (and `berth get volumes`).
pub async fn list(
    storage: &client::storage::Client,
    query: &VolumeQuery,
    output: Output,
) -> Result<(), CliError> {
    let namespace = if query.all_namespaces {
        None
    } else {
        Some(
            query
                .namespace
                .clone()
                .unwrap_or_else(|| domain::volume::DEFAULT_NAMESPACE.to_string()),
        )
    };
    let params = client::storage::ListParams {
        namespace: namespace.clone(),
        label_selector: query.selector.clone(),
        limit: query.limit,
        continue_token: None,
    };
    if query.watch {
        // Volumes of every namespace have no one sequence to follow: those are looked at again.
        let changes = namespace.clone().map(|ns| -> Changes<'_> {
            let selector = query.selector.clone();
            Box::new(move || {
                let (storage, ns, selector) = (storage.clone(), ns.clone(), selector.clone());
                Box::pin(async move {
                    storage
                        .watch(&ns, selector.as_deref(), None, STREAM_SECONDS)
                        .await
                })
            })
        });
        return watch(
            Source::Many(Box::new(move || {
                let (storage, params) = (storage.clone(), params.clone());
                Box::pin(async move { storage.list_all(&params).await })
            })),
            changes,
            output,
        )
        .await;
    }
    let list = match query.limit {
        Some(limit) => {
            let page = storage
                .list(&client::storage::ListParams {
                    continue_token: query.continue_token.clone(),
                    ..params
                })
                .await?;
            if let (Some(token), true) = (&page.continue_token, output.is_table()) {
                // On stderr, so the table stays only rows; JSON and YAML carry the token.
                eprintln!(
                    "More volumes exist: add --limit {limit} --continue {token} (with the same -n/-A and -l) for the next page."
                );
            }
            page
        }
        None => domain::VolumeList {
            metadata: None,
            items: storage.list_all(&params).await?,
            continue_token: None,
        },
    };
    let empty = match &namespace {
        Some(ns) => format!("No volumes found in namespace {ns}."),
        None => "No volumes found.".to_string(),
    };
    print_list(
        &Printable::of(&list, &list.items, output.is_wide()),
        output,
        &empty,
    );
    Ok(())
}

/// Waits until the volume `ns/name` is gone (its backend object removed, not only asked to be).
async fn wait_gone(
    storage: &client::storage::Client,
    ns: &str,
    name: &str,
    timeout: std::time::Duration,
) -> Result<(), CliError> {
    until(
        &format!("volume {ns}/{name} to be gone"),
        timeout,
        || async move {
            match storage.get(ns, name).await {
                Ok(v) => Ok(Step::Pending {
                    state: format!("it is {}", v.status.phase),
                    after: POLL,
                }),
                Err(e) if e.http_status == Some(404) => Ok(Step::Done(())),
                Err(e) => not_now(e),
            }
        },
    )
    .await
}

async fn wait_ready(
    storage: &client::storage::Client,
    volume: &Volume,
    timeout: std::time::Duration,
) -> Result<Volume, CliError> {
    let (ns, name) = (&volume.metadata.namespace, &volume.metadata.name);
    let mut first = Some(volume.clone());
    until(&format!("volume {ns}/{name} to be Ready"), timeout, || {
        let seen = first.take();
        async move {
            let current = match seen {
                Some(v) => v,
                None => match storage.get(ns, name).await {
                    Ok(v) => v,
                    Err(e) => return not_now(e),
                },
            };
            match current.status.phase {
                VolumePhase::Ready => Ok(Step::Done(current)),
                VolumePhase::Failed => Err(CliError::Local(Status::new(
                    Code::Internal,
                    format!(
                        "volume {ns}/{name} failed: {} {}",
                        current.status.reason, current.status.message
                    ),
                ))),
                // What it waits for, said as the server says it: a Kubernetes claim waiting to be
                // bound, or for a first pod to mount it.
                phase if current.status.message.is_empty() => Ok(Step::Pending {
                    state: format!("it is {phase}"),
                    after: POLL,
                }),
                phase => Ok(Step::Pending {
                    state: format!("it is {phase}: {}", current.status.message),
                    after: POLL,
                }),
            }
        }
    })
    .await
}
