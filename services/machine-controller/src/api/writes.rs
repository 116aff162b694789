//! The handlers that write (create, replace, patch, delete) and the steps they share: apart
//! from the reads because each goes through the writer's checks and the store's preconditions.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use domain::resources::Kind;
use domain::{Code, Status};
use serde_json::{Value, json};
use service_kit::ApiError;
use service_kit::tenancy::Caller;

use super::AppState;
use super::checks::{
    answer, check_name, check_namespace, check_shape, not_found, refuse_foreign_namespace,
};
use super::reads::visible;
use crate::objects::{merge_patch, replacement};
use crate::store::{Stored, Written};

pub(crate) async fn create(
    state: AppState,
    caller: Caller,
    kind: Kind,
    namespace: String,
    raw: Value,
) -> Result<Response, ApiError> {
    check_namespace(&namespace)?;
    check_shape(&raw)?;
    let name = raw["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    caller.audit_object(format!("{namespace}/{}/{name}", kind.plural()));
    refuse_foreign_namespace(&caller, &namespace)?;
    let prepared = state.writer.prepare(kind, &namespace, &raw).await?;
    let stored = insert(
        &state,
        kind,
        &namespace,
        prepared.body,
        prepared.values.as_ref(),
    )
    .await?;
    let mut response = answer(StatusCode::CREATED, &stored);
    if let Ok(location) = HeaderValue::from_str(&format!(
        "/v1/namespaces/{namespace}/{}/{name}",
        kind.plural()
    )) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// Stores a new object with the finalizers of its kind. A secret's values are sealed for its uid,
/// so its uid is chosen here and handed to the store with them: one write, one ADDED.
async fn insert(
    state: &AppState,
    kind: Kind,
    namespace: &str,
    mut body: Value,
    values: Option<&crate::seal::SecretValues>,
) -> Result<Stored, ApiError> {
    let mut finalizers = Vec::new();
    match kind {
        Kind::Machine => finalizers.push(domain::resources::MACHINE_FINALIZER),
        Kind::MachineSet | Kind::MachineDeployment => {
            finalizers.push(domain::resources::OWNER_FINALIZER);
        }
        _ => {}
    }
    if !finalizers.is_empty() {
        body["metadata"]["finalizers"] = json!(finalizers);
    }
    let sealed = match values {
        Some(values) => {
            let uid = uuid::Uuid::new_v4().to_string();
            body["metadata"]["uid"] = json!(uid);
            let name = body["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            Some(state.writer.seal(values, namespace, &name, &uid)?)
        }
        None => None,
    };
    Ok(state
        .writer
        .store
        .create(kind, namespace, body, sealed)
        .await?)
}

/// Replaces an object (or makes it: PUT is how `apply` writes whether or not it exists).
pub(crate) async fn put(
    state: AppState,
    caller: Caller,
    kind: Kind,
    namespace: String,
    name: String,
    raw: Value,
) -> Result<Response, ApiError> {
    check_namespace(&namespace)?;
    check_name(&name)?;
    check_shape(&raw)?;
    caller.audit_object(format!("{namespace}/{}/{name}", kind.plural()));
    if raw["metadata"]
        .get("name")
        .is_some_and(|n| n.as_str() != Some(name.as_str()))
    {
        return Err(ApiError::new(Status::invalid(
            "metadata.name",
            "must be the name in the path (or absent)",
        )));
    }
    let mut raw = raw;
    raw["metadata"]["name"] = json!(name);
    refuse_foreign_namespace(&caller, &namespace)?;
    let precondition = raw["metadata"]["resourceVersion"]
        .as_str()
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    let mut current = state.writer.store.get(kind, &namespace, &name).await?;
    // Two applies of one new object race: both read nothing, and the second create finds the
    // name taken. A PUT without a resourceVersion means "make it so", so the loser replaces what
    // the winner made rather than answering 409 (a break-it run: 6 of 18 concurrent applies
    // failed, saying a retry would not help). Once only: a writer that deletes it in between is
    // answered as it is.
    let mut lost_a_race = false;
    loop {
        // Said before the body is checked against the new provider's rules, which would only
        // complain of the fields that provider does not know.
        if let Some(current) = &current {
            check_uid(&raw, current)?;
            check_unchangeable(kind, &current.body, &raw).map_err(ApiError::new)?;
        }
        let prepared = state.writer.prepare(kind, &namespace, &raw).await?;
        let Some(current) = &current else {
            if precondition.is_some() {
                return Err(not_found(kind, &namespace, &name));
            }
            match insert(
                &state,
                kind,
                &namespace,
                prepared.body,
                prepared.values.as_ref(),
            )
            .await
            {
                Ok(stored) => return Ok(answer(StatusCode::CREATED, &stored)),
                Err(e) if !lost_a_race && e.status().code == Code::AlreadyExists => {
                    lost_a_race = true;
                    current = state.writer.store.get(kind, &namespace, &name).await?;
                    continue;
                }
                Err(e) => return Err(e),
            }
        };
        let written = replace(
            &state,
            kind,
            &namespace,
            current,
            prepared,
            precondition.as_deref(),
        )
        .await?;
        return Ok(answer(StatusCode::OK, written.object()));
    }
}

async fn replace(
    state: &AppState,
    kind: Kind,
    namespace: &str,
    current: &Stored,
    prepared: crate::objects::Prepared,
    precondition: Option<&str>,
) -> Result<Written, ApiError> {
    if current.body["metadata"].get("deletionTimestamp").is_some() {
        return Err(ApiError::new(Status::new(
            Code::FailedPrecondition,
            format!(
                "{kind} {:?} is being deleted; wait until it is gone",
                current.name()
            ),
        )));
    }
    // The same values sealed again differ byte for byte (a fresh nonce): an unchanged apply
    // keeps the stored ones, so it changes nothing.
    let sealed = match &prepared.values {
        Some(values) if state.writer.open(namespace, current).ok().as_ref() != Some(values) => {
            Some(
                state
                    .writer
                    .seal(values, namespace, current.name(), current.uid())?,
            )
        }
        _ => None,
    };
    let uid = current.uid().to_string();
    let body = prepared.body;
    let written = state
        .writer
        .store
        .update(
            kind,
            namespace,
            current.name(),
            Some(&uid),
            precondition,
            move |stored, stored_sealed| {
                check_unchangeable(kind, stored, &body)?;
                let next = replacement(&body, stored);
                *stored = next;
                if let Some(sealed) = sealed {
                    *stored_sealed = Some(sealed);
                }
                Ok(())
            },
        )
        .await?;
    Ok(written)
}

/// A `metadata.uid` sent with a replace or a patch is a precondition, as in Kubernetes: the object
/// read may have been deleted and made anew under its name since, and what was meant for it must
/// not land on the new one. (It was dropped in silence: a break-it finding.)
fn check_uid(sent: &Value, current: &Stored) -> Result<(), ApiError> {
    match sent["metadata"].get("uid") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(uid)) if uid.is_empty() || uid == current.uid() => Ok(()),
        Some(Value::String(_)) => Err(ApiError::new(Status::new(
            Code::Aborted,
            format!(
                "metadata.uid: is not the uid of {} {:?}, which was made anew since it was read; read it again",
                current.kind,
                current.name()
            ),
        ))),
        Some(_) => Err(ApiError::new(Status::invalid(
            "metadata.uid",
            "must be a string (the uid a read answered), or absent",
        ))),
    }
}

/// Refuses changing what a VM was made from. A class's provider, or a machine's class, changed
/// under a machine with a VM sent its status checks and its delete to the other provider, which
/// could never find that VM: the machine was wedged in Terminating, its VM left running (a
/// break-it finding). A new class, or a new machine, does what such a change meant; a deployment
/// rolls its machines onto a changed template.
fn check_unchangeable(kind: Kind, stored: &Value, next: &Value) -> Result<(), Status> {
    let (field, before, after, rule) = match kind {
        Kind::MachineClass => (
            "provider",
            &stored["provider"],
            &next["provider"],
            "cannot be changed: the class's machines were made by this provider; make a new class",
        ),
        Kind::Machine => (
            "spec.class.name",
            &stored["spec"]["class"]["name"],
            &next["spec"]["class"]["name"],
            "cannot be changed: a machine keeps the class its VM was made from; make a new machine, or change a MachineDeployment's template, which rolls its machines",
        ),
        _ => return Ok(()),
    };
    // Absent: the body's own checks say it is required.
    if before == after || after.is_null() {
        return Ok(());
    }
    Err(Status::invalid(field, rule))
}

/// Changes an object by a JSON merge patch (RFC 7386) of what a read answers. A secret's values
/// are merged with the stored ones (a key set to `null` in `stringData` or `data` goes).
pub(crate) async fn patch(
    state: AppState,
    caller: Caller,
    kind: Kind,
    namespace: String,
    name: String,
    patch: Value,
) -> Result<Response, ApiError> {
    caller.audit_object(format!("{namespace}/{}/{name}", kind.plural()));
    if !patch.is_object() {
        return Err(ApiError::new(Status::invalid(
            "body",
            "a merge patch must be a JSON object (RFC 7396)",
        )));
    }
    let current = visible(&state, &caller, kind, &namespace, &name).await?;
    check_uid(&patch, &current)?;
    let mut merged = current.body.clone();
    if kind == Kind::Secret {
        let values = state
            .writer
            .open(&namespace, &current)
            .map_err(ApiError::new)?;
        merged["data"] = json!(values.data);
        merged["stringData"] = json!(values.string_data);
        if let Some(m) = merged.as_object_mut() {
            m.remove("keys");
        }
        // A reader sees one list of keys, not which of the two maps wrote each: a key patched to
        // null under either is gone from both, as Kubernetes removes `data.KEY: null`. (Removed
        // from `data` alone, a key written as stringData stayed, and the patch answered 200: a
        // break-it finding.)
        for field in ["data", "stringData"] {
            let Some(asked) = patch.get(field).and_then(Value::as_object) else {
                continue;
            };
            for (key, _) in asked.iter().filter(|(_, v)| v.is_null()) {
                for held in ["data", "stringData"] {
                    if let Some(values) = merged[held].as_object_mut() {
                        values.remove(key);
                    }
                }
            }
        }
    }
    merge_patch(&mut merged, &patch);
    check_shape(&merged)?;
    check_unchangeable(kind, &current.body, &merged).map_err(ApiError::new)?;
    if merged["metadata"]["name"] != json!(name) {
        return Err(ApiError::new(Status::invalid(
            "metadata.name",
            "cannot be changed",
        )));
    }
    // Said as a PUT says it: the patch's namespace is dropped below, and must not be in silence.
    if let Some(asked) = patch["metadata"].get("namespace")
        && !asked.is_null()
        && asked.as_str() != Some(namespace.as_str())
        && asked.as_str() != Some("")
    {
        return Err(ApiError::new(Status::invalid(
            "metadata.namespace",
            "must be the namespace of the route (or absent)",
        )));
    }
    let precondition = patch["metadata"]["resourceVersion"]
        .as_str()
        .map(str::to_string);
    // What a read answered and the caller did not touch is not the caller's to send again.
    for field in [
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "finalizers",
        "ownerReferences",
        "namespace",
        "deletionTimestamp",
    ] {
        if let Some(m) = merged["metadata"].as_object_mut() {
            m.remove(field);
        }
    }
    if let Some(m) = merged.as_object_mut() {
        m.remove("status");
    }
    let prepared = state.writer.prepare(kind, &namespace, &merged).await?;
    let written = replace(
        &state,
        kind,
        &namespace,
        &current,
        prepared,
        precondition.as_deref(),
    )
    .await?;
    Ok(answer(StatusCode::OK, written.object()))
}

pub(crate) async fn delete(
    state: AppState,
    caller: Caller,
    kind: Kind,
    namespace: String,
    name: String,
) -> Result<Response, ApiError> {
    caller.audit_object(format!("{namespace}/{}/{name}", kind.plural()));
    let current = visible(&state, &caller, kind, &namespace, &name).await?;
    state.writer.check_unused(kind, &namespace, &name).await?;
    let written = state
        .writer
        .store
        .delete(kind, &namespace, &name, Some(current.uid()), None)
        .await?;
    Ok(answer(StatusCode::OK, written.object()))
}
