//! The driver contract: the [`Provider`] calls MCM makes, each a short story over the other
//! files (check the request, choose the Engine, find or make the container, bootstrap it,
//! answer).
//!
//! Apart so a reader can follow one call from request to answer without the Engine's details,
//! and so what every call shares sits in one place: the checks before an Engine is chosen
//! ([`Docker::target`]), the operation timeout, and the answers' conditions.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use bollard::query_parameters::{
    ListContainersOptions, RemoveContainerOptions, StopContainerOptions,
};
use domain::machine::{
    Condition, CreateMachineResponse, DeleteMachineResponse, GetMachineStatusResponse,
    InitializeMachineResponse, ListMachinesRequest, MachineClass, MachineRequest,
    PersistentVolumeSpec, Secret,
};
use domain::{Code, Status};
use tokio::time::Instant;
use tracing::Instrument as _;

use super::bootstrap::{BootstrapState, USER_DATA_MODE, write_file};
use super::container::{Container, Search, Target, listed_machine};
use super::create::{Checked, Origin};
use super::engine::{EngineError, gone_is_done, short};
use super::records::{ReadFirst, bootstrap_state, remove_records};
use super::spec::{
    self, Bootstrap, LABEL_MACHINE, LABEL_ROLE, ProviderSpec, Scope, USER_DATA_PATH,
};
use super::{Docker, NAME};
use crate::provider::{Listed, Provider, request_namespace};

/// How long InitializeMachine leaves itself, after waiting for a bootstrap, to answer.
const ANSWER_MARGIN: Duration = Duration::from_secs(1);
/// The longest pause between two looks at a running bootstrap.
const POLL_MAX: Duration = Duration::from_millis(500);

impl Docker {
    /// The request's Engine and the class's scope. `secret` may name the Engine. Everything about
    /// the request's shape is checked before the Engine is chosen (the spec, its scope, bootstrap
    /// and grace period, and `extra`), so a malformed request is a 400 even on a driver whose
    /// Engine is unusable (412) or down (503).
    async fn target(
        &self,
        class: &MachineClass,
        secret: &Secret,
        extra: impl FnOnce(&ProviderSpec) -> Result<(), Status>,
    ) -> Result<(Target, ProviderSpec), Status> {
        spec::check_class_name(class)?;
        let spec = ProviderSpec::decode(&class.provider_spec)?;
        let scope = Scope {
            instance: self.settings.instance.clone(),
            ..spec.scope()?
        };
        spec.bootstrap()?;
        spec.stop_grace()?;
        extra(&spec)?;
        let host = self.engine_address(secret)?;
        let engine = self.engine(&host).await?;
        Ok((
            Target {
                engine,
                host,
                scope,
            },
            spec,
        ))
    }

    /// Runs one driver call within the operation timeout.
    async fn bounded<T>(
        &self,
        what: String,
        call: impl Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        tokio::time::timeout(self.operation_timeout, call)
            .await
            .unwrap_or_else(|_| {
                Err(Status::new(
                    Code::DeadlineExceeded,
                    format!(
                        "{what} did not finish within {:?}; retry",
                        self.operation_timeout
                    ),
                ))
            })
    }

    /// The conditions of a container whose bootstrap is `bootstrap`, after CAPD's.
    fn conditions(c: &Container, bootstrap: &BootstrapState) -> Vec<Condition> {
        let condition = |kind: &str, ok: bool, reason: &str, message: String| Condition {
            kind: kind.to_owned(),
            status: if ok { "True" } else { "False" }.to_owned(),
            reason: reason.to_owned(),
            message,
            last_transition_time: None,
        };
        let (boot_reason, boot_message) = match bootstrap {
            BootstrapState::NotRequested => (
                "NotRequested",
                "the class asks for no bootstrap (bootstrap: none)".to_owned(),
            ),
            BootstrapState::Completed => (
                "Completed",
                "the user data ran once and exited 0".to_owned(),
            ),
            other => ("NotCompleted", other.reason(&c.name)),
        };
        let ready_message = if c.running {
            "the container is running".to_owned()
        } else {
            match c.exit_code {
                Some(code) => format!("the container is {} (exit code {code})", c.state),
                None => format!("the container is {}", c.state),
            }
        };
        let ready = c.running && bootstrap.is_done();
        vec![
            condition(
                "ContainerProvisioned",
                true,
                "Provisioned",
                format!("container {} ({})", c.name, short(&c.id)),
            ),
            condition(
                "BootstrapCompleted",
                bootstrap.is_done(),
                boot_reason,
                boot_message,
            ),
            condition(
                "Ready",
                ready,
                if ready { "Ready" } else { "NotReady" },
                ready_message,
            ),
        ]
    }

    fn missing(name: &str) -> Status {
        Status::not_found(format!("no Docker container backs machine {name:?}"))
    }
}

#[async_trait]
impl Provider for Docker {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> String {
        "Docker Engine: each machine is a container (after Cluster API's Docker provider)".into()
    }

    fn check_create(&self, req: &MachineRequest) -> Result<(), Status> {
        spec::machine_name(&req.machine)?;
        spec::machine_uid(&req.machine)?;
        spec::check_names(req)?;
        self.checked_create(req).map(|_| ())
    }

    async fn create_machine(&self, req: &MachineRequest) -> Result<CreateMachineResponse, Status> {
        let name = spec::machine_name(&req.machine)?;
        let uid = spec::machine_uid(&req.machine)?;
        spec::check_names(req)?;
        let span = tracing::info_span!("docker.create_machine", machine = %name);
        let call = async {
            let Checked {
                host,
                plan,
                user_data,
            } = self.checked_create(req)?;
            let namespace = request_namespace(req);
            let t = Target {
                engine: self.engine(&host).await?,
                host,
                scope: plan.scope.clone(),
            };
            let (c, origin) = self
                .create_or_adopt(&t, &plan, &name, &uid, namespace)
                .await?;
            if origin == Origin::Created {
                tracing::info!(container = %short(&c.id), "container created");
            } else {
                tracing::info!(container = %short(&c.id), "existing container adopted");
            }
            // Written before the container first starts, so its own init finds it at boot.
            if let Some(data) = &user_data {
                if origin == Origin::Created {
                    write_file(&t.engine, &c.id, USER_DATA_PATH, USER_DATA_MODE, data).await?;
                } else {
                    self.ensure_user_data(&t, &c, data).await?;
                }
            }
            if let Err(e) = self.ensure_running(&t, &c).await {
                // A container that never ran is undone with its create, so a corrected spec
                // makes a fresh one rather than adopting this one.
                if origin == Origin::Created {
                    self.undo_create(&t, &c).await;
                }
                return Err(e);
            }
            let bootstrap = match plan.bootstrap {
                Bootstrap::None => BootstrapState::NotRequested,
                Bootstrap::Exec => self.run_bootstrap(&t, &c).await?,
            };
            let c = self.by_id(&t, &c.id).await?.ok_or_else(|| {
                Status::unavailable(format!("container {name} was removed meanwhile; retry"))
            })?;
            let state = match &bootstrap {
                BootstrapState::NotRequested => "no bootstrap".to_owned(),
                other if other.is_done() => "bootstrap completed".to_owned(),
                other => other.reason(&name),
            };
            Ok(CreateMachineResponse {
                provider_id: c.provider_id(),
                node_name: c.hostname.clone(),
                last_known_state: format!(
                    "container {} ({}) {} and {}; {state}",
                    c.name,
                    short(&c.id),
                    match origin {
                        Origin::Created => "created",
                        Origin::Adopted => "adopted",
                    },
                    c.state
                ),
                addresses: c.addresses,
            })
        };
        self.bounded(format!("CreateMachine for machine {name:?}"), call)
            .instrument(span)
            .await
    }

    async fn initialize_machine(
        &self,
        req: &MachineRequest,
    ) -> Result<InitializeMachineResponse, Status> {
        let name = spec::machine_name(&req.machine)?;
        let uid = spec::machine_uid(&req.machine)?;
        spec::check_names(req)?;
        // Read by the lookup after the Engine is chosen; its shape is checked first.
        spec::check_provider_id(&req.machine)?;
        let deadline = Instant::now() + self.operation_timeout;
        let span = tracing::info_span!("docker.initialize_machine", machine = %name);
        let call = async {
            let (t, spec) = self
                .target(&req.machine_class, &req.secret, |spec| {
                    spec::user_data(&req.secret, spec.bootstrap()?).map(|_| ())
                })
                .await?;
            let bootstrap = spec.bootstrap()?;
            let user_data = spec::user_data(&req.secret, bootstrap)?;
            let c = self
                .find(&t, req, &name, &uid, Search::NamedThenOwner)
                .await?
                .ok_or_else(|| Self::missing(&name))?;
            let answer = |c: &Container| InitializeMachineResponse {
                provider_id: c.provider_id(),
                node_name: c.hostname.clone(),
                addresses: c.addresses.clone(),
            };
            if let Some(data) = &user_data {
                self.ensure_user_data(&t, &c, data).await?;
            }
            // Also without a bootstrap: a machine with mounts is started by the driver only
            // (after its checks), and this is one of the two calls that start it.
            self.ensure_running(&t, &c).await?;
            if bootstrap == Bootstrap::None {
                return Ok(answer(&c));
            }
            let mut state = self.run_bootstrap(&t, &c).await?;
            // Wait for it while there is time to answer; MCM asks again soon otherwise.
            let mut pause = Duration::from_millis(20);
            while matches!(state, BootstrapState::Running(_))
                && Instant::now() + pause + ANSWER_MARGIN < deadline
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(POLL_MAX);
                state = bootstrap_state(&t.engine, &c, ReadFirst::Started).await?;
            }
            if !state.is_done() {
                return Err(state.refusal(&name));
            }
            tracing::info!("bootstrap completed");
            Ok(answer(&c))
        };
        self.bounded(format!("InitializeMachine for machine {name:?}"), call)
            .instrument(span)
            .await
    }

    async fn delete_machine(&self, req: &MachineRequest) -> Result<DeleteMachineResponse, Status> {
        let name = spec::machine_name(&req.machine)?;
        let uid = spec::machine_uid(&req.machine)?;
        spec::check_names(req)?;
        // Read by the lookup after the Engine is chosen; its shape is checked first.
        spec::check_provider_id(&req.machine)?;
        let span = tracing::info_span!("docker.delete_machine", machine = %name);
        let call = async {
            let (t, spec) = self
                .target(&req.machine_class, &req.secret, |_| Ok(()))
                .await?;
            let grace = spec.stop_grace()?;
            // With a providerID, only that container: the orphan collector sends a live machine's
            // name with an orphan's id, and the live machine's container must survive.
            let Some(c) = self.find(&t, req, &name, &uid, Search::NamedOnly).await? else {
                let mut answer = self.nothing_to_delete(&name);
                // The name's container in the caller's own namespace made for another UID: said,
                // so a caller that sent no UID (or a stale one) does not take a running container
                // for gone (a break-it finding). Other namespaces' are never looked at.
                if req.machine.spec.provider_id.is_empty() {
                    let named = spec::container_name(
                        request_namespace(req),
                        &name,
                        t.scope.instance.as_deref(),
                    );
                    let held = self.by_name(&t, &named).await?.is_some_and(|c| {
                        t.scope.holds(&c.labels)
                            && c.labels.get(LABEL_MACHINE).is_some_and(|m| m == &name)
                            && c.namespace() == request_namespace(req)
                    });
                    if held {
                        answer
                            .last_known_state
                            .push_str(&crate::provider::held_by_another(&name, "container"));
                    }
                }
                return Ok(answer);
            };
            // Leave time to remove it after the grace period, within the call's own limit.
            let budget = self.operation_timeout.as_secs().saturating_sub(2) / 2;
            let grace = i64::from(grace).min(i64::try_from(budget).unwrap_or(i64::MAX));
            let stopped = t
                .engine
                .stop_container(
                    &c.id,
                    Some(StopContainerOptions {
                        t: i32::try_from(grace).ok(),
                        ..StopContainerOptions::default()
                    }),
                )
                .await;
            gone_is_done(stopped, || format!("stopping container {}", c.name))?;
            let removed = t
                .engine
                .remove_container(
                    &c.id,
                    Some(RemoveContainerOptions {
                        v: true,
                        force: true,
                        ..RemoveContainerOptions::default()
                    }),
                )
                .await;
            gone_is_done(removed, || format!("removing container {}", c.name))?;
            remove_records(&t.engine, &c.id).await?;
            tracing::info!(container = %short(&c.id), "container removed");
            Ok(DeleteMachineResponse {
                last_known_state: format!(
                    "container {} ({}) stopped (grace period {grace}s) and removed with its anonymous volumes",
                    c.name,
                    short(&c.id)
                ),
            })
        };
        self.bounded(format!("DeleteMachine for machine {name:?}"), call)
            .instrument(span)
            .await
    }

    async fn get_machine_status(
        &self,
        req: &MachineRequest,
    ) -> Result<GetMachineStatusResponse, Status> {
        let name = spec::machine_name(&req.machine)?;
        let uid = spec::machine_uid(&req.machine)?;
        spec::check_names(req)?;
        // Read by the lookup after the Engine is chosen; its shape is checked first.
        spec::check_provider_id(&req.machine)?;
        let span = tracing::debug_span!("docker.get_machine_status", machine = %name);
        let call = async {
            let (t, spec) = self
                .target(&req.machine_class, &req.secret, |_| Ok(()))
                .await?;
            let bootstrap = spec.bootstrap()?;
            let c = self
                .find(&t, req, &name, &uid, Search::NamedThenOwner)
                .await?
                .ok_or_else(|| Self::missing(&name))?;
            let state = match bootstrap {
                Bootstrap::None => BootstrapState::NotRequested,
                Bootstrap::Exec => bootstrap_state(&t.engine, &c, ReadFirst::Exited).await?,
            };
            if !state.is_done() {
                return Err(state.refusal(&name));
            }
            Ok(GetMachineStatusResponse {
                provider_id: c.provider_id(),
                node_name: c.hostname.clone(),
                conditions: Self::conditions(&c, &state),
                addresses: c.addresses,
            })
        };
        self.bounded(format!("GetMachineStatus for machine {name:?}"), call)
            .instrument(span)
            .await
    }

    async fn machines(
        &self,
        req: &ListMachinesRequest,
    ) -> Result<BTreeMap<String, Listed>, Status> {
        let call = async {
            let (t, _) = self
                .target(&req.machine_class, &req.secret, |_| Ok(()))
                .await?;
            let listed = t
                .engine
                .list_containers(Some(ListContainersOptions {
                    all: true,
                    filters: Some(HashMap::from([(
                        "label".to_owned(),
                        t.scope
                            .label_filters()
                            .into_iter()
                            .chain([format!("{LABEL_ROLE}={}", t.scope.role)])
                            .collect(),
                    )])),
                    ..ListContainersOptions::default()
                }))
                .await
                .map_err(|e| EngineError::new("listing the class's containers", e).to_status())?;
            Ok(listed
                .into_iter()
                .filter(|c| c.labels.as_ref().is_some_and(|l| t.scope.holds(l)))
                .filter_map(|c| {
                    let name = c.names?.first()?.trim_start_matches('/').to_owned();
                    Some((spec::provider_id(&name), listed_machine(&c.labels?)?))
                })
                .collect())
        };
        self.bounded("ListMachines".to_owned(), call).await
    }

    async fn namespace_machines(
        &self,
        req: &MachineRequest,
        namespace: &str,
    ) -> Result<Vec<Listed>, Status> {
        let call = async {
            let (t, _) = self
                .target(&req.machine_class, &req.secret, |_| Ok(()))
                .await?;
            // The quota is the namespace's, not one Engine's: counted on every Engine a secret may
            // name (a break-it finding: counted on one, a tenant went on on the next). The
            // request's own Engine must answer; another that cannot be reached holds nothing a
            // create could add to now, and is left out with a warning.
            let mut hosts: std::collections::BTreeSet<String> = self.settings.allowed_hosts.clone();
            if let Ok(default) = &self.settings.default_host {
                hosts.insert(default.clone());
            }
            hosts.remove(&t.host);
            let mut machines = self.machines_on(&t.engine, namespace).await?;
            for host in hosts {
                let listed = match self.engine(&host).await {
                    Ok(engine) => self.machines_on(&engine, namespace).await,
                    Err(e) => Err(e),
                };
                match listed {
                    Ok(more) => machines.extend(more),
                    Err(e) => {
                        tracing::warn!(engine = %host, error = %e.message, "machine quota: an allowed Docker Engine could not be counted")
                    }
                }
            }
            Ok(machines)
        };
        self.bounded("counting the namespace's machines".to_owned(), call)
            .await
    }

    fn missing(&self, machine_name: &str) -> Status {
        Self::missing(machine_name)
    }

    fn nothing_to_delete(&self, machine_name: &str) -> DeleteMachineResponse {
        DeleteMachineResponse {
            last_known_state: format!(
                "no Docker container backs machine {machine_name}; nothing to delete"
            ),
        }
    }

    fn volume_id(&self, pv: &PersistentVolumeSpec) -> Option<String> {
        pv.csi
            .as_ref()
            .filter(|csi| {
                csi.driver == spec::VOLUME_CSI_DRIVER && spec::is_volume_name(&csi.volume_handle)
            })
            .map(|csi| csi.volume_handle.clone())
    }
}
