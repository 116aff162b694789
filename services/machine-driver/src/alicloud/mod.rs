//! The `Alicloud` provider: MCM's Alicloud driver over Berth's own ECS client, with the fixes
//! docs/design.md, “The Alicloud driver, and what Berth changes”, lists.
//!
//! - CreateMachine is idempotent: it adopts the instance that already backs the machine (by
//!   `spec.providerID`, else by name within the cluster's tag), and otherwise sends RunInstances with a
//!   `ClientToken` derived from the machine's UID, so no retry or lost answer can make a second VM.
//!   It answers OK only for an instance that exists: when ECS answers the token with an instance
//!   since released (the machine is created again with the same UID), it goes on to the next
//!   token of the machine's deterministic series, which its retries walk alike. The series has no
//!   end: a call that runs out of time walking it answers Unavailable, and the tokens found used up
//!   are remembered, so the retry goes on from there.
//! - Tenancy: every instance carries the machine's namespace ([`NAMESPACE_STAMP`]); an instance
//!   stamped with another namespace than the request's is another tenant's, never found, adopted or
//!   released for this request, and a name it holds is answered with a 409 that says only that the
//!   name is taken.
//! - One name is one VM, across driver replicas: every instance records the UID it was made for
//!   (`berth.io/machine-uid`). When creates for one name race (different UIDs, or one without), each
//!   creator looks again after RunInstances and every replica reaches the same verdict from the same
//!   DescribeInstances answer ([`decide`]): the earliest instance keeps the name, ties broken by the
//!   smallest instance id. A loser releases what it made and answers AlreadyExists naming the owner.
//! - Every lookup is scoped to the class's `kubernetes.io/cluster/...` tag: a same-named VM of another
//!   cluster in the account is never seen, adopted or deleted. A lookup by name also skips instances
//!   made for another UID, so a losing machine neither adopts nor deletes the winner's VM.
//! - The region (of the spec and of a providerID) is a [`alicloud::Region`] the [`RegionPolicy`]
//!   admits before any client exists, so a caller can never aim a call at another host.
//! - DeleteMachine answers OK for a missing VM (the MCM contract), Unavailable while the VM is
//!   between states, and releases the disks and network interfaces the machine left behind (found
//!   by the `berth.io/machine` tag the driver puts on everything it creates).
//! - GetMachineStatus reports an `Initialized` condition, `False` until the instance is Running;
//!   the API answers that as MCM's Uninitialized (17), so MCM calls InitializeMachine, which starts
//!   a Stopped instance and says Uninitialized until it runs.
//!
//! # Layout
//! - [`spec`]: the provider spec, its validation, the region policy, owners, naming helpers.
//! - [`codes`]: what an ECS failure means to MCM (the machine codes) and the status answered.
//! - this file: [`Alicloud`], the [`Provider`] implementation, and [`decide`], the race verdict.

pub mod codes;
pub mod spec;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use alicloud::{
    DescribeDisks, DescribeInstances, DescribeNetworkInterfaces, Ecs, EcsClient, Instance,
    InstanceStatus, Region, Tag,
};
use async_trait::async_trait;
use domain::machine::{
    Condition, CreateMachineResponse, DeleteMachineResponse, GetMachineStatusResponse,
    InitializeMachineResponse, ListMachinesRequest, MachineRequest, NodeAddress,
    PersistentVolumeSpec,
};
use domain::{Code, Status};
use tracing::Instrument as _;

use crate::provider::{Listed, NAMESPACE_STAMP, Provider, request_namespace, stamped_namespace};
use codes::ecs_status;
use spec::{MACHINE_TAG, Owner, ProviderSpec, RegionPolicy};

/// The provider's name (`MachineClass.provider`).
pub const NAME: &str = "Alicloud";

/// How long, in all, CreateMachine looks for the instance RunInstances answered before taking it
/// for a released one: ECS may list a brand-new instance a moment after creating it. Should a new
/// instance be listed later still, the walk makes one more for the machine, and the two (both
/// carrying the machine's owner tag and name) are settled by [`decide`] on the next look: the
/// earlier stays, the other is released.
const CONFIRM_WINDOW: Duration = Duration::from_millis(1500);

/// How many released instance ids a driver process remembers ([`Released`]).
const RELEASED_MEMORY: usize = 4096;

/// What this driver process knows to be gone for good, the last [`RELEASED_MEMORY`] of each: the
/// instances it released, and the ClientTokens whose instance it found released. An ECS instance
/// id is never reused and a released instance never comes back, so a token answered with one of
/// these instances, or a token found released before, is known to be used up at once, without
/// [`CONFIRM_WINDOW`] spent waiting for its instance to be listed: a machine deleted and made again
/// (the same UID) walks its token series without a pause per earlier life. What another replica
/// released is not here, and is waited for as before.
#[derive(Debug, Default)]
struct Released {
    instances: Bounded,
    tokens: Bounded,
}

/// A set that forgets its oldest entries beyond [`RELEASED_MEMORY`].
#[derive(Debug, Default)]
struct Bounded {
    set: BTreeSet<String>,
    order: std::collections::VecDeque<String>,
}

impl Bounded {
    fn insert(&mut self, item: &str) {
        if self.set.insert(item.to_owned()) {
            self.order.push_back(item.to_owned());
            if self.order.len() > RELEASED_MEMORY
                && let Some(oldest) = self.order.pop_front()
            {
                self.set.remove(&oldest);
            }
        }
    }

    fn contains(&self, item: &str) -> bool {
        self.set.contains(item)
    }
}

/// The Alicloud provider plugin.
#[derive(Debug, Clone)]
pub struct Alicloud {
    ecs: Ecs,
    csi_drivers: BTreeSet<String>,
    operation_timeout: Duration,
    regions: RegionPolicy,
    released: std::sync::Arc<std::sync::Mutex<Released>>,
}

/// One instance found for a machine, with the client (region) it lives in.
struct Found {
    client: EcsClient,
    instance: Instance,
}

/// What a request's `spec.providerID` led to.
enum ByProviderId {
    /// No providerID.
    Unset,
    /// The instance it names, in the cluster.
    Found(Box<Found>),
    /// It names no instance of the cluster.
    Missing,
}

/// A request's checked spec, region and credentials.
struct Prepared {
    spec: ProviderSpec,
    region: Region,
    credentials: alicloud::Credentials,
}

impl Prepared {
    /// A client for the class's region.
    fn home(&self, ecs: &Ecs) -> EcsClient {
        ecs.client(&self.region, self.credentials.clone())
    }
}

/// Regions the machine quota lists at once: enough that counting in every known region takes a
/// few round trips, few enough not to trip ECS's per-account rate limit.
const QUOTA_REGIONS_AT_ONCE: usize = 8;

/// Who keeps a machine name, decided from one DescribeInstances answer ([`decide`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Instances of this owner that lost and must be released.
    pub release: Vec<String>,
    /// What is left for the caller.
    pub outcome: Outcome,
}

/// The caller's side of a [`Verdict`]; indexes point into the instances [`decide`] was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// No instance carries the name.
    Free,
    /// The name's VM is the caller's (made for its UID, or for no recorded owner).
    Adopt(usize),
    /// The name's VM was made for another owner, or is another namespace's.
    Taken(usize),
    /// Several instances without a recorded owner carry the name; none can be picked.
    Ambiguous(Vec<String>),
}

/// The order that decides who keeps a name: the earliest `CreationTime` (instances without one
/// last), then the smallest instance id. Every replica computes it from the same listing alike.
fn rank(i: &Instance) -> (bool, i64, &str) {
    let created = i.creation_timestamp();
    (
        created.is_none(),
        created.unwrap_or_default(),
        i.instance_id.as_str(),
    )
}

/// Decides, for a caller speaking for `me`, what the instances carrying one machine name (in one
/// cluster) mean. The first in [`rank`] order keeps the name. The caller's other instances lost:
/// they are to be released (a replica that made them crashed, or lost a race). Instances of other
/// owners are never the caller's to release; their creators release them the same way.
///
/// Instances without an owner tag (made before Berth recorded owners, or outside it) are adopted as
/// before, as long as only one of them carries the name. An instance stamped with another namespace
/// than the caller's (`namespace`; [`NAMESPACE_STAMP`]) is never the caller's, whatever its owner tag
/// says: a tenant that sends another tenant's UID neither adopts nor releases that tenant's VM.
pub fn decide(seen: &[Instance], me: &Owner, namespace: &str) -> Verdict {
    // Another namespace's instances are not there for this caller: ECS names need not be unique,
    // so a name one namespace uses is free in another, and a 409 would tell the caller the other
    // namespace has a machine of that name (a break-it finding).
    let Some(winner) = (0..seen.len())
        .filter(|n| in_namespace(&seen[*n], namespace))
        .min_by(|a, b| rank(&seen[*a]).cmp(&rank(&seen[*b])))
    else {
        return Verdict {
            release: Vec::new(),
            outcome: Outcome::Free,
        };
    };
    let release: Vec<String> = seen
        .iter()
        .enumerate()
        .filter(|(n, i)| {
            *n != winner && in_namespace(i, namespace) && Owner::of_instance(i).as_ref() == Some(me)
        })
        .map(|(_, i)| i.instance_id.clone())
        .collect();
    let outcome = match Owner::of_instance(&seen[winner]) {
        Some(owner) if &owner == me => Outcome::Adopt(winner),
        Some(_) => Outcome::Taken(winner),
        None => {
            let unowned: Vec<String> = seen
                .iter()
                .filter(|i| Owner::of_instance(i).is_none() && in_namespace(i, namespace))
                .map(|i| i.instance_id.clone())
                .collect();
            if unowned.len() == 1 {
                Outcome::Adopt(winner)
            } else {
                Outcome::Ambiguous(unowned)
            }
        }
    };
    Verdict { release, outcome }
}

/// Whether a by-name lookup for `owner` in `namespace` may take this instance as the machine's:
/// stamped with the same namespace, and made for the same owner or with no recorded owner.
fn belongs_to(i: &Instance, owner: &Owner, namespace: &str) -> bool {
    in_namespace(i, namespace) && Owner::of_instance(i).is_none_or(|o| &o == owner)
}

/// Whether the instance is stamped with `namespace` (no stamp: `default`).
fn in_namespace(i: &Instance, namespace: &str) -> bool {
    stamped_namespace(i.tag(NAMESPACE_STAMP)) == namespace
}

/// The machine's AlreadyExists: the name's VM is another machine's. It says only that the name is
/// taken: never the other VM's id, owner, cluster or namespace, which may be another tenant's.
fn taken(name: &str) -> Status {
    Status::new(
        Code::AlreadyExists,
        format!(
            "machine name {name:?} is taken: another machine's VM has it in this cluster; one name is one VM"
        ),
    )
}

impl Alicloud {
    /// A provider calling ECS through `ecs`. `extra_csi_drivers` are CSI driver names whose
    /// `volumeHandle` is an ECS disk id besides `diskplugin.csi.alibabacloud.com`;
    /// `operation_timeout` bounds each driver call (every ECS attempt, backoff and rate-limit wait).
    /// Regions must be ones ECS is known to serve unless `ecs` has an endpoint override; see
    /// [`Alicloud::with_allowed_regions`].
    pub fn new(ecs: Ecs, extra_csi_drivers: &[String], operation_timeout: Duration) -> Self {
        let regions = RegionPolicy {
            allowed: BTreeSet::new(),
            known_only: ecs.config().endpoint.is_none(),
        };
        Alicloud {
            ecs,
            csi_drivers: spec::csi_drivers(extra_csi_drivers),
            operation_timeout,
            regions,
            released: std::sync::Arc::default(),
        }
    }

    fn released(&self) -> std::sync::MutexGuard<'_, Released> {
        self.released
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records that `instance_id` was released ([`Released`]).
    fn remember_released(&self, instance_id: &str) {
        self.released().instances.insert(instance_id);
    }

    /// Whether this process released `instance_id`.
    fn was_released(&self, instance_id: &str) -> bool {
        self.released().instances.contains(instance_id)
    }

    /// The regions the machine quota counts in: the operator's allow-list, else every region ECS
    /// is known to serve, with the request's own region always among them.
    fn quota_regions(&self, own: &Region) -> BTreeSet<Region> {
        let mut regions: BTreeSet<Region> = if self.regions.allowed.is_empty() {
            alicloud::endpoint::known_regions()
                .into_iter()
                .filter_map(|r| Region::parse(r).ok())
                .collect()
        } else {
            self.regions.allowed.clone()
        };
        regions.insert(own.clone());
        regions
    }

    /// Allows only these regions (the operator's allow-list); an empty list keeps the default.
    pub fn with_allowed_regions(mut self, regions: impl IntoIterator<Item = Region>) -> Self {
        self.regions.allowed = regions.into_iter().collect();
        self
    }

    fn deadline(&self) -> alicloud::Instant {
        alicloud::deadline_in(self.operation_timeout)
    }

    /// The spec, region and credentials of a request, checked (all of them for a create).
    fn prepare(
        &self,
        class: &domain::machine::MachineClass,
        secret: &domain::machine::Secret,
        for_create: bool,
    ) -> Result<Prepared, Status> {
        let spec = ProviderSpec::decode(&class.provider_spec)?;
        let region = if for_create {
            spec.validate_for_create(&self.regions)
        } else {
            spec.validate_scope(&self.regions)
        };
        let credentials = spec::credentials(secret);
        // A malformed request (400) is told so before what this driver's set-up refuses (412):
        // the answer to a request depends on where it was sent only once it is well formed.
        let (region, credentials) = match (region, credentials) {
            (Err(refused), Err(malformed))
                if refused.code != Code::InvalidArgument
                    && malformed.code == Code::InvalidArgument =>
            {
                return Err(malformed);
            }
            (region, credentials) => (region?, credentials?),
        };
        Ok(Prepared {
            spec,
            region,
            credentials,
        })
    }

    /// The instance with this id in `region`, if it exists and carries the cluster tags.
    async fn by_id(
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
    async fn by_name(
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

    /// The instance `spec.providerID` names, looked up in its own region (checked against the
    /// policy before any client is made) within the cluster and the machine's namespace: another
    /// namespace's instance is answered as one that does not exist.
    async fn by_provider_id(
        &self,
        req: &MachineRequest,
        p: &Prepared,
        deadline: alicloud::Instant,
    ) -> Result<ByProviderId, Status> {
        let provider_id = req.machine.spec.provider_id.as_str();
        if provider_id.is_empty() {
            return Ok(ByProviderId::Unset);
        }
        let (region, id) = spec::decode_provider_id(provider_id, &self.regions)?;
        let client = match region {
            Some(r) if r != p.region => self.ecs.client(&r, p.credentials.clone()),
            _ => p.home(&self.ecs),
        };
        match self
            .by_id(&client, id, &p.spec.cluster_tags(), deadline)
            .await?
            .filter(|i| in_namespace(i, request_namespace(req)))
        {
            Some(instance) => Ok(ByProviderId::Found(Box::new(Found { client, instance }))),
            None => {
                tracing::debug!(instance_id = id, "no instance for providerID");
                Ok(ByProviderId::Missing)
            }
        }
    }

    /// The instances backing a machine: the one `spec.providerID` names, else, when `name_fallback`
    /// allows, those named like the machine in the class's region that belong to `owner`.
    async fn find(
        &self,
        req: &MachineRequest,
        p: &Prepared,
        name: &str,
        owner: &Owner,
        name_fallback: bool,
        deadline: alicloud::Instant,
    ) -> Result<Vec<Found>, Status> {
        match self.by_provider_id(req, p, deadline).await? {
            ByProviderId::Found(f) => return Ok(vec![*f]),
            ByProviderId::Missing if !name_fallback => return Ok(Vec::new()),
            ByProviderId::Missing | ByProviderId::Unset => {}
        }
        let home = p.home(&self.ecs);
        Ok(self
            .by_name(&home, name, &p.spec.cluster_tags(), deadline)
            .await?
            .into_iter()
            .filter(|i| belongs_to(i, owner, request_namespace(req)))
            .map(|instance| Found {
                client: home.clone(),
                instance,
            })
            .collect())
    }

    /// Applies [`decide`] to the instances carrying `name`: releases this owner's losing instances,
    /// then answers with the name's VM when it is the caller's, `None` when there is none, and
    /// AlreadyExists (another owner's) or OutOfRange (several without owner) otherwise.
    async fn settle(
        &self,
        client: &EcsClient,
        seen: Vec<Instance>,
        owner: &Owner,
        namespace: &str,
        name: &str,
        deadline: alicloud::Instant,
    ) -> Result<Option<Instance>, Status> {
        let verdict = decide(&seen, owner, namespace);
        for id in &verdict.release {
            tracing::info!(instance_id = %id, "releasing an instance that lost the machine name");
            self.release_lost(client, id, deadline)
                .await
                .map_err(|e| {
                    Status::unavailable(format!(
                        "ECS instance {id} was made for machine {name:?} but another instance keeps the name, and releasing it failed ({e}); retry to release it"
                    ))
                })?;
        }
        match verdict.outcome {
            Outcome::Free => Ok(None),
            Outcome::Adopt(n) => Ok(Some(seen[n].clone())),
            Outcome::Taken(_) => Err(taken(name)),
            Outcome::Ambiguous(ids) => Err(multiple(&ids)),
        }
    }

    /// Releases an instance a create of this machine made but that lost the name. It was never
    /// used, so the data disks the spec keeps (`deleteWithInstance: false`) go with it too.
    async fn release_lost(
        &self,
        client: &EcsClient,
        instance_id: &str,
        deadline: alicloud::Instant,
    ) -> Result<(), alicloud::Error> {
        let disks = client
            .describe_all_disks(
                &DescribeDisks {
                    instance_id: Some(instance_id.to_owned()),
                    ..DescribeDisks::default()
                },
                deadline,
            )
            .await?;
        for d in disks
            .iter()
            .filter(|d| d.delete_with_instance == Some(false))
        {
            match client
                .set_disk_delete_with_instance(&d.disk_id, true, deadline)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        match client.delete_instance(instance_id, true, deadline).await {
            Ok(_) => {
                self.remember_released(instance_id);
                Ok(())
            }
            Err(e) if e.is_not_found() => {
                self.remember_released(instance_id);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// After RunInstances: the instance it answered with, looked at at once and then a few times
    /// within [`CONFIRM_WINDOW`], since a cloud may list a new instance a moment after creating it.
    /// `None` means it is gone: the token was answered from an earlier, since released, creation.
    async fn confirm(
        &self,
        client: &EcsClient,
        instance_id: &str,
        deadline: alicloud::Instant,
    ) -> Result<Option<Instance>, Status> {
        if self.was_released(instance_id) {
            return Ok(None);
        }
        within_confirm_window(|| self.by_id(client, instance_id, &[], deadline)).await
    }

    /// Which instance a ClientToken ECS refused as used with other parameters made: one carrying
    /// the machine's UID, looked for within [`CONFIRM_WINDOW`] (a cloud may list a new instance a
    /// moment after making it), under this machine's name or another; or none, when it was released.
    async fn token_use(
        &self,
        client: &EcsClient,
        scope: &[Tag],
        owner: &Owner,
        namespace: &str,
        name: &str,
        deadline: alicloud::Instant,
    ) -> Result<TokenUse, Status> {
        let mut tags = scope.to_vec();
        tags.push(Tag::new(spec::OWNER_TAG, owner.tag_value()));
        let filter = DescribeInstances {
            tags,
            ..DescribeInstances::default()
        };
        let used = within_confirm_window(|| async {
            let found = client
                .describe_all_instances(&filter, deadline)
                .await
                .map_err(|e| ecs_status(&e))?;
            Ok(
                if found
                    .iter()
                    .any(|i| i.instance_name == name && in_namespace(i, namespace))
                {
                    Some(TokenUse::ThisMachine)
                } else {
                    // Another machine of the caller's own namespace may be named; one of another
                    // namespace (a tenant that sent someone else's UID) may not.
                    let visible = found.iter().find(|i| in_namespace(i, namespace));
                    (!found.is_empty())
                        .then(|| TokenUse::OtherMachine(visible.map(|i| i.instance_name.clone())))
                },
            )
        })
        .await?;
        Ok(used.unwrap_or(TokenUse::Released))
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

/// A machine's addresses: private IPs, public IPs and the host name the node registers with.
fn addresses(i: &Instance) -> Vec<NodeAddress> {
    let mut out = Vec::new();
    let private: Vec<&String> = if i.private_ip_addresses.is_empty() {
        i.network_interfaces
            .iter()
            .filter_map(|n| n.primary_ip_address.as_ref())
            .collect()
    } else {
        i.private_ip_addresses.iter().collect()
    };
    for ip in private {
        out.push(NodeAddress {
            kind: "InternalIP".into(),
            address: ip.clone(),
        });
    }
    for ip in &i.public_ip_addresses {
        out.push(NodeAddress {
            kind: "ExternalIP".into(),
            address: ip.clone(),
        });
    }
    out.push(NodeAddress {
        kind: "Hostname".into(),
        address: i
            .host_name
            .as_deref()
            .map(str::to_lowercase)
            .unwrap_or_else(|| spec::node_name(&i.instance_id)),
    });
    out
}

/// MCM's OutOfRange for several instances backing one machine.
fn multiple(ids: &[String]) -> Status {
    Status::new(
        Code::OutOfRange,
        format!(
            "multiple VM instances found backing this machine object. IDs for all backing VMs - [{}]",
            ids.join(" ")
        ),
    )
}

/// DeleteMachine's state when no instance backs the machine.
fn nothing_released(name: &str) -> String {
    format!("no ECS instance backs machine {name}; nothing to release")
}

/// MCM's NotFound for a machine no instance backs.
fn missing(name: &str) -> Status {
    Status::not_found(format!(
        "VM instance not found backing this machine object {name:?}"
    ))
}

/// Exactly one instance, or MCM's NotFound / OutOfRange.
fn exactly_one(found: Vec<Found>, name: &str) -> Result<Found, Status> {
    let mut found = found.into_iter();
    match (found.next(), found.next()) {
        (None, _) => Err(missing(name)),
        (Some(one), None) => Ok(one),
        (Some(a), Some(b)) => {
            let ids: Vec<String> = [a, b]
                .into_iter()
                .chain(found)
                .map(|f| f.instance.instance_id)
                .collect();
            Err(multiple(&ids))
        }
    }
}

/// An instance as ListMachines and the machine quota see it.
fn listed(i: Instance) -> Listed {
    Listed {
        namespace: stamped_namespace(i.tag(NAMESPACE_STAMP)).to_owned(),
        uid: i.tag(spec::OWNER_TAG).unwrap_or_default().to_owned(),
        name: i.instance_name,
    }
}

/// CreateMachine's answer for an instance that backs the machine.
fn create_answer(region: &str, i: &Instance, last_known_state: String) -> CreateMachineResponse {
    CreateMachineResponse {
        provider_id: spec::provider_id(region, &i.instance_id),
        node_name: spec::node_name(&i.instance_id),
        last_known_state,
        addresses: addresses(i),
    }
}

fn provider_id_of(f: &Found) -> String {
    spec::provider_id(f.client.region(), &f.instance.instance_id)
}

/// The condition GetMachineStatus reports: the ECS status, True once Running.
fn instance_condition(i: &Instance) -> Condition {
    let status = match i.status {
        InstanceStatus::Running => "True",
        InstanceStatus::Stopped | InstanceStatus::Stopping => "False",
        _ => "Unknown",
    };
    Condition {
        kind: "InstanceStatus".into(),
        status: status.into(),
        reason: i.status.as_str().to_owned(),
        message: format!("ECS instance {} is {}", i.instance_id, i.status),
        last_transition_time: None,
    }
}

/// Whether the instance is initialised ([`crate::provider::INITIALIZED_CONDITION`]): only a
/// Running instance is. Stopped (or Stopping) needs InitializeMachine to start it; Pending and
/// Starting are on their way. MCM, told Uninitialized, calls InitializeMachine, which starts what
/// is stopped and answers OK once the instance runs.
fn initialized_condition(i: &Instance, machine: &str) -> Condition {
    let id = &i.instance_id;
    let status = &i.status;
    let (initialized, message) = match status {
        InstanceStatus::Running => ("True", format!("ECS instance {id} is Running")),
        InstanceStatus::Stopped => (
            "False",
            format!(
                "ECS instance {id} backing machine {machine:?} exists but is not initialised: it is Stopped; InitializeMachine starts it"
            ),
        ),
        InstanceStatus::Stopping => (
            "False",
            format!(
                "ECS instance {id} backing machine {machine:?} exists but is not initialised: it is Stopping; InitializeMachine starts it once it has stopped"
            ),
        ),
        _ => (
            "False",
            format!(
                "ECS instance {id} backing machine {machine:?} exists but is not initialised: it is {status}, and counts as initialised once it is Running"
            ),
        ),
    };
    Condition {
        kind: crate::provider::INITIALIZED_CONDITION.into(),
        status: initialized.into(),
        reason: status.as_str().to_owned(),
        message,
        last_transition_time: None,
    }
}

/// Whether ECS refused a ClientToken as used before with other parameters.
fn is_mismatch(e: &alicloud::Error) -> bool {
    e.ecs_code() == Some("IdempotentParameterMismatch")
}

/// What made the instance a refused ClientToken stands for ([`Alicloud::token_use`]).
enum TokenUse {
    /// An instance of this machine (its UID and name), listed only now: retry to adopt it.
    ThisMachine,
    /// An instance with this machine's UID under another name: the UID is another machine's (its
    /// name when it is in the caller's namespace).
    OtherMachine(Option<String>),
    /// No instance carries the UID: the token's instance was released.
    Released,
}

/// The machine's AlreadyExists when its UID already stands for a VM of another name: a UID is one
/// machine's, and the ClientToken derived from it cannot make a second. It names that machine only
/// when it is in the caller's namespace (`other`), and never its VM.
fn uid_taken(name: &str, other: Option<&str>) -> Status {
    let whose = match other {
        Some(other) => format!("machine {other:?}'s VM"),
        None => "another machine's VM".to_owned(),
    };
    Status::new(
        Code::AlreadyExists,
        format!(
            "machine.metadata.uid: the UID already stands for {whose} in this cluster; machine {name:?} needs a UID of its own"
        ),
    )
}

/// A RunInstances failure as a status. `IdempotentParameterMismatch` means this machine's token
/// already made an instance with other parameters (user data with a renewed bootstrap token, say)
/// that the name lookup did not see yet: the next attempt adopts it, so that is a retry-soon.
fn create_error(e: &alicloud::Error, name: &str) -> Status {
    if e.ecs_code() == Some("IdempotentParameterMismatch") {
        return Status::unavailable(format!(
            "an ECS instance for machine {name:?} was already requested with other parameters and is not listed yet; retry to adopt it ({e})"
        ));
    }
    ecs_status(e)
}

#[async_trait]
impl Provider for Alicloud {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> String {
        // Says where calls go without the address itself: this answer reaches gateway clients.
        let target = if self.ecs.config().endpoint.is_some() {
            "the endpoint set by BERTH_ALICLOUD_ENDPOINT (an emulator or a private endpoint)"
        } else {
            "the regional endpoints ecs.<region>.aliyuncs.com"
        };
        format!("Alibaba Cloud ECS virtual machines (API 2014-05-26), through {target}")
    }

    fn check_create(&self, req: &MachineRequest) -> Result<(), Status> {
        spec::name_and_owner(&req.machine, true)?;
        let user_data = spec::user_data(&req.secret);
        match self.prepare(&req.machine_class, &req.secret, true) {
            Err(refused) if refused.code != Code::InvalidArgument => {
                user_data?;
                Err(refused)
            }
            prepared => prepared.and(user_data).map(|_| ()),
        }
    }

    async fn create_machine(&self, req: &MachineRequest) -> Result<CreateMachineResponse, Status> {
        let (name, owner) = spec::name_and_owner(&req.machine, true)?;
        let span = tracing::info_span!("alicloud.create_machine", machine = %name);
        async {
            let user_data = spec::user_data(&req.secret);
            let p = match self.prepare(&req.machine_class, &req.secret, true) {
                // The user data's shape (400) before what the set-up refuses (412).
                Err(refused) if refused.code != Code::InvalidArgument => {
                    user_data?;
                    return Err(refused);
                }
                p => p?,
            };
            let user_data = user_data?;
            let deadline = self.deadline();
            let namespace = request_namespace(req);
            if let ByProviderId::Found(f) = self.by_provider_id(req, &p, deadline).await? {
                let id = &f.instance.instance_id;
                if Owner::of_instance(&f.instance).is_some_and(|o| o != owner) {
                    return Err(taken(&name));
                }
                tracing::info!(instance_id = %id, "adopting the instance providerID names");
                return Ok(create_answer(
                    f.client.region(),
                    &f.instance,
                    format!("ECS instance {id} already backs machine {name}; adopted"),
                ));
            }
            let client = p.home(&self.ecs);
            let scope = p.spec.cluster_tags();
            let seen = self.by_name(&client, &name, &scope, deadline).await?;
            if let Some(i) = self.settle(&client, seen, &owner, namespace, &name, deadline).await? {
                let id = &i.instance_id;
                tracing::info!(instance_id = %id, "adopting the existing instance");
                return Ok(create_answer(
                    client.region(),
                    &i,
                    format!("ECS instance {id} already backs machine {name}; adopted"),
                ));
            }
            // No instance backs the machine. Walk its ClientToken series: token n is answered
            // with the instance it made before (a retry of this create finds it again), with a new
            // instance (the first unused token), or with an instance since released (the machine
            // is being created again after a delete, with the same UID: go on to token n+1).
            let mut run = p.spec.run_instances(&name, &owner, namespace, user_data);
            // The series never runs out: a machine may be deleted and made again any number of
            // times. What bounds one call is its deadline; the tokens it found used up are
            // remembered ([`Released`]), so the retry the answer asks for goes on from there.
            let mut walked = 0u32;
            for n in 0u32.. {
                let token = spec::client_token(&req.machine, n);
                if self.released().tokens.contains(&token) {
                    continue;
                }
                if alicloud::Instant::now() + CONFIRM_WINDOW >= deadline && walked > 0 {
                    return Err(Status::unavailable(format!(
                        "machine {name:?} was created and deleted often with this UID: this call found {walked} more of its earlier ClientTokens used up (token {n} is next) before its time ran out; retry to go on from there"
                    )));
                }
                walked += 1;
                run.client_token = Some(token.clone());
                let answer = match client.run_instances(&run, deadline).await {
                    Ok(answer) => answer,
                    // The token made an instance before, with other parameters. Whose, and is it
                    // still there? Only this machine's own instance, not listed yet, is a retry.
                    Err(e) if is_mismatch(&e) && !owner.tag_value().is_empty() => {
                        match self.token_use(&client, &scope, &owner, namespace, &name, deadline).await? {
                            TokenUse::ThisMachine => return Err(create_error(&e, &name)),
                            TokenUse::OtherMachine(other) => {
                                return Err(uid_taken(&name, other.as_deref()));
                            }
                            TokenUse::Released => {
                                tracing::info!(
                                    token = n,
                                    "the machine's ClientToken was used with other parameters by an instance since released; trying the next token of its series"
                                );
                                self.released().tokens.insert(&token);
                                continue;
                            }
                        }
                    }
                    Err(e) => return Err(create_error(&e, &name)),
                };
                let id = answer.instance_ids.into_iter().next().ok_or_else(|| {
                    Status::internal(format!(
                        "ECS instance creation failed for machine {name:?}: instance ID missing"
                    ))
                })?;
                let Some(made) = self.confirm(&client, &id, deadline).await? else {
                    // Only an instance that exists may be answered OK.
                    tracing::info!(
                        instance_id = %id,
                        token = n,
                        "the machine's ClientToken names a released instance; trying the next token of its series"
                    );
                    self.released().tokens.insert(&token);
                    continue;
                };
                // Other creators (other UIDs, other replicas) may have made an instance for this
                // name meanwhile: look again and settle who keeps it. Every creator reaches the
                // same verdict, so exactly one instance stays.
                let mut seen = self.by_name(&client, &name, &scope, deadline).await?;
                if !seen.iter().any(|i| i.instance_id == id) {
                    seen.push(made);
                }
                return match self.settle(&client, seen, &owner, namespace, &name, deadline).await? {
                    Some(kept) if kept.instance_id == id => {
                        tracing::info!(instance_id = %id, token = n, "instance created");
                        Ok(create_answer(
                            client.region(),
                            &kept,
                            format!("ECS instance {id} created for machine {name}"),
                        ))
                    }
                    // An earlier instance of this same machine keeps the name (a replica made it
                    // meanwhile); ours was released.
                    Some(kept) => {
                        let kept_id = &kept.instance_id;
                        tracing::info!(instance_id = %kept_id, "adopting the instance that keeps the name");
                        Ok(create_answer(
                            client.region(),
                            &kept,
                            format!("ECS instance {kept_id} already backs machine {name}; adopted"),
                        ))
                    }
                    None => Err(Status::internal(format!(
                        "ECS instance {id} of machine {name:?} vanished while settling who keeps the name"
                    ))),
                };
            }
            unreachable!("the token series is endless")
        }
        .instrument(span)
        .await
    }

    async fn initialize_machine(
        &self,
        req: &MachineRequest,
    ) -> Result<InitializeMachineResponse, Status> {
        let (name, owner) = spec::name_and_owner(&req.machine, false)?;
        let span = tracing::info_span!("alicloud.initialize_machine", machine = %name);
        async {
            let p = self.prepare(&req.machine_class, &req.secret, false)?;
            let deadline = self.deadline();
            let found = self.find(req, &p, &name, &owner, true, deadline).await?;
            let f = exactly_one(found, &name)?;
            let id = f.instance.instance_id.clone();
            let waiting = |what: String| Err(Status::new(Code::Uninitialized, what));
            match &f.instance.status {
                InstanceStatus::Running => Ok(InitializeMachineResponse {
                    provider_id: provider_id_of(&f),
                    node_name: spec::node_name(&id),
                    addresses: addresses(&f.instance),
                }),
                InstanceStatus::Stopped => {
                    match f.client.start_instance(&id, deadline).await {
                        Ok(_) => {}
                        // Someone else started it meanwhile: just as good.
                        Err(e) if e.ecs_code() == Some("IncorrectInstanceStatus") => {}
                        Err(e) => return Err(ecs_status(&e)),
                    }
                    tracing::info!(instance_id = %id, "started the stopped instance");
                    waiting(format!(
                        "ECS instance {id} was Stopped and is starting; initialization completes once it is Running"
                    ))
                }
                other => waiting(format!(
                    "ECS instance {id} is {other}; initialization completes once it is Running"
                )),
            }
        }
        .instrument(span)
        .await
    }

    async fn delete_machine(&self, req: &MachineRequest) -> Result<DeleteMachineResponse, Status> {
        let (name, owner) = spec::name_and_owner(&req.machine, false)?;
        let span = tracing::info_span!("alicloud.delete_machine", machine = %name);
        async {
            let p = self.prepare(&req.machine_class, &req.secret, false)?;
            let deadline = self.deadline();
            // With a providerID, only that instance: the orphan collector sends the name of a live
            // machine with the id of an orphan, and the live machine's VM must survive. By name,
            // only this owner's instances: a machine that lost its name never takes the winner's.
            let found = self.find(req, &p, &name, &owner, false, deadline).await?;
            let client = found
                .first()
                .map(|f| f.client.clone())
                .unwrap_or_else(|| p.home(&self.ecs));
            let mut released = Vec::new();
            let mut busy = Vec::new();
            for f in &found {
                let i = &f.instance;
                if i.status.is_transitional() {
                    busy.push(format!("{} is {}", i.instance_id, i.status));
                    continue;
                }
                match f.client.delete_instance(&i.instance_id, true, deadline).await {
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
                    &p.spec.cluster_tags(),
                    request_namespace(req),
                    &name,
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
                let mut state = nothing_released(&name);
                // By name, another UID's VM in the caller's own namespace holds the name: said,
                // so a caller that sent no UID (or a stale one) does not take a running VM for
                // gone (a break-it finding). Other namespaces' VMs are never looked at.
                if req.machine.spec.provider_id.is_empty()
                    && self
                        .by_name(&client, &name, &p.spec.cluster_tags(), deadline)
                        .await?
                        .iter()
                        .any(|i| in_namespace(i, request_namespace(req)))
                {
                    state.push_str(&crate::provider::held_by_another(&name, "VM"));
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
        .instrument(span)
        .await
    }

    async fn get_machine_status(
        &self,
        req: &MachineRequest,
    ) -> Result<GetMachineStatusResponse, Status> {
        let (name, owner) = spec::name_and_owner(&req.machine, false)?;
        let span = tracing::debug_span!("alicloud.get_machine_status", machine = %name);
        async {
            let p = self.prepare(&req.machine_class, &req.secret, false)?;
            let found = self
                .find(req, &p, &name, &owner, true, self.deadline())
                .await?;
            let f = exactly_one(found, &name)?;
            Ok(GetMachineStatusResponse {
                provider_id: provider_id_of(&f),
                node_name: spec::node_name(&f.instance.instance_id),
                addresses: addresses(&f.instance),
                conditions: vec![
                    instance_condition(&f.instance),
                    initialized_condition(&f.instance, &name),
                ],
            })
        }
        .instrument(span)
        .await
    }

    async fn machines(
        &self,
        req: &ListMachinesRequest,
    ) -> Result<BTreeMap<String, Listed>, Status> {
        let p = self.prepare(&req.machine_class, &req.secret, false)?;
        let client = p.home(&self.ecs);
        let filter = DescribeInstances {
            tags: p.spec.list_tags(),
            ..DescribeInstances::default()
        };
        let instances = client
            .describe_all_instances(&filter, self.deadline())
            .await
            .map_err(|e| ecs_status(&e))?;
        tracing::debug!(count = instances.len(), "instances listed");
        Ok(instances
            .into_iter()
            .map(|i| {
                (
                    spec::provider_id(client.region(), &i.instance_id),
                    listed(i),
                )
            })
            .collect())
    }

    async fn namespace_machines(
        &self,
        req: &MachineRequest,
        namespace: &str,
    ) -> Result<Vec<Listed>, Status> {
        use futures::StreamExt as _;
        let p = self.prepare(&req.machine_class, &req.secret, false)?;
        // Every machine Berth made carries its name tag; `default` also holds those made before
        // the namespace stamp, so only the other namespaces can be asked for by their stamp.
        let tag = if namespace == service_kit::tenancy::DEFAULT_NAMESPACE {
            Tag::new(MACHINE_TAG, "")
        } else {
            Tag::new(NAMESPACE_STAMP, namespace)
        };
        let filter = DescribeInstances {
            tags: vec![tag],
            ..DescribeInstances::default()
        };
        // The quota is the namespace's, not one region's: counted in every region a create could
        // use (the operator's allow-list, else every region ECS is known to serve), a few at a
        // time. Counted in the class's region alone, a tenant past it went on in the next region
        // (a break-it finding).
        let deadline = self.deadline();
        let regions = self.quota_regions(&p.region);
        let lists: Vec<_> = futures::stream::iter(regions)
            .map(|region| {
                let client = self.ecs.client(&region, p.credentials.clone());
                let filter = &filter;
                let own = region == p.region;
                async move {
                    match client.describe_all_instances(filter, deadline).await {
                        // A region this account (or endpoint) does not have holds none of its
                        // machines; only the class's own must exist.
                        Err(e)
                            if !own
                                && e.ecs_code()
                                    .is_some_and(|c| c.starts_with("InvalidRegionId")) =>
                        {
                            Ok(Vec::new())
                        }
                        other => other,
                    }
                }
            })
            .buffer_unordered(QUOTA_REGIONS_AT_ONCE)
            .collect()
            .await;
        let mut machines = Vec::new();
        for list in lists {
            let instances = list.map_err(|e| ecs_status(&e))?;
            machines.extend(
                instances
                    .into_iter()
                    .filter(|i| i.tag(MACHINE_TAG).is_some() && in_namespace(i, namespace))
                    .map(listed),
            );
        }
        Ok(machines)
    }

    fn missing(&self, machine_name: &str) -> Status {
        missing(machine_name)
    }

    fn nothing_to_delete(&self, machine_name: &str) -> DeleteMachineResponse {
        DeleteMachineResponse {
            last_known_state: nothing_released(machine_name),
        }
    }

    fn volume_id(&self, pv: &PersistentVolumeSpec) -> Option<String> {
        if let Some(flex) = &pv.flex_volume {
            // MCM does not check the flex driver's name; neither do we.
            return flex
                .options
                .get("volumeId")
                .filter(|v| !v.is_empty())
                .cloned();
        }
        pv.csi
            .as_ref()
            .filter(|c| self.csi_drivers.contains(&c.driver) && !c.volume_handle.is_empty())
            .map(|c| c.volume_handle.clone())
    }
}

/// What `look` finds, asked at once and then after pauses of 100 ms, 200 ms, ... until
/// [`CONFIRM_WINDOW`] has passed: a cloud may list a new instance a moment after making it, so one
/// look that finds nothing is not yet proof that there is nothing.
async fn within_confirm_window<T, F, Fut>(mut look: F) -> Result<Option<T>, Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, Status>>,
{
    let mut pause = Duration::from_millis(100);
    let mut waited = Duration::ZERO;
    loop {
        if let Some(found) = look().await? {
            return Ok(Some(found));
        }
        if waited >= CONFIRM_WINDOW {
            return Ok(None);
        }
        tokio::time::sleep(pause).await;
        waited += pause;
        pause *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::machine::Machine;

    /// An instance as DescribeInstances lists it: id, `CreationTime`, and the owner tag if any.
    fn instance(id: &str, created: Option<&str>, owner: Option<&str>) -> Instance {
        Instance {
            instance_id: id.into(),
            instance_name: "m-1".into(),
            host_name: None,
            status: InstanceStatus::Running,
            region_id: None,
            zone_id: None,
            instance_type: None,
            image_id: None,
            creation_time: created.map(str::to_owned),
            start_time: None,
            private_ip_addresses: Vec::new(),
            public_ip_addresses: Vec::new(),
            vpc_id: None,
            v_switch_id: None,
            network_interfaces: Vec::new(),
            tags: owner
                .map(|o| vec![Tag::new(spec::OWNER_TAG, o)])
                .unwrap_or_default(),
            key_pair_name: None,
            spot_strategy: None,
            operation_locks: Vec::new(),
        }
    }

    fn owner(uid: &str) -> Owner {
        let mut m = Machine::default();
        m.metadata.uid = uid.into();
        Owner::of(&m).unwrap()
    }

    const T0: Option<&str> = Some("2024-05-01T10:00Z");
    const T1: Option<&str> = Some("2024-05-01T10:01Z");

    #[test]
    fn nothing_named_is_free_and_one_of_mine_is_mine() {
        let me = owner("a");
        assert_eq!(decide(&[], &me, "default").outcome, Outcome::Free);
        let v = decide(&[instance("i-1", T0, Some("a"))], &me, "default");
        assert_eq!(v.outcome, Outcome::Adopt(0));
        assert!(v.release.is_empty());
    }

    #[test]
    fn the_earliest_instance_keeps_the_name_and_the_smallest_id_breaks_ties() {
        let seen = [
            instance("i-3", T0, Some("b")),
            instance("i-1", T1, Some("a")),
            instance("i-2", T0, Some("c")),
        ];
        // i-2 and i-3 were made in the same minute, before i-1: i-2 (c) keeps the name.
        let v = decide(&seen, &owner("a"), "default");
        assert_eq!(v.outcome, Outcome::Taken(2));
        assert_eq!(v.release, ["i-1"]);
        let v = decide(&seen, &owner("b"), "default");
        assert_eq!(v.outcome, Outcome::Taken(2));
        assert_eq!(v.release, ["i-3"]);
        let v = decide(&seen, &owner("c"), "default");
        assert_eq!(v.outcome, Outcome::Adopt(2));
        assert!(v.release.is_empty());
        // Someone else entirely releases nothing and is told who owns the name.
        let v = decide(&seen, &owner(""), "default");
        assert_eq!(v.outcome, Outcome::Taken(2));
        assert!(v.release.is_empty());
    }

    #[test]
    fn every_replica_reaches_the_same_verdict_whatever_the_listing_order() {
        let mut seen = vec![
            instance("i-40", T1, Some("x")),
            instance("i-07", T0, Some("")),
            instance("i-19", T0, Some("y")),
            instance("i-99", None, Some("z")),
        ];
        for _ in 0..seen.len() {
            seen.rotate_left(1);
            let kept: Vec<&str> = ["x", "", "y", "z"]
                .iter()
                .map(|uid| match decide(&seen, &owner(uid), "default").outcome {
                    Outcome::Adopt(n) | Outcome::Taken(n) => seen[n].instance_id.as_str(),
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(kept, ["i-07"; 4]);
        }
    }

    #[test]
    fn an_instance_without_a_creation_time_never_wins_over_one_with() {
        let seen = [
            instance("i-1", None, Some("a")),
            instance("i-2", T1, Some("b")),
        ];
        assert_eq!(
            decide(&seen, &owner("b"), "default").outcome,
            Outcome::Adopt(1)
        );
        assert_eq!(decide(&seen, &owner("a"), "default").release, ["i-1"]);
    }

    #[test]
    fn my_own_duplicates_are_released_and_the_earliest_kept() {
        let seen = [
            instance("i-5", T0, Some("a")),
            instance("i-4", T0, Some("a")),
        ];
        let v = decide(&seen, &owner("a"), "default");
        assert_eq!(v.outcome, Outcome::Adopt(1));
        assert_eq!(v.release, ["i-5"]);
    }

    #[test]
    fn instances_without_an_owner_are_adopted_alone_and_never_released() {
        let me = owner("a");
        let v = decide(&[instance("i-1", T0, None)], &me, "default");
        assert_eq!(v.outcome, Outcome::Adopt(0));
        // An unowned instance made first keeps the name; my later one goes.
        let v = decide(
            &[instance("i-1", T0, None), instance("i-2", T1, Some("a"))],
            &me,
            "default",
        );
        assert_eq!(v.outcome, Outcome::Adopt(0));
        assert_eq!(v.release, ["i-2"]);
        // Two unowned: no pick, nothing released (they are nobody's to release).
        let v = decide(
            &[instance("i-1", T0, None), instance("i-2", T0, None)],
            &me,
            "default",
        );
        assert_eq!(
            v.outcome,
            Outcome::Ambiguous(vec!["i-1".into(), "i-2".into()])
        );
        assert!(v.release.is_empty());
    }

    /// `instance` stamped with a namespace.
    fn in_ns(mut i: Instance, namespace: &str) -> Instance {
        i.tags.push(Tag::new(NAMESPACE_STAMP, namespace));
        i
    }

    #[test]
    fn another_namespaces_instance_is_never_mine_whatever_its_owner_tag() {
        // Tenant b sends tenant a's UID: a's instance is not there for b (neither adopted nor a
        // clash that would tell b it exists); the ClientToken from a's UID, used by a with other
        // tags, is what refuses b a VM then (`token_use`).
        let seen = [in_ns(instance("i-1", T0, Some("a")), "team-a")];
        let v = decide(&seen, &owner("a"), "team-b");
        assert_eq!(v.outcome, Outcome::Free);
        assert!(v.release.is_empty());
        // Nor released when it lost the race to b's own instance.
        let seen = [
            in_ns(instance("i-2", T1, Some("a")), "team-a"),
            in_ns(instance("i-1", T0, Some("a")), "team-b"),
        ];
        let v = decide(&seen, &owner("a"), "team-b");
        assert_eq!(v.outcome, Outcome::Adopt(1));
        assert!(v.release.is_empty(), "{v:?}");
        // An instance without a stamp is `default`'s.
        let v = decide(&[instance("i-1", T0, Some("a"))], &owner("a"), "team-b");
        assert_eq!(v.outcome, Outcome::Free);
        let v = decide(&[instance("i-1", T0, None)], &owner("a"), "default");
        assert_eq!(v.outcome, Outcome::Adopt(0));
        assert!(belongs_to(
            &in_ns(instance("i-1", T0, Some("a")), "team-a"),
            &owner("a"),
            "team-a"
        ));
        assert!(!belongs_to(
            &in_ns(instance("i-1", T0, Some("a")), "team-a"),
            &owner("a"),
            "team-b"
        ));
        assert!(!belongs_to(
            &instance("i-1", T0, None),
            &owner("a"),
            "team-b"
        ));
    }

    #[test]
    fn a_taken_name_says_nothing_of_the_other_machine() {
        let e = taken("worker-1");
        assert_eq!(e.code, Code::AlreadyExists);
        assert!(e.message.contains("\"worker-1\" is taken"), "{e:?}");
        assert!(
            !e.message.contains("uid") && !e.message.contains("i-"),
            "{e:?}"
        );
    }

    #[test]
    fn a_lookup_by_name_takes_only_the_callers_or_unowned_instances() {
        assert!(belongs_to(
            &instance("i-1", T0, Some("a")),
            &owner("a"),
            "default"
        ));
        assert!(belongs_to(
            &instance("i-1", T0, None),
            &owner("a"),
            "default"
        ));
        assert!(!belongs_to(
            &instance("i-1", T0, Some("b")),
            &owner("a"),
            "default"
        ));
        assert!(!belongs_to(
            &instance("i-1", T0, Some("")),
            &owner("a"),
            "default"
        ));
        assert!(belongs_to(
            &instance("i-1", T0, Some("")),
            &owner(""),
            "default"
        ));
    }
}
