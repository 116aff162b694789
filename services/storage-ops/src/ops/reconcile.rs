//! The reconciler's work: finish volumes a crash left half-done, and find (and, by policy, remove)
//! backend objects Berth made that no volume owns.

use std::collections::HashMap;
use std::sync::Arc;

use domain::{OrchestratorKind, Orphan, OrphanList, VolumePhase};

use super::{Ops, reasons};
use crate::backend::{Backend, Found};
use crate::store::VolumeRow;

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

impl Ops {
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
