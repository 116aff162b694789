//! `berth machine …`: the machine driver's contract, one command per call, with `--wait` for the two
//! that start something that takes a while (a VM booting, a VM being released).

use domain::Code;
use domain::machine::{
    GetMachineStatusResponse, ListMachinesRequest, Machine, MachineClass, MachineRequest,
    PersistentVolumeSpec, Secret,
};

use super::{CliError, Ctx, POLL, Step, decode, not_now, read_structured, until};
use crate::args::{Format, MachineCommand, MachineFiles, Output};
use crate::output::{Printable, print, print_list};

/// Assembles the machine, class and secret from Kubernetes objects (by `kind`) or a whole request body.
pub fn machine_request(
    files: &MachineFiles,
) -> Result<(Option<Machine>, MachineClass, Secret), CliError> {
    let (mut machine, mut class, mut secret) = (None, None, None);
    for path in &files.files {
        for doc in read_structured(path)? {
            if doc.get("machineClass").is_some() {
                let body: serde_json::Map<String, serde_json::Value> = decode("request body", doc)?;
                if let Some(m) = body.get("machine") {
                    machine = Some(decode("machine", m.clone())?);
                }
                class = Some(decode("machineClass", body["machineClass"].clone())?);
                if let Some(s) = body.get("secret") {
                    secret = Some(decode("secret", s.clone())?);
                }
                continue;
            }
            match doc.get("kind").and_then(|k| k.as_str()) {
                Some("Machine") => machine = Some(decode("Machine", doc)?),
                Some("MachineClass") => class = Some(decode("MachineClass", doc)?),
                Some("Secret") => secret = Some(decode("Secret", doc)?),
                other => {
                    let said = match other {
                        Some(kind) => format!("kind {kind:?} is not"),
                        None => "a document without a kind (a string) is not".to_owned(),
                    };
                    return Err(CliError::Usage(format!(
                        "{}: {said} a Machine, MachineClass or Secret, the driver's call takes \
                         those; the machine controller's objects (MachineDeployment, MachineSet, \
                         a stored Machine) go to `berth apply -f`",
                        path.display()
                    )));
                }
            }
        }
    }
    let class = class
        .ok_or_else(|| CliError::Usage("no MachineClass in the files given with -f".into()))?;
    let secret =
        secret.ok_or_else(|| CliError::Usage("no Secret in the files given with -f".into()))?;
    Ok((machine, class, secret))
}

/// The persistent volume specs in `files`: `PersistentVolume` objects (their `spec`), a
/// `{pvSpecs: [...]}` body, or bare specs.
pub fn pv_specs(files: &[std::path::PathBuf]) -> Result<Vec<PersistentVolumeSpec>, CliError> {
    let mut specs = Vec::new();
    for path in files {
        for doc in read_structured(path)? {
            if let Some(list) = doc.get("pvSpecs") {
                specs.extend(decode::<Vec<PersistentVolumeSpec>>(
                    "pvSpecs",
                    list.clone(),
                )?);
            } else if doc.get("kind").and_then(|k| k.as_str()) == Some("PersistentVolume") {
                let spec = doc.get("spec").cloned().ok_or_else(|| {
                    CliError::Usage(format!(
                        "{}: a PersistentVolume without a spec",
                        path.display()
                    ))
                })?;
                specs.push(decode("PersistentVolume spec", spec)?);
            } else {
                specs.push(decode("PersistentVolume spec", doc)?);
            }
        }
    }
    if specs.is_empty() {
        return Err(CliError::Usage(
            "no persistent volume specs in the files given with -f".into(),
        ));
    }
    Ok(specs)
}

fn addresses(list: &[domain::machine::NodeAddress]) -> String {
    if list.is_empty() {
        return "<none>".into();
    }
    list.iter()
        .map(|a| format!("{}={}", a.kind, a.address))
        .collect::<Vec<_>>()
        .join(",")
}

/// The conditions as one cell: `InstanceStatus=Running`.
fn conditions(r: &GetMachineStatusResponse) -> String {
    if r.conditions.is_empty() {
        return "<none>".into();
    }
    r.conditions
        .iter()
        .map(|c| {
            let said = if c.reason.is_empty() {
                &c.status
            } else {
                &c.reason
            };
            format!("{}={said}", c.kind)
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A VM runs when the driver reports conditions and every one of them is True.
fn running(r: &GetMachineStatusResponse) -> bool {
    !r.conditions.is_empty() && r.conditions.iter().all(|c| c.status == "True")
}

fn status_printable(r: &GetMachineStatusResponse) -> Printable {
    let row = vec![
        r.provider_id.clone(),
        r.node_name.clone(),
        addresses(&r.addresses),
        conditions(r),
    ];
    Printable::new(
        r,
        vec!["PROVIDER-ID", "NODE", "ADDRESSES", "STATUS"],
        vec![row],
    )
}

/// `berth machine …`.
pub async fn run(ctx: &Ctx, format: &Format, command: &MachineCommand) -> Result<(), CliError> {
    let machines = client::machines::Client::new(ctx.client());
    let output = format.output();
    let files = match command {
        MachineCommand::Providers => return providers(&machines, output).await,
        MachineCommand::Get {
            name,
            namespace,
            watch,
        } => {
            let query = crate::args::ObjectQuery {
                namespace: namespace.clone(),
                selector: None,
                watch: *watch,
            };
            let kind = domain::resources::Kind::Machine;
            return super::objects::get(ctx, output, kind, Some(name), &query).await;
        }
        MachineCommand::VolumeIds { files } => {
            let specs = pv_specs(files)?;
            let ids = machines.volume_ids(&specs).await?;
            let rows = ids.iter().map(|id| vec![id.clone()]).collect();
            print_list(
                &Printable::new(
                    &serde_json::json!({ "volumeIDs": ids }),
                    vec!["VOLUME-ID"],
                    rows,
                ),
                output,
                "No volume ids: the provider maps none of these volumes.",
            );
            return Ok(());
        }
        MachineCommand::Create { files, .. }
        | MachineCommand::Delete { files, .. }
        | MachineCommand::Status(files)
        | MachineCommand::Init(files)
        | MachineCommand::List(files) => files,
    };
    let (machine, machine_class, secret) = machine_request(files)?;
    if let MachineCommand::List(_) = command {
        let class_name = machine_class.metadata.name.clone();
        let body = ListMachinesRequest {
            machine_class,
            secret,
        };
        let r = machines.list(&body).await?;
        let rows = r
            .machine_list
            .iter()
            .map(|(id, name)| vec![id.clone(), name.clone()])
            .collect();
        print_list(
            &Printable::new(&r, vec!["PROVIDER-ID", "MACHINE"], rows),
            output,
            &format!("No machines found for machine class {class_name}."),
        );
        return Ok(());
    }
    let machine =
        machine.ok_or_else(|| CliError::Usage("no Machine in the files given with -f".into()))?;
    let body = MachineRequest {
        machine,
        machine_class,
        secret,
    };
    let name = body.machine.metadata.name.clone();
    let printable = match command {
        MachineCommand::Create { wait, .. } if wait.wait => {
            // CreateMachine is safe to repeat (it adopts the VM it made), so "not now" is retried.
            until(
                &format!("machine {name} to be created"),
                wait.timeout,
                || async {
                    match machines.create(&body).await {
                        Ok(created) => Ok(Step::Done(created)),
                        Err(e) => not_now(e),
                    }
                },
            )
            .await?;
            let status = until(&format!("machine {name} to run"), wait.timeout, || async {
                match machines.status_even_uninitialized(&body).await {
                    Ok((s, true)) if running(&s) => Ok(Step::Done(s)),
                    Ok((s, _)) => Ok(Step::Pending {
                        state: conditions(&s),
                        after: POLL,
                    }),
                    // A VM just made can take a moment to show up in the cloud's listing.
                    Err(e) if e.code() == Code::NotFound => Ok(Step::Pending {
                        state: "its VM is not listed yet".into(),
                        after: POLL,
                    }),
                    // A provider may answer a bootstrap still on its way as a bare Uninitialized
                    // (no status to read): not yet, unless it says the bootstrap ended for good.
                    Err(e)
                        if e.code() == Code::Uninitialized
                            && !crate::error::bootstrap_ended(&e) =>
                    {
                        Ok(Step::Pending {
                            state: e.status.message,
                            after: POLL,
                        })
                    }
                    Err(e) => not_now(e),
                }
            })
            .await?;
            status_printable(&status)
        }
        MachineCommand::Create { .. } => {
            let r = machines.create(&body).await?;
            let row = vec![
                r.provider_id.clone(),
                r.node_name.clone(),
                r.last_known_state.clone(),
                addresses(&r.addresses),
            ];
            Printable::new(
                &r,
                vec!["PROVIDER-ID", "NODE", "STATE", "ADDRESSES"],
                vec![row],
            )
        }
        MachineCommand::Init(_) => {
            let r = machines.initialize(&body).await?;
            let row = vec![
                r.provider_id.clone(),
                r.node_name.clone(),
                addresses(&r.addresses),
            ];
            Printable::new(&r, vec!["PROVIDER-ID", "NODE", "ADDRESSES"], vec![row])
        }
        // A VM that is not initialised yet (Uninitialized, 17) is a state to show, not an error: its
        // conditions say where it is (`Initialized=False`, the cloud's own status).
        MachineCommand::Status(_) => {
            status_printable(&machines.status_even_uninitialized(&body).await?.0)
        }
        MachineCommand::Delete { wait, .. } => {
            let r = if wait.wait {
                until(
                    &format!("machine {name} to be gone"),
                    wait.timeout,
                    || async {
                        let deleted = match machines.delete(&body).await {
                            Ok(deleted) => deleted,
                            Err(e) => return not_now(e),
                        };
                        // Deleted means released; gone means the cloud no longer lists it.
                        match machines.status(&body).await {
                            Err(e) if e.code() == Code::NotFound => Ok(Step::Done(deleted)),
                            Ok(s) => Ok(Step::Pending {
                                state: format!("its VM is still listed ({})", conditions(&s)),
                                after: POLL,
                            }),
                            Err(e) => not_now(e),
                        }
                    },
                )
                .await?
            } else {
                machines.delete(&body).await?
            };
            Printable::new(
                &r,
                vec!["MACHINE", "STATE"],
                vec![vec![name.clone(), r.last_known_state.clone()]],
            )
        }
        MachineCommand::List(_)
        | MachineCommand::Providers
        | MachineCommand::VolumeIds { .. }
        | MachineCommand::Get { .. } => {
            unreachable!("handled above")
        }
    };
    print(&printable, output);
    Ok(())
}

async fn providers(machines: &client::machines::Client, output: Output) -> Result<(), CliError> {
    let list = machines.providers().await?;
    let rows = list
        .providers
        .iter()
        .map(|p| vec![p.name.clone(), p.description.clone()])
        .collect();
    print_list(
        &Printable::new(&list, vec!["PROVIDER", "DESCRIPTION"], rows),
        output,
        "No providers found.",
    );
    Ok(())
}
