//! A machine's container as the driver reads it, and the lookups that find one.
//!
//! Every call but CreateMachine starts by finding the machine's container, and every lookup is
//! confined the same way (the class's cluster, role and stack, the machine's name, UID and
//! namespace): a container outside them is answered as a missing one, whatever a providerID says.
//! Keeping the read model ([`Container`]) and those lookups together keeps that confinement in one
//! place; what is done with a container once found is in the files about creating and
//! bootstrapping it.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker as Engine;
use bollard::errors::Error as BollardError;
use bollard::models::{ContainerInspectResponse, MountType, RestartPolicyNameEnum};
use bollard::query_parameters::ListContainersOptions;
use domain::machine::{MachineRequest, NodeAddress};
use domain::{Code, Status};
use tokio::time::Instant;

use super::Docker;
use super::engine::{EngineError, short};
use super::mounts::Bind;
use super::spec::{self, LABEL_INSTANCE, LABEL_MACHINE, LABEL_ROLE, LABEL_UID, Scope};
use crate::provider::{Listed, NAMESPACE_STAMP, request_namespace, stamped_namespace};

/// How long a create that found its machine's name taken waits for the container holding it to
/// show.
const NAME_SETTLE: Duration = Duration::from_secs(3);

/// How far [`Docker::find`] looks when the machine's providerID names no container of its own.
/// A machine without a providerID is looked up by its name and UID either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Search {
    /// Only the container the providerID names: DeleteMachine, whose caller (the orphan
    /// collector) may send a live machine's name with an orphan's id.
    NamedOnly,
    /// The container the providerID names, else the one made for the machine's name and UID.
    NamedThenOwner,
}

/// A request's Engine and scope.
pub(super) struct Target {
    pub(super) engine: Engine,
    /// The Engine's address: for lock keys only, never logged (it may come from a secret).
    pub(super) host: String,
    pub(super) scope: Scope,
}

/// A container as the driver reads it.
#[derive(Debug, Clone)]
pub(super) struct Container {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) labels: HashMap<String, String>,
    pub(super) running: bool,
    pub(super) state: String,
    pub(super) exit_code: Option<i64>,
    pub(super) hostname: String,
    pub(super) addresses: Vec<NodeAddress>,
    /// The host directories it mounts (bind mounts' sources), each with whether it is writable.
    pub(super) binds: Vec<Bind>,
    /// Whether the Engine restarts it by itself (any restart policy but `no`).
    pub(super) engine_restarts: bool,
}

impl Container {
    fn from_inspect(c: ContainerInspectResponse) -> Self {
        let name = c
            .name
            .as_deref()
            .unwrap_or_default()
            .trim_start_matches('/')
            .to_owned();
        let config = c.config.unwrap_or_default();
        let host_config = c.host_config.unwrap_or_default();
        let engine_restarts = host_config
            .restart_policy
            .and_then(|p| p.name)
            .is_some_and(|p| {
                !matches!(p, RestartPolicyNameEnum::NO | RestartPolicyNameEnum::EMPTY)
            });
        let binds = host_config
            .mounts
            .unwrap_or_default()
            .into_iter()
            .filter(|m| m.typ == Some(MountType::BIND))
            .filter_map(|m| Some((m.source?, !m.read_only.unwrap_or(false))))
            .collect();
        let state = c.state.unwrap_or_default();
        let hostname = config
            .hostname
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| name.clone());
        let mut networks: Vec<_> = c
            .network_settings
            .and_then(|n| n.networks)
            .unwrap_or_default()
            .into_iter()
            .collect();
        networks.sort_by(|a, b| a.0.cmp(&b.0));
        let mut addresses: Vec<NodeAddress> = networks
            .into_iter()
            .flat_map(|(_, n)| [n.ip_address, n.global_ipv6_address])
            .flatten()
            .filter(|a| !a.is_empty())
            .map(|address| NodeAddress {
                kind: "InternalIP".into(),
                address,
            })
            .collect();
        addresses.dedup();
        addresses.push(NodeAddress {
            kind: "Hostname".into(),
            address: hostname.clone(),
        });
        Container {
            id: c.id.unwrap_or_default(),
            name,
            labels: config.labels.unwrap_or_default(),
            running: state.running.unwrap_or(false),
            state: state
                .status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "unknown".into()),
            exit_code: state.exit_code,
            hostname,
            addresses,
            binds,
            engine_restarts,
        }
    }

    pub(super) fn provider_id(&self) -> String {
        spec::provider_id(&self.name)
    }

    /// The namespace stamped on the container ([`NAMESPACE_STAMP`]; none: `default`).
    pub(super) fn namespace(&self) -> &str {
        stamped_namespace(self.labels.get(NAMESPACE_STAMP).map(String::as_str))
    }
}

impl Docker {
    /// The namespace's machines on one Engine: every container Berth made carries the machine
    /// label; `default` also holds those made before the namespace stamp, so the stamp is checked
    /// here, not by the Engine.
    pub(super) async fn machines_on(
        &self,
        engine: &Engine,
        namespace: &str,
    ) -> Result<Vec<Listed>, Status> {
        let listed_containers = engine
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(HashMap::from([(
                    "label".to_owned(),
                    vec![LABEL_MACHINE.to_owned()],
                )])),
                ..ListContainersOptions::default()
            }))
            .await
            .map_err(|e| EngineError::new("listing the namespace's containers", e).to_status())?;
        // Another stack's machines are not this one's to count (BERTH_DOCKER_INSTANCE).
        let instance = self.settings.instance.as_ref();
        Ok(listed_containers
            .into_iter()
            .filter_map(|c| c.labels)
            .filter(|labels| labels.get(spec::LABEL_INSTANCE) == instance)
            .filter_map(|labels| listed_machine(&labels))
            .filter(|m| m.namespace == namespace)
            .collect())
    }

    /// The container named `name`, if it exists (exactly that name: the Engine would also take an
    /// id prefix).
    pub(super) async fn by_name(
        &self,
        t: &Target,
        name: &str,
    ) -> Result<Option<Container>, Status> {
        match t.engine.inspect_container(name, None).await {
            Ok(c) => {
                let c = Container::from_inspect(c);
                Ok((c.name == name).then_some(c))
            }
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(None),
            Err(e) => Err(EngineError::new(format!("inspecting container {name}"), e).to_status()),
        }
    }

    /// The container of the cluster made for machine `name` with UID `uid`.
    pub(super) async fn by_owner(
        &self,
        t: &Target,
        name: &str,
        uid: &str,
    ) -> Result<Option<Container>, Status> {
        let mut labels = t.scope.label_filters();
        labels.push(format!("{LABEL_MACHINE}={name}"));
        if !uid.is_empty() {
            labels.push(format!("{LABEL_UID}={uid}"));
        }
        let listed = t
            .engine
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(HashMap::from([("label".to_owned(), labels)])),
                ..ListContainersOptions::default()
            }))
            .await
            .map_err(|e| {
                EngineError::new(format!("listing the containers of machine {name}"), e).to_status()
            })?;
        let ids: Vec<String> = listed
            .into_iter()
            .filter(|c| {
                c.labels
                    .as_ref()
                    .is_some_and(|l| t.scope.holds(l) && l.get(LABEL_UID).is_some_and(|u| u == uid))
            })
            .filter_map(|c| c.id)
            .collect();
        match ids.as_slice() {
            [] => Ok(None),
            [id] => self.by_id(t, id).await,
            many => Err(Status::new(
                Code::OutOfRange,
                format!(
                    "multiple containers back machine {name:?}: [{}]",
                    many.iter().map(|i| short(i)).collect::<Vec<_>>().join(" ")
                ),
            )),
        }
    }

    /// The container with this id, if it (still) exists.
    pub(super) async fn by_id(&self, t: &Target, id: &str) -> Result<Option<Container>, Status> {
        match t.engine.inspect_container(id, None).await {
            Ok(c) => Ok(Some(Container::from_inspect(c))),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(None),
            Err(e) => {
                Err(EngineError::new(format!("inspecting container {}", short(id)), e).to_status())
            }
        }
    }

    /// The container backing the machine: the one `spec.providerID` names (within the cluster), else,
    /// with [`Search::NamedThenOwner`], the one made for the machine's name and UID.
    pub(super) async fn find(
        &self,
        t: &Target,
        req: &MachineRequest,
        name: &str,
        uid: &str,
        search: Search,
    ) -> Result<Option<Container>, Status> {
        // Another namespace's, role's or machine's container is answered as one that does not
        // exist: a providerID only says where to look, never whose the container is.
        let namespace = request_namespace(req);
        let label = |c: &Container, key: &str| c.labels.get(key).cloned().unwrap_or_default();
        let ours = |c: &Container| {
            t.scope.holds(&c.labels)
                && label(c, LABEL_ROLE) == t.scope.role
                && label(c, LABEL_MACHINE) == name
                && (uid.is_empty() || label(c, LABEL_UID) == uid)
                && c.namespace() == namespace
        };
        // The container a providerID names may also be this machine's own (its name and UID, in
        // this stack and namespace) from before its class changed its cluster or role tags: it
        // must still be found, by status and by delete, or it would be left running behind the
        // machine.
        let made_before_a_class_change = |c: &Container| {
            !uid.is_empty()
                && c.labels.get(LABEL_INSTANCE) == t.scope.instance.as_ref()
                && label(c, LABEL_MACHINE) == name
                && label(c, LABEL_UID) == uid
                && c.namespace() == namespace
        };
        let provider_id = req.machine.spec.provider_id.as_str();
        if !provider_id.is_empty() {
            let named = spec::decode_provider_id(provider_id)?;
            let found = self
                .by_name(t, named)
                .await?
                .filter(|c| ours(c) || made_before_a_class_change(c));
            if found.is_some() || search == Search::NamedOnly {
                return Ok(found);
            }
        }
        Ok(self.by_owner(t, name, uid).await?.filter(ours))
    }

    /// The container holding `name` after a create was refused because the name is taken. The
    /// Engine reserves a name a moment before the container that takes it can be inspected, so a
    /// create that lost the race looks again briefly before concluding nothing holds it.
    pub(super) async fn holder_of(
        &self,
        t: &Target,
        name: &str,
    ) -> Result<Option<Container>, Status> {
        let give_up = Instant::now() + NAME_SETTLE;
        let mut pause = Duration::from_millis(10);
        loop {
            if let Some(c) = self.by_name(t, name).await? {
                return Ok(Some(c));
            }
            if Instant::now() + pause > give_up {
                return Ok(None);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }
}

/// A container's machine as ListMachines and the machine quota see it, from its labels.
pub(super) fn listed_machine(labels: &HashMap<String, String>) -> Option<Listed> {
    Some(Listed {
        name: labels.get(LABEL_MACHINE)?.clone(),
        namespace: stamped_namespace(labels.get(NAMESPACE_STAMP).map(String::as_str)).to_owned(),
        uid: labels.get(LABEL_UID).cloned().unwrap_or_default(),
    })
}
