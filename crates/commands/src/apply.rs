//! `berth apply -f`: Volumes, orchestrators and what the machine controller keeps, from YAML or JSON
//! files (or `-`, standard input), as `get -o yaml` prints them or as written by hand.
//!
//! Two passes, so a file is never half-applied for a mistake the CLI can see: the first reads every
//! document, expands lists (`items`), and checks each object's shape (its kind, apiVersion, the
//! fields it may carry, names, labels, a volume's capacity), sending nothing; the second writes
//! them in order, orchestrators and the controller's objects before the volumes that may name
//! them. When the server refuses one, apply stops there and says which document it was, what was
//! applied before it and what was not tried.
//!
//! A `metadata.resourceVersion` in a file (an orchestrator's `resourceVersion`) is a precondition,
//! as in kubectl: a file read before someone else's change is refused (409), not written over it.
//! Without one, a volume's labels are merged (the file's are set, others kept); with one, the file
//! is the whole truth and labels it lacks are removed.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::Path;

use client::controller::Client;
use domain::resources::Kind;
use domain::{Code, Status};
use serde_json::{Value, json};

use crate::args::{ApplyArgs, Output};
use crate::output::{Printable, print};
use crate::{CliError, Ctx};

/// The fields a Volume document may carry, at each level (what `get volume -o yaml` prints).
const VOLUME_FIELDS: &[&str] = &["apiVersion", "kind", "metadata", "spec", "status"];
const VOLUME_METADATA_FIELDS: &[&str] = &[
    "name",
    "namespace",
    "labels",
    "uid",
    "resourceVersion",
    "creationTimestamp",
];
const VOLUME_SPEC_FIELDS: &[&str] = &[
    "orchestrator",
    "capacity",
    "capacityBytes",
    "replicas",
    "parameters",
];
/// The fields an orchestrator document may carry (what `get orchestrator -o yaml` prints).
const ORCHESTRATOR_FIELDS: &[&str] = &[
    "name",
    "kind",
    "label",
    "region",
    "config",
    "default",
    "storageOps",
    "resourceVersion",
];

/// One object to write, checked.
enum Planned {
    /// Something the machine controller keeps, written with PUT.
    Object {
        kind: Kind,
        namespace: String,
        name: String,
        body: Value,
    },
    /// A volume: made, or its labels and capacity patched.
    Volume {
        namespace: String,
        name: String,
        doc: Value,
    },
    /// An orchestrator: registered with PUT.
    Orchestrator {
        name: String,
        doc: Value,
        precondition: Option<u64>,
    },
}

impl Planned {
    fn shown(&self) -> String {
        match self {
            Planned::Object { kind, name, .. } => {
                format!("{}/{name}", kind.as_str().to_ascii_lowercase())
            }
            Planned::Volume { name, .. } => format!("volume/{name}"),
            Planned::Orchestrator { name, .. } => format!("orchestrator/{name}"),
        }
    }

    /// The order of writing: orchestrators, then the controller's objects in the order that puts
    /// what one refers to first, then volumes.
    fn rank(&self) -> usize {
        match self {
            Planned::Orchestrator { .. } => 0,
            Planned::Object { kind, .. } => {
                1 + Kind::ALL.iter().position(|k| k == kind).unwrap_or(0)
            }
            Planned::Volume { .. } => 1 + Kind::ALL.len(),
        }
    }
}

/// `berth apply -f FILE…`: a line an object (`machineset/pool configured`), or with `-o`, the
/// objects as written (one, or a `List` of several, which applies back as it is).
pub async fn apply(ctx: &Ctx, output: Output, args: &ApplyArgs) -> Result<(), CliError> {
    let mut plan = Vec::new();
    for path in &args.files {
        for (n, doc) in read_documents(path)?.into_iter().enumerate() {
            let at = format!("{} (document {})", shown_path(path), n + 1);
            match doc.get("items") {
                Some(Value::Array(items)) if is_list(&doc) => {
                    for (i, item) in items.iter().enumerate() {
                        let at = format!("{at}, item {}", i + 1);
                        plan.push((at.clone(), planned(&at, item, args.namespace.as_ref())?));
                    }
                }
                _ => plan.push((at.clone(), planned(&at, &doc, args.namespace.as_ref())?)),
            }
        }
    }
    if plan.is_empty() {
        return Err(CliError::Usage(format!(
            "no objects to apply in {}",
            args.files
                .iter()
                .map(|p| shown_path(p))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    // Stable: objects of one rank keep the files' order.
    plan.sort_by_key(|(_, p)| p.rank());
    classes_after_what_they_roll(ctx, &mut plan).await;
    let mut written = Vec::new();
    for (i, (at, step)) in plan.iter().enumerate() {
        match write(ctx, step).await {
            Ok((outcome, _)) if output.is_table() => println!("{} {outcome}", step.shown()),
            Ok((_, object)) => written.push((step.shown(), object)),
            Err(e) => {
                // What was written before the refusal is printed still: a script reads what
                // happened from stdout, the refusal from stderr.
                print_written(written, output);
                let before: Vec<String> = plan[..i].iter().map(|(_, p)| p.shown()).collect();
                let after: Vec<String> = plan[i + 1..].iter().map(|(_, p)| p.shown()).collect();
                let list = |v: &[String]| {
                    if v.is_empty() {
                        "none".to_string()
                    } else {
                        v.join(", ")
                    }
                };
                eprintln!(
                    "apply stopped at {at}, {}: applied before it: {}; not tried: {}",
                    step.shown(),
                    list(&before),
                    list(&after)
                );
                return Err(e);
            }
        }
    }
    print_written(written, output);
    Ok(())
}

/// The objects apply wrote, in a form other than the table: one as itself, several as a `List`.
fn print_written(written: Vec<(String, Value)>, output: Output) {
    if written.is_empty() {
        return;
    }
    let names = written.iter().map(|(shown, _)| shown.clone()).collect();
    let mut objects: Vec<Value> = written.into_iter().map(|(_, object)| object).collect();
    let value = if objects.len() == 1 {
        objects.remove(0)
    } else {
        json!({"apiVersion": "v1", "kind": "List", "items": objects})
    };
    let mut printable = Printable::new(&value, Vec::new(), Vec::new());
    printable.names = names;
    print(&printable, output);
}

/// Moves the classes of `plan` that exist already after its machine sets and deployments. A class
/// change rolls the sets and deployments using it at once, under their strategy as stored: when the
/// same file also changes a deployment's `maxSurge`/`maxUnavailable`, the class written first
/// started the roll under the strategy the file was leaving (a break-it finding). A new class
/// stays first: what refers to it needs it there.
async fn classes_after_what_they_roll(ctx: &Ctx, plan: &mut Vec<(String, Planned)>) {
    let rolls = |p: &Planned| {
        matches!(
            p,
            Planned::Object {
                kind: Kind::MachineSet | Kind::MachineDeployment,
                ..
            }
        )
    };
    if !plan.iter().any(|(_, p)| rolls(p)) {
        return;
    }
    let client = Client::new(ctx.client());
    let mut existing = Vec::new();
    let mut i = 0;
    while i < plan.len() {
        let stored = match &plan[i].1 {
            Planned::Object {
                kind: Kind::MachineClass,
                namespace,
                name,
                ..
            } => client
                .get(Kind::MachineClass, namespace, name)
                .await
                .is_ok(),
            _ => false,
        };
        if stored {
            existing.push(plan.remove(i));
        } else {
            i += 1;
        }
    }
    let after = plan
        .iter()
        .rposition(|(_, p)| rolls(p))
        .map_or(plan.len(), |last| last + 1);
    plan.splice(after..after, existing);
}

fn shown_path(path: &Path) -> String {
    if path == Path::new("-") {
        "standard input".into()
    } else {
        path.display().to_string()
    }
}

/// The documents of a file, or of standard input for `-`.
fn read_documents(path: &Path) -> Result<Vec<Value>, CliError> {
    if path != Path::new("-") {
        return crate::read_structured(path);
    }
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| CliError::Usage(format!("standard input: {e}")))?;
    crate::parse_structured("standard input", &text)
}

/// A list as `get … -o yaml` prints one: `items`, and no name of its own.
fn is_list(doc: &Value) -> bool {
    doc.pointer("/metadata/name").is_none() && doc.get("name").is_none()
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn refused(at: &str, field: &str, rule: impl std::fmt::Display) -> CliError {
    CliError::Local(Status::invalid(&format!("{at}: {field}"), rule))
}

/// Every key of `object` (at `field`) is one of `allowed`; the first that is not is refused,
/// naming the one meant when it is a near miss.
fn only_known(at: &str, field: &str, object: &Value, allowed: &[&str]) -> Result<(), CliError> {
    let Some(map) = object.as_object() else {
        return Err(refused(at, field, "must be an object"));
    };
    for key in map.keys() {
        if !allowed.contains(&key.as_str()) {
            let named = if field.is_empty() {
                key.clone()
            } else {
                format!("{field}.{key}")
            };
            let hint = match domain::names::near_miss(key, allowed.iter().copied()) {
                Some(meant) => format!("not a field it has; did you mean {meant}?"),
                None => format!("not a field it has (it has {})", allowed.join(", ")),
            };
            return Err(refused(at, &named, hint));
        }
    }
    Ok(())
}

/// The namespace of an object: its own, or the flag's (which must agree), or `default`.
fn namespace_for(at: &str, doc: &Value, flag: Option<&String>) -> Result<String, CliError> {
    match (text(doc, "/metadata/namespace"), flag) {
        ("", Some(flag)) => Ok(flag.clone()),
        ("", None) => Ok(domain::volume::DEFAULT_NAMESPACE.to_string()),
        (ns, Some(flag)) if ns != flag => Err(CliError::Usage(format!(
            "{at}: metadata.namespace is {ns:?} but -n/--namespace says {flag:?}"
        ))),
        (ns, _) => Ok(ns.to_string()),
    }
}

/// A document checked and turned into what to write; nothing is sent.
fn planned(at: &str, doc: &Value, namespace_flag: Option<&String>) -> Result<Planned, CliError> {
    if !doc.is_object() {
        return Err(CliError::Usage(format!(
            "{at}: not an object (a YAML mapping or a JSON object)"
        )));
    }
    let kind_text = text(doc, "/kind");
    if kind_text == domain::volume::VOLUME_KIND {
        return planned_volume(at, doc, namespace_flag);
    }
    // An orchestrator keeps a flat shape: its `kind` is the orchestrator's kind (local, docker…).
    if doc.get("apiVersion").is_none()
        && doc.get("metadata").is_none()
        && domain::OrchestratorKind::parse_field("kind", kind_text).is_ok()
    {
        return planned_orchestrator(at, doc);
    }
    let kind = Kind::parse(kind_text).ok_or_else(|| {
        CliError::Usage(format!(
            "{at}: kind {kind_text:?} is not one apply writes: Volume, Secret, MachineClass, Machine, MachineSet, MachineDeployment, or an orchestrator ({{name, kind: local|docker|kubernetes, config}})"
        ))
    })?;
    // Checked here as the server checks it, so a file is not half-applied for it. Required, as
    // kubectl requires it (and apply requires it of a Volume): a file says what it was written
    // for, so one written for another API is refused rather than read as ours.
    match doc.get("apiVersion") {
        None => {
            return Err(refused(
                at,
                "apiVersion",
                format!(
                    "is missing: a {} is {}",
                    kind.as_str(),
                    domain::resources::API_VERSION
                ),
            ));
        }
        Some(Value::String(v)) if v == domain::resources::API_VERSION => {}
        Some(Value::String(v)) if v.starts_with("machine.sapcloud.io/") => {
            return Err(refused(
                at,
                "apiVersion",
                format!(
                    "{v} is MCM's, a driver request's (`berth machine create -f` takes those); apply's objects are {}",
                    domain::resources::API_VERSION
                ),
            ));
        }
        Some(other) => {
            return Err(refused(
                at,
                "apiVersion",
                format!(
                    "must be {} for a {}, not {other}",
                    domain::resources::API_VERSION,
                    kind.as_str()
                ),
            ));
        }
    }
    let name = text(doc, "/metadata/name").to_string();
    if name.is_empty() {
        return Err(refused(at, "metadata.name", "is missing"));
    }
    let namespace = namespace_for(at, doc, namespace_flag)?;
    // The server's own checks of any object's metadata (its namespace, its name for the kind,
    // labels, annotations), made before anything is sent: a bad name in a file's third object left the
    // first two written (a break-it finding).
    let meta: domain::machine::ObjectMeta =
        serde_json::from_value(doc["metadata"].clone()).map_err(|e| refused(at, "metadata", e))?;
    domain::names::validate_dns1123_label("metadata.namespace", &namespace)
        .and_then(|()| kind.check_write(&meta, "", "", &namespace))
        .map_err(|e| CliError::Local(Status::new(e.code, format!("{at}: {}", e.message))))?;
    Ok(Planned::Object {
        kind,
        namespace,
        name,
        body: writable(doc),
    })
}

fn planned_volume(
    at: &str,
    doc: &Value,
    namespace_flag: Option<&String>,
) -> Result<Planned, CliError> {
    let api_version = text(doc, "/apiVersion");
    if api_version != domain::resources::API_VERSION {
        return Err(refused(
            at,
            "apiVersion",
            format!(
                "must be {} for a Volume, not {api_version:?}",
                domain::resources::API_VERSION
            ),
        ));
    }
    only_known(at, "", doc, VOLUME_FIELDS)?;
    let metadata = doc.get("metadata").cloned().unwrap_or(json!({}));
    only_known(at, "metadata", &metadata, VOLUME_METADATA_FIELDS)?;
    let spec = doc.get("spec").cloned().unwrap_or(json!({}));
    only_known(at, "spec", &spec, VOLUME_SPEC_FIELDS)?;
    let name = text(doc, "/metadata/name").to_string();
    if name.is_empty() {
        return Err(refused(at, "metadata.name", "is missing"));
    }
    let namespace = namespace_for(at, doc, namespace_flag)?;
    let capacity = match spec.get("capacity") {
        None | Some(Value::Null) => return Err(refused(at, "spec.capacity", "is missing")),
        Some(Value::String(s)) => s.clone(),
        // YAML's `capacity: 1048576` is a number: a quantity of bytes, as Kubernetes reads one.
        Some(Value::Number(n)) => n.to_string(),
        Some(_) => {
            return Err(refused(
                at,
                "spec.capacity",
                "must be a quantity such as 10Gi",
            ));
        }
    };
    domain::quantity::Quantity::parse_field("spec.capacity", &capacity)
        .map_err(|e| refused(at, "spec.capacity", e.message))?;
    let labels = labels_of(at, doc)?;
    if let Some(version) = metadata.get("resourceVersion")
        && !version.is_string()
    {
        return Err(refused(
            at,
            "metadata.resourceVersion",
            "must be a string, as get prints it",
        ));
    }
    let mut doc = doc.clone();
    doc["spec"]["capacity"] = Value::String(capacity);
    doc["metadata"]["labels"] = json!(labels);
    Ok(Planned::Volume {
        namespace,
        name,
        doc,
    })
}

fn labels_of(at: &str, doc: &Value) -> Result<BTreeMap<String, String>, CliError> {
    let labels: domain::Labels = match doc.pointer("/metadata/labels") {
        None | Some(Value::Null) => Default::default(),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|_| refused(at, "metadata.labels", "must map each key to a string value"))?,
    };
    domain::names::validate_labels("metadata.labels", &labels)
        .map_err(|e| CliError::Local(Status::new(e.code, format!("{at}: {}", e.message))))?;
    Ok(labels.into_iter().collect())
}

fn planned_orchestrator(at: &str, doc: &Value) -> Result<Planned, CliError> {
    only_known(at, "", doc, ORCHESTRATOR_FIELDS)?;
    let name = text(doc, "/name").to_string();
    if name.is_empty() {
        return Err(refused(at, "name", "is missing"));
    }
    let precondition = match doc.get("resourceVersion") {
        None | Some(Value::Null) => None,
        // A string of digits, as get prints it (older Berths printed a number).
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().ok()
        }
        Some(_) => None,
    };
    let precondition = match (doc.get("resourceVersion"), precondition) {
        (None | Some(Value::Null), _) => None,
        (Some(_), Some(v)) => Some(v),
        (Some(_), None) => {
            return Err(refused(
                at,
                "resourceVersion",
                "must be a string of digits, as get prints it",
            ));
        }
    };
    Ok(Planned::Orchestrator {
        name,
        doc: doc.clone(),
        precondition,
    })
}

/// What apply sends of a controller object: no status, and of `metadata` only what a caller
/// writes, with `resourceVersion` as the precondition when the file has one.
fn writable(doc: &Value) -> Value {
    let mut body = doc.clone();
    if let Some(m) = body.as_object_mut() {
        m.remove("status");
        m.remove("keys");
    }
    // What the server keeps of its own goes; everything else is sent, a misspelt field included,
    // for the server to refuse by name (keeping only the fields apply knew dropped a `labells`
    // without a word: a break-it finding).
    if let Some(meta) = body["metadata"].as_object_mut() {
        for owned in [
            // The route names it (and apply has checked it agrees).
            "namespace",
            "uid",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "finalizers",
            "ownerReferences",
        ] {
            meta.remove(owned);
        }
    }
    body
}

/// Writes one planned object: what happened (`created`, `configured`, `unchanged`) and the object after.
async fn write(ctx: &Ctx, step: &Planned) -> Result<(&'static str, Value), CliError> {
    match step {
        Planned::Object {
            kind,
            namespace,
            name,
            body,
        } => write_object(ctx, *kind, namespace, name, body).await,
        Planned::Volume {
            namespace,
            name,
            doc,
        } => write_volume(ctx, namespace, name, doc).await,
        Planned::Orchestrator {
            name,
            doc,
            precondition,
        } => write_orchestrator(ctx, name, doc, *precondition).await,
    }
}

async fn write_object(
    ctx: &Ctx,
    kind: Kind,
    namespace: &str,
    name: &str,
    body: &Value,
) -> Result<(&'static str, Value), CliError> {
    let client = Client::new(ctx.client());
    let before = match client.get(kind, namespace, name).await {
        Ok(v) => Some(text(&v, "/metadata/resourceVersion").to_string()),
        Err(e) if e.code() == Code::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    let values_given = body.get("data").is_some() || body.get("stringData").is_some();
    // A new secret without values is sent as it is: the server refuses it, naming a misspelt
    // values field (`stringDatta`) where there is one rather than saying only that none came.
    if kind == Kind::Secret
        && !values_given
        && let Some(before) = before
    {
        // Its values stay as stored; the rest of the file (labels, annotations, and any field a
        // secret does not have, which the server refuses by name) is merged in.
        let after = client.patch(kind, namespace, name, body).await?;
        let outcome = if before.as_str() == text(&after, "/metadata/resourceVersion") {
            "unchanged (its values are write-only: give data or stringData to change them)"
        } else {
            "configured (its values kept: give data or stringData to change them)"
        };
        return Ok((outcome, after));
    }
    // A file's version names the object it was read from; one that is gone is made anew.
    let mut body = body.clone();
    if before.is_none()
        && let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.remove("resourceVersion");
    }
    let (after, created) = client.put(kind, namespace, name, &body).await?;
    let outcome = if created {
        "created"
    } else if before.as_deref() == Some(text(&after, "/metadata/resourceVersion")) {
        "unchanged"
    } else {
        "configured"
    };
    Ok((outcome, after))
}

/// A volume: made when it is not there; otherwise patched to the document (labels as the module
/// says, capacity grown), every other field sent as it is, so that one that differs is refused by
/// the service, naming it (a volume's spec cannot change).
async fn write_volume(
    ctx: &Ctx,
    namespace: &str,
    name: &str,
    doc: &Value,
) -> Result<(&'static str, Value), CliError> {
    let storage = client::storage::Client::new(ctx.client());
    let labels: BTreeMap<String, String> =
        serde_json::from_value(doc["metadata"]["labels"].clone()).unwrap_or_default();
    let current = match storage.get(namespace, name).await {
        Ok(v) => Some(v),
        Err(e) if e.code() == Code::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    let Some(current) = current else {
        let profile = domain::VolumeProvisionerProfile {
            name: name.to_string(),
            namespace: Some(namespace.to_string()),
            capacity: text(doc, "/spec/capacity").to_string(),
            orchestrator: doc
                .pointer("/spec/orchestrator")
                .and_then(Value::as_str)
                .map(str::to_string),
            replicas: doc
                .pointer("/spec/replicas")
                .and_then(Value::as_u64)
                .and_then(|r| u32::try_from(r).ok()),
            labels: Some(labels),
            parameters: doc
                .pointer("/spec/parameters")
                .map(|p| serde_json::from_value(p.clone()))
                .transpose()
                .map_err(|_| {
                    CliError::Local(Status::invalid(
                        &format!("volume/{name}: spec.parameters"),
                        "must map each key to a string value",
                    ))
                })?,
        };
        let (made, _) = storage.add(&profile).await?;
        return Ok(("created", to_value(&made)));
    };
    let precondition = doc.pointer("/metadata/resourceVersion").cloned();
    let mut label_patch: serde_json::Map<String, Value> = serde_json::Map::new();
    if precondition.is_some() {
        // The file is the whole truth as of its version: the labels it lacks go.
        label_patch.extend(
            current
                .metadata
                .labels
                .keys()
                .filter(|k| !labels.contains_key(*k))
                .map(|k| (k.clone(), Value::Null)),
        );
    }
    label_patch.extend(labels.into_iter().map(|(k, v)| (k, Value::String(v))));
    let mut metadata = json!({ "labels": label_patch });
    for field in ["uid", "resourceVersion"] {
        if let Some(v) = doc.pointer(&format!("/metadata/{field}")) {
            metadata[field] = v.clone();
        }
    }
    let patch = json!({ "metadata": metadata, "spec": doc["spec"].clone() });
    let after = storage.patch(namespace, name, &patch).await?;
    let outcome = if after.metadata.resource_version == current.metadata.resource_version {
        "unchanged"
    } else {
        "configured"
    };
    Ok((outcome, to_value(&after)))
}

/// An orchestrator: registered (PUT makes or replaces it; the same registration again changes
/// nothing). A `resourceVersion` the file gives must still be the registration's.
async fn write_orchestrator(
    ctx: &Ctx,
    name: &str,
    doc: &Value,
    precondition: Option<u64>,
) -> Result<(&'static str, Value), CliError> {
    let registry = client::registry::Client::new(ctx.client());
    let kind = domain::OrchestratorKind::parse_field("kind", text(doc, "/kind"))
        .map_err(CliError::Local)?;
    let optional_text = |field: &str| doc.get(field).and_then(Value::as_str).map(str::to_string);
    let before = match registry.get(name).await {
        Ok(o) => Some(o.resource_version),
        Err(e) if e.code() == Code::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    if let (Some(asked), Some(current)) = (precondition, before)
        && asked != current
    {
        return Err(CliError::Local(Status::new(
            Code::Aborted,
            format!(
                "orchestrator/{name}: resourceVersion: the file was read at {asked}, the registration is now at {current}; get it again and reapply"
            ),
        )));
    }
    let request = domain::orchestrator::RegisterOrchestrator {
        label: optional_text("label"),
        region: optional_text("region"),
        config: doc.get("config").cloned(),
        default: doc.get("default").and_then(Value::as_bool),
        ..domain::orchestrator::RegisterOrchestrator::new(kind)
    };
    let after = registry.register(name, &request).await?;
    let outcome = match before {
        None => "created",
        Some(v) if v == after.resource_version => "unchanged",
        Some(_) => "configured",
    };
    Ok((outcome, to_value(&after)))
}

fn to_value(object: &impl serde::Serialize) -> Value {
    serde_json::to_value(object).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_printed_by_get_applies_without_what_the_server_owns() {
        let printed = json!({
            "apiVersion": "berth.io/v1", "kind": "MachineSet",
            "metadata": {"name": "s", "namespace": "default", "uid": "u", "resourceVersion": "9",
                         "labels": {"a": "b"}, "finalizers": ["berth.io/owned"], "labells": {}},
            "spec": {"replicas": 2}, "status": {"replicas": 2}
        });
        let body = writable(&printed);
        // The version stays: it is the precondition of the PUT. A field the object does not have
        // stays too, for the server to refuse by name.
        assert_eq!(
            body["metadata"],
            json!({"name": "s", "labels": {"a": "b"}, "resourceVersion": "9", "labells": {}})
        );
        assert!(body.get("status").is_none());
        assert_eq!(body["spec"]["replicas"], 2);
    }

    fn volume(extra: Value) -> Value {
        let mut doc = json!({
            "apiVersion": "berth.io/v1", "kind": "Volume",
            "metadata": {"name": "v"}, "spec": {"capacity": "1Gi"}
        });
        merge(&mut doc, extra);
        doc
    }

    fn merge(doc: &mut Value, patch: Value) {
        if let (Some(d), Value::Object(p)) = (doc.as_object_mut(), patch) {
            for (k, v) in p {
                match (d.get_mut(&k), v) {
                    (Some(existing @ Value::Object(_)), v @ Value::Object(_)) => merge(existing, v),
                    (_, v) => {
                        d.insert(k, v);
                    }
                }
            }
        }
    }

    fn refusal(doc: Value) -> String {
        match planned("f (document 1)", &doc, None) {
            Ok(_) => panic!("accepted {doc}"),
            Err(CliError::Local(s)) => s.message,
            Err(CliError::Usage(m)) => m,
            Err(e) => panic!("{e:?}"),
        }
    }

    #[test]
    fn a_controller_object_of_another_api_version_is_refused_before_anything_is_sent() {
        let class = |version: Value| {
            json!({"apiVersion": version, "kind": "MachineClass", "metadata": {"name": "c"},
                   "provider": "Alicloud", "providerSpec": {}, "secretRef": {"name": "s"}})
        };
        assert!(planned("f", &class(json!("berth.io/v1")), None).is_ok());
        assert!(refusal(class(json!("berth.io/v2"))).contains("apiVersion: must be berth.io/v1"));
        assert!(refusal(class(json!(1))).contains("apiVersion: must be berth.io/v1"));
        let mut without = class(json!(""));
        without.as_object_mut().unwrap().remove("apiVersion");
        let said = refusal(without);
        assert!(
            said.contains("apiVersion: is missing: a MachineClass is berth.io/v1"),
            "{said}"
        );
        assert!(
            refusal(class(json!("machine.sapcloud.io/v1alpha1")))
                .contains("berth machine create -f")
        );
    }

    #[test]
    fn a_controller_objects_name_and_labels_are_checked_before_anything_is_sent() {
        let object = |kind: &str, metadata: Value| {
            json!({"apiVersion": "berth.io/v1", "kind": kind, "metadata": metadata,
                   "stringData": {"k": "v"}})
        };
        assert!(planned("f", &object("Secret", json!({"name": "ok"})), None).is_ok());
        for (doc, said) in [
            (
                object("Secret", json!({"name": "Bad_Name"})),
                "f (document 1): metadata.name: ",
            ),
            (
                object("Secret", json!({"name": "s", "labels": {"bad label": "x"}})),
                "f (document 1): metadata.labels",
            ),
            (
                object("MachineDeployment", json!({"name": "d".repeat(47)})),
                "a MachineDeployment name is at most 46 characters",
            ),
            (
                object("Secret", json!({"name": "s", "labels": ["a"]})),
                "f (document 1): metadata: ",
            ),
            (
                object("Secret", json!({"name": "s", "namespace": "Team_A"})),
                "f (document 1): metadata.namespace: ",
            ),
        ] {
            let refused = refusal(doc);
            assert!(refused.contains(said), "{refused}");
        }
    }

    #[test]
    fn a_volume_is_checked_before_anything_is_sent() {
        assert!(planned("f", &volume(json!({})), None).is_ok());
        for (doc, said) in [
            (volume(json!({"apiVersion": "berth.io/v2"})), "apiVersion"),
            (volume(json!({"apiVersion": null})), "apiVersion"),
            (volume(json!({"foo": 1})), "foo: not a field"),
            (volume(json!({"spec": {"size": "5Gi"}})), "spec.size"),
            (
                volume(json!({"metadata": {"annotations": {"a": "b"}}})),
                "metadata.annotations",
            ),
            (
                volume(json!({"spec": {"capacity": "-1Mi"}})),
                "spec.capacity",
            ),
            (
                volume(json!({"spec": {"capacity": null}})),
                "spec.capacity: is missing",
            ),
            (
                volume(json!({"metadata": {"labels": {"a b": "c"}}})),
                "metadata.labels",
            ),
            (
                volume(json!({"metadata": {"resourceVersion": 7}})),
                "resourceVersion",
            ),
        ] {
            let message = refusal(doc.clone());
            assert!(message.contains(said), "{doc}: {message}");
        }
        // A misspelt field names the one meant.
        assert!(
            refusal(volume(json!({"spec": {"capacty": "1Gi"}}))).contains("did you mean capacity?")
        );
        // A YAML number is a quantity of bytes.
        match planned("f", &volume(json!({"spec": {"capacity": 1048576}})), None).unwrap() {
            Planned::Volume { doc, .. } => assert_eq!(doc["spec"]["capacity"], "1048576"),
            _ => panic!("not a volume"),
        }
    }

    #[test]
    fn an_orchestrator_is_known_by_its_flat_shape() {
        let hand_written = json!({"name": "fast", "kind": "local", "config": {"basePath": "/srv"}});
        assert!(matches!(
            planned("f", &hand_written, None).unwrap(),
            Planned::Orchestrator {
                precondition: None,
                ..
            }
        ));
        let printed = json!({"name": "fast", "kind": "local", "config": {}, "storageOps": true,
                             "default": false, "label": "", "region": "", "resourceVersion": "4"});
        assert!(matches!(
            planned("f", &printed, None).unwrap(),
            Planned::Orchestrator {
                precondition: Some(4),
                ..
            }
        ));
        assert!(
            refusal(json!({"name": "fast", "kind": "local", "confg": {}}))
                .contains("did you mean config?")
        );
        assert!(
            refusal(json!({"kind": "Widget", "metadata": {"name": "w"}}))
                .contains("an orchestrator")
        );
    }
}
