//! DeleteStorage: idempotent by name; the row is marked Deleting before the backend removes the object
//! and removed after, so a crash half-way leaves something the reconciler finishes.

use std::sync::Arc;

use domain::volume::ReclaimPolicy;
use domain::{DeleteResult, VolumePhase};

use super::{Ops, OpsError, reasons};
use crate::store::{StatusUpdate, VolumeRow};

impl Ops {
    /// DeleteStorage. `policy` overrides the volume's own `parameters.reclaimPolicy`.
    pub async fn delete(
        self: &Arc<Self>,
        namespace: String,
        name: String,
        policy: Option<ReclaimPolicy>,
    ) -> Result<DeleteResult, OpsError> {
        let this = self.clone();
        service_kit::request_id::spawn_in_request(async move {
            this.delete_locked(&namespace, &name, policy).await
        })
        .await?
    }

    async fn delete_locked(
        &self,
        namespace: &str,
        name: &str,
        policy: Option<ReclaimPolicy>,
    ) -> Result<DeleteResult, OpsError> {
        let _guard = self.locks.lock(namespace, name).await;
        let Some(row) = self.store.get(namespace, name).await? else {
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
            .await?
            .unwrap_or(row);
        self.finish_delete(row, retain).await?;
        Ok(DeleteResult { deleted: true })
    }

    /// Removes the backend object (unless retained), then the row.
    pub(super) async fn finish_delete(&self, row: VolumeRow, retain: bool) -> Result<(), OpsError> {
        // Retained, the object stays but is let go (a Kubernetes claim loses Berth's managed-by
        // label); a backend this service may no longer use keeps whatever mark it had.
        let backend = match retain {
            false => Some(self.stored_backend(&row)?),
            true => self.stored_backend(&row).ok(),
        };
        if let Some(backend) = backend {
            let object = row.object_ref();
            let done = if retain {
                backend.release(&object).await
            } else {
                backend.delete(&object).await
            };
            if let Err(e) = done {
                tracing::warn!(namespace = %row.namespace, name = %row.name, uid = %row.uid, error = %e, "backend failed to delete a volume");
                self.store
                    .set_status(
                        &row.uid,
                        StatusUpdate {
                            phase: VolumePhase::Deleting,
                            // Kept Retaining, so a retry retains it still.
                            reason: if retain {
                                reasons::RETAINING
                            } else {
                                reasons::BACKEND_ERROR
                            }
                            .into(),
                            message: e.message.clone(),
                            location: None,
                        },
                    )
                    .await?;
                return Err(OpsError::DeleteFailed {
                    namespace: row.namespace,
                    name: row.name,
                    cause: e,
                });
            }
        }
        self.store.remove(&row.uid, retain).await?;
        tracing::info!(namespace = %row.namespace, name = %row.name, uid = %row.uid, retain, "volume deleted");
        Ok(())
    }
}
