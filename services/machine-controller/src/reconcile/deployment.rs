//! One machine deployment's reconcile, as Kubernetes' (and MCM's) deployment controller runs it:
//! one machine set per template, named `<deployment>-<hash>`, where the hash covers the template
//! and its class's generation, so changing either rolls the machines.
//!
//! RollingUpdate: the new set grows while all sets' machines together (those being deleted too,
//! which still hold their VMs, and those a set is still to make) stay within `replicas + maxSurge`;
//! old sets shrink while the available machines stay at least `replicas - maxUnavailable` (their
//! machines not running go first, as they count for nothing). A set's status may not have caught
//! up with its replicas yet: what it has above them is counted as going, never as available.
//! Recreate: old sets go to zero, and once their machines are gone the new set grows. An old set
//! at zero with no machine left is deleted. While `paused`, no new set is made; the current ones
//! keep their sizes.

use std::sync::Arc;
use std::time::Duration;

use domain::machine::{Condition, OwnerReference};
use domain::resources::{
    API_VERSION, Kind, MachineDeployment, MachinePhase, MachineSet, OWNER_FINALIZER, StrategyType,
    TEMPLATE_HASH_LABEL,
};
use serde_json::{Value, json};
use sha2::Digest as _;

use super::Controller;
use crate::store::{Store, StoreError, Written, now};

/// Reconciles the deployment `namespace/name`; says when to look again.
pub async fn reconcile(
    controller: &Arc<Controller>,
    namespace: &str,
    name: &str,
) -> Result<Option<Duration>, StoreError> {
    let store = &controller.writer.store;
    let Some(stored) = store.get(Kind::MachineDeployment, namespace, name).await? else {
        return Ok(None);
    };
    let deployment: MachineDeployment = stored.decode()?;
    let uid = deployment.metadata.uid.clone();
    let sets: Vec<MachineSet> = store
        .owned(Kind::MachineSet, &uid)
        .await?
        .iter()
        .map(|s| s.decode())
        .collect::<Result<_, _>>()?;
    if deployment.metadata.deletion_timestamp.is_some() {
        return delete_deployment(store, namespace, &deployment, &sets).await;
    }
    let class_generation = match store
        .get(
            Kind::MachineClass,
            namespace,
            &deployment.spec.template.spec.class.name,
        )
        .await?
    {
        Some(class) => class.body["metadata"]["generation"].as_i64().unwrap_or(0),
        None => 0,
    };
    let hash = template_hash(&deployment, class_generation);
    let live: Vec<&MachineSet> = sets
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .collect();
    let current = live
        .iter()
        .find(|s| s.metadata.labels.get(TEMPLATE_HASH_LABEL) == Some(&hash))
        .copied();
    let want = deployment.spec.replicas;
    let current = match current {
        Some(set) => Some(set.clone()),
        None if deployment.spec.paused => None,
        None => Some(make_set(store, namespace, &deployment, &hash).await?),
    };
    let olds: Vec<&MachineSet> = live
        .iter()
        .filter(|s| {
            current
                .as_ref()
                .is_none_or(|c| c.metadata.uid != s.metadata.uid)
        })
        .copied()
        .collect();
    if let Some(current) = &current {
        // The surge counts, set by set, the machines being deleted (they still hold their VMs),
        // the failed ones, and the larger of the machines it keeps and its replicas: a set still
        // making machines holds them already, and one that has not yet deleted its surplus still
        // has it. (Summing either across sets alone lets one set's lag hide another's.)
        let mut existing = 0u32;
        // What the sets but the current one hold, failed machines (which may be kept for
        // inspection) aside: while anything is left there, the roll is on.
        let mut elsewhere = 0u32;
        for set in &sets {
            let (mut active, mut deleting, mut failed) = (0u32, 0u32, 0u32);
            for machine in store.owned_machines(&set.metadata.uid).await? {
                if machine.deleting {
                    deleting += 1;
                } else if machine.phase == MachinePhase::Failed {
                    failed += 1;
                } else {
                    active += 1;
                }
            }
            let wanted = match set.metadata.deletion_timestamp {
                None => set.spec.replicas,
                Some(_) => 0,
            };
            let held = deleting + active.max(wanted);
            existing += held + failed;
            if set.metadata.uid != current.metadata.uid {
                elsewhere += held;
            }
        }
        match deployment.spec.strategy.strategy_type {
            StrategyType::RollingUpdate => {
                roll(
                    store,
                    namespace,
                    &deployment,
                    current,
                    &olds,
                    (existing, elsewhere),
                )
                .await?
            }
            StrategyType::Recreate => recreate(store, namespace, want, current, &olds).await?,
        }
    }
    // An old set emptied of machines is of no more use.
    for old in &olds {
        if old.spec.replicas == 0 && old.status.replicas == 0 && old.status.failed_replicas == 0 {
            let deleted = store
                .delete(
                    Kind::MachineSet,
                    namespace,
                    &old.metadata.name,
                    Some(&old.metadata.uid),
                    None,
                )
                .await;
            gone_is_fine(deleted)?;
        }
    }
    let status_of = |s: &MachineSet| (s.status.replicas, s.status.ready_replicas);
    let replicas: u32 = live.iter().map(|s| status_of(s).0).sum();
    let ready: u32 = live.iter().map(|s| status_of(s).1).sum();
    let updated = current.as_ref().map_or(0, |c| c.status.replicas);
    let (_, max_unavailable) = deployment.spec.strategy.bounds(want);
    let available = ready >= want.saturating_sub(max_unavailable);
    let conditions = vec![
        condition(
            "Available",
            available,
            if available {
                "MinimumReplicasAvailable"
            } else {
                "MinimumReplicasUnavailable"
            },
        ),
        condition(
            "Progressing",
            true,
            if updated == want && replicas == want && ready == want {
                "NewMachineSetAvailable"
            } else {
                "MachineSetUpdating"
            },
        ),
    ];
    let generation = deployment.metadata.generation;
    let written = store
        .update(
            Kind::MachineDeployment,
            namespace,
            name,
            Some(&uid),
            None,
            move |body, _| {
                // A condition's time changes only when its status does.
                let mut conditions = conditions;
                for c in &mut conditions {
                    let before = body["status"]["conditions"]
                        .as_array()
                        .and_then(|all| all.iter().find(|b| b["type"] == json!(c.kind)));
                    if let Some(before) = before
                        && before["status"] == json!(c.status)
                    {
                        c.last_transition_time =
                            before["lastTransitionTime"].as_str().map(str::to_string);
                    }
                }
                body["status"] = json!({
                    "replicas": replicas,
                    "updatedReplicas": updated,
                    "readyReplicas": ready,
                    "availableReplicas": ready,
                    "unavailableReplicas": want.saturating_sub(ready),
                    "observedGeneration": generation,
                    "templateHash": hash,
                    "observedClassGeneration": class_generation,
                    "conditions": conditions,
                });
                Ok(())
            },
        )
        .await;
    gone_is_fine(written)?;
    Ok(None)
}

fn condition(kind: &str, status: bool, reason: &str) -> Condition {
    Condition {
        kind: kind.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: String::new(),
        last_transition_time: Some(now()),
    }
}

fn gone_is_fine(written: Result<Written, StoreError>) -> Result<(), StoreError> {
    match written {
        Ok(_) | Err(StoreError::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The template's hash: its JSON and its class's generation, 10 hex characters.
pub fn template_hash(deployment: &MachineDeployment, class_generation: i64) -> String {
    let mut hasher = sha2::Sha256::new();
    hasher.update(serde_json::to_vec(&deployment.spec.template).unwrap_or_default());
    hasher.update(class_generation.to_be_bytes());
    hex::encode(hasher.finalize())[..10].to_string()
}

/// Makes the set of the current template, empty (the roll grows it).
async fn make_set(
    store: &Store,
    namespace: &str,
    deployment: &MachineDeployment,
    hash: &str,
) -> Result<MachineSet, StoreError> {
    let mut template = deployment.spec.template.clone();
    template
        .metadata
        .labels
        .insert(TEMPLATE_HASH_LABEL.into(), hash.into());
    let mut selector = deployment.spec.selector.clone();
    selector
        .match_labels
        .insert(TEMPLATE_HASH_LABEL.into(), hash.into());
    let mut labels = deployment.spec.template.metadata.labels.clone();
    labels.insert(TEMPLATE_HASH_LABEL.into(), hash.into());
    let owner = OwnerReference {
        api_version: API_VERSION.into(),
        kind: Kind::MachineDeployment.as_str().into(),
        name: deployment.metadata.name.clone(),
        uid: deployment.metadata.uid.clone(),
        controller: Some(true),
    };
    let replicas = match deployment.spec.strategy.strategy_type {
        // The first set of a deployment has nothing to roll from.
        _ if deployment.status.template_hash.is_empty() => deployment.spec.replicas,
        StrategyType::RollingUpdate | StrategyType::Recreate => 0,
    };
    let body = json!({
        "metadata": {
            "name": format!("{}-{hash}", deployment.metadata.name),
            "labels": labels,
            "finalizers": [OWNER_FINALIZER],
            "ownerReferences": [owner],
        },
        "spec": {"replicas": replicas, "selector": selector, "template": template},
    });
    let stored = match store.create(Kind::MachineSet, namespace, body, None).await {
        Ok(s) => s,
        Err(StoreError::Exists { .. }) => store
            .get(
                Kind::MachineSet,
                namespace,
                &format!("{}-{hash}", deployment.metadata.name),
            )
            .await?
            .ok_or_else(|| StoreError::Corrupt {
                what: deployment.metadata.name.clone(),
                why: "its set vanished while it was made".into(),
            })?,
        Err(e) => return Err(e),
    };
    stored.decode()
}

async fn scale(
    store: &Store,
    namespace: &str,
    set: &MachineSet,
    replicas: u32,
) -> Result<(), StoreError> {
    if set.spec.replicas == replicas {
        return Ok(());
    }
    let written = store
        .update(
            Kind::MachineSet,
            namespace,
            &set.metadata.name,
            Some(&set.metadata.uid),
            None,
            move |body, _| {
                body["spec"]["replicas"] = Value::from(replicas);
                Ok(())
            },
        )
        .await;
    gone_is_fine(written)
}

/// One step of a rolling update. `held` is what every set holds, and what the sets but `current`
/// hold (machines kept, still to make, or leaving).
async fn roll(
    store: &Store,
    namespace: &str,
    deployment: &MachineDeployment,
    current: &MachineSet,
    olds: &[&MachineSet],
    held: (u32, u32),
) -> Result<(), StoreError> {
    let (existing, elsewhere) = held;
    let want = deployment.spec.replicas;
    let (surge, unavailable) = deployment.spec.strategy.bounds(want);
    let old_total: u32 = olds.iter().map(|s| s.spec.replicas).sum();
    if old_total == 0 && elsewhere == 0 {
        // Nothing to roll from: the current set is simply the deployment's size. (Old sets at
        // zero whose machines are still being deleted are not nothing: those hold VMs.)
        return scale(store, namespace, current, want).await;
    }
    // Grow the new set within the surge, counting machines that are there but no set wants any
    // more (their VMs are being deleted).
    let total = (old_total + current.spec.replicas).max(existing);
    let room = (want + surge).saturating_sub(total);
    let grown = (current.spec.replicas + room).min(want);
    scale(store, namespace, current, grown).await?;
    // Shrink old sets while enough stay available; what is not running goes first, freely. A
    // set's ready machines above its replicas are going (its status was written before it was
    // scaled down, and the set deletes its surplus, running machines last): never count them.
    let ready_of = |s: &MachineSet| s.status.ready_replicas.min(s.spec.replicas);
    let ready: u32 = olds.iter().map(|s| ready_of(s)).sum::<u32>() + ready_of(current);
    let mut removable = ready.saturating_sub(want.saturating_sub(unavailable));
    let mut olds: Vec<&&MachineSet> = olds.iter().collect();
    olds.sort_by(|a, b| {
        a.metadata
            .creation_timestamp
            .cmp(&b.metadata.creation_timestamp)
    });
    for old in olds {
        let not_ready = old.spec.replicas.saturating_sub(ready_of(old));
        let from_ready = (old.spec.replicas - not_ready).min(removable);
        removable -= from_ready;
        let target = old.spec.replicas - not_ready - from_ready;
        scale(store, namespace, old, target).await?;
    }
    Ok(())
}

/// One step of a recreate: old sets to zero, then the new one to its size once they are empty.
async fn recreate(
    store: &Store,
    namespace: &str,
    want: u32,
    current: &MachineSet,
    olds: &[&MachineSet],
) -> Result<(), StoreError> {
    for old in olds {
        scale(store, namespace, old, 0).await?;
    }
    if olds.iter().all(|s| s.status.replicas == 0) {
        scale(store, namespace, current, want).await?;
    }
    Ok(())
}

async fn delete_deployment(
    store: &Store,
    namespace: &str,
    deployment: &MachineDeployment,
    sets: &[MachineSet],
) -> Result<Option<Duration>, StoreError> {
    for s in sets
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
    {
        let deleted = store
            .delete(
                Kind::MachineSet,
                namespace,
                &s.metadata.name,
                Some(&s.metadata.uid),
                None,
            )
            .await;
        gone_is_fine(deleted)?;
    }
    if !sets.is_empty() {
        return Ok(None);
    }
    let written = store
        .update(
            Kind::MachineDeployment,
            namespace,
            &deployment.metadata.name,
            Some(&deployment.metadata.uid),
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
