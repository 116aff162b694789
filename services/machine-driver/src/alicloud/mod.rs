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
//! A request is decoded and checked once, then acted on; each part in its own file.
//! - [`spec`]: the provider spec, its decoding and tag selection, the RunInstances it becomes;
//!   `spec/rules.rs` its field rules, [`spec::schema`] their description in the API document.
//! - [`identity`]: the machine's name, owner, tags, providerID, node name and ClientToken series.
//! - [`secret`]: the access key and user data from the request's secret.
//! - [`region`]: the [`region::RegionPolicy`] every region passes before a client is made.
//! - `plan`: the request decoded and checked: `Prepared` for every call that takes a class,
//!   `CreatePlan` for a create (everything its ECS calls need).
//! - [`codes`]: what an ECS failure means to MCM (the machine codes) and the status answered.
//! - `lookup`: finding a machine's instances; `create`: the create walk on a `CreatePlan`;
//!   `delete`: the release and the leftovers; `verdict`: [`decide`], who keeps a name;
//!   `answers`: the shapes MCM reads (addresses, conditions, refusals).
//! - this file: [`Alicloud`] and its [`Provider`] implementation, which hands each call to the
//!   above.

mod answers;
pub mod codes;
mod create;
mod delete;
pub mod identity;
mod lookup;
mod plan;
pub mod region;
pub mod secret;
pub mod spec;
mod verdict;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use alicloud::{DescribeInstances, Ecs, InstanceStatus, Region, Tag};
use async_trait::async_trait;
use domain::machine::{
    CreateMachineResponse, DeleteMachineResponse, GetMachineStatusResponse,
    InitializeMachineResponse, ListMachinesRequest, MachineClass, MachineRequest,
    PersistentVolumeSpec, Secret,
};
use domain::{Code, Status};
use tracing::Instrument as _;

use crate::provider::{CheckedFor, Listed, NAMESPACE_STAMP, Provider, request_namespace};
use answers::{
    addresses, exactly_one, initialized_condition, instance_condition, listed, missing,
    nothing_released, provider_id_of,
};
use codes::ecs_status;
use create::Released;
use identity::{MACHINE_TAG, node_name};
use plan::{CreatePlan, Prepared};
use region::RegionPolicy;
use verdict::in_namespace;
pub use verdict::{Outcome, Verdict, decide};

/// The provider's name (`MachineClass.provider`).
pub const NAME: &str = "Alicloud";

/// Regions the machine quota lists at once: enough that counting in every known region takes a
/// few round trips, few enough not to trip ECS's per-account rate limit.
const QUOTA_REGIONS_AT_ONCE: usize = 8;

/// The Alicloud CSI disk driver whose `volumeHandle` is an ECS disk id.
pub const CSI_DISK_DRIVER: &str = "diskplugin.csi.alibabacloud.com";

/// The CSI drivers whose `volumeHandle` is an ECS disk id: the Alicloud disk plugin plus `extra`.
pub fn csi_drivers(extra: &[String]) -> BTreeSet<String> {
    std::iter::once(CSI_DISK_DRIVER.to_owned())
        .chain(extra.iter().cloned())
        .collect()
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

impl Alicloud {
    /// A lookup's spec, region and credentials, checked as every call but CreateMachine checks them.
    fn prepared_for_lookup(
        &self,
        class: &MachineClass,
        secret: &Secret,
    ) -> Result<Prepared, Status> {
        Prepared::new(class, secret, &self.regions, CheckedFor::Lookup)
    }

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
            csi_drivers: csi_drivers(extra_csi_drivers),
            operation_timeout,
            regions,
            released: std::sync::Arc::default(),
        }
    }

    /// Allows only these regions (the operator's allow-list); an empty list keeps the default.
    pub fn with_allowed_regions(mut self, regions: impl IntoIterator<Item = Region>) -> Self {
        self.regions.allowed = regions.into_iter().collect();
        self
    }

    fn deadline(&self) -> alicloud::Instant {
        alicloud::deadline_in(self.operation_timeout)
    }
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
        CreatePlan::check(req, &self.regions)
    }

    async fn create_machine(&self, req: &MachineRequest) -> Result<CreateMachineResponse, Status> {
        let plan = CreatePlan::new(req, &self.regions)?;
        let span = tracing::info_span!("alicloud.create_machine", machine = %plan.name);
        self.create(plan).instrument(span).await
    }

    async fn initialize_machine(
        &self,
        req: &MachineRequest,
    ) -> Result<InitializeMachineResponse, Status> {
        let (name, owner) = identity::name_and_owner(&req.machine, CheckedFor::Lookup)?;
        let span = tracing::info_span!("alicloud.initialize_machine", machine = %name);
        async {
            let p = self.prepared_for_lookup(&req.machine_class, &req.secret)?;
            let deadline = self.deadline();
            let found = self
                .find(
                    p.reach(request_namespace(req)),
                    &req.machine.spec.provider_id,
                    &name,
                    &owner,
                    true,
                    deadline,
                )
                .await?;
            let f = exactly_one(found, &name)?;
            let id = f.instance.instance_id.clone();
            let waiting = |what: String| Err(Status::new(Code::Uninitialized, what));
            match &f.instance.status {
                InstanceStatus::Running => Ok(InitializeMachineResponse {
                    provider_id: provider_id_of(&f),
                    node_name: node_name(&id),
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
        let (name, owner) = identity::name_and_owner(&req.machine, CheckedFor::Lookup)?;
        let span = tracing::info_span!("alicloud.delete_machine", machine = %name);
        self.delete(req, &name, &owner).instrument(span).await
    }

    async fn get_machine_status(
        &self,
        req: &MachineRequest,
    ) -> Result<GetMachineStatusResponse, Status> {
        let (name, owner) = identity::name_and_owner(&req.machine, CheckedFor::Lookup)?;
        let span = tracing::debug_span!("alicloud.get_machine_status", machine = %name);
        async {
            let p = self.prepared_for_lookup(&req.machine_class, &req.secret)?;
            let found = self
                .find(
                    p.reach(request_namespace(req)),
                    &req.machine.spec.provider_id,
                    &name,
                    &owner,
                    true,
                    self.deadline(),
                )
                .await?;
            let f = exactly_one(found, &name)?;
            Ok(GetMachineStatusResponse {
                provider_id: provider_id_of(&f),
                node_name: node_name(&f.instance.instance_id),
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
        let p = self.prepared_for_lookup(&req.machine_class, &req.secret)?;
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
                    identity::provider_id(client.region(), &i.instance_id),
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
        let p = self.prepared_for_lookup(&req.machine_class, &req.secret)?;
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
        let regions = self.regions.quota_regions(&p.region);
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
