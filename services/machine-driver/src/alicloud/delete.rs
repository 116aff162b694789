//! DeleteMachine: release the instances that back the machine, then the disks and network
//! interfaces it left behind.
//!
//! Apart because a delete has its own rules of what it may touch (with a providerID only that
//! instance; by name only this owner's; leftovers only this namespace's) and of when it is done
//! (OK for a missing VM, Unavailable while anything is between states).

use alicloud::{DescribeDisks, DescribeNetworkInterfaces, EcsClient, Tag};
use domain::Status;
use domain::machine::{DeleteMachineResponse, MachineRequest};

use super::Alicloud;
use super::answers::nothing_released;
use super::codes::ecs_status;
use super::identity::{MACHINE_TAG, Owner};
use super::verdict::in_namespace;
use crate::provider::{NAMESPACE_STAMP, request_namespace, stamped_namespace};

impl Alicloud {
    /// DeleteMachine for the machine `name` of `owner`, both checked.
    pub(super) async fn delete(
        &self,
        req: &MachineRequest,
        name: &str,
        owner: &Owner,
    ) -> Result<DeleteMachineResponse, Status> {
        let p = self.prepared_for_lookup(&req.machine_class, &req.secret)?;
        let reach = p.reach(request_namespace(req));
        let provider_id = req.machine.spec.provider_id.as_str();
        let deadline = self.deadline();
        // With a providerID, only that instance: the orphan collector sends the name of a live
        // machine with the id of an orphan, and the live machine's VM must survive. By name,
        // only this owner's instances: a machine that lost its name never takes the winner's.
        let found = self
            .find(reach, provider_id, name, owner, false, deadline)
            .await?;
        let client = found
            .first()
            .map(|f| f.client.clone())
            .unwrap_or_else(|| reach.home(&self.ecs));
        let mut released = Vec::new();
        let mut busy = Vec::new();
        for f in &found {
            let i = &f.instance;
            if i.status.is_transitional() {
                busy.push(format!("{} is {}", i.instance_id, i.status));
                continue;
            }
            match f
                .client
                .delete_instance(&i.instance_id, true, deadline)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(ecs_status(&e)),
            }
            self.remember_released(&i.instance_id);
            tracing::info!(instance_id = %i.instance_id, "instance released");
            released.push(i.instance_id.clone());
        }
        if !busy.is_empty() {
            return Err(Status::unavailable(format!(
                "ECS instance not in running/stopped state: {}; call delete again once it settles (Retry-After says when; `berth machine delete --wait` does so)",
                busy.join(", ")
            )));
        }
        let (disks, nics, detaching) = self
            .clean_leftovers(
                &client,
                reach.scope,
                reach.namespace,
                name,
                &released,
                deadline,
            )
            .await?;
        if detaching > 0 {
            return Err(Status::unavailable(format!(
                "{detaching} disk(s) or network interface(s) of machine {name:?} are still detaching from released instances; retry to release them"
            )));
        }
        let mut state = if released.is_empty() {
            let mut state = nothing_released(name);
            // By name, another UID's VM in the caller's own namespace holds the name: said,
            // so a caller that sent no UID (or a stale one) does not take a running VM for
            // gone (a break-it finding). Other namespaces' VMs are never looked at.
            if provider_id.is_empty()
                && self
                    .by_name(&client, name, reach.scope, deadline)
                    .await?
                    .iter()
                    .any(|i| in_namespace(i, reach.namespace))
            {
                state.push_str(&crate::provider::held_by_another(name, "VM"));
            }
            state
        } else {
            format!(
                "ECS instance(s) [{}] deleted for machine {name}",
                released.join(" ")
            )
        };
        if !disks.is_empty() || !nics.is_empty() {
            state.push_str(&format!(
                "; leftovers deleted: disks [{}], network interfaces [{}]",
                disks.join(" "),
                nics.join(" ")
            ));
        }
        Ok(DeleteMachineResponse {
            last_known_state: state,
        })
    }

    /// Deletes the disks and network interfaces tagged for this machine that no instance uses any
    /// more. Disks the spec asked to keep (`deleteWithInstance: false`) stay. Returns what was
    /// deleted and how many are still detaching from `released` instances.
    async fn clean_leftovers(
        &self,
        client: &EcsClient,
        scope: &[Tag],
        namespace: &str,
        name: &str,
        released: &[String],
        deadline: alicloud::Instant,
    ) -> Result<(Vec<String>, Vec<String>, usize), Status> {
        let mut tags = scope.to_vec();
        tags.push(Tag::new(MACHINE_TAG, name));
        // Only this namespace's leftovers: ECS copies the instance's tags, the namespace stamp
        // among them, onto its disks and network interfaces.
        let ours = |tags: &[Tag]| {
            stamped_namespace(
                tags.iter()
                    .find(|t| t.key == NAMESPACE_STAMP)
                    .map(|t| t.value.as_str()),
            ) == namespace
        };
        let mut disks_deleted = Vec::new();
        let mut nics_deleted = Vec::new();
        let mut detaching = 0usize;
        let attached_to_released = |instance: &Option<String>| {
            instance
                .as_deref()
                .is_some_and(|i| released.iter().any(|r| r == i))
        };
        // Both looked up at once: a delete retried after its instance is gone still makes these
        // two calls, and one after the other they took a slow ECS (2 s a call) past the call's
        // deadline on every retry, so the delete never answered OK.
        let disk_query = DescribeDisks {
            tags: tags.clone(),
            ..DescribeDisks::default()
        };
        let nic_query = DescribeNetworkInterfaces {
            tags,
            ..DescribeNetworkInterfaces::default()
        };
        let (disks, nics) = tokio::join!(
            client.describe_all_disks(&disk_query, deadline),
            client.describe_all_network_interfaces(&nic_query, deadline),
        );
        let disks = disks.map_err(|e| ecs_status(&e))?;
        let nics = nics.map_err(|e| ecs_status(&e))?;
        for d in disks.into_iter().filter(|d| ours(&d.tags)) {
            if d.delete_with_instance == Some(false) {
                tracing::debug!(disk_id = %d.disk_id, "keeping disk the spec asked to keep");
                continue;
            }
            if d.status == "Available" {
                match client.delete_disk(&d.disk_id, deadline).await {
                    Ok(_) => disks_deleted.push(d.disk_id),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(ecs_status(&e)),
                }
            } else if attached_to_released(&d.instance_id) {
                detaching += 1;
            }
        }
        for n in nics.into_iter().filter(|n| ours(&n.tags)) {
            if n.status == "Available" {
                match client
                    .delete_network_interface(&n.network_interface_id, deadline)
                    .await
                {
                    Ok(_) => nics_deleted.push(n.network_interface_id),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(ecs_status(&e)),
                }
            } else if attached_to_released(&n.instance_id) {
                detaching += 1;
            }
        }
        Ok((disks_deleted, nics_deleted, detaching))
    }
}
