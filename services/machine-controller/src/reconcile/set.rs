//! One machine set's reconcile, as MCM's machine-set controller runs it: keep `spec.replicas`
//! machines of the template that are neither failed nor being deleted.
//!
//! - Failed machines are deleted and replaced, unless preserved ([`PRESERVE_ANNOTATION`]) or kept
//!   for inspection (`keep_failed`, MCM #449). Each failure in a row delays the set's next
//!   creation by a doubling backoff (MCM #483), reset once a machine of the set runs.
//! - A scale-down picks, among machines not preserved, those furthest from running first
//!   (Pending, Creating, Unknown, then Running), the newest first.
//! - A machine is made stored-first with its owner reference and finalizer; its name is the set's
//!   and five random characters, so a retry after a crash makes a new name, never a second VM for
//!   one.
//! - A set whose deletion was asked deletes its machines and goes once none is left; a preserved
//!   one it lets go instead (no longer owned, kept with its VM).

use std::sync::Arc;
use std::time::Duration;

use domain::machine::{Condition, OwnerReference};
use domain::resources::{
    API_VERSION, Kind, MACHINE_FINALIZER, MachinePhase, MachineSet, OWNER_FINALIZER,
    PRESERVE_ANNOTATION,
};
use rand::Rng as _;
use serde_json::json;

use super::{Controller, elapsed_since};
use crate::store::{OwnedMachine, StoreError, now};

/// The most machines one reconcile makes or deletes; the next takes the rest.
const BURST: usize = 100;

/// Reconciles the set `namespace/name`; says when to look again.
pub async fn reconcile(
    controller: &Arc<Controller>,
    namespace: &str,
    name: &str,
) -> Result<Option<Duration>, StoreError> {
    let store = &controller.writer.store;
    let Some(stored) = store.get(Kind::MachineSet, namespace, name).await? else {
        return Ok(None);
    };
    let set: MachineSet = stored.decode()?;
    let uid = set.metadata.uid.clone();
    let machines = store.owned_machines(&uid).await?;
    if set.metadata.deletion_timestamp.is_some() {
        return delete_set(controller, namespace, &set, &machines).await;
    }
    // A machine relabelled out of the selector is the set's no more, as Kubernetes' and MCM's
    // controllers release it: let go (kept, with its VM) and replaced. It was still owned and
    // counted, while a watch by the selector had seen it DELETED (a break-it finding).
    let (machines, strayed): (Vec<OwnedMachine>, Vec<OwnedMachine>) = machines
        .into_iter()
        .partition(|m| m.deleting || set.spec.selector.matches(&m.labels));
    let strayed: Vec<&OwnedMachine> = strayed.iter().collect();
    let_go(controller, namespace, &set, &strayed, LetGo::Strayed).await?;
    let failed: Vec<&OwnedMachine> = machines
        .iter()
        .filter(|m| !m.deleting && m.phase == MachinePhase::Failed)
        .collect();
    let mut active: Vec<&OwnedMachine> = machines
        .iter()
        .filter(|m| !m.deleting && m.phase != MachinePhase::Failed)
        .collect();
    // Failed machines: kept when preserved or within keep_failed (oldest kept), else deleted.
    let mut kept = 0u32;
    let mut newly_failed = 0u32;
    for m in &failed {
        if m.preserved || kept < controller.settings.keep_failed {
            kept += 1;
            continue;
        }
        let deleted = store
            .delete(Kind::Machine, namespace, &m.name, Some(&m.uid), None)
            .await;
        gone_is_fine(deleted)?;
        newly_failed += 1;
    }
    let mut failures = set.status.failures;
    if newly_failed > 0 {
        failures = failures.saturating_add(newly_failed);
    } else if active.iter().any(|m| m.phase == MachinePhase::Running) && failed.is_empty() {
        failures = 0;
    }
    let want = set.spec.replicas as usize;
    let mut again = None;
    if active.len() < want {
        // After failures, the next machine waits a delay that doubles with each (MCM #483).
        let wait = match (failures, newly_failed) {
            (0, _) => Duration::ZERO,
            (n, 0) => controller
                .settings
                .backoff(n)
                .saturating_sub(elapsed_since(last_failure(&set).as_deref())),
            (n, _) => controller.settings.backoff(n),
        };
        if wait.is_zero() {
            // At once, not one after the other: they share the store's commits.
            let making = (0..(want - active.len()).min(BURST))
                .map(|_| make_machine(controller, namespace, &set));
            futures::future::try_join_all(making).await?;
        } else {
            again = Some(wait);
        }
    } else if active.len() > want {
        let mut candidates: Vec<&&OwnedMachine> = active.iter().filter(|m| !m.preserved).collect();
        candidates.sort_by(|a, b| {
            rank(a.phase)
                .cmp(&rank(b.phase))
                .then_with(|| b.created.cmp(&a.created))
        });
        let surplus: Vec<(String, String)> = candidates
            .iter()
            .take((active.len() - want).min(BURST))
            .map(|m| (m.name.clone(), m.uid.clone()))
            .collect();
        let deleting = surplus.iter().map(|(machine, machine_uid)| async move {
            let deleted = store
                .delete(Kind::Machine, namespace, machine, Some(machine_uid), None)
                .await;
            gone_is_fine(deleted)
        });
        futures::future::try_join_all(deleting).await?;
        active.retain(|m| !surplus.iter().any(|(n, _)| *n == m.name));
    }
    let ready = active
        .iter()
        .filter(|m| m.phase == MachinePhase::Running)
        .count() as u32;
    let generation = set.metadata.generation;
    let replicas = active.len() as u32;
    let failure_condition = (failures > 0).then(|| Condition {
        kind: "ReplicaFailure".into(),
        status: "True".into(),
        reason: "MachinesFailed".into(),
        message: format!("{failures} machine(s) of this set failed in a row; new ones are made after a growing delay"),
        last_transition_time: if newly_failed > 0 { Some(now()) } else { last_failure(&set).or_else(|| Some(now())) },
    });
    let written = store
        .update(
            Kind::MachineSet,
            namespace,
            &set.metadata.name,
            Some(&uid),
            None,
            move |body, _| {
                body["status"] = json!({
                    "replicas": replicas,
                    "readyReplicas": ready,
                    "availableReplicas": ready,
                    "failedReplicas": kept,
                    "observedGeneration": generation,
                    "failures": failures,
                    "conditions": failure_condition.into_iter().collect::<Vec<_>>(),
                });
                Ok(())
            },
        )
        .await;
    gone_is_fine(written)?;
    Ok(again)
}

/// A write's outcome, where the object being gone meanwhile is no failure (it was deleted, or
/// another incarnation holds the name).
fn gone_is_fine(written: Result<crate::store::Written, StoreError>) -> Result<(), StoreError> {
    match written {
        Ok(_) | Err(StoreError::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// When the set last recorded a failed machine.
fn last_failure(set: &MachineSet) -> Option<String> {
    set.status
        .conditions
        .iter()
        .find(|c| c.kind == "ReplicaFailure")
        .and_then(|c| c.last_transition_time.clone())
}

/// The order a scale-down picks machines in: furthest from running first.
fn rank(phase: MachinePhase) -> u8 {
    match phase {
        MachinePhase::Pending => 0,
        MachinePhase::Creating => 1,
        MachinePhase::Unknown => 2,
        MachinePhase::Failed => 3,
        MachinePhase::Running => 4,
        MachinePhase::Terminating => 5,
    }
}

/// Stores a new machine of the set's template, owned by the set.
async fn make_machine(
    controller: &Controller,
    namespace: &str,
    set: &MachineSet,
) -> Result<(), StoreError> {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let suffix: String = {
        let mut rng = rand::rng();
        (0..5)
            .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
            .collect()
    };
    let template = &set.spec.template;
    let owner = OwnerReference {
        api_version: API_VERSION.into(),
        kind: Kind::MachineSet.as_str().into(),
        name: set.metadata.name.clone(),
        uid: set.metadata.uid.clone(),
        controller: Some(true),
    };
    let mut annotations = template.metadata.annotations.clone();
    // A template's preserve mark is for the machines a person marks, not every machine made.
    annotations.remove(PRESERVE_ANNOTATION);
    let mut body = json!({
        "metadata": {
            "name": format!("{}-{suffix}", set.metadata.name),
            "labels": template.metadata.labels,
            "finalizers": [MACHINE_FINALIZER],
            "ownerReferences": [owner],
        },
        "spec": template.spec,
    });
    // Left out when empty, as the API stores what callers send: an empty map here made applying
    // the machine's own `get -o yaml` back change it ("configured", a new resourceVersion).
    if !annotations.is_empty() {
        body["metadata"]["annotations"] = json!(annotations);
    }
    match controller
        .writer
        .store
        .create(Kind::Machine, namespace, body, None)
        .await
    {
        // Five random characters met a name already taken: the next reconcile tries another.
        Ok(_) | Err(StoreError::Exists { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Why a set lets machines go (owned by nothing, kept with their VMs).
#[derive(Clone, Copy, PartialEq, Eq)]
enum LetGo {
    /// The set is being deleted and they are preserved: no controller action deletes them.
    SetGoing,
    /// They were relabelled out of the set's selector; kept owned if they match again by the time
    /// of the write.
    Strayed,
}

/// Removes the set's owner reference from `machines`.
async fn let_go(
    controller: &Controller,
    namespace: &str,
    set: &MachineSet,
    machines: &[&OwnedMachine],
    why: LetGo,
) -> Result<(), StoreError> {
    let store = &controller.writer.store;
    let letting_go = machines.iter().map(|m| {
        let selector = set.spec.selector.clone();
        let set_uid = json!(set.metadata.uid);
        async move {
            let let_go = store
                .update(
                    Kind::Machine,
                    namespace,
                    &m.name,
                    Some(&m.uid),
                    None,
                    move |body, _| {
                        let labels: domain::Labels =
                            serde_json::from_value(body["metadata"]["labels"].clone())
                                .unwrap_or_default();
                        if why == LetGo::Strayed && selector.matches(&labels) {
                            return Ok(());
                        }
                        if let Some(owners) = body["metadata"]["ownerReferences"].as_array_mut() {
                            owners.retain(|o| o["uid"] != set_uid);
                            if owners.is_empty()
                                && let Some(meta) = body["metadata"].as_object_mut()
                            {
                                meta.remove("ownerReferences");
                            }
                        }
                        Ok(())
                    },
                )
                .await;
            gone_is_fine(let_go)
        }
    });
    futures::future::try_join_all(letting_go).await?;
    Ok(())
}

async fn delete_set(
    controller: &Controller,
    namespace: &str,
    set: &MachineSet,
    machines: &[OwnedMachine],
) -> Result<Option<Duration>, StoreError> {
    let store = &controller.writer.store;
    // A preserved machine is never deleted by the controller (MCM #1146), its owner's deletion
    // included: it is let go instead, kept with its VM and no longer owned (a break-it finding:
    // it went with the set). Deleting it is then its owner's own act.
    let preserved: Vec<&OwnedMachine> = machines
        .iter()
        .filter(|m| m.preserved && !m.deleting)
        .collect();
    let_go(controller, namespace, set, &preserved, LetGo::SetGoing).await?;
    let deleting = machines
        .iter()
        .filter(|m| !m.deleting && !m.preserved)
        .map(|m| async move {
            let deleted = store
                .delete(Kind::Machine, namespace, &m.name, Some(&m.uid), None)
                .await;
            gone_is_fine(deleted)
        });
    futures::future::try_join_all(deleting).await?;
    if machines.iter().any(|m| m.deleting || !m.preserved) {
        // Each machine's removal queues the set again.
        return Ok(Some(controller.settings.resync));
    }
    let written = store
        .update(
            Kind::MachineSet,
            namespace,
            &set.metadata.name,
            Some(&set.metadata.uid),
            None,
            |body, _| {
                if let Some(f) = body["metadata"]["finalizers"].as_array_mut() {
                    f.retain(|x| x != &json!(OWNER_FINALIZER));
                }
                Ok(())
            },
        )
        .await;
    gone_is_fine(written)?;
    Ok(None)
}
