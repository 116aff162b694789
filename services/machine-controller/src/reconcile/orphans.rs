//! Orphan collection, MCM's safety controller made safe: a VM or container this controller made
//! (its machine's name and uid recorded before the create call) that backs no stored machine any
//! more is deleted, but only once it has been seen so in two full, successful listings at least
//! `orphan_interval` apart.
//!
//! MCM issue #657: its collector deleted live VMs when its cache of machines was stale. Here:
//! - a class whose listing fails deletes nothing and counts no sighting (a failed or partial
//!   listing is no evidence);
//! - the stored machines are read after the listing, so a machine made while the listing ran is
//!   seen;
//! - only names this controller made are candidates (a VM someone made through the driver directly
//!   is never touched), and the delete goes through the driver with the recorded uid and
//!   namespace, which deletes only a VM stamped with both;
//! - a VM that backs a machine again, or is gone, loses its sightings.

use std::sync::Arc;

use domain::machine::{Machine, MachineClass, MachineRequest, MachineSpec, ObjectMeta};
use domain::resources::Kind;
use domain::{ListMachinesRequest, Secret};

use super::{Controller, elapsed_since};
use crate::store::StoreError;

/// What one collection did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Collected {
    /// Classes listed completely.
    pub listed: usize,
    /// Classes whose listing failed (nothing of theirs was counted or deleted).
    pub failed: usize,
    /// VMs seen backing no machine.
    pub orphans: usize,
    /// VMs deleted.
    pub deleted: usize,
}

/// One pass over every class.
pub async fn collect(controller: &Arc<Controller>) -> Result<Collected, StoreError> {
    let store = &controller.writer.store;
    let (classes, _) = store.list(Kind::MachineClass, None).await?;
    let mut done = Collected::default();
    for stored in classes {
        let namespace = stored.body["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let Ok(class) = stored.decode::<MachineClass>() else {
            done.failed += 1;
            continue;
        };
        let made = store.made(&namespace, &class.metadata.name).await?;
        if made.is_empty() {
            continue;
        }
        let secret = match controller.writer.secret_of(&namespace, &class).await {
            Ok(values) => values.as_secret(),
            Err(e) => {
                tracing::warn!(%namespace, class = %class.metadata.name, error = %e.message, "orphans: cannot read the class's secret; skipping it");
                done.failed += 1;
                continue;
            }
        };
        let request = ListMachinesRequest {
            machine_class: class.clone(),
            secret: secret.clone(),
        };
        let listing = match controller.writer.driver.list(&request).await {
            Ok(l) => l.machine_list,
            Err(e) => {
                tracing::warn!(%namespace, class = %class.metadata.name, error = %e, "orphans: the listing failed; nothing of this class is counted or deleted");
                done.failed += 1;
                continue;
            }
        };
        done.listed += 1;
        let mut still_orphaned = Vec::new();
        for (provider_id, machine_name) in &listing {
            let Some(uid) = made.get(machine_name) else {
                continue;
            };
            // Read now, after the listing: a machine made meanwhile is seen.
            if store
                .get(Kind::Machine, &namespace, machine_name)
                .await?
                .is_some()
            {
                continue;
            }
            done.orphans += 1;
            still_orphaned.push(provider_id.clone());
            let (sightings, first_seen) = store
                .sight_orphan(provider_id, &namespace, &class.metadata.name, machine_name)
                .await?;
            let old_enough =
                elapsed_since(Some(&first_seen)) >= controller.settings.orphan_interval;
            if sightings < 2 || !old_enough {
                continue;
            }
            let request =
                delete_request(&namespace, machine_name, uid, provider_id, &class, &secret);
            match controller.writer.driver.delete(&request).await {
                Ok(_) => {
                    tracing::warn!(%namespace, machine = %machine_name, %provider_id, "orphans: deleted a VM no machine owns");
                    store.forget_orphan(provider_id).await?;
                    done.deleted += 1;
                }
                Err(e) => {
                    tracing::warn!(%namespace, machine = %machine_name, %provider_id, error = %e, "orphans: the delete failed; trying again next time");
                }
            }
        }
        store
            .forget_orphans_except(&namespace, &class.metadata.name, &still_orphaned)
            .await?;
        // A made machine with no stored machine and no VM listed is gone for good.
        for name in made.keys() {
            let listed = listing.values().any(|n| n == name);
            if !listed && store.get(Kind::Machine, &namespace, name).await?.is_none() {
                store.forget_made(&namespace, name).await?;
            }
        }
    }
    Ok(done)
}

fn delete_request(
    namespace: &str,
    name: &str,
    uid: &str,
    provider_id: &str,
    class: &MachineClass,
    secret: &Secret,
) -> MachineRequest {
    MachineRequest {
        machine: Machine {
            metadata: ObjectMeta {
                name: name.to_string(),
                namespace: namespace.to_string(),
                uid: uid.to_string(),
                ..ObjectMeta::default()
            },
            spec: MachineSpec {
                class: domain::machine::ClassSpec {
                    kind: "MachineClass".into(),
                    name: class.metadata.name.clone(),
                    ..Default::default()
                },
                provider_id: provider_id.to_string(),
                node_template: None,
            },
            status: serde_json::Value::Null,
        },
        machine_class: class.clone(),
        secret: secret.clone(),
    }
}
