//! The HTTP API: for each kind, `GET`/`POST /v1/namespaces/{namespace}/{plural}` and `GET`, `PUT`,
//! `PATCH` (JSON merge patch), `DELETE` on `.../{name}`, with Kubernetes' semantics; a list with
//! `watch=true` streams changes ([`crate::stream`]).
//!
//! The handlers are written once, over the kind; [`kind_routes!`] stamps out each kind's documented
//! operations, which only name the kind and its schema.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use domain::resources::{API_VERSION, Kind};
use domain::{Code, Status, names};
use serde::Deserialize;
use serde_json::{Value, json};
use service_kit::ApiError;
use service_kit::extract::{Json, Path, Query};
use service_kit::tenancy::Caller;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::objects::{Writer, merge_patch, replacement};
use crate::store::{Stored, Written};

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    /// Writes, checks and the store.
    pub writer: Writer,
    /// The operator's limits on watches, and the permits of the open ones.
    pub watch: service_kit::watch::WatchLimits,
}

/// The query of a list.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only objects whose labels match (`a=b,c!=d,e in (f,g)`).
    pub(crate) label_selector: Option<String>,
    /// Stream changes (newline-delimited JSON events) instead of answering a list.
    pub(crate) watch: Option<bool>,
    /// With `watch`: the version to stream changes after (the list's `metadata.resourceVersion`);
    /// absent or `0`, every current object is sent as ADDED first. Too old: 410.
    #[param(pattern = "^(0|[1-9][0-9]{0,19})?$")]
    pub(crate) resource_version: Option<String>,
    /// With `watch`: how long to stream, in seconds (at most 1800, the default).
    #[param(minimum = 1, maximum = 1800)]
    pub(crate) timeout_seconds: Option<u64>,
    /// Accepted for Kubernetes clients; BOOKMARK heartbeats are always sent.
    pub(crate) allow_watch_bookmarks: Option<bool>,
}

fn check_namespace(namespace: &str) -> Result<(), ApiError> {
    names::validate_dns1123_label("namespace", namespace).map_err(ApiError::new)
}

fn check_name(name: &str) -> Result<(), ApiError> {
    names::validate_dns1123_label("name", name).map_err(ApiError::new)
}

fn not_found(kind: Kind, namespace: &str, name: &str) -> ApiError {
    ApiError::new(Status::not_found(format!(
        "{kind} {name:?} not found in namespace {namespace:?}"
    )))
}

fn answer(status: StatusCode, stored: &Stored) -> Response {
    let mut response = (status, Json(stored.body.clone())).into_response();
    if let Ok(tag) = HeaderValue::from_str(&format!("\"{}\"", stored.resource_version)) {
        response.headers_mut().insert(header::ETAG, tag);
    }
    response
}

pub(crate) async fn list(
    state: AppState,
    caller: Caller,
    draining: service_kit::watch::Draining,
    kind: Kind,
    namespace: String,
    query: ListQuery,
) -> Result<Response, ApiError> {
    check_namespace(&namespace)?;
    service_kit::watch::check_timeout(query.timeout_seconds)?;
    // Spelled right or refused, watch or not, as the document's pattern says.
    service_kit::watch::parse_resource_version(query.resource_version.as_deref())?;
    let selector: domain::Selector = query
        .label_selector
        .as_deref()
        .unwrap_or_default()
        .parse()
        .map_err(ApiError::new)?;
    if query.watch.unwrap_or(false) {
        let _ = query.allow_watch_bookmarks;
        return crate::stream::watch(&state, &caller, draining, kind, namespace, selector, query)
            .await;
    }
    let (objects, version) = if caller.allows(&namespace) {
        state.writer.store.list(kind, Some(&namespace)).await?
    } else {
        // Another namespace's objects are answered as if there were none.
        (Vec::new(), 0)
    };
    let items: Vec<Value> = objects
        .into_iter()
        .filter(|o| selector.matches(&labels_of(&o.body)))
        .map(|o| o.body)
        .collect();
    Ok(Json(json!({
        "apiVersion": API_VERSION,
        "kind": format!("{kind}List"),
        "metadata": {"resourceVersion": version.to_string()},
        "items": items,
    }))
    .into_response())
}

/// An object's labels.
pub(crate) fn labels_of(body: &Value) -> domain::Labels {
    serde_json::from_value(body["metadata"]["labels"].clone()).unwrap_or_default()
}

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
    let prepared = state.writer.prepare(kind, &namespace, &raw).await?;
    if !caller.allows(&namespace) {
        return Err(not_found(kind, &namespace, &name));
    }
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

async fn visible(
    state: &AppState,
    caller: &Caller,
    kind: Kind,
    namespace: &str,
    name: &str,
) -> Result<Stored, ApiError> {
    check_namespace(namespace)?;
    check_name(name)?;
    if !caller.allows(namespace) {
        return Err(not_found(kind, namespace, name));
    }
    state
        .writer
        .store
        .get(kind, namespace, name)
        .await?
        .ok_or_else(|| not_found(kind, namespace, name))
}

pub(crate) async fn get(
    state: AppState,
    caller: Caller,
    kind: Kind,
    namespace: String,
    name: String,
) -> Result<Response, ApiError> {
    let stored = visible(&state, &caller, kind, &namespace, &name).await?;
    Ok(answer(StatusCode::OK, &stored))
}

/// What every write's body must be before anything reads into it: a JSON object whose
/// `metadata`, when present, is an object too.
fn check_shape(body: &Value) -> Result<(), ApiError> {
    if !body.is_object() {
        return Err(ApiError::new(Status::invalid(
            "body",
            "must be a JSON object",
        )));
    }
    match body.get("metadata") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err(ApiError::new(Status::invalid(
            "metadata",
            "must be an object",
        ))),
    }
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
    let prepared = state.writer.prepare(kind, &namespace, &raw).await?;
    if !caller.allows(&namespace) {
        return Err(not_found(kind, &namespace, &name));
    }
    let precondition = raw["metadata"]["resourceVersion"]
        .as_str()
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    let Some(current) = state.writer.store.get(kind, &namespace, &name).await? else {
        if precondition.is_some() {
            return Err(not_found(kind, &namespace, &name));
        }
        let stored = insert(
            &state,
            kind,
            &namespace,
            prepared.body,
            prepared.values.as_ref(),
        )
        .await?;
        return Ok(answer(StatusCode::CREATED, &stored));
    };
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
            |stored, stored_sealed| {
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
    }
    merge_patch(&mut merged, &patch);
    check_shape(&merged)?;
    if merged["metadata"]["name"] != json!(name) {
        return Err(ApiError::new(Status::invalid(
            "metadata.name",
            "cannot be changed",
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

/// One kind's documented operations, each a line that hands the kind to the shared handler.
macro_rules! kind_routes {
    ($module:ident, $kind:expr, $schema:ty, $tag:tt, $singular:tt, $collection:tt, $item:tt) => {
        pub(crate) mod $module {
            use super::*;

            #[doc = concat!("Lists the namespace's ", $tag, "; with `watch=true`, streams their changes.")]
            #[utoipa::path(get, path = $collection, tag = $tag, operation_id = concat!("listNamespaced", $singular),
                params(("namespace" = String, Path, description = "The namespace, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63), ListQuery),
                responses(
                    (status = 200, description = "The list (`items`, `metadata.resourceVersion`), or with watch=true a stream of newline-delimited events `{type, object}`", content((Value = "application/json"), (Value = "application/x-ndjson"))),
                    (status = 400, description = "A bad namespace, selector or resourceVersion (code 3)", body = service_kit::error::Problem),
                    (status = 410, description = "watch: the resourceVersion is older than the changes kept; list again (code 11)", body = service_kit::error::Problem),
                    (status = 429, description = "watch: too many watches open (code 8)", body = service_kit::error::Problem),
                ))]
            pub(crate) async fn list(State(state): State<AppState>, caller: Caller, draining: service_kit::watch::Draining, Path(namespace): Path<String>, Query(query): Query<ListQuery>) -> Result<Response, ApiError> {
                super::list(state, caller, draining, $kind, namespace, query).await
            }

            #[doc = concat!("Makes one of the namespace's ", $tag, ".")]
            #[utoipa::path(post, path = $collection, tag = $tag, operation_id = concat!("createNamespaced", $singular),
                params(("namespace" = String, Path, description = "The namespace, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63)),
                request_body = $schema,
                responses(
                    (status = 201, description = "Made", body = $schema),
                    (status = 400, description = "A bad field (code 3), named", body = service_kit::error::Problem),
                    (status = 404, description = "The caller may not act in the namespace (code 5)", body = service_kit::error::Problem),
                    (status = 409, description = "The name is taken (code 6)", body = service_kit::error::Problem),
                    (status = 412, description = "What it refers to is missing, or the operator's ceilings refuse it (code 9)", body = service_kit::error::Problem),
                ))]
            pub(crate) async fn create(State(state): State<AppState>, caller: Caller, Path(namespace): Path<String>, Json(raw): Json<Value>) -> Result<Response, ApiError> {
                super::create(state, caller, $kind, namespace, raw).await
            }

            #[doc = concat!("Reads one of the namespace's ", $tag, ".")]
            #[utoipa::path(get, path = $item, tag = $tag, operation_id = concat!("readNamespaced", $singular),
                params(("namespace" = String, Path, description = "The namespace, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63), ("name" = String, Path, description = "The name, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63)),
                responses(
                    (status = 200, description = "The object", body = $schema),
                    (status = 404, description = "No such object (code 5)", body = service_kit::error::Problem),
                ))]
            pub(crate) async fn get(State(state): State<AppState>, caller: Caller, Path((namespace, name)): Path<(String, String)>) -> Result<Response, ApiError> {
                super::get(state, caller, $kind, namespace, name).await
            }

            #[doc = concat!("Replaces (or makes) one of the namespace's ", $tag, "; `metadata.resourceVersion`, when sent, must be the current one.")]
            #[utoipa::path(put, path = $item, tag = $tag, operation_id = concat!("replaceNamespaced", $singular),
                params(("namespace" = String, Path, description = "The namespace, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63), ("name" = String, Path, description = "The name, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63)),
                request_body = $schema,
                responses(
                    (status = 200, description = "Replaced", body = $schema),
                    (status = 201, description = "Made", body = $schema),
                    (status = 400, description = "A bad field (code 3), named", body = service_kit::error::Problem),
                    (status = 404, description = "No such object to replace at that resourceVersion, or a namespace the caller may not act in (code 5)", body = service_kit::error::Problem),
                    (status = 409, description = "resourceVersion is not the current one (code 10)", body = service_kit::error::Problem),
                    (status = 412, description = "It is being deleted, or what it refers to is missing (code 9)", body = service_kit::error::Problem),
                ))]
            pub(crate) async fn put(State(state): State<AppState>, caller: Caller, Path((namespace, name)): Path<(String, String)>, Json(raw): Json<Value>) -> Result<Response, ApiError> {
                super::put(state, caller, $kind, namespace, name, raw).await
            }

            #[doc = concat!("Changes one of the namespace's ", $tag, " by a JSON merge patch (RFC 7386).")]
            #[utoipa::path(patch, path = $item, tag = $tag, operation_id = concat!("patchNamespaced", $singular),
                params(("namespace" = String, Path, description = "The namespace, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63), ("name" = String, Path, description = "The name, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63)),
                request_body(content = Value, content_type = "application/merge-patch+json"),
                responses(
                    (status = 200, description = "Changed", body = $schema),
                    (status = 400, description = "A bad field (code 3), named", body = service_kit::error::Problem),
                    (status = 404, description = "No such object (code 5)", body = service_kit::error::Problem),
                    (status = 409, description = "metadata.resourceVersion in the patch is not the current one (code 10)", body = service_kit::error::Problem),
                    (status = 412, description = "It is being deleted, or what it refers to is missing (code 9)", body = service_kit::error::Problem),
                ))]
            pub(crate) async fn patch(State(state): State<AppState>, caller: Caller, Path((namespace, name)): Path<(String, String)>, Json(raw): Json<Value>) -> Result<Response, ApiError> {
                super::patch(state, caller, $kind, namespace, name, raw).await
            }

            #[doc = concat!("Deletes one of the namespace's ", $tag, ": at once, or once its finalizers are done (its VM deleted, what it owns gone).")]
            #[utoipa::path(delete, path = $item, tag = $tag, operation_id = concat!("deleteNamespaced", $singular),
                params(("namespace" = String, Path, description = "The namespace, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63), ("name" = String, Path, description = "The name, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63)),
                responses(
                    (status = 200, description = "Deleted, or marked (metadata.deletionTimestamp) until its finalizers are done", body = $schema),
                    (status = 404, description = "No such object (code 5)", body = service_kit::error::Problem),
                    (status = 412, description = "Something still uses it (code 9), named", body = service_kit::error::Problem),
                ))]
            pub(crate) async fn delete(State(state): State<AppState>, caller: Caller, Path((namespace, name)): Path<(String, String)>) -> Result<Response, ApiError> {
                super::delete(state, caller, $kind, namespace, name).await
            }
        }
    };
}

kind_routes!(
    secrets,
    Kind::Secret,
    domain::resources::SecretResource,
    "secrets",
    "Secret",
    "/v1/namespaces/{namespace}/secrets",
    "/v1/namespaces/{namespace}/secrets/{name}"
);
kind_routes!(
    classes,
    Kind::MachineClass,
    domain::MachineClass,
    "machineclasses",
    "MachineClass",
    "/v1/namespaces/{namespace}/machineclasses",
    "/v1/namespaces/{namespace}/machineclasses/{name}"
);
kind_routes!(
    machines,
    Kind::Machine,
    domain::resources::MachineResource,
    "machines",
    "Machine",
    "/v1/namespaces/{namespace}/machines",
    "/v1/namespaces/{namespace}/machines/{name}"
);
kind_routes!(
    sets,
    Kind::MachineSet,
    domain::resources::MachineSet,
    "machinesets",
    "MachineSet",
    "/v1/namespaces/{namespace}/machinesets",
    "/v1/namespaces/{namespace}/machinesets/{name}"
);
kind_routes!(
    deployments,
    Kind::MachineDeployment,
    domain::resources::MachineDeployment,
    "machinedeployments",
    "MachineDeployment",
    "/v1/namespaces/{namespace}/machinedeployments",
    "/v1/namespaces/{namespace}/machinedeployments/{name}"
);

/// The documented examples, one object of each kind that works on a stack whose Alicloud provider
/// is the ECS emulator (`berth up`): a secret with the emulator's key (its two `EMULATOR_*`
/// placeholders replaced by the key `berth up` prints), a class using the secret `alicloud`, and
/// a machine, set and deployment of the class `small` — the secret and class examples made under
/// those two names first, as the README's tour does. Path parameters name the example objects
/// (the secret and class ones under names nothing uses, so deleting them is allowed); a create's
/// example takes a name of its own, so it does not meet the one the others read and replace.
pub(crate) fn document_examples(doc: &mut Value) {
    // What the controller writes and a caller's write never changes (Kubernetes' status
    // subresource): documented read-only, so a client knows not to send it.
    if let Some(class) = doc["components"]["schemas"].get_mut("MachineClass") {
        domain::machine::document_machine_class(class);
    }
    for schema in ["MachineResource", "MachineSet", "MachineDeployment"] {
        if let Some(status) = doc["components"]["schemas"][schema]["properties"].get_mut("status") {
            status["readOnly"] = json!(true);
        }
    }
    let class = "small";
    let examples: [(&str, &str, Value); 5] = [
        (
            "secrets",
            "spare-secret",
            json!({"apiVersion": API_VERSION, "kind": "Secret",
                "stringData": {"alicloudAccessKeyID": "EMULATOR_ACCESS_KEY_ID",
                               "alicloudAccessKeySecret": "EMULATOR_ACCESS_KEY_SECRET"}}),
        ),
        (
            "machineclasses",
            "spare-class",
            json!({"apiVersion": API_VERSION, "kind": "MachineClass", "provider": "Alicloud",
                "providerSpec": {"imageID": "m-demo-image", "instanceType": "ecs.g6.large",
                    "region": "cn-shanghai", "zoneID": "cn-shanghai-b",
                    "securityGroupID": "sg-demo", "vSwitchID": "vsw-demo", "keyPairName": "demo",
                    "tags": {"kubernetes.io/cluster/demo": "1", "kubernetes.io/role/node": "1"}},
                "secretRef": {"name": "alicloud"}}),
        ),
        (
            "machines",
            "worker-1",
            json!({"apiVersion": API_VERSION, "kind": "Machine",
                "metadata": {"labels": {"role": "single"}},
                "spec": {"class": {"name": class}}}),
        ),
        (
            "machinesets",
            "pool",
            json!({"apiVersion": API_VERSION, "kind": "MachineSet",
                "spec": {"replicas": 1, "selector": {"matchLabels": {"pool": "set"}},
                    "template": {"metadata": {"labels": {"pool": "set"}},
                                 "spec": {"class": {"name": class}}}}}),
        ),
        (
            "machinedeployments",
            "workers",
            json!({"apiVersion": API_VERSION, "kind": "MachineDeployment",
                "spec": {"replicas": 1, "selector": {"matchLabels": {"pool": "workers"}},
                    "template": {"metadata": {"labels": {"pool": "workers"}},
                                 "spec": {"class": {"name": class}}}}}),
        ),
    ];
    for (plural, name, body) in examples {
        let collection = format!("/v1/namespaces/{{namespace}}/{plural}");
        let item = format!("{collection}/{{name}}");
        let with_name = |name: &str| {
            let mut body = body.clone();
            let labels = body["metadata"]["labels"].clone();
            body["metadata"] = json!({"name": name});
            if !labels.is_null() {
                body["metadata"]["labels"] = labels;
            }
            body
        };
        let paths = &mut doc["paths"];
        for (path, method) in [
            (&collection, "get"),
            (&collection, "post"),
            (&item, "get"),
            (&item, "put"),
            (&item, "patch"),
            (&item, "delete"),
        ] {
            let Some(operation) = paths.get_mut(path.as_str()).and_then(|p| p.get_mut(method))
            else {
                continue;
            };
            if let Some(parameters) = operation["parameters"].as_array_mut() {
                for p in parameters.iter_mut() {
                    match p["name"].as_str() {
                        Some("namespace") => p["example"] = json!("team-a"),
                        Some("name") => p["example"] = json!(name),
                        _ => {}
                    }
                }
            }
            let example = match method {
                "post" => with_name(&format!("{name}-new")),
                "put" => with_name(name),
                "patch" => json!({"metadata": {"labels": {"team": "a"}}}),
                _ => continue,
            };
            if let Some(content) = operation["requestBody"]["content"].as_object_mut() {
                for media in content.values_mut() {
                    media["example"] = example.clone();
                }
            }
        }
    }
}

/// The API routes, with their OpenAPI descriptions.
pub fn routes(state: AppState) -> OpenApiRouter {
    OpenApiRouter::new()
        .routes(routes!(secrets::list, secrets::create))
        .routes(routes!(
            secrets::get,
            secrets::put,
            secrets::patch,
            secrets::delete
        ))
        .routes(routes!(classes::list, classes::create))
        .routes(routes!(
            classes::get,
            classes::put,
            classes::patch,
            classes::delete
        ))
        .routes(routes!(machines::list, machines::create))
        .routes(routes!(
            machines::get,
            machines::put,
            machines::patch,
            machines::delete
        ))
        .routes(routes!(sets::list, sets::create))
        .routes(routes!(sets::get, sets::put, sets::patch, sets::delete))
        .routes(routes!(deployments::list, deployments::create))
        .routes(routes!(
            deployments::get,
            deployments::put,
            deployments::patch,
            deployments::delete
        ))
        .with_state(state)
}
