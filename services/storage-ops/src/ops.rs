//! StorageOps: AddStorage, DeleteStorage, ReadStorage, ListStorage, stats, orphans and the reconcile
//! pass, on top of the store, the registry and the backends.
//!
//! The order of writes is what makes a crash harmless: a row is written (`Provisioning`) before the
//! backend makes anything, and removed only after the backend has removed its object (`Deleting` in
//! between). So every backend object has had a row from before it existed, a row left half-way is
//! finished by [`Ops::reconcile_once`], and an object without a row can only be something Berth did not
//! make or a leftover the orphan scan reports. Work on one volume holds that volume's lock, and runs
//! in its own task, so a caller that hangs up cannot stop it half-way.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use client::ClientError;
use domain::volume::{ReclaimPolicy, VolumeMeta, VolumeSpecView, VolumeStatus};
use domain::{
    Code, Condition, DeleteResult, Orchestrator, OrchestratorKind, Orphan, OrphanList, Selector,
    Status, Volume, VolumeList, VolumePhase, VolumeSpec, VolumeStats,
};
use hmac::{Hmac, Mac};
use service_kit::ApiError;
use sha2::{Digest, Sha256};

use crate::backend::{Backend, Backends, Found, ObjectRef, capacity_limit};
use crate::locks::KeyLocks;
use crate::store::{StatusUpdate, Store, StoreError, VolumeRow, now};

/// The most rows one ListStorage call examines when a label selector filters them out; past this it
/// answers the matches it has with a `continue` token, so one call's cost stays bounded.
pub const MAX_SCAN: usize = 10_000;
/// Rows fetched per round when a label selector filters.
const SELECTOR_CHUNK: u32 = 500;

/// Reasons written into `status.reason`.
pub mod reasons {
    /// The backend is making it.
    pub const PROVISIONING: &str = "Provisioning";
    /// The backend made it.
    pub const PROVISIONED: &str = "Provisioned";
    /// The backend failed; `message` has its words.
    pub const BACKEND_ERROR: &str = "BackendError";
    /// Being deleted, backend object too.
    pub const DELETING: &str = "Deleting";
    /// Being deleted, backend object kept (`reclaimPolicy: Retain`).
    pub const RETAINING: &str = "Retaining";
}

/// What the reconciler does with orphans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrphanPolicy {
    /// List them at `GET /v1/orphans` and in the log.
    Report,
    /// Also remove them.
    Delete,
}

impl OrphanPolicy {
    /// The policy's name.
    pub fn as_str(self) -> &'static str {
        match self {
            OrphanPolicy::Report => "report",
            OrphanPolicy::Delete => "delete",
        }
    }
}

impl std::str::FromStr for OrphanPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "report" => Ok(OrphanPolicy::Report),
            "delete" => Ok(OrphanPolicy::Delete),
            _ => Err("must be report or delete".into()),
        }
    }
}

/// A ListStorage request, parsed.
#[derive(Debug, Clone, Default)]
pub struct ListRequest {
    /// Only this namespace (all when absent).
    pub namespace: Option<String>,
    /// Only volumes whose labels match.
    pub selector: Option<Selector>,
    /// Page size.
    pub limit: u32,
    /// Start after this key.
    pub after: Option<(String, String)>,
}

/// The service's logic.
pub struct Ops {
    store: Store,
    tokens: ContinueTokens,
    registry: client::registry::Client,
    backends: Backends,
    locks: KeyLocks,
    orphan_policy: OrphanPolicy,
}

/// ListStorage's `continue` tokens: a position, signed so that a token this service did not issue
/// (a forged or edited position) is refused instead of being taken as a place to start from.
///
/// A token is `base64url([namespace, name]) "." base64url(HMAC-SHA256(key, first part))`, the MAC cut
/// to [`ContinueTokens::MAC_BYTES`]. The key lives in the service's database, so a restart (or a second
/// process on the same database) takes the tokens the last one issued.
#[derive(Clone)]
pub struct ContinueTokens {
    key: Vec<u8>,
}

impl std::fmt::Debug for ContinueTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ContinueTokens([REDACTED])")
    }
}

impl ContinueTokens {
    /// Bytes of the MAC a token carries: 128 bits, beyond guessing.
    pub const MAC_BYTES: usize = 16;

    /// Tokens signed with `key`.
    pub fn new(key: &[u8]) -> Self {
        ContinueTokens { key: key.to_vec() }
    }

    fn mac(&self) -> Hmac<Sha256> {
        <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC takes a key of any length")
    }

    /// The token for the position after `namespace/name`.
    pub fn encode(&self, namespace: &str, name: &str) -> String {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let position = b64.encode(serde_json::to_vec(&[namespace, name]).unwrap_or_default());
        let mut mac = self.mac();
        mac.update(position.as_bytes());
        let tag = mac.finalize().into_bytes();
        format!("{position}.{}", b64.encode(&tag[..Self::MAC_BYTES]))
    }

    /// The position a token this service issued stands for; any other token is a 400.
    pub fn decode(&self, token: &str) -> Result<(String, String), Status> {
        let bad = || {
            Status::invalid(
                "continue",
                "is not a token this service issued; start again without it",
            )
        };
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (position, tag) = token.split_once('.').ok_or_else(bad)?;
        let tag = b64.decode(tag).map_err(|_| bad())?;
        if tag.len() != Self::MAC_BYTES {
            return Err(bad());
        }
        let mut mac = self.mac();
        mac.update(position.as_bytes());
        // Compared in constant time: a caller learns nothing from how fast a guess was refused.
        mac.verify_truncated_left(&tag).map_err(|_| bad())?;
        let bytes = b64.decode(position).map_err(|_| bad())?;
        let [namespace, name]: [String; 2] = serde_json::from_slice(&bytes).map_err(|_| bad())?;
        Ok((namespace, name))
    }
}

/// The hash of a normalised spec: two requests are "the same volume" when these are equal.
pub fn spec_hash(spec: &VolumeSpec, orchestrator: &str) -> String {
    let canonical = serde_json::json!({
        "capacityBytes": spec.capacity.bytes(),
        "replicas": spec.replicas,
        "labels": spec.labels,
        "parameters": spec.parameters,
        "orchestrator": orchestrator,
    });
    hex::encode(Sha256::digest(canonical.to_string().as_bytes()))
}

/// How `spec` differs from the stored volume, field by field; empty when it asks for the same volume.
/// An absent orchestrator asks for "whichever it is on".
pub fn differences(row: &VolumeRow, spec: &VolumeSpec) -> Vec<String> {
    let mut diffs = Vec::new();
    if spec.capacity.bytes() != row.capacity_bytes {
        diffs.push(format!(
            "capacity is {} (asked {})",
            row.capacity, spec.capacity
        ));
    }
    if spec.replicas != row.replicas {
        diffs.push(format!(
            "replicas is {} (asked {})",
            row.replicas, spec.replicas
        ));
    }
    if let Some(o) = &spec.orchestrator
        && *o != row.orchestrator
    {
        diffs.push(format!(
            "orchestrator is {:?} (asked {o:?})",
            row.orchestrator
        ));
    }
    if spec.labels != row.labels {
        diffs.push(format!(
            "labels are {} (asked {})",
            serde_json::to_string(&row.labels).unwrap_or_default(),
            serde_json::to_string(&spec.labels).unwrap_or_default()
        ));
    }
    if spec.parameters != row.parameters {
        diffs.push(format!(
            "parameters are {} (asked {})",
            serde_json::to_string(&row.parameters).unwrap_or_default(),
            serde_json::to_string(&spec.parameters).unwrap_or_default()
        ));
    }
    diffs
}

/// The wire form of a stored volume.
pub fn to_volume(row: &VolumeRow) -> Volume {
    let ready = match row.phase {
        VolumePhase::Ready => "True",
        VolumePhase::Failed | VolumePhase::Deleting => "False",
        VolumePhase::Pending | VolumePhase::Provisioning => "Unknown",
    };
    Volume {
        metadata: VolumeMeta {
            name: row.name.clone(),
            namespace: row.namespace.clone(),
            uid: row.uid.clone(),
            labels: row.labels.clone(),
            creation_timestamp: row.created_at.clone(),
            resource_version: row.resource_version.to_string(),
        },
        spec: VolumeSpecView {
            orchestrator: row.orchestrator.clone(),
            capacity: row.capacity.clone(),
            capacity_bytes: row.capacity_bytes,
            replicas: row.replicas,
            parameters: row.parameters.clone(),
        },
        status: VolumeStatus {
            phase: row.phase,
            reason: row.reason.clone(),
            message: row.message.clone(),
            location: row.location.clone(),
            conditions: vec![Condition {
                kind: "Ready".into(),
                status: ready.into(),
                reason: row.reason.clone(),
                message: row.message.clone(),
                last_transition_time: Some(row.updated_at.clone()),
            }],
        },
    }
}

fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::Exists(ns, name) => ApiError::from_code(
            Code::AlreadyExists,
            format!("volume {ns}/{name} already exists"),
        ),
        e @ StoreError::CapacityExhausted { .. } => {
            ApiError::from_code(Code::ResourceExhausted, e.to_string())
        }
        StoreError::Closed => ApiError::from_code(Code::Unavailable, "storage-ops is stopping"),
        e @ StoreError::Db(_) => ApiError::internal(e),
    }
}

impl Ops {
    /// The logic over `store`, resolving orchestrators through `registry` and using only the
    /// backends `limits` allows.
    pub fn new(
        store: Store,
        registry: client::registry::Client,
        orphan_policy: OrphanPolicy,
        limits: domain::orchestrator::OrchestratorLimits,
    ) -> Self {
        let backends = Backends::new(store.instance(), limits);
        Ops {
            tokens: ContinueTokens::new(store.continue_key()),
            store,
            registry,
            backends,
            locks: KeyLocks::default(),
            orphan_policy,
        }
    }

    /// The `continue` token for the position after `namespace/name`.
    pub fn encode_continue(&self, namespace: &str, name: &str) -> String {
        self.tokens.encode(namespace, name)
    }

    /// The position of a `continue` token this service issued; any other is a 400.
    pub fn decode_continue(&self, token: &str) -> Result<(String, String), Status> {
        self.tokens.decode(token)
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The registry client.
    pub fn registry(&self) -> &client::registry::Client {
        &self.registry
    }

    /// The 503 for a registry that failed. The caller learns that it failed and how, never where it
    /// is (an internal host and port) or what it said; the log gets all of it with the request id.
    fn registry_down(&self, e: &ClientError) -> ApiError {
        ApiError::from_code(
            Code::Unavailable,
            format!(
                "the orchestrator registry is unavailable ({}); nothing was changed, retry later",
                e.public_reason()
            ),
        )
        .with_retry_after(e.retry_after.unwrap_or(Duration::from_secs(1)))
        .with_cause(e.clone())
    }

    /// The orchestrator `name`, or `None` when it is not registered; 503 when the registry fails.
    async fn lookup(&self, name: &str) -> Result<Option<Orchestrator>, ApiError> {
        match self.registry.get(name).await {
            Ok(o) => Ok(Some(o)),
            Err(e) if e.code() == Code::NotFound => Ok(None),
            Err(e) => Err(self.registry_down(&e)),
        }
    }

    /// The orchestrator a profile names, or the registry's default.
    async fn resolve(&self, name: Option<&str>) -> Result<Orchestrator, ApiError> {
        match name {
            Some(name) => self.lookup(name).await?.ok_or_else(|| {
                Status::invalid(
                    "orchestrator",
                    format!("'{name}' is not a registered orchestration provider"),
                )
                .into()
            }),
            None => match self.registry.default_orchestrator().await {
                Ok(o) => Ok(o),
                Err(e) if e.code() == Code::NotFound => Err(ApiError::from_code(
                    Code::FailedPrecondition,
                    "the profile names no orchestrator and the registry has no default one; name one, or register one with default: true",
                )),
                Err(e) => Err(self.registry_down(&e)),
            },
        }
    }

    fn stored_backend(&self, row: &VolumeRow) -> Result<Arc<dyn Backend>, ApiError> {
        self.backends
            .for_orchestrator(&row.orchestrator, row.kind, &row.backend_config)
            .map_err(ApiError::new)
    }

    /// AddStorage. `(volume, created)`: created is false when the volume was there with the same spec.
    pub async fn add(self: &Arc<Self>, spec: VolumeSpec) -> Result<(Volume, bool), ApiError> {
        // The capacity fits the store's signed 64-bit column: a parsed quantity is at most
        // `domain::quantity::MAX_BYTES`, the one limit every reader of a quantity shares.
        let this = self.clone();
        // In its own task: a caller hanging up must not stop the work between two writes.
        service_kit::request_id::spawn_in_request(async move { this.add_locked(spec).await })
            .await
            .map_err(ApiError::internal)?
    }

    async fn add_locked(&self, spec: VolumeSpec) -> Result<(Volume, bool), ApiError> {
        let _guard = self.locks.lock(&spec.namespace, &spec.name).await;
        if let Some(row) = self
            .store
            .get(&spec.namespace, &spec.name)
            .await
            .map_err(store_error)?
        {
            let diffs = differences(&row, &spec);
            if !diffs.is_empty() {
                return Err(ApiError::from_code(
                    Code::AlreadyExists,
                    format!(
                        "volume {}/{} already exists with a different spec: {}; it was left as it is",
                        row.namespace,
                        row.name,
                        diffs.join("; ")
                    ),
                ));
            }
            return match row.phase {
                VolumePhase::Ready => Ok((to_volume(&row), false)),
                VolumePhase::Deleting => Err(ApiError::from_code(
                    Code::Aborted,
                    format!(
                        "volume {}/{} is being deleted; add it again once the delete is done",
                        row.namespace, row.name
                    ),
                )),
                // Left half-made by a crash, or Failed before: the same request finishes it.
                VolumePhase::Pending | VolumePhase::Provisioning | VolumePhase::Failed => {
                    let backend = self.stored_backend(&row)?;
                    let row = self.provision(backend.as_ref(), row).await?;
                    Ok((to_volume(&row), false))
                }
            };
        }
        let orchestrator = self.resolve(spec.orchestrator.as_deref()).await?;
        if !orchestrator.storage_ops {
            return Err(ApiError::from_code(
                Code::FailedPrecondition,
                format!(
                    "orchestrator {:?} is of kind {}, which has no StorageOps",
                    orchestrator.name, orchestrator.kind
                ),
            ));
        }
        let backend = self
            .backends
            .for_orchestrator(&orchestrator.name, orchestrator.kind, &orchestrator.config)
            .map_err(ApiError::new)?;
        let stamp = now();
        let row = VolumeRow {
            uid: uuid::Uuid::new_v4().to_string(),
            namespace: spec.namespace.clone(),
            name: spec.name.clone(),
            orchestrator: orchestrator.name.clone(),
            kind: orchestrator.kind,
            backend_config: orchestrator.config.clone(),
            capacity: spec.capacity.to_string(),
            capacity_bytes: spec.capacity.bytes(),
            replicas: spec.replicas,
            labels: spec.labels.clone(),
            parameters: spec.parameters.clone(),
            spec_hash: spec_hash(&spec, &orchestrator.name),
            phase: VolumePhase::Provisioning,
            reason: reasons::PROVISIONING.into(),
            message: format!("the {} backend is making it", orchestrator.kind),
            location: String::new(),
            created_at: stamp.clone(),
            updated_at: stamp,
            resource_version: 0,
        };
        let limit = capacity_limit(orchestrator.kind, &orchestrator.config);
        let row = self.store.insert(row, limit).await.map_err(store_error)?;
        let row = self.provision(backend.as_ref(), row).await?;
        tracing::info!(namespace = %row.namespace, name = %row.name, uid = %row.uid, orchestrator = %row.orchestrator, location = %row.location, "volume provisioned");
        Ok((to_volume(&row), true))
    }

    /// Asks the backend to make `row`'s object and records the outcome: Ready, or Failed with the
    /// backend's words (answered as the backend's code).
    async fn provision(
        &self,
        backend: &dyn Backend,
        row: VolumeRow,
    ) -> Result<VolumeRow, ApiError> {
        let outcome = backend.create(&ObjectRef::of(&row)).await;
        let update = match &outcome {
            Ok(location) => StatusUpdate {
                phase: VolumePhase::Ready,
                reason: reasons::PROVISIONED.into(),
                message: String::new(),
                location: Some(location.clone()),
            },
            Err(e) => StatusUpdate {
                phase: VolumePhase::Failed,
                reason: reasons::BACKEND_ERROR.into(),
                message: e.message.clone(),
                location: None,
            },
        };
        let updated = self
            .store
            .set_status(&row.uid, update)
            .await
            .map_err(store_error)?
            .ok_or_else(|| {
                ApiError::from_code(
                    Code::Aborted,
                    format!(
                        "volume {}/{} was removed meanwhile",
                        row.namespace, row.name
                    ),
                )
            })?;
        match outcome {
            Ok(_) => Ok(updated),
            Err(e) => {
                tracing::warn!(namespace = %row.namespace, name = %row.name, uid = %row.uid, error = %e, "backend failed to make a volume");
                Err(ApiError::from_code(
                    e.code,
                    format!(
                        "volume {}/{} failed: {}; it is kept as Failed (GET shows it, the same AddStorage retries it, DeleteStorage removes it)",
                        row.namespace, row.name, e.message
                    ),
                )
                .with_cause(e))
            }
        }
    }

    /// DeleteStorage. `policy` overrides the volume's own `parameters.reclaimPolicy`.
    pub async fn delete(
        self: &Arc<Self>,
        namespace: String,
        name: String,
        policy: Option<ReclaimPolicy>,
    ) -> Result<DeleteResult, ApiError> {
        let this = self.clone();
        service_kit::request_id::spawn_in_request(async move {
            this.delete_locked(&namespace, &name, policy).await
        })
        .await
        .map_err(ApiError::internal)?
    }

    async fn delete_locked(
        &self,
        namespace: &str,
        name: &str,
        policy: Option<ReclaimPolicy>,
    ) -> Result<DeleteResult, ApiError> {
        let _guard = self.locks.lock(namespace, name).await;
        let Some(row) = self.store.get(namespace, name).await.map_err(store_error)? else {
            return Ok(DeleteResult { deleted: false });
        };
        // The seed resolves the orchestrator on every delete; a registry that does not answer stops
        // the delete before anything changes. One deregistered since still lets its volumes go: the
        // object lives where the stored config says.
        self.lookup(&row.orchestrator).await?;
        let retained_before =
            row.phase == VolumePhase::Deleting && row.reason == reasons::RETAINING;
        let retain_by_spec = row
            .parameters
            .get(domain::volume::params::RECLAIM_POLICY)
            .is_some_and(|p| p == "Retain");
        let retain = match policy {
            Some(p) => p == ReclaimPolicy::Retain,
            None => retained_before || retain_by_spec,
        };
        // A volume whose backend this service may not use (any more) is left as it is, not marked
        // Deleting for a reconciler that could never finish it.
        if !retain {
            self.stored_backend(&row)?;
        }
        let row = self
            .store
            .set_status(
                &row.uid,
                StatusUpdate {
                    phase: VolumePhase::Deleting,
                    reason: if retain {
                        reasons::RETAINING
                    } else {
                        reasons::DELETING
                    }
                    .into(),
                    message: String::new(),
                    location: None,
                },
            )
            .await
            .map_err(store_error)?
            .unwrap_or(row);
        self.finish_delete(row, retain).await?;
        Ok(DeleteResult { deleted: true })
    }

    /// Removes the backend object (unless retained), then the row.
    async fn finish_delete(&self, row: VolumeRow, retain: bool) -> Result<(), ApiError> {
        if !retain {
            let backend = self.stored_backend(&row)?;
            if let Err(e) = backend.delete(&ObjectRef::of(&row)).await {
                tracing::warn!(namespace = %row.namespace, name = %row.name, uid = %row.uid, error = %e, "backend failed to delete a volume");
                self.store
                    .set_status(
                        &row.uid,
                        StatusUpdate {
                            phase: VolumePhase::Deleting,
                            reason: reasons::BACKEND_ERROR.into(),
                            message: e.message.clone(),
                            location: None,
                        },
                    )
                    .await
                    .map_err(store_error)?;
                return Err(ApiError::from_code(
                    e.code,
                    format!(
                        "deleting volume {}/{} failed: {}; it stays Deleting and the reconciler retries",
                        row.namespace, row.name, e.message
                    ),
                )
                .with_cause(e));
            }
        }
        self.store
            .remove(&row.uid, retain)
            .await
            .map_err(store_error)?;
        tracing::info!(namespace = %row.namespace, name = %row.name, uid = %row.uid, retain, "volume deleted");
        Ok(())
    }

    /// ReadStorage.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Volume, ApiError> {
        self.store
            .get(namespace, name)
            .await
            .map_err(store_error)?
            .map(|r| to_volume(&r))
            .ok_or_else(|| {
                ApiError::new(Status::not_found(format!(
                    "volume {namespace}/{name} not found"
                )))
            })
    }

    /// ListStorage: one keyset page; with a selector, rounds of rows until the page is full, the
    /// table ends, or [`MAX_SCAN`] rows were examined.
    pub async fn list(&self, req: ListRequest) -> Result<VolumeList, ApiError> {
        let limit = req.limit.max(1) as usize;
        let mut after = req.after.clone();
        let mut items = Vec::new();
        let mut scanned = 0usize;
        loop {
            let want = match &req.selector {
                None => (limit - items.len() + 1) as u32,
                Some(_) => SELECTOR_CHUNK,
            };
            let rows = self
                .store
                .page(
                    req.namespace.as_deref(),
                    after.as_ref().map(|(a, b)| (a.as_str(), b.as_str())),
                    want,
                )
                .await
                .map_err(store_error)?;
            let exhausted = rows.len() < want as usize;
            let fetched = rows.len();
            for (i, row) in rows.into_iter().enumerate() {
                scanned += 1;
                if req.selector.as_ref().is_none_or(|s| s.matches(&row.labels)) {
                    items.push(to_volume(&row));
                }
                after = Some((row.namespace, row.name));
                if items.len() == limit {
                    let more = i + 1 < fetched || !exhausted;
                    return Ok(VolumeList {
                        items,
                        continue_token: more
                            .then(|| after.as_ref().map(|(a, b)| self.encode_continue(a, b)))
                            .flatten(),
                    });
                }
            }
            if exhausted {
                return Ok(VolumeList {
                    items,
                    continue_token: None,
                });
            }
            if scanned >= MAX_SCAN {
                return Ok(VolumeList {
                    items,
                    continue_token: after.as_ref().map(|(a, b)| self.encode_continue(a, b)),
                });
            }
        }
    }

    /// What a volume uses.
    pub async fn stats(&self, namespace: &str, name: &str) -> Result<VolumeStats, ApiError> {
        let row = self
            .store
            .get(namespace, name)
            .await
            .map_err(store_error)?
            .ok_or_else(|| {
                ApiError::new(Status::not_found(format!(
                    "volume {namespace}/{name} not found"
                )))
            })?;
        if row.phase != VolumePhase::Ready {
            return Err(ApiError::from_code(
                Code::FailedPrecondition,
                format!(
                    "volume {namespace}/{name} is {}, not Ready; it has no usage to measure",
                    row.phase
                ),
            ));
        }
        let backend = self.stored_backend(&row)?;
        let usage = backend
            .usage(&ObjectRef::of(&row))
            .await
            .map_err(|e| match e.code {
                Code::NotFound => ApiError::from_code(
                    Code::DataLoss,
                    format!(
                        "volume {namespace}/{name} is Ready but its backend object is gone: {}",
                        e.message
                    ),
                )
                .with_cause(e),
                _ => ApiError::new(e.clone().into()).with_cause(e),
            })?;
        Ok(VolumeStats {
            namespace: row.namespace,
            name: row.name,
            uid: row.uid,
            capacity_bytes: row.capacity_bytes,
            used_bytes: usage.used_bytes,
            available_bytes: usage.available_bytes,
            location: row.location,
            source: usage.source.to_string(),
        })
    }

    /// Every backend worth scanning: those of registered orchestrators and those stored volumes live
    /// on, one per identity. Also what could not be listed.
    async fn scan_targets(
        &self,
    ) -> (
        Vec<(String, OrchestratorKind, Arc<dyn Backend>)>,
        Vec<String>,
    ) {
        let mut unscanned = Vec::new();
        let mut candidates = Vec::new();
        match self.registry.list().await {
            Ok(list) => candidates.extend(
                list.items
                    .into_iter()
                    .filter(|o| o.storage_ops)
                    .map(|o| (o.name, o.kind, o.config)),
            ),
            Err(e) => {
                tracing::warn!(error = %e, "orphan scan: the registry did not list orchestrators");
                unscanned.push(format!(
                    "registry: cannot list orchestrators ({}); only backends that hold volumes were scanned",
                    e.public_reason()
                ))
            }
        }
        match self.store.backend_targets().await {
            Ok(targets) => candidates.extend(targets),
            Err(e) => unscanned.push(format!("database: {e}")),
        }
        let mut seen = HashMap::new();
        for (name, kind, config) in candidates {
            if let Ok(backend) = self.backends.for_orchestrator(&name, kind, &config) {
                seen.entry(backend.identity())
                    .or_insert((name, kind, backend));
            }
        }
        let mut targets: Vec<_> = seen.into_values().collect();
        targets.sort_by(|a, b| a.0.cmp(&b.0));
        (targets, unscanned)
    }

    /// Scans every backend for objects Berth made that no volume owns.
    pub async fn find_orphans(&self) -> (Vec<(Orphan, Found, Arc<dyn Backend>)>, Vec<String>) {
        let (targets, mut unscanned) = self.scan_targets().await;
        let mut found = Vec::new();
        for (orchestrator, kind, backend) in targets {
            match backend.scan().await {
                Ok(objects) => found.extend(
                    objects
                        .into_iter()
                        .map(|f| (orchestrator.clone(), kind, f, backend.clone())),
                ),
                Err(e) => {
                    tracing::warn!(backend = %backend.identity(), error = %e, "orphan scan: a backend could not be listed");
                    unscanned.push(format!("{}: {}", backend.identity(), e.message))
                }
            }
        }
        // Read the owners after listing the backends: a row is written before its object is made,
        // so an object listed above has its row in this set unless it really has none.
        let owners = match self.store.owner_uids().await {
            Ok(o) => o,
            Err(e) => {
                unscanned.push(format!("database: {e}"));
                return (Vec::new(), unscanned);
            }
        };
        let orphans = found
            .into_iter()
            .filter(|(_, _, f, _)| !owners.contains(&f.uid))
            .map(|(orchestrator, kind, f, backend)| {
                (
                    Orphan {
                        orchestrator,
                        kind,
                        location: f.location.clone(),
                        uid: f.uid.clone(),
                        namespace: f.namespace.clone(),
                        name: f.name.clone(),
                    },
                    f,
                    backend,
                )
            })
            .collect();
        (orphans, unscanned)
    }

    /// `GET /v1/orphans`: a fresh scan.
    pub async fn orphans(&self) -> OrphanList {
        let (orphans, unscanned) = self.find_orphans().await;
        OrphanList {
            items: orphans.into_iter().map(|(o, _, _)| o).collect(),
            policy: self.orphan_policy.as_str().into(),
            unscanned,
        }
    }

    /// One reconcile pass: finish every half-done volume nobody is working on, then deal with orphans
    /// as the policy says.
    pub async fn reconcile_once(&self) {
        match self.store.unfinished().await {
            Ok(rows) => {
                for row in rows {
                    self.finish(row).await;
                }
            }
            Err(e) => tracing::error!(error = %e, "reconcile: cannot read unfinished volumes"),
        }
        let (orphans, unscanned) = self.find_orphans().await;
        for problem in unscanned {
            tracing::warn!(%problem, "reconcile: a backend was not scanned");
        }
        for (orphan, found, backend) in orphans {
            if self.orphan_policy == OrphanPolicy::Report {
                tracing::warn!(orchestrator = %orphan.orchestrator, location = %orphan.location, uid = %orphan.uid, "orphan: a backend object Berth made that no volume owns");
                continue;
            }
            // Owned-ness never comes back for a uid (uids are new per volume), but check once more
            // right before removing anything.
            if !matches!(self.store.owns(&found.uid).await, Ok(false)) {
                continue;
            }
            match backend.remove_found(&found).await {
                Ok(()) => {
                    tracing::info!(orchestrator = %orphan.orchestrator, location = %orphan.location, uid = %orphan.uid, "orphan removed")
                }
                Err(e) => {
                    tracing::warn!(location = %orphan.location, error = %e, "orphan could not be removed")
                }
            }
        }
    }

    async fn finish(&self, row: VolumeRow) {
        let Some(_guard) = self.locks.try_lock(&row.namespace, &row.name) else {
            return; // someone is working on it right now
        };
        let Ok(Some(row)) = self.store.get_uid(&row.uid).await else {
            return;
        };
        let (namespace, name, uid) = (row.namespace.clone(), row.name.clone(), row.uid.clone());
        let result = match row.phase {
            VolumePhase::Pending | VolumePhase::Provisioning => match self.stored_backend(&row) {
                Ok(backend) => self.provision(backend.as_ref(), row).await.map(|_| ()),
                Err(e) => Err(e),
            },
            VolumePhase::Deleting => {
                let retain = row.reason == reasons::RETAINING;
                self.finish_delete(row, retain).await
            }
            VolumePhase::Ready | VolumePhase::Failed => Ok(()),
        };
        match result {
            Ok(()) => {
                tracing::info!(%namespace, %name, %uid, "reconcile: finished a half-done volume")
            }
            Err(e) => {
                tracing::warn!(%namespace, %name, %uid, error = %e, "reconcile: could not finish a volume")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_foreign_ones_are_refused() {
        use base64::Engine as _;
        let tokens = ContinueTokens::new(b"key one");
        let t = tokens.encode("ns", "a.b");
        assert_eq!(tokens.decode(&t).unwrap(), ("ns".into(), "a.b".into()));
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (position, mac) = t.split_once('.').unwrap();
        let unsigned = b64.encode(br#"["../..","%"]"#);
        let edited = format!("{}.{mac}", b64.encode(br#"["ns","z"]"#));
        for foreign in [
            "not-a-token".to_string(),
            unsigned.clone(),
            format!("{unsigned}.{mac}"),
            edited,
            format!("{position}."),
            format!("{position}.{}", &mac[..mac.len() - 2]),
            ContinueTokens::new(b"key two").encode("ns", "a.b"),
        ] {
            let e = tokens.decode(&foreign).unwrap_err();
            assert_eq!(e.code, Code::InvalidArgument);
            assert!(e.message.starts_with("continue: "), "{}", e.message);
        }
        assert_eq!(format!("{tokens:?}"), "ContinueTokens([REDACTED])");
    }
}
