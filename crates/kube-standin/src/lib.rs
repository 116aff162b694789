//! A stand-in for the Kubernetes API server, for tests: small, and strict where Berth could be wrong.
//!
//! No API server can run where Berth is built and tested (no server binaries, no image registry),
//! so, as the ECS emulator stands in for ECS, this serves what storage-ops' `kubernetes` backend
//! uses, following the Kubernetes API conventions: PersistentVolumeClaims in namespaces (create,
//! get, list with label selectors and `limit`/`continue`, JSON merge patch, delete with
//! preconditions and the `kubernetes.io/pvc-protection` finalizer), events (list by field
//! selector), a `resourceVersion` on every write, and the `Status` object of every refusal (404
//! NotFound, 409 AlreadyExists and Conflict, 403 Forbidden for RBAC and ResourceQuota, 422
//! Invalid, 400 BadRequest for a field the type does not have, as `fieldValidation=Strict` does).
//!
//! What the cluster's controllers do, the test does, through [`StandIn`]: bind a claim (the PV
//! controller), lose it, record an event, mark a claim in use by a pod, delete one behind Berth's
//! back; and the faults: a required bearer token, verbs RBAC refuses, a quota, a hung server.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::extract::{Path, Query, Request, State as AxumState};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine as _;
use serde_json::{Map, Value, json};

/// The user the stand-in's RBAC refusals name, as a pod's service account is named.
pub const USER: &str = "system:serviceaccount:berth:storage-ops";

/// What the cluster is set to refuse.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// A bearer token every call must present; `None`: anonymous calls are allowed.
    pub token: Option<String>,
    /// `(verb, resource)` pairs RBAC refuses (`("create", "persistentvolumeclaims")`).
    pub denied: BTreeSet<(String, String)>,
    /// A ResourceQuota on every namespace: the most claims and the most requested bytes.
    pub quota: Option<Quota>,
    /// Every call hangs, never answered (a server that accepted the connection and stalled).
    pub hang: bool,
}

/// A ResourceQuota named [`Quota::name`].
#[derive(Debug, Clone)]
pub struct Quota {
    /// Its name, as the refusal says it.
    pub name: String,
    /// `count/persistentvolumeclaims`.
    pub claims: Option<usize>,
    /// `requests.storage`, in bytes.
    pub storage: Option<u64>,
}

#[derive(Default)]
struct Cluster {
    namespaces: BTreeSet<String>,
    /// Claims by (namespace, name), as stored.
    claims: BTreeMap<(String, String), Value>,
    events: Vec<Value>,
    /// Claims a pod mounts: their deletion waits on the pvc-protection finalizer.
    in_use: BTreeSet<(String, String)>,
    resource_version: u64,
    faults: Faults,
    /// Every call, `METHOD path?query`, for tests that check what was asked.
    calls: Vec<String>,
    /// Every object a client sent to be created, as sent: what a schema check holds the client to.
    sent: Vec<Value>,
    /// The claims' changes, oldest first, for watches: at most [`WATCH_LOG`] of them.
    changes: std::collections::VecDeque<Change>,
    /// The newest change's resourceVersion, for watches to wait on.
    newest: Option<tokio::sync::watch::Sender<u64>>,
    /// StorageClasses whose claims may grow (`allowVolumeExpansion: true`).
    expandable: BTreeSet<String>,
}

/// Changes a watch can start from; an older resourceVersion is 410 Gone, as an API server whose
/// watch cache moved on answers.
const WATCH_LOG: usize = 10_000;

/// One change of a claim, as a watch event says it.
#[derive(Clone)]
struct Change {
    version: u64,
    namespace: String,
    kind: &'static str,
    object: Value,
}

impl Cluster {
    fn next_version(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    /// Records the claim at `key` as changed (`ADDED`, `MODIFIED`) or, removed, as `DELETED` at a
    /// new resourceVersion; wakes the watches.
    fn changed(&mut self, key: &(String, String), kind: &'static str, removed: Option<Value>) {
        let object = match removed {
            Some(mut gone) => {
                let version = self.next_version();
                gone["metadata"]["resourceVersion"] = json!(version);
                gone
            }
            None => match self.claims.get(key) {
                Some(claim) => claim.clone(),
                None => return,
            },
        };
        let version = object["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(self.resource_version);
        self.changes.push_back(Change {
            version,
            namespace: key.0.clone(),
            kind,
            object,
        });
        while self.changes.len() > WATCH_LOG {
            self.changes.pop_front();
        }
        if let Some(newest) = &self.newest {
            newest.send_replace(version);
        }
    }

    /// Removes the claim at `key`, recording its deletion.
    fn remove_claim(&mut self, key: &(String, String)) -> Option<Value> {
        let gone = self.claims.remove(key)?;
        self.changed(key, "DELETED", Some(gone.clone()));
        Some(gone)
    }
}

type Shared = Arc<Mutex<Cluster>>;

fn lock(shared: &Shared) -> MutexGuard<'_, Cluster> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running stand-in on a loopback port.
pub struct StandIn {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    cluster: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandIn {
    /// Starts one with the namespaces `namespaces`.
    pub async fn start(namespaces: &[&str]) -> StandIn {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        StandIn::start_on(listener, namespaces)
    }

    /// Starts one on `listener` (a port a test chose, or one it stops and starts again).
    pub fn start_on(listener: tokio::net::TcpListener, namespaces: &[&str]) -> StandIn {
        let addr: SocketAddr = listener.local_addr().expect("an address");
        let cluster: Shared = Arc::default();
        {
            let mut c = lock(&cluster);
            c.namespaces
                .extend(namespaces.iter().map(|n| n.to_string()));
            c.newest = Some(tokio::sync::watch::channel(0).0);
        }
        let app = router(cluster.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        StandIn {
            url: format!("http://{addr}"),
            cluster,
            task,
        }
    }

    /// Lets claims of StorageClass `class` grow, as `allowVolumeExpansion: true` does; others are
    /// refused by the resize admission plugin's 403.
    pub fn allow_expansion(&self, class: &str) {
        lock(&self.cluster).expandable.insert(class.to_string());
    }

    /// Sets what the cluster refuses.
    pub fn set_faults(&self, faults: Faults) {
        lock(&self.cluster).faults = faults;
    }

    /// Every call so far, `METHOD path?query`.
    pub fn calls(&self) -> Vec<String> {
        lock(&self.cluster).calls.clone()
    }

    /// Every object a client sent to be created, exactly as sent (before any check).
    pub fn sent(&self) -> Vec<Value> {
        lock(&self.cluster).sent.clone()
    }

    /// The claim `namespace/name` as stored.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<Value> {
        lock(&self.cluster)
            .claims
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Every claim of `namespace`, by name.
    pub fn claims(&self, namespace: &str) -> BTreeMap<String, Value> {
        lock(&self.cluster)
            .claims
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .map(|((_, name), claim)| (name.clone(), claim.clone()))
            .collect()
    }

    /// Makes a claim as `kubectl create` would, bypassing Berth (a foreign claim).
    pub fn put_claim(&self, namespace: &str, claim: Value) -> Result<Value, Value> {
        let mut cluster = lock(&self.cluster);
        create_claim(&mut cluster, namespace, claim).map_err(|(_, status)| status)
    }

    /// Gives the claim the uid `uid`, as if the API server had (a pact's examples name one).
    pub fn set_uid(&self, namespace: &str, name: &str, uid: &str) -> bool {
        self.update(namespace, name, |claim| {
            claim["metadata"]["uid"] = json!(uid);
        })
    }

    /// Sets one of the claim's labels, as someone editing it would.
    pub fn set_label(&self, namespace: &str, name: &str, key: &str, value: &str) -> bool {
        self.update(namespace, name, |claim| {
            claim["metadata"]["labels"][key] = json!(value);
        })
    }

    /// The PV controller binds the claim: a PersistentVolume of the requested size, `Bound`.
    pub fn bind(&self, namespace: &str, name: &str) -> bool {
        self.update(namespace, name, |claim| {
            let uid = claim["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let storage = claim["spec"]["resources"]["requests"]["storage"].clone();
            let modes = claim["spec"]["accessModes"].clone();
            claim["spec"]["volumeName"] = json!(format!("pvc-{uid}"));
            if claim["spec"]["storageClassName"].is_null() {
                claim["spec"]["storageClassName"] = json!("standard");
            }
            claim["status"] =
                json!({"phase": "Bound", "capacity": {"storage": storage}, "accessModes": modes});
        })
    }

    /// The PV controller of a cluster with capacity to spare: binds every Pending claim of
    /// `namespace`, and says how many.
    pub fn bind_pending(&self, namespace: &str) -> usize {
        let pending: Vec<String> = self
            .claims(namespace)
            .into_iter()
            .filter(|(_, c)| c["status"]["phase"] == "Pending")
            .map(|(name, _)| name)
            .collect();
        pending
            .iter()
            .filter(|name| self.bind(namespace, name))
            .count()
    }

    /// The claim's volume is gone: `Lost`.
    pub fn lose(&self, namespace: &str, name: &str) -> bool {
        self.update(namespace, name, |claim| {
            claim["status"]["phase"] = json!("Lost");
        })
    }

    /// Records an event on the claim, as a controller does (`ProvisioningFailed`,
    /// `WaitForFirstConsumer`).
    pub fn event(&self, namespace: &str, name: &str, reason: &str, message: &str) {
        let mut cluster = lock(&self.cluster);
        let version = cluster.next_version();
        let n = cluster.events.len();
        cluster.events.push(json!({
            "metadata": {"name": format!("{name}.{n:x}"), "namespace": namespace, "resourceVersion": version},
            "involvedObject": {"kind": "PersistentVolumeClaim", "name": name, "namespace": namespace},
            "reason": reason, "message": message, "type": "Warning",
        }));
    }

    /// Whether a pod mounts the claim: while it does, a deleted claim stays, terminating.
    pub fn set_in_use(&self, namespace: &str, name: &str, in_use: bool) {
        let mut cluster = lock(&self.cluster);
        let key = (namespace.to_string(), name.to_string());
        if in_use {
            cluster.in_use.insert(key);
            return;
        }
        cluster.in_use.remove(&key);
        let terminating = cluster
            .claims
            .get(&key)
            .is_some_and(|c| !c["metadata"]["deletionTimestamp"].is_null());
        if terminating {
            cluster.remove_claim(&key);
        }
    }

    /// Deletes a claim behind Berth's back (`kubectl delete pvc`).
    pub fn delete_claim(&self, namespace: &str, name: &str) -> bool {
        lock(&self.cluster)
            .remove_claim(&(namespace.to_string(), name.to_string()))
            .is_some()
    }

    fn update(&self, namespace: &str, name: &str, change: impl FnOnce(&mut Value)) -> bool {
        let mut cluster = lock(&self.cluster);
        let version = cluster.next_version();
        let key = (namespace.to_string(), name.to_string());
        match cluster.claims.get_mut(&key) {
            Some(claim) => {
                change(claim);
                claim["metadata"]["resourceVersion"] = json!(version);
                cluster.changed(&key, "MODIFIED", None);
                true
            }
            None => false,
        }
    }
}

fn router(cluster: Shared) -> Router {
    let claims = "/api/v1/namespaces/{namespace}/persistentvolumeclaims";
    Router::new()
        .route(claims, get(list_claims).post(post_claim))
        .route(
            &format!("{claims}/{{name}}"),
            get(get_claim).delete(delete_claim).patch(patch_claim),
        )
        .route("/api/v1/namespaces/{namespace}/events", get(list_events))
        // Discovery, as kubectl reads it before its first call.
        .route(
            "/api",
            get(|| async { axum::Json(json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})) }),
        )
        .route(
            "/apis",
            get(|| async { axum::Json(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []})) }),
        )
        .route("/api/v1", get(|| async { axum::Json(resources()) }))
        .route(
            "/version",
            get(|| async {
                axum::Json(json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-standin", "platform": "linux/amd64"}))
            }),
        )
        .fallback(|request: Request| async move {
            failure(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!(
                    "the server could not find the requested resource ({})",
                    request.uri().path()
                ),
                None,
            )
        })
        .layer(axum::middleware::from_fn_with_state(cluster.clone(), gate))
        .with_state(cluster)
}

/// The core group's resources the stand-in serves.
fn resources() -> Value {
    json!({
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            {"name": "persistentvolumeclaims", "singularName": "persistentvolumeclaim", "namespaced": true,
             "kind": "PersistentVolumeClaim", "verbs": ["create", "delete", "get", "list", "patch", "watch"],
             "shortNames": ["pvc"]},
            {"name": "events", "singularName": "event", "namespaced": true, "kind": "Event",
             "verbs": ["get", "list"], "shortNames": ["ev"]},
        ],
    })
}

/// Records the call, then the faults every call meets: a hung server, a required token.
async fn gate(AxumState(cluster): AxumState<Shared>, request: Request, next: Next) -> Response {
    let (hang, token) = {
        let mut c = lock(&cluster);
        let uri = request.uri();
        c.calls.push(format!(
            "{} {}{}",
            request.method(),
            uri.path(),
            uri.query().map(|q| format!("?{q}")).unwrap_or_default()
        ));
        (c.faults.hang, c.faults.token.clone())
    };
    if hang {
        std::future::pending::<()>().await;
    }
    if let Some(token) = token {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if presented != Some(token.as_str()) {
            return failure(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "Unauthorized".into(),
                None,
            );
        }
    }
    next.run(request).await
}

/// A `Status` answer, as the API server writes every refusal.
fn failure(code: StatusCode, reason: &str, message: String, details: Option<Value>) -> Response {
    let mut status = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    if let Some(details) = details {
        status["details"] = details;
    }
    (code, axum::Json(status)).into_response()
}

type Refusal = (StatusCode, Value);

fn refusal(code: StatusCode, reason: &str, message: String, name: Option<&str>) -> Refusal {
    let mut status = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    if let Some(name) = name {
        status["details"] = json!({"name": name, "kind": "persistentvolumeclaims"});
    }
    (code, status)
}

fn answer(result: Result<Value, Refusal>) -> Response {
    match result {
        Ok(body) => (StatusCode::OK, axum::Json(body)).into_response(),
        Err((code, status)) => (code, axum::Json(status)).into_response(),
    }
}

/// RBAC: whether the verb on the resource is allowed; the refusal as the API server words it.
fn authorize(
    cluster: &Cluster,
    verb: &str,
    resource: &str,
    namespace: &str,
    name: Option<&str>,
) -> Result<(), Refusal> {
    if !cluster
        .faults
        .denied
        .contains(&(verb.to_string(), resource.to_string()))
    {
        return Ok(());
    }
    let subject = match name {
        Some(name) => format!("{resource} {name:?}"),
        None => resource.to_string(),
    };
    Err(refusal(
        StatusCode::FORBIDDEN,
        "Forbidden",
        format!(
            "{subject} is forbidden: User {USER:?} cannot {verb} resource {resource:?} in API group \"\" in the namespace {namespace:?}"
        ),
        name,
    ))
}

fn namespace_exists(cluster: &Cluster, namespace: &str) -> Result<(), Refusal> {
    if cluster.namespaces.contains(namespace) {
        return Ok(());
    }
    Err(refusal(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("namespaces {namespace:?} not found"),
        None,
    ))
}

fn not_found(name: &str) -> Refusal {
    refusal(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("persistentvolumeclaims {name:?} not found"),
        Some(name),
    )
}

#[derive(serde::Deserialize)]
struct ListQuery {
    #[serde(rename = "labelSelector")]
    label_selector: Option<String>,
    #[serde(rename = "fieldSelector")]
    field_selector: Option<String>,
    limit: Option<usize>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
    watch: Option<bool>,
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(rename = "timeoutSeconds")]
    timeout_seconds: Option<u64>,
}

async fn list_claims(
    AxumState(shared): AxumState<Shared>,
    Path(namespace): Path<String>,
    Query(query): Query<ListQuery>,
) -> Response {
    if query.watch == Some(true) {
        return watch_claims(shared, namespace, query);
    }
    let cluster = lock(&shared);
    answer((|| {
        authorize(&cluster, "list", "persistentvolumeclaims", &namespace, None)?;
        let selector: domain::Selector = query
            .label_selector
            .as_deref()
            .unwrap_or("")
            .parse()
            .map_err(|e: domain::Status| {
                refusal(StatusCode::BAD_REQUEST, "BadRequest", e.message, None)
            })?;
        let after = match &query.continue_token {
            None => None,
            Some(token) => Some(decode_continue(token).ok_or_else(|| {
                refusal(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    "continue key is not valid: the token was not issued by this server".into(),
                    None,
                )
            })?),
        };
        let matching = cluster.claims.iter().filter(|((ns, name), claim)| {
            ns == &namespace
                && after.as_ref().is_none_or(|a| name > a)
                && selector.matches(&labels_of(claim))
        });
        let limit = query.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let mut items: Vec<Value> = Vec::new();
        let mut more = false;
        for (_, claim) in matching {
            if items.len() == limit {
                more = true;
                break;
            }
            items.push(claim.clone());
        }
        let mut metadata = json!({"resourceVersion": cluster.resource_version.to_string()});
        if more && let Some(last) = items.last() {
            let last = last["metadata"]["name"].as_str().unwrap_or_default();
            metadata["continue"] =
                json!(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(last));
        }
        Ok(
            json!({"kind": "PersistentVolumeClaimList", "apiVersion": "v1", "metadata": metadata, "items": items}),
        )
    })())
}

/// What a watch has still to send, and where it is in the changes.
struct Watching {
    shared: Shared,
    namespace: String,
    selector: domain::Selector,
    /// The newest change already looked at.
    after: u64,
    lines: std::collections::VecDeque<Value>,
    newest: tokio::sync::watch::Receiver<u64>,
    until: tokio::time::Instant,
}

/// A watch of a namespace's claims, as the API server streams one: a JSON event a line, `ADDED` for
/// every matching claim first when no resourceVersion (or `0`) is given, then every change after it
/// until `timeoutSeconds` (default 300). A resourceVersion older than the changes kept is 410 Gone.
fn watch_claims(shared: Shared, namespace: String, query: ListQuery) -> Response {
    let start = {
        let c = lock(&shared);
        if let Err((code, status)) =
            authorize(&c, "watch", "persistentvolumeclaims", &namespace, None)
        {
            return (code, axum::Json(status)).into_response();
        }
        let selector: domain::Selector = match query.label_selector.as_deref().unwrap_or("").parse()
        {
            Ok(s) => s,
            Err(e) => {
                let e: domain::Status = e;
                return failure(StatusCode::BAD_REQUEST, "BadRequest", e.message, None);
            }
        };
        let from: Option<u64> = match query.resource_version.as_deref() {
            None | Some("" | "0") => None,
            Some(v) => match v.parse() {
                Ok(v) => Some(v),
                Err(_) => {
                    return failure(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        format!("resourceVersion {v:?} is not a resource version"),
                        None,
                    );
                }
            },
        };
        let mut lines = std::collections::VecDeque::new();
        let after = match from {
            None => {
                for ((ns, _), claim) in &c.claims {
                    if ns == &namespace && selector.matches(&labels_of(claim)) {
                        lines.push_back(json!({"type": "ADDED", "object": claim}));
                    }
                }
                c.resource_version
            }
            Some(v) => {
                let oldest = c
                    .changes
                    .front()
                    .map_or(c.resource_version, |ch| ch.version);
                if c.changes.len() >= WATCH_LOG && v + 1 < oldest {
                    return failure(
                        StatusCode::GONE,
                        "Expired",
                        format!("too old resource version: {v} ({oldest})"),
                        None,
                    );
                }
                v
            }
        };
        let Some(newest) = c.newest.as_ref().map(|n| n.subscribe()) else {
            return failure(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                "no watch".into(),
                None,
            );
        };
        let seconds = query.timeout_seconds.unwrap_or(300).min(3600);
        Watching {
            shared: shared.clone(),
            namespace,
            selector,
            after,
            lines,
            newest,
            until: tokio::time::Instant::now() + std::time::Duration::from_secs(seconds),
        }
    };
    let stream = futures::stream::unfold(start, |mut w| async move {
        loop {
            if let Some(event) = w.lines.pop_front() {
                let mut line = serde_json::to_vec(&event).unwrap_or_default();
                line.push(b'\n');
                return Some((
                    Ok::<_, std::convert::Infallible>(bytes::Bytes::from(line)),
                    w,
                ));
            }
            {
                let c = lock(&w.shared);
                for change in c.changes.iter().filter(|ch| ch.version > w.after) {
                    if change.namespace == w.namespace
                        && w.selector.matches(&labels_of(&change.object))
                    {
                        w.lines
                            .push_back(json!({"type": change.kind, "object": change.object}));
                    }
                }
                w.after = w.after.max(c.changes.back().map_or(0, |ch| ch.version));
            }
            if !w.lines.is_empty() {
                continue;
            }
            tokio::select! {
                changed = w.newest.changed() => if changed.is_err() { return None; },
                () = tokio::time::sleep_until(w.until) => return None,
            }
        }
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        axum::body::Body::from_stream(stream),
    )
        .into_response()
}

fn decode_continue(token: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()?;
    String::from_utf8(bytes).ok()
}

fn labels_of(claim: &Value) -> domain::Labels {
    claim["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

async fn get_claim(
    AxumState(cluster): AxumState<Shared>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    let cluster = lock(&cluster);
    answer((|| {
        authorize(
            &cluster,
            "get",
            "persistentvolumeclaims",
            &namespace,
            Some(&name),
        )?;
        cluster
            .claims
            .get(&(namespace.clone(), name.clone()))
            .cloned()
            .ok_or_else(|| not_found(&name))
    })())
}

async fn post_claim(
    AxumState(cluster): AxumState<Shared>,
    Path(namespace): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let mut cluster = lock(&cluster);
    let result = (|| {
        authorize(
            &cluster,
            "create",
            "persistentvolumeclaims",
            &namespace,
            None,
        )?;
        // No content type is JSON, as the API server takes it (the first type it supports); the
        // official Python client sends none.
        let json_body = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_none_or(|v| v.starts_with("application/json"));
        if !json_body {
            return Err(refusal(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                "the body of a create must be application/json".into(),
                None,
            ));
        }
        let claim: Value = serde_json::from_slice(&body).map_err(|e| {
            refusal(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("the body is not JSON: {e}"),
                None,
            )
        })?;
        cluster.sent.push(claim.clone());
        create_claim(&mut cluster, &namespace, claim)
    })();
    match result {
        Ok(made) => (StatusCode::CREATED, axum::Json(made)).into_response(),
        Err((code, status)) => (code, axum::Json(status)).into_response(),
    }
}

/// Validates and stores a new claim; what the API server adds (uid, resourceVersion,
/// creationTimestamp, the pvc-protection finalizer, a Pending status) is added.
fn create_claim(
    cluster: &mut Cluster,
    namespace: &str,
    mut claim: Value,
) -> Result<Value, Refusal> {
    namespace_exists(cluster, namespace)?;
    validate_claim(&claim, namespace)?;
    let name = claim["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let key = (namespace.to_string(), name.clone());
    if cluster.claims.contains_key(&key) {
        return Err(refusal(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("persistentvolumeclaims {name:?} already exists"),
            Some(&name),
        ));
    }
    let requested = storage_bytes(&claim).unwrap_or_default();
    if let Some(quota) = cluster.faults.quota.clone() {
        let in_namespace: Vec<&Value> = cluster
            .claims
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .map(|(_, c)| c)
            .collect();
        let used: u64 = in_namespace.iter().filter_map(|c| storage_bytes(c)).sum();
        let over_count = quota.claims.is_some_and(|max| in_namespace.len() + 1 > max);
        let over_bytes = quota.storage.is_some_and(|max| used + requested > max);
        if over_count || over_bytes {
            let (what, requested, used, limited) = if over_count {
                let n = in_namespace.len();
                (
                    "count/persistentvolumeclaims",
                    1,
                    n as u64,
                    quota.claims.unwrap_or(0) as u64,
                )
            } else {
                (
                    "requests.storage",
                    requested,
                    used,
                    quota.storage.unwrap_or(0),
                )
            };
            return Err(refusal(
                StatusCode::FORBIDDEN,
                "Forbidden",
                format!(
                    "persistentvolumeclaims {name:?} is forbidden: exceeded quota: {}, requested: {what}={requested}, used: {what}={used}, limited: {what}={limited}",
                    quota.name
                ),
                Some(&name),
            ));
        }
    }
    let version = cluster.next_version();
    let metadata = claim["metadata"].as_object_mut().expect("validated");
    metadata.insert("namespace".into(), json!(namespace));
    metadata.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    metadata.insert("resourceVersion".into(), json!(version));
    metadata.insert(
        "creationTimestamp".into(),
        json!(chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()),
    );
    metadata.insert("finalizers".into(), json!(["kubernetes.io/pvc-protection"]));
    claim["apiVersion"] = json!("v1");
    claim["kind"] = json!("PersistentVolumeClaim");
    claim["status"] = json!({"phase": "Pending"});
    if claim["spec"]["volumeMode"].is_null() {
        claim["spec"]["volumeMode"] = json!("Filesystem");
    }
    cluster.claims.insert(key.clone(), claim.clone());
    cluster.changed(&key, "ADDED", None);
    Ok(claim)
}

fn storage_bytes(claim: &Value) -> Option<u64> {
    let text = claim["spec"]["resources"]["requests"]["storage"].as_str()?;
    domain::Quantity::parse_field("storage", text)
        .ok()
        .map(|q| q.bytes())
}

/// The checks the API server makes of a claim, strictly: a field the type does not have is a 400
/// (`fieldValidation=Strict`), a value it does not take a 422 naming the field.
fn validate_claim(claim: &Value, namespace: &str) -> Result<(), Refusal> {
    let unknown = |path: &str, map: &Map<String, Value>, known: &[&str]| -> Result<(), Refusal> {
        match map.keys().find(|k| !known.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) => Err(refusal(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("strict decoding error: unknown field \"{path}{k}\""),
                None,
            )),
        }
    };
    let object = |v: &Value, path: &str| -> Result<Map<String, Value>, Refusal> {
        match v {
            Value::Object(m) => Ok(m.clone()),
            Value::Null => Ok(Map::new()),
            _ => Err(refusal(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("{path}: expected an object"),
                None,
            )),
        }
    };
    let top = object(claim, "body")?;
    unknown(
        "",
        &top,
        &["apiVersion", "kind", "metadata", "spec", "status"],
    )?;
    // Absent, they are the URL's (the API server decodes with the resource's kind as the default);
    // present, they must be it.
    let said = |field: &str, want: &str| claim[field].is_null() || claim[field] == want;
    if !said("apiVersion", "v1") || !said("kind", "PersistentVolumeClaim") {
        return Err(refusal(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the object's apiVersion and kind must be v1 PersistentVolumeClaim".into(),
            None,
        ));
    }
    let metadata = object(&claim["metadata"], "metadata")?;
    unknown(
        "metadata.",
        &metadata,
        &["name", "namespace", "labels", "annotations"],
    )?;
    let spec = object(&claim["spec"], "spec")?;
    unknown(
        "spec.",
        &spec,
        &[
            "accessModes",
            "resources",
            "storageClassName",
            "volumeMode",
            "selector",
            "volumeName",
        ],
    )?;
    let name = claim["metadata"]["name"].as_str().unwrap_or_default();
    let mut invalid = Vec::new();
    if domain::names::validate_dns1123_subdomain("metadata.name", name, 253).is_err() {
        invalid.push(format!(
            "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"
        ));
    }
    if let Some(ns) = claim["metadata"]["namespace"].as_str()
        && ns != namespace
    {
        return Err(refusal(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
            None,
        ));
    }
    for (field, kind) in [("labels", "label"), ("annotations", "annotation")] {
        if let Some(map) = claim["metadata"][field].as_object() {
            for (key, value) in map {
                let key_ok = domain::names::validate_label_key("key", key).is_ok();
                let value_ok = value.is_string()
                    && (field == "annotations"
                        || domain::names::validate_label_value(
                            "value",
                            value.as_str().unwrap_or(""),
                        )
                        .is_ok());
                if !key_ok || !value_ok {
                    invalid.push(format!(
                        "metadata.{field}: Invalid value: {key:?}: not a valid {kind}"
                    ));
                }
            }
        }
    }
    let modes = claim["spec"]["accessModes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if modes.is_empty() {
        invalid.push("spec.accessModes: Required value: at least 1 access mode is required".into());
    }
    for mode in &modes {
        if !domain::orchestrator::kubernetes::ACCESS_MODES.contains(&mode.as_str().unwrap_or("")) {
            invalid.push(format!("spec.accessModes: Unsupported value: {mode}"));
        }
    }
    if let Some(mode) = claim["spec"]["volumeMode"].as_str()
        && !domain::orchestrator::kubernetes::VOLUME_MODES.contains(&mode)
    {
        invalid.push(format!("spec.volumeMode: Unsupported value: {mode:?}"));
    }
    let resources = object(&claim["spec"]["resources"], "spec.resources")?;
    unknown("spec.resources.", &resources, &["requests", "limits"])?;
    match storage_bytes(claim) {
        Some(bytes) if bytes > 0 => {}
        _ => invalid.push(
            "spec.resources[storage]: Required value: a storage request of more than 0 is required"
                .into(),
        ),
    }
    if invalid.is_empty() {
        return Ok(());
    }
    Err(refusal(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        format!(
            "PersistentVolumeClaim {name:?} is invalid: {}",
            invalid.join(", ")
        ),
        Some(name),
    ))
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteOptions {
    #[serde(default)]
    preconditions: Option<Preconditions>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Preconditions {
    uid: Option<String>,
    resource_version: Option<String>,
}

async fn delete_claim(
    AxumState(cluster): AxumState<Shared>,
    Path((namespace, name)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let mut cluster = lock(&cluster);
    answer((|| {
        authorize(
            &cluster,
            "delete",
            "persistentvolumeclaims",
            &namespace,
            Some(&name),
        )?;
        let options: DeleteOptions = if body.is_empty() {
            DeleteOptions {
                preconditions: None,
            }
        } else {
            serde_json::from_slice(&body).map_err(|e| {
                refusal(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!("DeleteOptions: {e}"),
                    None,
                )
            })?
        };
        let key = (namespace.clone(), name.clone());
        let claim = cluster
            .claims
            .get(&key)
            .cloned()
            .ok_or_else(|| not_found(&name))?;
        if let Some(pre) = &options.preconditions {
            let uid = claim["metadata"]["uid"].as_str().unwrap_or_default();
            let version = claim["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default();
            let failed = pre.uid.as_deref().is_some_and(|u| u != uid)
                || pre
                    .resource_version
                    .as_deref()
                    .is_some_and(|v| v != version);
            if failed {
                return Err(refusal(
                    StatusCode::CONFLICT,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on persistentvolumeclaims {name:?}: Precondition failed: UID in precondition: {}, UID in object meta: {uid}",
                        pre.uid.as_deref().unwrap_or("")
                    ),
                    Some(&name),
                ));
            }
        }
        if cluster.in_use.contains(&key) {
            let version = cluster.next_version();
            let claim = cluster.claims.get_mut(&key).expect("present");
            if claim["metadata"]["deletionTimestamp"].is_null() {
                claim["metadata"]["deletionTimestamp"] =
                    json!(chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string());
                claim["metadata"]["resourceVersion"] = json!(version);
                cluster.changed(&key, "MODIFIED", None);
            }
            let claim = cluster.claims.get(&key).cloned().expect("present");
            return Ok(claim);
        }
        // The object as it was deleted, as the API server answers a DELETE it carried out at once.
        let mut gone = cluster.remove_claim(&key).unwrap_or(claim);
        gone["metadata"]["deletionTimestamp"] =
            json!(chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string());
        gone["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        Ok(gone)
    })())
}

async fn patch_claim(
    AxumState(cluster): AxumState<Shared>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let mut cluster = lock(&cluster);
    answer((|| {
        authorize(
            &cluster,
            "patch",
            "persistentvolumeclaims",
            &namespace,
            Some(&name),
        )?;
        let merge = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/merge-patch+json"));
        if !merge {
            return Err(refusal(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                "the stand-in takes JSON merge patches (application/merge-patch+json) only".into(),
                None,
            ));
        }
        let patch: Value = serde_json::from_slice(&body).map_err(|e| {
            refusal(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("the patch is not JSON: {e}"),
                None,
            )
        })?;
        let key = (namespace.clone(), name.clone());
        let mut claim = cluster
            .claims
            .get(&key)
            .cloned()
            .ok_or_else(|| not_found(&name))?;
        let spec_before = claim["spec"].clone();
        let bytes_before = storage_bytes(&claim);
        merge_patch(&mut claim, &patch);
        // The one change of spec allowed: more storage, on a class that allows expansion, as the
        // API server's validation and its PersistentVolumeClaimResize admission plugin say.
        let mut resized = claim["spec"].clone();
        resized["resources"]["requests"]["storage"] =
            spec_before["resources"]["requests"]["storage"].clone();
        if resized == spec_before && claim["spec"] != spec_before {
            let bytes = storage_bytes(&claim);
            if bytes.is_none() || bytes < bytes_before {
                return Err(refusal(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    format!(
                        "PersistentVolumeClaim {name:?} is invalid: spec.resources.requests.storage: Forbidden: field can not be less than previous value"
                    ),
                    Some(&name),
                ));
            }
            let class = claim["spec"]["storageClassName"]
                .as_str()
                .unwrap_or_default();
            if !cluster.expandable.contains(class) {
                return Err(refusal(
                    StatusCode::FORBIDDEN,
                    "Forbidden",
                    format!(
                        "persistentvolumeclaims {name:?} is forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"
                    ),
                    Some(&name),
                ));
            }
            // Bound: the resizer grows it at once here.
            if claim["status"]["phase"] == "Bound" {
                claim["status"]["capacity"]["storage"] =
                    claim["spec"]["resources"]["requests"]["storage"].clone();
            }
        } else if claim["spec"] != spec_before {
            return Err(refusal(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                format!(
                    "PersistentVolumeClaim {name:?} is invalid: spec: Forbidden: spec is immutable after creation except resources.requests"
                ),
                Some(&name),
            ));
        }
        let version = cluster.next_version();
        claim["metadata"]["resourceVersion"] = json!(version);
        cluster.claims.insert(key.clone(), claim.clone());
        cluster.changed(&key, "MODIFIED", None);
        Ok(claim)
    })())
}

/// RFC 7386: `null` removes, objects merge, anything else replaces.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let map = target.as_object_mut().expect("an object");
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

async fn list_events(
    AxumState(cluster): AxumState<Shared>,
    Path(namespace): Path<String>,
    Query(query): Query<ListQuery>,
) -> Response {
    let cluster = lock(&cluster);
    answer((|| {
        authorize(&cluster, "list", "events", &namespace, None)?;
        let mut wanted = BTreeMap::new();
        for term in query
            .field_selector
            .as_deref()
            .unwrap_or("")
            .split(',')
            .filter(|t| !t.is_empty())
        {
            let (field, value) = term.split_once('=').ok_or_else(|| {
                refusal(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!("invalid field selector {term:?}"),
                    None,
                )
            })?;
            if !["involvedObject.kind", "involvedObject.name", "reason"].contains(&field) {
                return Err(refusal(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!("field label not supported: {field}"),
                    None,
                ));
            }
            wanted.insert(field.to_string(), value.to_string());
        }
        let items: Vec<Value> = cluster
            .events
            .iter()
            .filter(|e| e["metadata"]["namespace"] == namespace.as_str())
            .filter(|e| {
                wanted.iter().all(|(field, value)| {
                    let got = match field.as_str() {
                        "reason" => &e["reason"],
                        other => &e["involvedObject"][other.trim_start_matches("involvedObject.")],
                    };
                    got == value.as_str()
                })
            })
            .take(query.limit.filter(|l| *l > 0).unwrap_or(usize::MAX))
            .cloned()
            .collect();
        Ok(json!({"kind": "EventList", "apiVersion": "v1",
            "metadata": {"resourceVersion": cluster.resource_version.to_string()}, "items": items}))
    })())
}
