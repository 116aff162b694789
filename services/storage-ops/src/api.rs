//! The HTTP API (docs/design.md, “Storage ops API”), one handler per route, each documented in the
//! OpenAPI document by its `#[utoipa::path]`. Handlers parse and validate at the edge, then hand
//! domain values to [`Ops`], and turn what it fails with ([`OpsError`]) into the answer, in one
//! place.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use domain::volume::ReclaimPolicy;
use domain::{
    Code, DeleteResult, OrphanList, Selector, Status, Volume, VolumeList, VolumeProvisionerProfile,
    VolumeStats, names,
};
use serde::Deserialize;
use serde_json::json;
use service_kit::ApiError;
use service_kit::error::Problem;
use service_kit::extract::{Json, Path, Query};
use service_kit::tenancy::Caller;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::ops::{ListRequest, Ops, OpsError};
use crate::store::StoreError;

/// Page size when `limit` is absent.
pub const DEFAULT_LIMIT: u32 = 100;
/// The largest page.
pub const MAX_LIMIT: u32 = 1000;

/// The API routes, with their OpenAPI descriptions.
pub fn routes(ops: Arc<Ops>, watch: service_kit::watch::WatchLimits) -> OpenApiRouter {
    OpenApiRouter::new()
        .routes(routes!(add_storage, list_storage))
        .routes(routes!(read_storage, patch_storage, delete_storage))
        .routes(routes!(volume_stats))
        .routes(routes!(list_orphans))
        .layer(axum::Extension(watch))
        .with_state(ops)
}

/// The one place a logic failure becomes an HTTP answer: its code, the detail the caller reads, and
/// what only the log gets (the cause, never shown on a 5xx).
impl From<OpsError> for ApiError {
    fn from(e: OpsError) -> Self {
        let detail = e.to_string();
        match e {
            OpsError::Store(StoreError::Exists(..)) => {
                ApiError::from_code(Code::AlreadyExists, detail)
            }
            OpsError::Store(
                StoreError::CapacityExhausted { .. } | StoreError::QuotaExceeded { .. },
            ) => ApiError::from_code(Code::ResourceExhausted, detail).not_retryable(),
            OpsError::Store(StoreError::Stale { .. }) => ApiError::from_code(Code::Aborted, detail),
            OpsError::Store(StoreError::Closed) => {
                ApiError::from_code(Code::Unavailable, "storage-ops is stopping")
            }
            OpsError::Store(e @ (StoreError::Db(_) | StoreError::DirectorySync { .. })) => {
                ApiError::internal(e)
            }
            // AddStorage records these as Failed volumes; one that reaches here keeps its code and
            // the backend's words for the caller (never the detail, which names paths).
            OpsError::Store(StoreError::Backend(e)) => ApiError::new(e.into()),
            OpsError::Task(e) => ApiError::internal(e),
            // The caller learns that the registry failed and how, never where it is or what it
            // said; the log gets all of it with the request id.
            OpsError::RegistryDown(e) => ApiError::from_code(Code::Unavailable, detail)
                .with_retry_after(e.retry_after.unwrap_or(Duration::from_secs(1)))
                .with_cause(e),
            OpsError::UnknownOrchestrator(_)
            | OpsError::NoDefaultOrchestrator
            | OpsError::NoStorageOps { .. }
            | OpsError::NotReady { .. } => ApiError::from_code(Code::FailedPrecondition, detail),
            OpsError::BackendRefused(status) => ApiError::new(status),
            OpsError::SpecConflict { .. } => ApiError::from_code(Code::AlreadyExists, detail),
            OpsError::BeingDeleted { .. }
            | OpsError::PatchOfDeleting { .. }
            | OpsError::RemovedMeanwhile { .. } => ApiError::from_code(Code::Aborted, detail),
            OpsError::NotFound { .. } => ApiError::from_code(Code::NotFound, detail),
            OpsError::ObjectGone { cause, .. } => {
                ApiError::from_code(Code::DataLoss, detail).with_cause(cause)
            }
            OpsError::ProvisionFailed { cause, .. }
            | OpsError::DeleteFailed { cause, .. }
            | OpsError::Usage(cause) => ApiError::from_code(cause.code, detail).with_cause(cause),
        }
    }
}

/// OpenAPI `links` from AddStorage's answers to the read, stats and delete of the volume it made,
/// so a client (and schemathesis' stateful phase) can follow them.
pub(crate) fn document_links(doc: &mut serde_json::Value) {
    let key = json!({
        "namespace": "$response.body#/metadata/namespace",
        "name": "$response.body#/metadata/name",
    });
    let links = json!({
        "ReadStorage": {"operationId": "read_storage", "parameters": key, "description": "The volume just made"},
        "VolumeStats": {"operationId": "volume_stats", "parameters": key, "description": "What it uses"},
        "DeleteStorage": {"operationId": "delete_storage", "parameters": key, "description": "Delete it"},
    });
    for status in ["200", "201"] {
        if let Some(response) =
            doc.pointer_mut(&format!("/paths/~1v1~1volumes/post/responses/{status}"))
        {
            response["links"] = links.clone();
        }
    }
}

fn valid_key(namespace: &str, name: &str) -> Result<(), ApiError> {
    names::validate_dns1123_label("namespace", namespace)?;
    names::validate_volume_name("name", name)?;
    Ok(())
}

/// AddStorage: makes a volume, or answers the one already there when the spec is the same.
#[utoipa::path(
    post,
    path = "/v1/volumes",
    tag = "volumes",
    request_body(
        content = VolumeProvisionerProfile,
        description = "The volume wanted; the example succeeds against a fresh `berth up` (its default orchestrator is local)",
        example = json!({"name": "data-1", "capacity": "1Gi", "labels": {"app": "db"}})
    ),
    responses(
        (status = 201, description = "Made; Ready", body = Volume, headers(("Location" = String, description = "The volume's path, /v1/volumes/{namespace}/{name}"))),
        (status = 200, description = "It was there already with the same spec", body = Volume),
        (status = 400, description = "A field breaks a rule, or the body is not a JSON object (code 3), naming the field", body = Problem),
        (status = 409, description = "The name is taken by a volume with a different spec (code 6), saying which fields differ; or it is being deleted (code 10)", body = Problem),
        (status = 403, description = "The caller's token may not act in the namespace named (code 7)", body = Problem),
        (status = 412, description = "The orchestrator named is not registered, its kind has no StorageOps, there is no default orchestrator, or the orchestrator points outside what this service's operator allows (BERTH_LOCAL_ROOTS, BERTH_DOCKER_ENDPOINTS) (code 9)", body = Problem),
        (status = 429, description = "The orchestrator's capacity, or the namespace's quota (BERTH_QUOTA_VOLUMES, BERTH_QUOTA_VOLUME_BYTES), would be exceeded (code 8), naming which, the use and the limit", body = Problem),
        (status = 500, description = "The backend failed; the volume is kept as Failed with its message", body = Problem),
        (status = 503, description = "The registry or the backend is unavailable (code 14); Retry-After", body = Problem),
    )
)]
async fn add_storage(
    State(ops): State<Arc<Ops>>,
    caller: Caller,
    Json(profile): Json<VolumeProvisionerProfile>,
) -> Result<Response, ApiError> {
    let spec = profile.validate()?;
    caller.audit_object(format!("{}/{}", spec.namespace, spec.name));
    // The caller named the namespace, so saying it may not act there tells it nothing new.
    if !caller.allows(&spec.namespace) {
        return Err(ApiError::from_code(
            Code::PermissionDenied,
            format!(
                "namespace: the token may not act in namespace {:?}",
                spec.namespace
            ),
        ));
    }
    let (volume, created) = ops.add(spec).await?;
    if !created {
        return Ok((StatusCode::OK, Json(volume)).into_response());
    }
    let location = format!(
        "/v1/volumes/{}/{}",
        volume.metadata.namespace, volume.metadata.name
    );
    let mut response = (StatusCode::CREATED, Json(volume)).into_response();
    if let Ok(v) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, v);
    }
    Ok(response)
}

/// ListStorage's query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    /// Only this namespace, a DNS-1123 label (every namespace the caller's token may see when absent
    /// or empty; one it may not see lists nothing).
    #[param(pattern = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$", max_length = 63)]
    namespace: Option<String>,
    /// A label selector (`app=db,tier in (a,b),!legacy`).
    #[serde(rename = "labelSelector")]
    #[param(
        rename = "labelSelector",
        pattern = "^(\\s*|\\s*(!\\s*(([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?){0,2}|[a-z0-9]([-a-z0-9]{0,28}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,28}[a-z0-9])?){3,7})/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?|(([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?){0,2}|[a-z0-9]([-a-z0-9]{0,28}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,28}[a-z0-9])?){3,7})/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?(\\s*(!=|==|=)\\s*([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?|\\s+(in|notin)\\s*\\(\\s*([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?|([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?(\\s*,\\s*([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)+)\\s*\\))?)\\s*(,\\s*(!\\s*(([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?){0,2}|[a-z0-9]([-a-z0-9]{0,28}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,28}[a-z0-9])?){3,7})/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?|(([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?){0,2}|[a-z0-9]([-a-z0-9]{0,28}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,28}[a-z0-9])?){3,7})/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?(\\s*(!=|==|=)\\s*([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?|\\s+(in|notin)\\s*\\(\\s*([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?|([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?(\\s*,\\s*([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)+)\\s*\\))?)\\s*)*)$"
    )]
    label_selector: Option<String>,
    /// Page size, 1 to 1000 (100 when absent).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// The `continue` token of the previous page.
    #[serde(rename = "continue")]
    #[param(rename = "continue")]
    continue_token: Option<String>,
    /// Stream the namespace's changes (newline-delimited JSON events) instead of answering a
    /// page; needs `namespace` (each namespace has its own sequence of versions).
    watch: Option<bool>,
    /// With `watch`: the version to stream changes after (a list's `metadata.resourceVersion`);
    /// absent or `0`, every current volume of the namespace is sent as ADDED first. Too old: 410.
    #[serde(rename = "resourceVersion")]
    #[param(rename = "resourceVersion", pattern = "^(0|[1-9][0-9]{0,19})?$")]
    resource_version: Option<String>,
    /// With `watch`: how long to stream, in seconds (at most 1800, the default).
    #[serde(rename = "timeoutSeconds")]
    #[param(rename = "timeoutSeconds", minimum = 1, maximum = 1800)]
    timeout_seconds: Option<u64>,
    /// Accepted for Kubernetes clients; BOOKMARK heartbeats are always sent.
    #[serde(rename = "allowWatchBookmarks")]
    #[param(rename = "allowWatchBookmarks")]
    allow_watch_bookmarks: Option<bool>,
}

/// ListStorage: a page of volumes in (namespace, name) order; with `watch=true`, a namespace's
/// changes as they happen.
#[utoipa::path(
    get,
    path = "/v1/volumes",
    tag = "volumes",
    params(ListQuery),
    responses(
        (status = 200, description = "A page; `items` is [] when empty; `continue` is absent on the last page; with a namespace, `metadata.resourceVersion` is where a watch resumes. With watch=true, a stream of newline-delimited events `{type, object}` (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR)", content((VolumeList = "application/json"), (serde_json::Value = "application/x-ndjson"))),
        (status = 400, description = "A bad namespace, selector, limit, continue token, resourceVersion or timeoutSeconds, or a watch without a namespace (code 3)", body = Problem),
        (status = 410, description = "watch: the resourceVersion is older than the changes kept; list again (code 11)", body = Problem),
        (status = 429, description = "watch: too many watches open (code 8)", body = Problem),
    )
)]
async fn list_storage(
    State(ops): State<Arc<Ops>>,
    axum::Extension(watching): axum::Extension<service_kit::watch::WatchLimits>,
    draining: service_kit::watch::Draining,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let namespace = q.namespace.filter(|n| !n.is_empty());
    if let Some(ns) = &namespace {
        names::validate_dns1123_label("namespace", ns)?;
    }
    let selector = match q.label_selector.as_deref().filter(|s| !s.trim().is_empty()) {
        None => None,
        Some(s) => Some(s.parse::<Selector>().map_err(ApiError::new)?),
    };
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(Status::invalid_query(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}, got {limit}"),
        )
        .into());
    }
    service_kit::watch::check_timeout(q.timeout_seconds)?;
    let from = service_kit::watch::parse_resource_version(q.resource_version.as_deref())?;
    if q.watch.unwrap_or(false) {
        let _ = q.allow_watch_bookmarks;
        let Some(namespace) = namespace else {
            return Err(Status::invalid(
                "namespace",
                "is required with watch=true: a watch follows one namespace (each has its own sequence of versions)",
            )
            .into());
        };
        return watch_volumes(
            &ops,
            &watching,
            draining,
            &caller,
            VolumeWatch {
                namespace,
                selector,
                from,
                timeout_seconds: q.timeout_seconds,
            },
        )
        .await;
    }
    let after = match q.continue_token.as_deref().filter(|t| !t.is_empty()) {
        None => None,
        Some(t) => Some(ops.decode_continue(
            t,
            &crate::ops::list_query(namespace.as_deref(), selector.as_ref()),
        )?),
    };
    // Read before the page, so the page is at least as new: a watch from it may repeat a change,
    // never miss one. A namespace the caller may not see is at "0", as an empty one is to it.
    let version = match &namespace {
        Some(ns) if caller.namespaces.allows(ns) => Some(
            ops.store()
                .namespace_version(ns)
                .await
                .map_err(OpsError::Store)?,
        ),
        Some(_) => Some(0),
        None => None,
    };
    let mut list = ops
        .list(ListRequest {
            namespace,
            visible: caller.namespaces,
            selector,
            limit,
            after,
        })
        .await?;
    list.metadata = version.map(|v| domain::resources::ListMeta {
        resource_version: v.to_string(),
    });
    Ok(Json(list).into_response())
}

/// `watch=true`: the namespace's volumes (every current one first, without a version), then
/// their changes.
/// What a watch of volumes asks for.
struct VolumeWatch {
    namespace: String,
    selector: Option<Selector>,
    from: Option<u64>,
    timeout_seconds: Option<u64>,
}

async fn watch_volumes(
    ops: &Ops,
    limits: &service_kit::watch::WatchLimits,
    draining: service_kit::watch::Draining,
    caller: &Caller,
    asked: VolumeWatch,
) -> Result<Response, ApiError> {
    let VolumeWatch {
        namespace,
        selector,
        from,
        timeout_seconds,
    } = asked;
    use service_kit::watch;
    let permit = watch::admit(limits, "storage-ops")?;
    let visible = caller.namespaces.allows(&namespace);
    let store = ops.store();
    let admits = move |labels: &domain::Labels| selector.as_ref().is_none_or(|s| s.matches(labels));
    // Another tenant's namespace: nothing, and no version of it either (not even "too old").
    let started = store
        .feed()
        .start(&namespace, from, visible, || async {
            let (rows, version) = store.snapshot(&namespace).await.map_err(OpsError::Store)?;
            let added = rows
                .iter()
                .filter(|r| admits(&r.labels))
                .map(|r| serde_json::to_value(crate::ops::to_volume(r)).unwrap_or_default())
                .collect();
            Ok((added, version))
        })
        .await?;
    Ok(watch::stream(
        watch::Watch {
            draining,
            started,
            scope: namespace,
            // A volume's labels never change: no change moves one in or out of a selector.
            filter: watch::Filter {
                kind: Box::new(|()| true),
                labels: Box::new(move |labels| {
                    admits(&serde_json::from_value(labels.clone()).unwrap_or_default())
                }),
            },
            kind: "Volume",
            timeout_seconds,
        },
        limits,
        permit,
    ))
}

/// ReadStorage: one volume.
#[utoipa::path(
    get,
    path = "/v1/volumes/{namespace}/{name}",
    tag = "volumes",
    params(
        ("namespace" = String, Path, description = "A DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63),
        ("name" = String, Path, description = "A DNS-1123 subdomain of at most 63 characters", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", min_length = 1, max_length = 63),
    ),
    responses(
        (status = 200, description = "The volume", body = Volume),
        (status = 400, description = "A bad namespace or name (code 3)", body = Problem),
        (status = 404, description = "No such volume (code 5)", body = Problem),
    )
)]
async fn read_storage(
    State(ops): State<Arc<Ops>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Json<Volume>, ApiError> {
    valid_key(&namespace, &name)?;
    visible(&caller, &namespace, &name)?;
    Ok(Json(ops.get(&namespace, &name).await?))
}

/// PatchStorage: changes a volume's labels, and grows its capacity where its backend can, by a
/// JSON merge patch (RFC 7386). `metadata.resourceVersion` in the patch makes it conditional, as in
/// Kubernetes: the patch applies only to that version.
#[utoipa::path(
    patch,
    path = "/v1/volumes/{namespace}/{name}",
    tag = "volumes",
    params(
        ("namespace" = String, Path, description = "A DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63),
        ("name" = String, Path, description = "A DNS-1123 subdomain of at most 63 characters", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", min_length = 1, max_length = 63),
    ),
    request_body(
        content = serde_json::Value,
        content_type = "application/merge-patch+json",
        description = "`{\"metadata\": {\"labels\": {\"tier\": \"gold\", \"old\": null}, \"resourceVersion\": \"7\"}, \"spec\": {\"capacity\": \"2Gi\"}}`: a label set to null goes, `labels: null` removes them all; the capacity only grows. Any other field of `metadata` and `spec` may be sent as it is, and is refused (400, named) when it differs; `status` is the service's and is ignored (it must be an object), as Kubernetes ignores it outside the status subresource",
        example = json!({"metadata": {"labels": {"tier": "gold"}}, "spec": {"capacity": "2Gi"}})
    ),
    responses(
        (status = 200, description = "The volume as it is now", body = Volume),
        (status = 400, description = "A bad field (code 3), named with the rule: a label, a capacity smaller than the volume's, a field that cannot change", body = Problem),
        (status = 404, description = "No such volume (code 5)", body = Problem),
        (status = 409, description = "metadata.resourceVersion is not the volume's (code 10), or it is being deleted", body = Problem),
        (status = 412, description = "Its backend cannot grow it (a Docker volume; a claim whose StorageClass does not allow expansion), or it is not Ready (code 9)", body = Problem),
        (status = 415, description = "Not a JSON body (code 3)", body = Problem),
        (status = 429, description = "The growth does not fit the namespace's quota or the orchestrator's capacity (code 8)", body = Problem),
    )
)]
async fn patch_storage(
    State(ops): State<Arc<Ops>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
    Json(raw): Json<serde_json::Value>,
) -> Result<Json<Volume>, ApiError> {
    valid_key(&namespace, &name)?;
    visible(&caller, &namespace, &name)?;
    caller.audit_object(format!("{namespace}/{name}"));
    let patch = crate::ops::VolumePatch::parse(&raw)?;
    Ok(Json(ops.patch(namespace, name, patch).await?))
}

/// Another tenant's volume is answered as a missing one is, in the same words.
fn visible(caller: &Caller, namespace: &str, name: &str) -> Result<(), ApiError> {
    if caller.allows(namespace) {
        Ok(())
    } else {
        Err(OpsError::NotFound {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
        .into())
    }
}

/// DeleteStorage's query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct DeleteQuery {
    /// `Delete` removes the backend object, `Retain` keeps it; absent or empty means the volume's
    /// own `parameters.reclaimPolicy` (default `Delete`).
    #[serde(rename = "reclaimPolicy")]
    #[param(rename = "reclaimPolicy", pattern = "^(Delete|Retain)?$")]
    reclaim_policy: Option<String>,
}

/// DeleteStorage: removes a volume (and its backend object unless retained); a missing one is not an
/// error.
#[utoipa::path(
    delete,
    path = "/v1/volumes/{namespace}/{name}",
    tag = "volumes",
    params(
        ("namespace" = String, Path, description = "A DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63),
        ("name" = String, Path, description = "A DNS-1123 subdomain of at most 63 characters", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", min_length = 1, max_length = 63),
        DeleteQuery,
    ),
    responses(
        (status = 200, description = "`deleted` says whether there was a volume", body = DeleteResult),
        (status = 400, description = "A bad namespace, name or reclaimPolicy (code 3)", body = Problem),
        (status = 503, description = "The registry or the backend is unavailable (code 14); the volume stays (Deleting if the backend failed) and the reconciler retries", body = Problem),
    )
)]
async fn delete_storage(
    State(ops): State<Arc<Ops>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
    Query(q): Query<DeleteQuery>,
) -> Result<Json<DeleteResult>, ApiError> {
    valid_key(&namespace, &name)?;
    caller.audit_object(format!("{namespace}/{name}"));
    let policy = match q.reclaim_policy.as_deref() {
        None | Some("") => None,
        Some("Delete") => Some(ReclaimPolicy::Delete),
        Some("Retain") => Some(ReclaimPolicy::Retain),
        Some(other) => {
            return Err(Status::invalid(
                "reclaimPolicy",
                format!("must be Delete or Retain, got {other:?}"),
            )
            .into());
        }
    };
    if !caller.allows(&namespace) {
        // As for a volume that does not exist.
        return Ok(Json(DeleteResult { deleted: false }));
    }
    Ok(Json(ops.delete(namespace, name, policy).await?))
}

/// What a volume uses: capacity, bytes used, free space.
#[utoipa::path(
    get,
    path = "/v1/volumes/{namespace}/{name}/stats",
    tag = "volumes",
    params(
        ("namespace" = String, Path, description = "A DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63),
        ("name" = String, Path, description = "A DNS-1123 subdomain of at most 63 characters", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", min_length = 1, max_length = 63),
    ),
    responses(
        (status = 200, description = "The figures", body = VolumeStats),
        (status = 404, description = "No such volume (code 5)", body = Problem),
        (status = 412, description = "The volume is not Ready (code 9)", body = Problem),
        (status = 500, description = "Ready, but the backend object is gone (code 15)", body = Problem),
    )
)]
async fn volume_stats(
    State(ops): State<Arc<Ops>>,
    caller: Caller,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Json<VolumeStats>, ApiError> {
    valid_key(&namespace, &name)?;
    visible(&caller, &namespace, &name)?;
    Ok(Json(ops.stats(&namespace, &name).await?))
}

/// Backend objects Berth made that no volume owns, from a fresh scan of every known backend.
#[utoipa::path(
    get,
    path = "/v1/orphans",
    tag = "volumes",
    responses(
        (status = 200, description = "The orphans (`items` is [] when none), the policy, and any backend that could not be scanned", body = OrphanList),
        (status = 403, description = "The caller's token is not cluster-wide: orphans belong to no namespace (code 7)", body = Problem),
    )
)]
async fn list_orphans(
    State(ops): State<Arc<Ops>>,
    caller: Caller,
) -> Result<Json<OrphanList>, ApiError> {
    // An orphan has no volume, so no namespace a token could be scoped to; what it names (uids,
    // other tenants' names) is for a cluster-wide caller only.
    if !caller.namespaces.is_cluster_wide() {
        return Err(ApiError::from_code(
            Code::PermissionDenied,
            "listing orphans is cluster-wide: use a cluster-wide token",
        ));
    }
    Ok(Json(ops.orphans().await))
}
