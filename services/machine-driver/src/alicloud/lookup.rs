//! How the driver finds a machine's instances: by id, by name, by the providerID a request pins,
//! always within the machine's namespace, and within the class's cluster tags unless the instance
//! a providerID pins is the machine's own (the class's tags may have changed since it was made).
//!
//! Apart because every call that looks at a machine (create, initialize, status, delete) finds it
//! the same way, and a lookup that strays (another cluster's VM, another tenant's, a losing
//! machine's) is what the scoping here exists to prevent.

use alicloud::{DescribeInstances, EcsClient, Instance, Tag};
use domain::Status;

use super::Alicloud;
use super::codes::ecs_status;
use super::identity::Owner;
use super::plan::{Pinned, Reach};
use super::verdict::{belongs_to, in_namespace};

/// One instance found for a machine, with the client (region) it lives in.
pub(super) struct Found {
    pub(super) client: EcsClient,
    pub(super) instance: Instance,
}

impl Alicloud {
    /// The instance with this id in `region`, if it exists and carries the cluster tags.
    pub(super) async fn by_id(
        &self,
        client: &EcsClient,
        instance_id: &str,
        scope: &[Tag],
        deadline: alicloud::Instant,
    ) -> Result<Option<Instance>, Status> {
        let filter = DescribeInstances {
            instance_ids: vec![instance_id.to_owned()],
            tags: scope.to_vec(),
            ..DescribeInstances::default()
        };
        let found = client
            .describe_all_instances(&filter, deadline)
            .await
            .map_err(|e| ecs_status(&e))?;
        Ok(found.into_iter().find(|i| i.instance_id == instance_id))
    }

    /// Instances named exactly `name` carrying the cluster tags, whoever they were made for.
    pub(super) async fn by_name(
        &self,
        client: &EcsClient,
        name: &str,
        scope: &[Tag],
        deadline: alicloud::Instant,
    ) -> Result<Vec<Instance>, Status> {
        let filter = DescribeInstances {
            instance_name: Some(name.to_owned()),
            tags: scope.to_vec(),
            ..DescribeInstances::default()
        };
        let found = client
            .describe_all_instances(&filter, deadline)
            .await
            .map_err(|e| ecs_status(&e))?;
        Ok(found
            .into_iter()
            .filter(|i| i.instance_name == name)
            .collect())
    }

    /// The instance a providerID names, looked up in its own region (checked against the policy
    /// when it was decoded, before any client is made), in the machine's namespace: another
    /// namespace's instance is answered as one that does not exist (`None`). It must carry the
    /// class's cluster tags, or else be this machine's own (its name and its owner tag): the class
    /// may have changed its tags since it made the VM, and a machine made before
    /// must still be found, by status and by delete, or its VM would be left running behind it
    /// (MCM's providers look a providerID up by id alone).
    pub(super) async fn pinned(
        &self,
        reach: Reach<'_>,
        pinned: &Pinned,
        machine: (&str, &Owner),
        deadline: alicloud::Instant,
    ) -> Result<Option<Found>, Status> {
        let id = pinned.instance_id.as_str();
        let client = match &pinned.region {
            Some(r) if r != reach.region => reach.client(&self.ecs, r),
            _ => reach.home(&self.ecs),
        };
        let (name, owner) = machine;
        // As a DescribeInstances tag filter matches: an empty value asks for the key alone.
        let in_scope = |i: &Instance| {
            reach.scope.iter().all(|t| {
                i.tag(&t.key)
                    .is_some_and(|v| t.value.is_empty() || v == t.value)
            })
        };
        match self
            .by_id(&client, id, &[], deadline)
            .await?
            .filter(|i| in_namespace(i, reach.namespace))
            .filter(|i| {
                // Out of the class's scope only with the machine's own owner tag: an untagged VM
                // of that name in another cluster is that cluster's machine, not this one.
                in_scope(i)
                    || (i.instance_name == name
                        && !owner.tag_value().is_empty()
                        && Owner::of_instance(i).as_ref() == Some(owner))
            }) {
            Some(instance) => Ok(Some(Found { client, instance })),
            None => {
                tracing::debug!(instance_id = id, "no instance for providerID");
                Ok(None)
            }
        }
    }

    /// The instances backing a machine: the one `provider_id` names, else, when `name_fallback`
    /// allows, those named like the machine in the class's region that belong to `owner`.
    pub(super) async fn find(
        &self,
        reach: Reach<'_>,
        provider_id: &str,
        name: &str,
        owner: &Owner,
        name_fallback: bool,
        deadline: alicloud::Instant,
    ) -> Result<Vec<Found>, Status> {
        if let Some(pinned) = Pinned::decode(provider_id, &self.regions)? {
            match self.pinned(reach, &pinned, (name, owner), deadline).await? {
                Some(f) => return Ok(vec![f]),
                None if !name_fallback => return Ok(Vec::new()),
                None => {}
            }
        }
        let home = reach.home(&self.ecs);
        Ok(self
            .by_name(&home, name, reach.scope, deadline)
            .await?
            .into_iter()
            .filter(|i| belongs_to(i, owner, reach.namespace))
            .map(|instance| Found {
                client: home.clone(),
                instance,
            })
            .collect())
    }
}
