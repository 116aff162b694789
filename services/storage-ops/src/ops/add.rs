//! AddStorage: idempotent by (namespace, name) and spec, durable in one database commit.
//!
//! # Why one commit is enough
//!
//! A new volume's uid is chosen here, and its backend object is named after it. On a backend that
//! can mark an object uncommitted (the `local` one, see [`crate::backend`]) the store's writer makes
//! the object first, marked, then syncs the object's directory and commits the row, already Ready,
//! in that order (concurrent adds share both fsyncs), then clears the mark (not synced), and only
//! then answers. So a volume is acknowledged only once its row and its object are both on disk, and a
//! crash anywhere leaves one of:
//! - nothing, or an uncommitted object no row owns: never acknowledged, never shown to anyone; the
//!   reconciler removes it whatever the orphan policy, and the client's retry makes a new one;
//! - a committed row whose object is still marked: the reconciler clears the mark.
//!
//! The add holds the volume's lock from before the object is made until its mark is cleared, and
//! the reconciler removes an uncommitted object only under that lock, after seeing that no row owns
//! it: so it never takes the object of an add about to commit. At start nothing is in flight.
//!
//! Backends that cannot mark objects (Docker: its labels are fixed at creation) keep the older
//! order: a Provisioning row first, then the object, then Ready (two commits), so every object they
//! hold has had a row from before it existed.
//!
//! A backend failure is recorded as a Failed row either way: the same request retries it (and
//! finishes a row a crash left half-made) through [`Ops::provision`], and the row keeps its share
//! of the orchestrator's capacity until it is deleted.

use std::collections::BTreeMap;
use std::sync::Arc;

use domain::{Volume, VolumePhase, VolumeSpec};
use sha2::{Digest, Sha256};

use super::{Ops, OpsError, reasons, to_volume};
use crate::backend::{Backend, BackendError, NewObject, ObjectRef, Observed, capacity_limit};
use crate::store::{StatusUpdate, StoreError, VolumeRow, now};

/// The hash of a normalised spec: two requests are "the same volume" when these are equal.
pub fn spec_hash(spec: &VolumeSpec, orchestrator: &str) -> String {
    hash_of(
        spec.capacity.bytes(),
        spec.replicas,
        &spec.labels,
        &spec.parameters,
        orchestrator,
    )
}

/// [`spec_hash`] of a stored volume whose labels or capacity a patch changed.
pub(super) fn row_spec_hash(row: &VolumeRow) -> String {
    hash_of(
        row.capacity_bytes,
        row.replicas,
        &row.labels,
        &row.parameters,
        &row.orchestrator,
    )
}

fn hash_of(
    capacity_bytes: u64,
    replicas: u32,
    labels: &domain::Labels,
    parameters: &BTreeMap<String, String>,
    orchestrator: &str,
) -> String {
    let canonical = serde_json::json!({
        "capacityBytes": capacity_bytes,
        "replicas": replicas,
        "labels": labels,
        "parameters": with_defaults(parameters),
        "orchestrator": orchestrator,
    });
    hex::encode(Sha256::digest(canonical.to_string().as_bytes()))
}

/// `parameters` with every default spelled out (`format: directory`, `reclaimPolicy: Delete`): a
/// request that writes a default asks for the same volume as one that leaves it out, as the
/// document promises.
fn with_defaults(parameters: &BTreeMap<String, String>) -> BTreeMap<&str, &str> {
    let mut effective: BTreeMap<&str, &str> = BTreeMap::from([
        (domain::volume::params::FORMAT, "directory"),
        (domain::volume::params::RECLAIM_POLICY, "Delete"),
    ]);
    effective.extend(parameters.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    effective
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
    if with_defaults(&spec.parameters) != with_defaults(&row.parameters) {
        diffs.push(format!(
            "parameters are {} (asked {})",
            serde_json::to_string(&row.parameters).unwrap_or_default(),
            serde_json::to_string(&spec.parameters).unwrap_or_default()
        ));
    }
    diffs
}

impl Ops {
    /// AddStorage. `(volume, created)`: created is false when the volume was there with the same spec.
    pub async fn add(self: &Arc<Self>, spec: VolumeSpec) -> Result<(Volume, bool), OpsError> {
        // The capacity fits the store's signed 64-bit column: a parsed quantity is at most
        // `domain::quantity::MAX_BYTES`, the one limit every reader of a quantity shares.
        let this = self.clone();
        // In its own task: a caller hanging up must not stop the work between two writes.
        service_kit::request_id::spawn_in_request(async move { this.add_locked(spec).await })
            .await?
    }

    async fn add_locked(&self, spec: VolumeSpec) -> Result<(Volume, bool), OpsError> {
        let _guard = self.locks.lock(&spec.namespace, &spec.name).await;
        // The registry is asked beside the read, not after it: a new volume needs both. For one that
        // exists the question is dropped once the read answers, so a slow or absent registry does
        // not hold up a repeated add.
        let read = self.store.get(&spec.namespace, &spec.name);
        let resolve = self.resolve(spec.orchestrator.as_deref());
        tokio::pin!(read, resolve);
        let mut resolved = None;
        let existing = loop {
            tokio::select! {
                existing = &mut read => break existing,
                answer = &mut resolve, if resolved.is_none() => resolved = Some(answer),
            }
        };
        if let Some(row) = existing? {
            let diffs = differences(&row, &spec);
            if !diffs.is_empty() {
                return Err(OpsError::SpecConflict {
                    namespace: row.namespace,
                    name: row.name,
                    differences: diffs,
                });
            }
            return match row.phase {
                VolumePhase::Ready => Ok((to_volume(&row), false)),
                VolumePhase::Deleting => Err(OpsError::BeingDeleted {
                    namespace: row.namespace,
                    name: row.name,
                }),
                // Left half-made by a crash, or Failed before: the same request finishes it.
                VolumePhase::Pending | VolumePhase::Provisioning | VolumePhase::Failed => {
                    let backend = self.stored_backend(&row)?;
                    let row = self.provision(backend.as_ref(), row).await?;
                    Ok((to_volume(&row), false))
                }
            };
        }
        let orchestrator = match resolved {
            Some(answer) => answer,
            None => resolve.await,
        }?;
        if !orchestrator.storage_ops {
            return Err(OpsError::NoStorageOps {
                name: orchestrator.name,
                kind: orchestrator.kind,
            });
        }
        let backend = self
            .backends
            .for_orchestrator(&orchestrator.name, orchestrator.kind, &orchestrator.config)
            .map_err(OpsError::BackendRefused)?;
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
        let row = if let Some(object) = backend.new_object(&row.object_ref()) {
            self.create_then_commit(backend.as_ref(), object, row, limit)
                .await?
        } else {
            let row = self.store.insert(row, limit).await?;
            self.provision(backend.as_ref(), row).await?
        };
        tracing::info!(namespace = %row.namespace, name = %row.name, uid = %row.uid, orchestrator = %row.orchestrator, location = %row.location, "volume provisioned");
        Ok((to_volume(&row), true))
    }

    /// A new volume on a backend that marks uncommitted objects: the object made (uncommitted), its
    /// directory synced, the row committed (Ready) and the mark cleared, all by the store's writer
    /// (see the module docs). The caller holds the volume's lock throughout.
    async fn create_then_commit(
        &self,
        backend: &dyn Backend,
        object: Box<dyn NewObject>,
        mut row: VolumeRow,
        limit: Option<u64>,
    ) -> Result<VolumeRow, OpsError> {
        let object_ref = row.object_ref();
        let failed_row = row.clone();
        row.phase = VolumePhase::Ready;
        row.reason = reasons::PROVISIONED.into();
        row.message = String::new();
        match self.store.insert_with_object(row, limit, object).await {
            Ok(row) => Ok(row),
            // The request itself cannot be met here (a file larger than the file system allows):
            // the same request would fail again, so nothing is recorded and it is refused as such.
            Err(StoreError::Backend(e)) if e.code == domain::Code::InvalidArgument => {
                Err(OpsError::BackendRefused(e.into()))
            }
            // Nothing was made: recorded as any other backend failure, Failed, retried by the same
            // request.
            Err(StoreError::Backend(e)) => Err(self.record_failed(failed_row, limit, e).await),
            Err(e) => {
                // Refused (capacity, the name taken, the directory not synced): nothing was
                // committed, so the object is nobody's; take it back now. Any other failure leaves
                // it to the reconciler, which removes it once it sees no row owns it.
                let refused = matches!(
                    e,
                    StoreError::CapacityExhausted { .. }
                        | StoreError::QuotaExceeded { .. }
                        | StoreError::Exists(..)
                        | StoreError::DirectorySync { .. }
                );
                if refused
                    && let Err(removal) =
                        backend.remove_found(&found_uncommitted(&object_ref)).await
                {
                    tracing::warn!(namespace = %object_ref.namespace, name = %object_ref.name, uid = %object_ref.uid, error = %removal, "an uncommitted object could not be taken back; the reconciler will remove it");
                }
                match e {
                    // The backend's failure, recorded as any other: Failed, retried by the same
                    // request.
                    StoreError::DirectorySync { dir, cause } => {
                        let e =
                            crate::backend::BackendError::io("syncing a directory", &dir, &cause);
                        Err(self.record_failed(failed_row, limit, e).await)
                    }
                    e => Err(e.into()),
                }
            }
        }
    }

    /// Records a new volume the backend failed to make as Failed, and says so.
    async fn record_failed(
        &self,
        mut row: VolumeRow,
        limit: Option<u64>,
        e: crate::backend::BackendError,
    ) -> OpsError {
        // The backend took back what it had begun; if it could not, the object is uncommitted and
        // this row owns it: the retry's `create` marks it committed, a delete removes it.
        row.phase = VolumePhase::Failed;
        row.reason = reasons::BACKEND_ERROR.into();
        row.message.clone_from(&e.message);
        if let Err(store) = self.store.insert(row.clone(), limit).await {
            return store.into();
        }
        tracing::warn!(namespace = %row.namespace, name = %row.name, uid = %row.uid, error = %e, "backend failed to make a volume");
        OpsError::ProvisionFailed {
            namespace: row.namespace,
            name: row.name,
            cause: e,
        }
    }

    /// Asks the backend to make the object of `row`, a row already written, and records the outcome:
    /// Ready, or Failed with the backend's words (answered as the backend's code). Two commits in
    /// all (the row's, then this one), which is why new volumes on a backend that marks uncommitted
    /// objects do not come here.
    pub(super) async fn provision(
        &self,
        backend: &dyn Backend,
        row: VolumeRow,
    ) -> Result<VolumeRow, OpsError> {
        let object = row.object_ref();
        let mut outcome = backend.create(&object).await;
        // A backend whose objects become usable in their own time says where this one is: the
        // volume is Ready only once it is (a claim Bound), and a failure it sees is the volume's.
        let mut observed = None;
        if outcome.is_ok() && backend.observes() {
            match backend.observe(&object).await {
                Ok(Observed::Failed { reason, message }) => {
                    outcome = Err(BackendError::new(domain::Code::FailedPrecondition, message)
                        .with_detail(reason));
                }
                Ok(seen) => observed = Some(seen),
                Err(e) => {
                    observed = Some(Observed::Pending {
                        message: format!("made; its state could not be read yet: {}", e.message),
                    })
                }
            }
        }
        let update = match (&outcome, observed) {
            (Ok(_), Some(Observed::Pending { message })) => StatusUpdate {
                phase: VolumePhase::Pending,
                reason: reasons::BINDING.into(),
                message,
                location: outcome.as_ref().ok().cloned(),
            },
            (Ok(_), Some(Observed::Ready { location, message })) => StatusUpdate {
                phase: VolumePhase::Ready,
                reason: reasons::PROVISIONED.into(),
                message,
                location: Some(location),
            },
            (Ok(location), _) => StatusUpdate {
                phase: VolumePhase::Ready,
                reason: reasons::PROVISIONED.into(),
                message: String::new(),
                location: Some(location.clone()),
            },
            (Err(e), _) => StatusUpdate {
                phase: VolumePhase::Failed,
                reason: reasons::BACKEND_ERROR.into(),
                message: e.message.clone(),
                location: None,
            },
        };
        let updated = self
            .store
            .set_status(&row.uid, update)
            .await?
            .ok_or_else(|| OpsError::RemovedMeanwhile {
                namespace: row.namespace.clone(),
                name: row.name.clone(),
            })?;
        match outcome {
            Ok(_) => Ok(updated),
            Err(e) => {
                tracing::warn!(namespace = %row.namespace, name = %row.name, uid = %row.uid, error = %e, "backend failed to make a volume");
                Err(OpsError::ProvisionFailed {
                    namespace: row.namespace,
                    name: row.name,
                    cause: e,
                })
            }
        }
    }
}

/// What a scan would find for the uncommitted object of `v` (to remove it through the same path).
fn found_uncommitted(v: &ObjectRef) -> crate::backend::Found {
    crate::backend::Found {
        uid: v.uid.clone(),
        namespace: v.namespace.clone(),
        name: v.name.clone(),
        location: String::new(),
        uncommitted: true,
    }
}
