//! The `Alicloud` provider: MCM's Alicloud driver over Berth's own ECS client, with the fixes
//! reference/mcm.md §4 and §10 ask for.
//!
//! - CreateMachine is idempotent: it adopts the instance that already backs the machine (by
//!   `spec.providerID`, else by name within the cluster's tag), and otherwise sends RunInstances with a
//!   `ClientToken` derived from the machine's UID, so no retry, lost answer or concurrent duplicate
//!   can make a second VM.
//! - Every lookup is scoped to the class's `kubernetes.io/cluster/...` tag: a same-named VM of another
//!   cluster in the account is never seen, adopted or deleted.
//! - DeleteMachine answers OK for a missing VM (the MCM contract), Unavailable while the VM is
//!   between states, and releases the disks and network interfaces the machine left behind (found
//!   by the `berth.io/machine` tag the driver puts on everything it creates).
//! - InitializeMachine starts a Stopped instance and says Uninitialized until it runs.
//!
//! # Layout
//! - [`spec`]: the provider spec, its validation, the secret's keys, naming helpers.
//! - this file: [`Alicloud`], the [`Provider`] implementation.

pub mod spec;

use std::collections::BTreeSet;
use std::time::Duration;

use alicloud::{
    DescribeDisks, DescribeInstances, DescribeNetworkInterfaces, Ecs, EcsClient, Instance,
    InstanceStatus, Tag,
};
use async_trait::async_trait;
use domain::machine::{
    Condition, CreateMachineResponse, DeleteMachineResponse, GetMachineStatusResponse,
    GetVolumeIdsRequest, GetVolumeIdsResponse, InitializeMachineResponse, ListMachinesRequest,
    ListMachinesResponse, MachineRequest, NodeAddress,
};
use domain::{Code, Status};
use tracing::Instrument as _;

use crate::provider::Provider;
use spec::{MACHINE_TAG, ProviderSpec};

/// The provider's name (`MachineClass.provider`).
pub const NAME: &str = "Alicloud";

/// How often CreateMachine follows a stale ClientToken to a fresh one before giving up.
const MAX_TOKEN_HOPS: usize = 3;

/// The Alicloud provider plugin.
#[derive(Debug, Clone)]
pub struct Alicloud {
    ecs: Ecs,
    csi_drivers: BTreeSet<String>,
    operation_timeout: Duration,
}

/// One instance found for a machine, with the client (region) it lives in.
struct Found {
    client: EcsClient,
    instance: Instance,
}

impl Alicloud {
    /// A provider calling ECS through `ecs`. `extra_csi_drivers` are CSI driver names whose
    /// `volumeHandle` is an ECS disk id besides `diskplugin.csi.alibabacloud.com`;
    /// `operation_timeout` bounds each driver call (every ECS attempt, backoff and rate-limit wait).
    pub fn new(ecs: Ecs, extra_csi_drivers: &[String], operation_timeout: Duration) -> Self {
        Alicloud {
            ecs,
            csi_drivers: spec::csi_drivers(extra_csi_drivers),
            operation_timeout,
        }
    }

    fn deadline(&self) -> alicloud::Instant {
        alicloud::deadline_in(self.operation_timeout)
    }

    /// The spec and credentials of a request, checked for `purpose`.
    fn prepare(
        &self,
        class: &domain::machine::MachineClass,
        secret: &domain::machine::Secret,
        for_create: bool,
    ) -> Result<(ProviderSpec, alicloud::Credentials), Status> {
        let spec = ProviderSpec::decode(&class.provider_spec)?;
        if for_create {
            spec.validate_for_create()?;
        } else {
            spec.validate_scope()?;
        }
        let credentials = spec::credentials(secret)?;
        Ok((spec, credentials))
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
            .map_err(|e| e.to_status())?;
        Ok(found.into_iter().find(|i| i.instance_id == instance_id))
    }

    /// Instances named exactly `name` carrying the cluster tags.
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
            .map_err(|e| e.to_status())?;
        Ok(found
            .into_iter()
            .filter(|i| i.instance_name == name)
            .collect())
    }

    /// The instances backing a machine: the one `spec.providerID` names (in its own region), else,
    /// when `name_fallback` allows, those named like the machine in the class's region.
    async fn find(
        &self,
        req: &MachineRequest,
        spec: &ProviderSpec,
        credentials: &alicloud::Credentials,
        name: &str,
        name_fallback: bool,
        deadline: alicloud::Instant,
    ) -> Result<Vec<Found>, Status> {
        let scope = spec.cluster_tags();
        let home = self.ecs.client(&spec.region, credentials.clone());
        let provider_id = req.machine.spec.provider_id.trim();
        if !provider_id.is_empty() {
            let (region, id) = spec::decode_provider_id(provider_id)?;
            let client = match region {
                Some(r) if r != spec.region => self.ecs.client(r, credentials.clone()),
                _ => home.clone(),
            };
            if let Some(instance) = self.by_id(&client, id, &scope, deadline).await? {
                return Ok(vec![Found { client, instance }]);
            }
            tracing::debug!(instance_id = id, "no instance for providerID");
            if !name_fallback {
                return Ok(Vec::new());
            }
        }
        Ok(self
            .by_name(&home, name, &scope, deadline)
            .await?
            .into_iter()
            .map(|instance| Found {
                client: home.clone(),
                instance,
            })
            .collect())
    }

    /// After RunInstances: the instance it answered with, looked at a few times, since a cloud may
    /// list a new instance a moment after creating it. `None` means it is gone: the token was
    /// answered from an earlier, since released, creation.
    async fn confirm(
        &self,
        client: &EcsClient,
        instance_id: &str,
        deadline: alicloud::Instant,
    ) -> Result<Option<Instance>, Status> {
        // About 3 s in all: long enough for ECS's listing delay after RunInstances, so an instance
        // that is merely new is not taken for a released one.
        const ATTEMPTS: u32 = 5;
        let mut pause = Duration::from_millis(200);
        for attempt in 1..=ATTEMPTS {
            if let Some(i) = self.by_id(client, instance_id, &[], deadline).await? {
                return Ok(Some(i));
            }
            if attempt < ATTEMPTS {
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
        }
        Ok(None)
    }

    /// Deletes the disks and network interfaces tagged for this machine that no instance uses any
    /// more. Disks the spec asked to keep (`deleteWithInstance: false`) stay. Returns what was
    /// deleted and how many are still detaching from `released` instances.
    async fn clean_leftovers(
        &self,
        client: &EcsClient,
        scope: &[Tag],
        name: &str,
        released: &[String],
        deadline: alicloud::Instant,
    ) -> Result<(Vec<String>, Vec<String>, usize), Status> {
        let mut tags = scope.to_vec();
        tags.push(Tag::new(MACHINE_TAG, name));
        let mut disks_deleted = Vec::new();
        let mut nics_deleted = Vec::new();
        let mut detaching = 0usize;
        let attached_to_released = |instance: &Option<String>| {
            instance
                .as_deref()
                .is_some_and(|i| released.iter().any(|r| r == i))
        };
        let disks = client
            .describe_all_disks(
                &DescribeDisks {
                    tags: tags.clone(),
                    ..DescribeDisks::default()
                },
                deadline,
            )
            .await
            .map_err(|e| e.to_status())?;
        for d in disks {
            if d.delete_with_instance == Some(false) {
                tracing::debug!(disk_id = %d.disk_id, "keeping disk the spec asked to keep");
                continue;
            }
            if d.status == "Available" {
                match client.delete_disk(&d.disk_id, deadline).await {
                    Ok(_) => disks_deleted.push(d.disk_id),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e.to_status()),
                }
            } else if attached_to_released(&d.instance_id) {
                detaching += 1;
            }
        }
        let nics = client
            .describe_all_network_interfaces(
                &DescribeNetworkInterfaces {
                    tags,
                    ..DescribeNetworkInterfaces::default()
                },
                deadline,
            )
            .await
            .map_err(|e| e.to_status())?;
        for n in nics {
            if n.status == "Available" {
                match client
                    .delete_network_interface(&n.network_interface_id, deadline)
                    .await
                {
                    Ok(_) => nics_deleted.push(n.network_interface_id),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e.to_status()),
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

/// Exactly one instance, or MCM's NotFound / OutOfRange.
fn exactly_one(found: Vec<Found>, name: &str) -> Result<Found, Status> {
    match found.len() {
        0 => Err(Status::not_found(format!(
            "VM instance not found backing this machine object {name:?}"
        ))),
        1 => Ok(found.into_iter().next().expect("one")),
        _ => Err(Status::new(
            Code::OutOfRange,
            format!(
                "multiple VM instances found backing this machine object. IDs for all backing VMs - [{}]",
                found
                    .iter()
                    .map(|f| f.instance.instance_id.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        )),
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

/// A RunInstances failure as a status. `IdempotentParameterMismatch` means this machine's token
/// already made an instance with other parameters (user data with a renewed bootstrap token, say)
/// that the name lookup did not see yet: the next attempt adopts it, so that is a retry-soon.
fn create_error(e: &alicloud::Error, name: &str) -> Status {
    if e.ecs_code() == Some("IdempotentParameterMismatch") {
        return Status::unavailable(format!(
            "an ECS instance for machine {name:?} was already requested with other parameters and is not listed yet; retry to adopt it ({e})"
        ));
    }
    e.to_status()
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

    async fn create_machine(&self, req: &MachineRequest) -> Result<CreateMachineResponse, Status> {
        let name = spec::machine_name(&req.machine, true)?;
        let span = tracing::info_span!("alicloud.create_machine", machine = %name);
        async {
            let (spec, credentials) = self.prepare(&req.machine_class, &req.secret, true)?;
            let user_data = spec::user_data(&req.secret)?;
            let deadline = self.deadline();
            let found = self
                .find(req, &spec, &credentials, &name, true, deadline)
                .await?;
            if !found.is_empty() {
                let f = exactly_one(found, &name)?;
                let id = &f.instance.instance_id;
                tracing::info!(instance_id = %id, "adopting the existing instance");
                return Ok(CreateMachineResponse {
                    provider_id: provider_id_of(&f),
                    node_name: spec::node_name(id),
                    last_known_state: format!(
                        "ECS instance {id} already backs machine {name}; adopted"
                    ),
                    addresses: addresses(&f.instance),
                });
            }
            let client = self.ecs.client(&spec.region, credentials);
            let mut run = spec.run_instances(&name, user_data);
            let mut stale: Option<String> = None;
            for _ in 0..MAX_TOKEN_HOPS {
                run.client_token = Some(spec::client_token(&req.machine, stale.as_deref()));
                let answer = client
                    .run_instances(&run, deadline)
                    .await
                    .map_err(|e| create_error(&e, &name))?;
                let id = answer.instance_ids.into_iter().next().ok_or_else(|| {
                    Status::internal(format!(
                        "ECS instance creation failed for machine {name:?}: instance ID missing"
                    ))
                })?;
                match self.confirm(&client, &id, deadline).await? {
                    Some(instance) => {
                        tracing::info!(instance_id = %id, "instance created");
                        return Ok(CreateMachineResponse {
                            provider_id: spec::provider_id(client.region(), &id),
                            node_name: spec::node_name(&id),
                            last_known_state: format!(
                                "ECS instance {id} created for machine {name}"
                            ),
                            addresses: addresses(&instance),
                        });
                    }
                    // A machine with a UID gets a token no earlier machine had, so the instance is new
                    // and only not listed yet (ECS lists new instances with a delay): trust RunInstances.
                    // Chaining to a fresh token here could make a second VM.
                    None if !req.machine.metadata.uid.is_empty() => {
                        tracing::warn!(instance_id = %id, "created instance not listed yet; trusting RunInstances");
                        return Ok(CreateMachineResponse {
                            provider_id: spec::provider_id(client.region(), &id),
                            node_name: spec::node_name(&id),
                            last_known_state: format!(
                                "ECS instance {id} created for machine {name}; not listed yet"
                            ),
                            addresses: Vec::new(),
                        });
                    }
                    // Without a UID the token comes from namespace/name, which a machine created again
                    // after its VM was released shares with the old one: ECS then answers with the
                    // released instance, and only a fresh token makes a new one.
                    None => {
                        tracing::warn!(
                            instance_id = %id,
                            "the machine's ClientToken names a released instance; creating with the next token"
                        );
                        stale = Some(id);
                    }
                }
            }
            Err(Status::internal(format!(
                "ECS kept answering RunInstances for machine {name:?} with released instances"
            )))
        }
        .instrument(span)
        .await
    }

    async fn initialize_machine(
        &self,
        req: &MachineRequest,
    ) -> Result<InitializeMachineResponse, Status> {
        let name = spec::machine_name(&req.machine, false)?;
        let span = tracing::info_span!("alicloud.initialize_machine", machine = %name);
        async {
            let (spec, credentials) = self.prepare(&req.machine_class, &req.secret, false)?;
            let deadline = self.deadline();
            let found = self
                .find(req, &spec, &credentials, &name, true, deadline)
                .await?;
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
                        Err(e) => return Err(e.to_status()),
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
        let name = spec::machine_name(&req.machine, false)?;
        let span = tracing::info_span!("alicloud.delete_machine", machine = %name);
        async {
            let (spec, credentials) = self.prepare(&req.machine_class, &req.secret, false)?;
            let deadline = self.deadline();
            // With a providerID, only that instance: the orphan collector sends the name of a live
            // machine with the id of an orphan, and the live machine's VM must survive.
            let found = self
                .find(req, &spec, &credentials, &name, false, deadline)
                .await?;
            let client = found
                .first()
                .map(|f| f.client.clone())
                .unwrap_or_else(|| self.ecs.client(&spec.region, credentials.clone()));
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
                    Err(e) => return Err(e.to_status()),
                }
                tracing::info!(instance_id = %i.instance_id, "instance released");
                released.push(i.instance_id.clone());
            }
            if !busy.is_empty() {
                return Err(Status::unavailable(format!(
                    "ECS instance not in running/stopped state: {}; deletion is retried once it settles",
                    busy.join(", ")
                )));
            }
            let (disks, nics, detaching) = self
                .clean_leftovers(&client, &spec.cluster_tags(), &name, &released, deadline)
                .await?;
            if detaching > 0 {
                return Err(Status::unavailable(format!(
                    "{detaching} disk(s) or network interface(s) of machine {name:?} are still detaching from released instances; retry to release them"
                )));
            }
            let mut state = if released.is_empty() {
                format!("no ECS instance backs machine {name}; nothing to release")
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
        let name = spec::machine_name(&req.machine, false)?;
        let span = tracing::debug_span!("alicloud.get_machine_status", machine = %name);
        async {
            let (spec, credentials) = self.prepare(&req.machine_class, &req.secret, false)?;
            let found = self
                .find(req, &spec, &credentials, &name, true, self.deadline())
                .await?;
            let f = exactly_one(found, &name)?;
            Ok(GetMachineStatusResponse {
                provider_id: provider_id_of(&f),
                node_name: spec::node_name(&f.instance.instance_id),
                addresses: addresses(&f.instance),
                conditions: vec![instance_condition(&f.instance)],
            })
        }
        .instrument(span)
        .await
    }

    async fn list_machines(
        &self,
        req: &ListMachinesRequest,
    ) -> Result<ListMachinesResponse, Status> {
        let span = tracing::debug_span!("alicloud.list_machines", class = %req.machine_class.metadata.name);
        async {
            let (spec, credentials) = self.prepare(&req.machine_class, &req.secret, false)?;
            let client = self.ecs.client(&spec.region, credentials);
            let filter = DescribeInstances {
                tags: spec.list_tags(),
                ..DescribeInstances::default()
            };
            let instances = client
                .describe_all_instances(&filter, self.deadline())
                .await
                .map_err(|e| e.to_status())?;
            tracing::debug!(count = instances.len(), "instances listed");
            Ok(ListMachinesResponse {
                machine_list: instances
                    .into_iter()
                    .map(|i| {
                        (
                            spec::provider_id(&spec.region, &i.instance_id),
                            i.instance_name,
                        )
                    })
                    .collect(),
            })
        }
        .instrument(span)
        .await
    }

    async fn get_volume_ids(
        &self,
        req: &GetVolumeIdsRequest,
    ) -> Result<GetVolumeIdsResponse, Status> {
        let volume_ids = req
            .pv_specs
            .iter()
            .filter_map(|pv| {
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
            })
            .collect();
        Ok(GetVolumeIdsResponse { volume_ids })
    }
}
