//! The reconciler's work: finish volumes a crash left half-done, take back the objects of adds that
//! never committed, and find (and, by policy, remove) backend objects Berth made that no volume owns.
//!
//! Three kinds of objects are told apart (see [`crate::backend`] and `add`):
//! - owned by a row: a volume's; one still marked uncommitted (its add was stopped between its
//!   commit and clearing the mark) is marked committed;
//! - uncommitted and owned by no row: made by an add that has not committed, or never will (a
//!   crash, a refusal). Never acknowledged to anyone, so it is removed whatever the orphan policy,
//!   under the volume's lock (an add in flight holds it from before its object exists until after
//!   its commit) and only once no row owns it; it is not listed as an orphan;
//! - committed and owned by no row: an orphan, left by something Berth cannot account for (a
//!   database restored from an older copy, another Berth on the same path, a hand-made directory),
//!   so it may hold data someone wants: reported, and removed only under
//!   [`OrphanPolicy::Delete`].

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use service_kit::metrics::{DurationHistogram, Family, Gauge};

use domain::{OrchestratorKind, Orphan, OrphanList, VolumePhase};

use super::{Ops, reasons};
use crate::backend::{Backend, Found, ObjectRef, Observed};
use crate::store::{StatusUpdate, VolumeRow};

/// Reconcile passes, with how long each took.
static RECONCILE_PASSES: Family<DurationHistogram> = Family::new(
    "berth_storage_reconcile_duration_seconds",
    "Time a reconcile pass took (finishing half-done volumes, scanning every backend).",
    &[],
)
.with_count(
    "berth_storage_reconcile_runs_total",
    "Reconcile passes run.",
);

/// Orphans the last pass found.
static ORPHANS_FOUND: Family<Gauge> = Family::new(
    "berth_storage_orphans",
    "Backend objects Berth made that no volume owns, as the last reconcile pass found them.",
    &[],
);

/// Volumes by orchestrator and phase, as the last pass counted them. Orchestrator names are the
/// operator's registrations and phases a closed set, so the series stay few.
static VOLUMES: Family<Gauge> = Family::new(
    "berth_storage_volumes",
    "Volumes by orchestrator and phase, as the last reconcile pass counted them.",
    &["orchestrator", "phase"],
);

/// The (orchestrator, phase) series the last pass set: one no longer counted is set to 0, not left
/// at its old value.
static VOLUME_SERIES: Mutex<BTreeSet<(String, String)>> = Mutex::new(BTreeSet::new());

/// One object a scan found, with what the reconciler needs to deal with it.
struct Scanned {
    orphan: Orphan,
    found: Found,
    backend: Arc<dyn Backend>,
    /// Whether a row (a volume, or a retained object's record) owns it.
    owned: bool,
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

    /// Scans every backend for the objects Berth made, each with whether a row owns it.
    async fn scan_objects(&self) -> (Vec<Scanned>, Vec<String>) {
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
                    // Said by the orchestrator's name: the backend's identity holds where it is (a
                    // path, an Engine's or API server's address), which no answer shows.
                    unscanned.push(format!("orchestrator {orchestrator:?}: {}", e.message))
                }
            }
        }
        // Read the owners after listing the backends: an object listed above as committed had its
        // row committed before its mark was cleared (or before it was made), so the row is in this
        // set unless it really has none (or was deleted since). Uncommitted ones are checked again,
        // under their volume's lock, before anything is done to them.
        let owners = match self.store.owner_uids().await {
            Ok(o) => o,
            Err(e) => {
                unscanned.push(format!("database: {e}"));
                return (Vec::new(), unscanned);
            }
        };
        let scanned = found
            .into_iter()
            .map(|(orchestrator, kind, found, backend)| Scanned {
                owned: owners.contains(&found.uid),
                orphan: Orphan {
                    orchestrator,
                    kind,
                    location: found.location.clone(),
                    uid: found.uid.clone(),
                    namespace: found.namespace.clone(),
                    name: found.name.clone(),
                },
                found,
                backend,
            })
            .collect();
        (scanned, unscanned)
    }

    /// Scans every backend for objects Berth made that no volume owns (uncommitted ones are not
    /// orphans: the reconciler takes them back).
    pub async fn find_orphans(&self) -> (Vec<(Orphan, Found, Arc<dyn Backend>)>, Vec<String>) {
        let (scanned, unscanned) = self.scan_objects().await;
        let orphans = scanned
            .into_iter()
            .filter(|s| !s.owned && !s.found.uncommitted)
            .map(|s| (s.orphan, s.found, s.backend))
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

    /// One reconcile pass: finish every half-done volume nobody is working on, settle the objects of
    /// adds that were stopped half-way, then deal with orphans as the policy says.
    pub async fn reconcile_once(&self) {
        let started = std::time::Instant::now();
        match self.store.unfinished().await {
            Ok(rows) => {
                for row in rows {
                    self.finish(row).await;
                }
            }
            Err(e) => tracing::error!(error = %e, "reconcile: cannot read unfinished volumes"),
        }
        self.recheck_observed().await;
        let (scanned, unscanned) = self.scan_objects().await;
        for problem in unscanned {
            tracing::warn!(%problem, "reconcile: a backend was not scanned");
        }
        let orphans = scanned
            .iter()
            .filter(|s| !s.owned && !s.found.uncommitted)
            .count();
        ORPHANS_FOUND
            .series(&[])
            .set(i64::try_from(orphans).unwrap_or(i64::MAX));
        for Scanned {
            orphan,
            found,
            backend,
            owned,
        } in scanned
        {
            match (owned, found.uncommitted) {
                (true, false) => {}
                (true, true) => self.mark_committed(&found, backend.as_ref()).await,
                (false, true) => self.take_back(&found, backend.as_ref()).await,
                (false, false) => self.orphan(&orphan, &found, backend.as_ref()).await,
            }
        }
        self.count_volumes().await;
        RECONCILE_PASSES.series(&[]).record(started.elapsed());
    }

    /// Ready volumes whose objects live on in the orchestrator's own time (Kubernetes claims): one
    /// deleted behind Berth's back, or Lost, makes its volume Failed, saying so, rather than Ready
    /// over nothing.
    async fn recheck_observed(&self) {
        let rows = match self.store.ready_of_kind(OrchestratorKind::Kubernetes).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "reconcile: cannot read the volumes to recheck");
                return;
            }
        };
        for row in rows {
            let Some(_guard) = self.locks.try_lock(&row.namespace, &row.name) else {
                continue; // someone is working on it right now
            };
            let Ok(backend) = self.stored_backend(&row) else {
                continue;
            };
            match backend.observe(&row.object_ref()).await {
                Ok(Observed::Failed { reason, message }) => {
                    tracing::warn!(namespace = %row.namespace, name = %row.name, uid = %row.uid, %message, "reconcile: a volume's object is gone");
                    let update = StatusUpdate {
                        phase: VolumePhase::Failed,
                        reason: reason.into(),
                        message,
                        location: None,
                    };
                    if let Err(e) = self.store.set_status(&row.uid, update).await {
                        tracing::warn!(error = %e, "reconcile: could not record a volume Failed");
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(namespace = %row.namespace, name = %row.name, error = %e, "reconcile: a volume's object could not be read")
                }
            }
        }
    }

    /// Sets the volumes-by-orchestrator-and-phase gauges from the store.
    async fn count_volumes(&self) {
        let counts = match self.store.volume_counts().await {
            Ok(counts) => counts,
            Err(e) => {
                tracing::warn!(error = %e, "reconcile: cannot count volumes for the metrics");
                return;
            }
        };
        let mut series = VOLUME_SERIES.lock().expect("volume series lock");
        let now: BTreeSet<(String, String)> = counts
            .iter()
            .map(|(orchestrator, phase, _)| (orchestrator.clone(), phase.clone()))
            .collect();
        for (orchestrator, phase) in series.difference(&now) {
            VOLUMES.series(&[orchestrator, phase]).set(0);
        }
        for (orchestrator, phase, n) in &counts {
            VOLUMES
                .series(&[orchestrator, phase])
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        *series = now;
    }

    /// An owned object still marked uncommitted: its add stopped between its commit and clearing the
    /// mark (or a power loss undid the clearing). Marked committed if its volume is Ready or its
    /// object retained (the backend looks at the object itself, so the size and kind are not needed).
    async fn mark_committed(&self, found: &Found, backend: &dyn Backend) {
        let Some(_guard) = self.locks.try_lock(&found.namespace, &found.name) else {
            return; // an add or delete is working on it right now
        };
        match self.store.get_uid(&found.uid).await {
            Ok(Some(row)) if row.phase == VolumePhase::Ready => {}
            // A Failed one is made again by its retry, a Deleting one removed.
            Ok(Some(_)) | Err(_) => return,
            // Retained by a delete since: kept, so usable.
            Ok(None) if matches!(self.store.owns(&found.uid).await, Ok(true)) => {}
            Ok(None) => return,
        }
        let object = ObjectRef {
            uid: found.uid.clone(),
            namespace: found.namespace.clone(),
            name: found.name.clone(),
            capacity_bytes: 0,
            file: false,
        };
        match backend.mark_committed(&object).await {
            Ok(()) => {
                tracing::info!(namespace = %found.namespace, name = %found.name, uid = %found.uid, "reconcile: marked a volume's object committed")
            }
            Err(e) => {
                tracing::warn!(namespace = %found.namespace, name = %found.name, uid = %found.uid, error = %e, "reconcile: could not mark a volume's object committed")
            }
        }
    }

    /// An uncommitted object no row owns: removed, unless an add holds its volume's lock (it may be
    /// about to commit) or a row owns it by now.
    async fn take_back(&self, found: &Found, backend: &dyn Backend) {
        let Some(_guard) = self.locks.try_lock(&found.namespace, &found.name) else {
            return;
        };
        // Under the lock no add of this name is in flight, and only such an add could commit a row
        // for this uid: so "no row" now stays true.
        if !matches!(self.store.owns(&found.uid).await, Ok(false)) {
            return;
        }
        match backend.remove_found(found).await {
            Ok(()) => {
                tracing::info!(namespace = %found.namespace, name = %found.name, uid = %found.uid, "reconcile: removed the object of an add that never committed")
            }
            Err(e) => {
                tracing::warn!(namespace = %found.namespace, name = %found.name, uid = %found.uid, error = %e, "reconcile: could not remove the object of an add that never committed")
            }
        }
    }

    /// An object Berth made that no row owns, dealt with as the policy says.
    async fn orphan(&self, orphan: &Orphan, found: &Found, backend: &dyn Backend) {
        if self.orphan_policy == OrphanPolicy::Report {
            tracing::warn!(orchestrator = %orphan.orchestrator, location = %orphan.location, uid = %orphan.uid, "orphan: a backend object Berth made that no volume owns");
            return;
        }
        // Owned-ness never comes back for a uid (uids are new per volume), but check once more
        // right before removing anything.
        if !matches!(self.store.owns(&found.uid).await, Ok(false)) {
            return;
        }
        match backend.remove_found(found).await {
            Ok(()) => {
                tracing::info!(orchestrator = %orphan.orchestrator, location = %orphan.location, uid = %orphan.uid, "orphan removed")
            }
            Err(e) => {
                tracing::warn!(location = %orphan.location, error = %e, "orphan could not be removed")
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
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    use client::{ClientOptions, ServiceClient};
    use domain::orchestrator::OrchestratorLimits;

    use super::*;
    use crate::backend::local::LocalBackend;
    use crate::store::{Store, now};

    /// Ops over a fresh store, with a registry that does not answer: the reconciler then scans the
    /// backends the stored volumes live on.
    async fn ops(dir: &Path, policy: OrphanPolicy) -> Ops {
        let store = Store::open(&dir.join("s.db")).await.unwrap();
        let registry = client::registry::Client::new(ServiceClient::new(
            "http://127.0.0.1:9",
            ClientOptions {
                attempts: 1,
                ..ClientOptions::default()
            },
        ));
        let limits = OrchestratorLimits {
            local_roots: vec![dir.display().to_string()],
            docker_endpoints: Vec::new(),
            kubernetes_servers: Vec::new(),
            in_cluster: false,
        };
        Ops::new(store, registry, policy, limits)
    }

    fn ready_row(base: &Path, name: &str, uid: &str, location: &str) -> VolumeRow {
        VolumeRow {
            uid: uid.into(),
            namespace: "team".into(),
            name: name.into(),
            orchestrator: "disk".into(),
            kind: OrchestratorKind::Local,
            backend_config: serde_json::json!({"basePath": base.display().to_string()}),
            capacity: "1Mi".into(),
            capacity_bytes: 1 << 20,
            replicas: 1,
            labels: Default::default(),
            parameters: Default::default(),
            spec_hash: String::new(),
            phase: VolumePhase::Ready,
            reason: reasons::PROVISIONED.into(),
            message: String::new(),
            location: location.into(),
            created_at: now(),
            updated_at: now(),
            resource_version: 0,
        }
    }

    fn object(name: &str) -> ObjectRef {
        ObjectRef {
            uid: uuid::Uuid::new_v4().to_string(),
            namespace: "team".into(),
            name: name.into(),
            capacity_bytes: 1 << 20,
            file: false,
        }
    }

    fn mode(at: &str) -> u32 {
        std::fs::symlink_metadata(at).unwrap().mode() & 0o7777
    }

    /// The crash windows of an add, under both policies: an object made but never committed is
    /// taken back, but never while an add of its name holds the lock (it may be about to commit);
    /// a committed one still marked is marked committed; neither is ever listed as an orphan.
    #[tokio::test]
    async fn uncommitted_objects_are_taken_back_unless_in_flight_and_committed_ones_marked() {
        for policy in [OrphanPolicy::Report, OrphanPolicy::Delete] {
            let tmp = tempfile::tempdir().unwrap();
            let base = tmp.path().join("vols");
            let ops = ops(tmp.path(), policy).await;
            let backend = LocalBackend::new(
                &base.display().to_string(),
                vec![tmp.path().display().to_string()].into(),
            );
            // Stopped between its commit and clearing the mark: a Ready row, an object of mode 000.
            let committed = object("committed");
            let at_committed = backend
                .create_uncommitted(&committed)
                .await
                .unwrap()
                .location;
            ops.store
                .insert(
                    ready_row(&base, "committed", &committed.uid, &at_committed),
                    None,
                )
                .await
                .unwrap();
            // Stopped before its commit: no row.
            let abandoned = object("abandoned");
            let at_abandoned = backend
                .create_uncommitted(&abandoned)
                .await
                .unwrap()
                .location;
            // In flight: made, not committed yet, its add holding the lock.
            let in_flight = object("in-flight");
            let at_in_flight = backend
                .create_uncommitted(&in_flight)
                .await
                .unwrap()
                .location;
            let add = ops.locks.lock("team", "in-flight").await;

            assert!(ops.orphans().await.items.is_empty(), "{policy:?}");
            ops.reconcile_once().await;
            assert_eq!(mode(&at_committed), 0o700, "{policy:?}");
            assert!(!Path::new(&at_abandoned).exists(), "{policy:?}");
            assert_eq!(
                mode(&at_in_flight),
                0,
                "{policy:?}: an add in flight keeps its object"
            );

            // The add commits, marks, and lets go: its volume stays.
            ops.store
                .insert(
                    ready_row(&base, "in-flight", &in_flight.uid, &at_in_flight),
                    None,
                )
                .await
                .unwrap();
            drop(add);
            ops.reconcile_once().await;
            assert_eq!(mode(&at_in_flight), 0o700, "{policy:?}");
            assert!(Path::new(&at_committed).is_dir(), "{policy:?}");
            assert!(ops.orphans().await.items.is_empty(), "{policy:?}");
        }
    }
}
