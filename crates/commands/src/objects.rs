//! What the machine controller keeps (machines, machine sets and deployments, classes, secrets):
//! `get` (and `machine get`), `delete`, `scale` and `rollout status` (`apply -f` is [`crate::apply`]), kubectl's habits
//! over the controller's API. `--watch` and `rollout status` follow the server's watch, resuming
//! from the last version seen (a bookmark's, when quiet) whenever a stream ends.

use std::time::{Duration, Instant};

use client::controller::{Client, WatchEvent};
use domain::resources::Kind;
use domain::{Code, Status};
use serde_json::{Value, json};

use super::{CliError, Ctx};
use crate::args::{DeleteArgs, ObjectQuery, ObjectRef, Output, Shape};
use crate::output::{Columns, Printable, age, labels, print, print_list, write_stdout};

/// The kind a command line names: kubectl's singular, plural and short names.
pub fn kind_named(text: &str) -> Option<Kind> {
    Some(match text.to_ascii_lowercase().as_str() {
        "secret" | "secrets" => Kind::Secret,
        "machineclass" | "machineclasses" | "mcc" => Kind::MachineClass,
        "machine" | "machines" | "mach" => Kind::Machine,
        "machineset" | "machinesets" | "ms" => Kind::MachineSet,
        "machinedeployment" | "machinedeployments" | "md" => Kind::MachineDeployment,
        _ => return None,
    })
}

/// `kind/name` as `-o name` and the messages say it.
fn lower(kind: Kind) -> String {
    kind.as_str().to_ascii_lowercase()
}

fn namespace_of(namespace: Option<&String>) -> String {
    namespace
        .cloned()
        .unwrap_or_else(|| domain::volume::DEFAULT_NAMESPACE.to_string())
}

/// The kind, name and namespace an [`ObjectRef`] names.
fn resolve(object: &ObjectRef) -> Result<(Kind, String, String), CliError> {
    let (kind_text, name) = match (object.target.split_once('/'), &object.name) {
        (Some(_), Some(_)) => {
            return Err(CliError::Usage(format!(
                "{:?} names the object already; give `KIND/NAME` or `KIND NAME`, not both",
                object.target
            )));
        }
        (Some((k, n)), None) => (k.to_string(), n.to_string()),
        (None, Some(n)) => (object.target.clone(), n.clone()),
        (None, None) => {
            return Err(CliError::Usage(format!(
                "which {}? give `KIND/NAME` or `KIND NAME`",
                object.target
            )));
        }
    };
    let kind = kind_named(&kind_text).ok_or_else(|| {
        CliError::Usage(format!(
            "{kind_text:?} is not a kind the machine controller keeps: machine, machineset (ms), machinedeployment (md), machineclass (mcc), secret"
        ))
    })?;
    Ok((kind, name, namespace_of(object.namespace.as_ref())))
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn number(value: &Value, pointer: &str) -> u64 {
    value.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

/// A kind's table: headers, and the cells of one object.
fn headers(kind: Kind, wide: bool) -> Vec<&'static str> {
    let mut h = match kind {
        Kind::Machine => vec!["NAME", "PHASE", "PROVIDER ID", "NODE", "AGE"],
        Kind::MachineSet => vec!["NAME", "DESIRED", "CURRENT", "READY", "AGE"],
        Kind::MachineDeployment => vec!["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        Kind::MachineClass => vec!["NAME", "PROVIDER", "SECRET", "AGE"],
        Kind::Secret => vec!["NAME", "TYPE", "KEYS", "AGE"],
    };
    if wide {
        h.extend(match kind {
            Kind::Machine => vec!["CLASS", "ADDRESSES", "LAST OPERATION", "LABELS"],
            Kind::MachineSet | Kind::MachineDeployment => vec!["CLASS", "SELECTOR", "LABELS"],
            Kind::MachineClass | Kind::Secret => vec!["LABELS"],
        });
    }
    h
}

fn row(kind: Kind, o: &Value, wide: bool) -> Vec<String> {
    let name = text(o, "/metadata/name").to_string();
    let created = age(text(o, "/metadata/creationTimestamp"));
    let mut r = match kind {
        Kind::Machine => {
            let phase = if o.pointer("/metadata/deletionTimestamp").is_some() {
                "Terminating"
            } else {
                text(o, "/status/phase")
            };
            vec![
                name,
                or_dash(phase),
                or_dash(text(o, "/status/providerID")),
                or_dash(text(o, "/status/nodeName")),
                created,
            ]
        }
        Kind::MachineSet => vec![
            name,
            number(o, "/spec/replicas").to_string(),
            number(o, "/status/replicas").to_string(),
            number(o, "/status/readyReplicas").to_string(),
            created,
        ],
        Kind::MachineDeployment => vec![
            name,
            format!(
                "{}/{}",
                number(o, "/status/readyReplicas"),
                number(o, "/spec/replicas")
            ),
            number(o, "/status/updatedReplicas").to_string(),
            number(o, "/status/availableReplicas").to_string(),
            created,
        ],
        Kind::MachineClass => vec![
            name,
            text(o, "/provider").to_string(),
            or_dash(text(o, "/secretRef/name")),
            created,
        ],
        Kind::Secret => {
            let keys: Vec<&str> = o["keys"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let kind = match text(o, "/type") {
                "" => "Opaque",
                t => t,
            };
            vec![name, kind.to_string(), keys.join(","), created]
        }
    };
    if wide {
        let map: std::collections::BTreeMap<String, String> =
            serde_json::from_value(o["metadata"]["labels"].clone()).unwrap_or_default();
        let object_labels = labels(map.iter());
        match kind {
            Kind::Machine => {
                let addresses: Vec<&str> = o["status"]["addresses"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a["address"].as_str())
                    .collect();
                let last = match o.pointer("/status/lastOperation") {
                    Some(op) => format!("{} {}", text(op, "/type"), text(op, "/state")),
                    None => "-".into(),
                };
                r.extend([
                    or_dash(text(o, "/spec/class/name")),
                    or_dash(&addresses.join(",")),
                    last,
                    object_labels,
                ]);
            }
            Kind::MachineSet | Kind::MachineDeployment => {
                let selector = o["spec"]["selector"]["matchLabels"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_default();
                r.extend([
                    or_dash(text(o, "/spec/template/spec/class/name")),
                    or_dash(&selector),
                    object_labels,
                ]);
            }
            Kind::MachineClass | Kind::Secret => r.push(object_labels),
        }
    }
    r
}

fn or_dash(text: &str) -> String {
    if text.is_empty() {
        "-".into()
    } else {
        text.to_string()
    }
}

fn printable(kind: Kind, value: Value, items: &[Value], wide: bool) -> Printable {
    let mut p = Printable::new(
        &value,
        headers(kind, wide),
        items.iter().map(|o| row(kind, o, wide)).collect(),
    );
    p.names = items
        .iter()
        .map(|o| format!("{}/{}", lower(kind), text(o, "/metadata/name")))
        .collect();
    p
}

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

/// Follows the server's watch of `kind` from `version`, handing each event to `each` until it
/// says stop; resumes after each stream's end from the last version seen, and lists again when
/// that version is gone (410).
async fn follow(
    ctx: &Ctx,
    client: &Client,
    kind: Kind,
    namespace: &str,
    selector: Option<&str>,
    mut version: String,
    mut each: impl FnMut(&WatchEvent) -> bool,
) -> Result<(), CliError> {
    // Each stream ends before the client's own per-call limit would cut it.
    let per_stream = ctx
        .request_timeout
        .saturating_sub(Duration::from_secs(5))
        .as_secs()
        .clamp(1, 1800);
    loop {
        let mut watch = match client
            .watch(kind, namespace, selector, Some(&version), per_stream)
            .await
        {
            Ok(w) => w,
            Err(e) if e.http_status == Some(410) => {
                let list = client.list(kind, namespace, selector).await?;
                version = text(&list, "/metadata/resourceVersion").to_string();
                for item in list["items"].as_array().into_iter().flatten() {
                    let event = WatchEvent {
                        event: "MODIFIED".into(),
                        object: item.clone(),
                    };
                    if !each(&event) {
                        return Ok(());
                    }
                }
                continue;
            }
            Err(e) if matches!(e.http_status, Some(429 | 503) | None) => {
                eprintln!("watch: {}; looking again", e.status.message);
                tokio::time::sleep(e.retry_after.unwrap_or(Duration::from_secs(1))).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        loop {
            let event = match watch.next().await {
                Ok(Some(event)) => event,
                Ok(None) => break,
                Err(e) => {
                    eprintln!("watch: {}; looking again", e.status.message);
                    break;
                }
            };
            let seen = text(&event.object, "/metadata/resourceVersion");
            if !seen.is_empty() {
                version = seen.to_string();
            }
            match event.event.as_str() {
                "BOOKMARK" => {}
                // The watch fell behind: resume from a fresh list.
                "ERROR" => {
                    version = "0".into();
                    break;
                }
                _ => {
                    if !each(&event) {
                        return Ok(());
                    }
                }
            }
        }
        if version == "0" {
            let list = client.list(kind, namespace, selector).await?;
            version = text(&list, "/metadata/resourceVersion").to_string();
        }
    }
}

/// Prints watch events in the chosen form, columns sized once from the headers and the first rows
/// so later rows stay aligned.
struct EventPrinter {
    kind: Kind,
    output: Output,
    columns: Option<Columns>,
}

impl EventPrinter {
    fn new(kind: Kind, output: Output) -> Self {
        EventPrinter {
            kind,
            output,
            columns: None,
        }
    }

    /// Prints one event; false once the reader went away.
    fn print(&mut self, event: &str, object: &Value) -> bool {
        let wide = self.output.is_wide();
        let mut out = String::new();
        match self.output.shape {
            Shape::Table | Shape::Wide => {
                let mut cells = vec![event.to_string()];
                cells.extend(row(self.kind, object, wide));
                if self.columns.is_none() {
                    let mut header = vec!["EVENT"];
                    header.extend(headers(self.kind, wide));
                    let mut columns = Columns::default();
                    columns.fit(&header);
                    // Room for what the first rows hold and a little more.
                    let roomy: Vec<String> = cells.iter().map(|c| format!("{c}    ")).collect();
                    columns.fit(&roomy);
                    if self.output.headers {
                        out.push_str(&columns.line(&header));
                        out.push('\n');
                    }
                    self.columns = Some(columns);
                }
                if let Some(columns) = &self.columns {
                    out.push_str(&columns.line(&cells));
                    out.push('\n');
                }
            }
            Shape::Name => out.push_str(&format!(
                "{}/{}\n",
                lower(self.kind),
                text(object, "/metadata/name")
            )),
            Shape::JsonPath(template) => {
                if let Ok(template) = crate::jsonpath::Template::parse(template) {
                    out.push_str(&template.render(object));
                }
            }
            Shape::Json => {
                out.push_str(&json!({"type": event, "object": object}).to_string());
                out.push('\n');
            }
            Shape::Yaml => {
                out.push_str("---\n");
                out.push_str(
                    &serde_yaml::to_string(&json!({"type": event, "object": object}))
                        .unwrap_or_default(),
                );
            }
        }
        write_stdout(&out).is_ok()
    }
}

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
        super::until(
            &format!("{shown} to be gone"),
            args.wait.timeout,
            || async {
                match client.get(kind, &namespace, &name).await {
                    Err(e) if e.code() == Code::NotFound => Ok(super::Step::Done(())),
                    Ok(o) => Ok(super::Step::Pending {
                        after: Duration::from_secs(1),
                        state: format!("finalizers {}", o["metadata"]["finalizers"]),
                    }),
                    Err(e) => super::not_now(e),
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
    client
        .patch(
            kind,
            &namespace,
            &name,
            &json!({"spec": {"replicas": replicas}}),
        )
        .await?;
    say(output, &format!("{}/{name} scaled", lower(kind)));
    Ok(())
}

/// Where a deployment's roll stands: done, or what is still to happen. `class_generation` is
/// its class's generation when the command started: a class change rolls the machines without
/// changing the deployment's generation.
fn rollout_state(d: &Value, class_generation: Option<i64>) -> Result<(), String> {
    let want = number(d, "/spec/replicas");
    let observed = d
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let generation = d
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let observed_class = d
        .pointer("/status/observedClassGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if observed < generation || class_generation.is_some_and(|g| observed_class < g) {
        return Err("waiting for the controller to see the latest change".into());
    }
    let updated = number(d, "/status/updatedReplicas");
    let replicas = number(d, "/status/replicas");
    let available = number(d, "/status/availableReplicas");
    if updated < want {
        return Err(format!(
            "{updated} of {want} updated replicas are available"
        ));
    }
    if replicas > updated {
        return Err(format!(
            "{} old replicas are pending termination",
            replicas - updated
        ));
    }
    if available < updated {
        return Err(format!(
            "{available} of {updated} updated replicas are available"
        ));
    }
    Ok(())
}

/// `berth rollout status machinedeployment/NAME`: follows the deployment's watch until its roll is
/// complete, saying each step once.
pub async fn rollout_status(
    ctx: &Ctx,
    object: &ObjectRef,
    timeout: Duration,
) -> Result<(), CliError> {
    let (kind, name, namespace) = resolve(object)?;
    if kind != Kind::MachineDeployment {
        return Err(CliError::Usage(format!(
            "rollout status follows a machinedeployment, not a {}",
            lower(kind)
        )));
    }
    let client = Client::new(ctx.client());
    let current = client.get(kind, &namespace, &name).await?;
    // The class as it is now: a roll it started is not done until the controller saw it. A class
    // that is missing (or unreadable) leaves only the deployment's own generation to wait on.
    let class = text(&current, "/spec/template/spec/class/name").to_string();
    let class_generation = match class.is_empty() {
        true => None,
        false => client
            .get(Kind::MachineClass, &namespace, &class)
            .await
            .ok()
            .and_then(|c| c.pointer("/metadata/generation").and_then(Value::as_i64)),
    };
    let done = format!("machinedeployment {name:?} successfully rolled out");
    let mut last = String::new();
    let mut check = |d: &Value| match rollout_state(d, class_generation) {
        Ok(()) => true,
        Err(state) => {
            if state != last {
                println!("Waiting for machinedeployment {name:?} rollout to finish: {state}...");
                last = state;
            }
            false
        }
    };
    if check(&current) {
        println!("{done}");
        return Ok(());
    }
    let version = text(&current, "/metadata/resourceVersion").to_string();
    let started = Instant::now();
    let mut finished = false;
    let followed = follow(ctx, &client, kind, &namespace, None, version, |event| {
        if text(&event.object, "/metadata/name") != name {
            return true;
        }
        if event.event == "DELETED" {
            return false;
        }
        finished = check(&event.object);
        !finished
    });
    match tokio::time::timeout(timeout.saturating_sub(started.elapsed()), followed).await {
        Ok(result) => result?,
        Err(_) => {
            return Err(CliError::Local(Status::new(
                Code::DeadlineExceeded,
                format!(
                    "gave up waiting for machinedeployment {name:?} to roll out after {timeout:?} (a longer --timeout waits longer)"
                ),
            )));
        }
    }
    if finished {
        println!("{done}");
        Ok(())
    } else {
        Err(CliError::Local(Status::not_found(format!(
            "machinedeployment {name:?} was deleted during its roll"
        ))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_named_as_kubectl_names_them() {
        assert_eq!(kind_named("md"), Some(Kind::MachineDeployment));
        assert_eq!(kind_named("MachineSets"), Some(Kind::MachineSet));
        assert_eq!(kind_named("mcc"), Some(Kind::MachineClass));
        assert_eq!(kind_named("pods"), None);
    }

    #[test]
    fn a_roll_is_done_when_every_replica_is_updated_and_available() {
        let rollout_state_of = |d: &Value| rollout_state(d, None);
        let d = |generation: i64,
                 observed: i64,
                 want: u64,
                 replicas: u64,
                 updated: u64,
                 available: u64| {
            json!({"metadata": {"generation": generation}, "spec": {"replicas": want},
                   "status": {"observedGeneration": observed, "replicas": replicas,
                              "updatedReplicas": updated, "availableReplicas": available}})
        };
        assert!(
            rollout_state_of(&d(2, 1, 3, 3, 3, 3))
                .unwrap_err()
                .contains("latest change")
        );
        assert!(
            rollout_state_of(&d(2, 2, 3, 4, 1, 3))
                .unwrap_err()
                .contains("1 of 3 updated")
        );
        assert!(
            rollout_state_of(&d(2, 2, 3, 4, 3, 3))
                .unwrap_err()
                .contains("1 old replicas")
        );
        assert!(
            rollout_state_of(&d(2, 2, 3, 3, 3, 2))
                .unwrap_err()
                .contains("2 of 3")
        );
        rollout_state_of(&d(2, 2, 3, 3, 3, 3)).unwrap();
        // A class change: done only once the controller saw the class's new generation.
        let mut done = d(2, 2, 3, 3, 3, 3);
        done["status"]["observedClassGeneration"] = json!(4);
        assert!(
            rollout_state(&done, Some(5))
                .unwrap_err()
                .contains("latest change")
        );
        rollout_state(&done, Some(4)).unwrap();
    }
}
