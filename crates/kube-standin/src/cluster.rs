//! The cluster's state: namespaces, claims, events, the faults set, what was asked, and the
//! changes watches follow. Apart because every handler and the test's handle share it, behind one
//! lock, and the rule that every change of a claim is recorded for watches lives with it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};

use crate::faults::Faults;

#[derive(Default)]
pub(crate) struct Cluster {
    pub(crate) namespaces: BTreeSet<String>,
    /// Claims by (namespace, name), as stored.
    pub(crate) claims: BTreeMap<(String, String), Value>,
    pub(crate) events: Vec<Value>,
    /// Claims a pod mounts: their deletion waits on the pvc-protection finalizer.
    pub(crate) in_use: BTreeSet<(String, String)>,
    pub(crate) resource_version: u64,
    pub(crate) faults: Faults,
    /// Every call, `METHOD path?query`, for tests that check what was asked.
    pub(crate) calls: Vec<String>,
    /// Every object a client sent to be created, as sent: what a schema check holds the client to.
    pub(crate) sent: Vec<Value>,
    /// The claims' changes, oldest first, for watches: at most [`WATCH_LOG`] of them.
    pub(crate) changes: std::collections::VecDeque<Change>,
    /// The newest change's resourceVersion, for watches to wait on.
    pub(crate) newest: Option<tokio::sync::watch::Sender<u64>>,
    /// StorageClasses whose claims may grow (`allowVolumeExpansion: true`).
    pub(crate) expandable: BTreeSet<String>,
}

/// Changes a watch can start from; an older resourceVersion is 410 Gone, as an API server whose
/// watch cache moved on answers.
pub(crate) const WATCH_LOG: usize = 10_000;

/// One change of a claim, as a watch event says it.
#[derive(Clone)]
pub(crate) struct Change {
    pub(crate) version: u64,
    pub(crate) namespace: String,
    pub(crate) kind: &'static str,
    pub(crate) object: Value,
}

impl Cluster {
    pub(crate) fn next_version(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    /// Records the claim at `key` as changed (`ADDED`, `MODIFIED`) or, removed, as `DELETED` at a
    /// new resourceVersion; wakes the watches.
    pub(crate) fn changed(
        &mut self,
        key: &(String, String),
        kind: &'static str,
        removed: Option<Value>,
    ) {
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
    pub(crate) fn remove_claim(&mut self, key: &(String, String)) -> Option<Value> {
        let gone = self.claims.remove(key)?;
        self.changed(key, "DELETED", Some(gone.clone()));
        Some(gone)
    }
}

pub(crate) type Shared = Arc<Mutex<Cluster>>;

pub(crate) fn lock(shared: &Shared) -> MutexGuard<'_, Cluster> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}
