//! Making a machine's container and starting it: CreateMachine's checks, the create (or the
//! adoption of the container an earlier or racing call made), and the start every call that
//! brings a machine up goes through.
//!
//! Apart because this is where a request's wishes become Engine state, in an order that matters:
//! everything that can be refused without the Engine is refused first, the mount gate is held
//! from the neighbours' check until the Engine has made or started the container, and a container
//! this call made but could not start is removed again, so a corrected spec makes a fresh one.

use bollard::errors::Error as BollardError;
use bollard::models::{ContainerUpdateBody, RestartPolicy, RestartPolicyNameEnum};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};
use domain::machine::MachineRequest;
use domain::{Code, Status};

use super::Docker;
use super::container::{Container, Target};
use super::engine::{EngineError, gone_is_done, short};
use super::mounts::Bind;
use super::records::remove_records;
use super::settings::EngineSite;
use super::spec::{self, LABEL_MACHINE, LABEL_UID, Plan, ProviderSpec, Pull, SPEC};
use crate::provider::{NAMESPACE_STAMP, request_namespace};

/// Whether [`Docker::create_or_adopt`] made the machine's container or found it made already (by
/// an earlier call, or one that won a race for the name): one it made gets the user data written
/// outright and is removed again if its first start fails; one it found keeps the user data it
/// has and is never removed by a create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    /// Made by this call.
    Created,
    /// Made before, for the same machine.
    Adopted,
}

/// What a CreateMachine's checks make of its request ([`Docker::checked_create`]).
pub(super) struct Checked {
    /// The Engine's address.
    pub(super) host: String,
    pub(super) plan: Plan,
    /// The user data to write into the container, if any.
    pub(super) user_data: Option<Vec<u8>>,
}

impl Docker {
    /// A CreateMachine's checks that need no Engine call, in the order it answers them: the
    /// request's shape first (400), then what this driver's settings refuse (412): the Engine it
    /// names or the default one, then the spec's registry, privileges, mounts (each in the
    /// machine's namespace's directory).
    pub(super) fn checked_create(&self, req: &MachineRequest) -> Result<Checked, Status> {
        let spec = ProviderSpec::decode(&req.machine_class.provider_spec)?;
        let bootstrap = spec.bootstrap()?;
        let user_data = spec::user_data(&req.secret, bootstrap);
        let host = self.engine_address(&req.secret);
        let engine_site = match &host {
            Ok(address) => EngineSite::of(address),
            Err(_) => EngineSite::Elsewhere,
        };
        let plan = spec.plan(&self.settings, engine_site);
        if let Some(e) = [
            plan.as_ref().err(),
            user_data.as_ref().err(),
            host.as_ref().err(),
        ]
        .into_iter()
        .flatten()
        .find(|e| e.code == Code::InvalidArgument)
        {
            return Err(e.clone());
        }
        let (host, plan, user_data) = (host?, plan?, user_data?);
        let namespace = request_namespace(req);
        for (i, m) in plan.mounts.iter().enumerate() {
            if let Err(rule) = self.settings.confine_to_namespace(&m.host_path, namespace) {
                return Err(Status::new(
                    Code::FailedPrecondition,
                    format!("{SPEC}.mounts[{i}].hostPath: {rule}"),
                ));
            }
        }
        Ok(Checked {
            host,
            plan,
            user_data,
        })
    }

    /// Makes the machine's container, or adopts the one made for it already (found by its UID, or
    /// holding its name with its labels after a create race). Pulls a missing image only when the
    /// class allows it.
    pub(super) async fn create_or_adopt(
        &self,
        t: &Target,
        plan: &Plan,
        name: &str,
        uid: &str,
        namespace: &str,
    ) -> Result<(Container, Origin), Status> {
        if let Some(c) = self.by_owner(t, name, uid).await? {
            if c.namespace() != namespace {
                return Err(name_taken(name));
            }
            return Ok((c, Origin::Adopted));
        }
        self.check_network(t, plan).await?;
        let own: Vec<Bind> = plan
            .mounts
            .iter()
            .map(|m| (m.host_path.clone(), !m.read_only))
            .collect();
        // Held until the container exists, so the next create's check sees it.
        let _gate = if own.is_empty() {
            None
        } else {
            let gate = self.mount_gate.lock().await;
            self.check_neighbours(t, None, &own).await?;
            Some(gate)
        };
        let container = spec::container_name(namespace, name, t.scope.instance.as_deref());
        let mut body = plan.container(name, uid);
        body.labels
            .get_or_insert_default()
            .insert(NAMESPACE_STAMP.to_owned(), namespace.to_owned());
        let mut pulled = false;
        loop {
            self.check_image_labels(t, &plan.image).await?;
            let made = t
                .engine
                .create_container(
                    Some(CreateContainerOptions {
                        name: Some(container.clone()),
                        ..CreateContainerOptions::default()
                    }),
                    body.clone(),
                )
                .await
                .map_err(|e| EngineError::new(format!("creating container {container}"), e));
            let e = match made {
                Ok(made) => {
                    return match self.by_id(t, &made.id).await? {
                        Some(c) => Ok((c, Origin::Created)),
                        None => Err(Status::unavailable(format!(
                            "container {container} was removed right after it was created; retry"
                        ))),
                    };
                }
                Err(e) => e,
            };
            match e.status() {
                // The name is taken: by a create of this machine that won the race (adopt it), or by
                // another machine (one name is one machine).
                Some(409) => {
                    return match self.holder_of(t, &container).await? {
                        Some(c)
                            if t.scope.holds(&c.labels)
                                && c.labels.get(LABEL_MACHINE).map(String::as_str)
                                    == Some(name)
                                && c.labels.get(LABEL_UID).map(String::as_str) == Some(uid)
                                && c.namespace() == namespace =>
                        {
                            Ok((c, Origin::Adopted))
                        }
                        Some(_) => Err(name_taken(name)),
                        None => Err(Status::unavailable(format!(
                            "the name of container {container} is held but no container shows it (being removed?); retry"
                        ))),
                    };
                }
                Some(404) if !pulled => {
                    if self.image_exists(t, &plan.image).await? {
                        // Not the image: the Engine misses something else the spec names (a network).
                        return Err(Status::new(
                            Code::FailedPrecondition,
                            format!(
                                "{SPEC}: the Docker Engine cannot create container {container}: {}",
                                e.message()
                            ),
                        ));
                    }
                    if plan.pull == Pull::Never {
                        return Err(Status::new(
                            Code::FailedPrecondition,
                            format!(
                                "{SPEC}.image: image {:?} is not on the Docker Engine; load it there, or set {SPEC}.pull: IfNotPresent to pull it",
                                plan.image.reference
                            ),
                        ));
                    }
                    self.pull(t, &plan.image).await?;
                    pulled = true;
                }
                Some(404) => {
                    return Err(Status::new(
                        Code::FailedPrecondition,
                        format!(
                            "{SPEC}: the Docker Engine cannot create container {container} after pulling {:?}: {}",
                            plan.image.reference,
                            e.message()
                        ),
                    ));
                }
                _ => return Err(e.to_status()),
            }
        }
    }

    /// Starts the container unless it runs, after checking every host directory it mounts again
    /// ([`Settings::recheck_mount`]): the machine may have planted a symbolic link on the way to one
    /// since it last started (see [`Plan::restart_policy`]).
    pub(super) async fn ensure_running(&self, t: &Target, c: &Container) -> Result<(), Status> {
        if !c.binds.is_empty() && c.engine_restarts {
            // Made by an earlier driver, which let the Engine restart every machine: from now on
            // only the driver starts this one, after its checks.
            t.engine
                .update_container(
                    &c.id,
                    ContainerUpdateBody {
                        restart_policy: Some(RestartPolicy {
                            name: Some(RestartPolicyNameEnum::NO),
                            maximum_retry_count: None,
                        }),
                        ..ContainerUpdateBody::default()
                    },
                )
                .await
                .map_err(|e| {
                    EngineError::new(
                        format!("updating the restart policy of container {}", c.name),
                        e,
                    )
                    .to_status()
                })?;
        }
        if c.running {
            return Ok(());
        }
        // Held until the Engine has started it, so no other create or start passes its own check
        // in between.
        let _gate = if c.binds.is_empty() {
            None
        } else {
            let gate = self.mount_gate.lock().await;
            self.check_neighbours(t, Some(&c.id), &c.binds).await?;
            Some(gate)
        };
        let engine_site = EngineSite::of(&t.host);
        for (source, _) in &c.binds {
            if let Err(rule) = self.settings.recheck_mount(source, engine_site) {
                tracing::warn!(container = %c.name, %rule, "a mount source failed its check; the machine is not started");
                return Err(Status::new(
                    Code::FailedPrecondition,
                    format!(
                        "machine {:?} is not started: its mount {rule}; the machine must be deleted, or the host directory put back",
                        c.name
                    ),
                ));
            }
        }
        let Err(e) = t.engine.start_container(&c.id, None).await else {
            return Ok(());
        };
        let e = EngineError::new(format!("starting container {}", c.name), e);
        if e.status() != Some(404) {
            return Err(e.to_status());
        }
        // Either the container went away meanwhile, or it exists and something it needs does not.
        match self.by_id(t, &c.id).await? {
            Some(_) => Err(Status::new(
                Code::FailedPrecondition,
                format!(
                    "{SPEC}: the Docker Engine cannot start container {}: {}",
                    c.name,
                    e.message()
                ),
            )),
            None => Err(Status::unavailable(format!(
                "container {} was removed while it was being started; retry",
                c.name
            ))),
        }
    }

    /// Removes a container this call created and could not start (with its records, if any). A
    /// failure here is only logged: the caller answers the start's error, and the container, made
    /// for the machine's UID, is adopted (and removed by DeleteMachine) like any other.
    pub(super) async fn undo_create(&self, t: &Target, c: &Container) {
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
        let outcome = gone_is_done(removed, || format!("removing container {}", c.name));
        match outcome.and(remove_records(&t.engine, &c.id).await) {
            Ok(()) => {
                tracing::info!(container = %short(&c.id), "container removed: its first start failed");
            }
            Err(e) => {
                tracing::warn!(container = %short(&c.id), error = %e.message, "a container whose first start failed was not removed");
            }
        }
    }

    /// FailedPrecondition when the spec names a network the Engine does not have (checked before
    /// the container is made, so a refused create leaves nothing behind).
    async fn check_network(&self, t: &Target, plan: &Plan) -> Result<(), Status> {
        let Some(network) = &plan.network else {
            return Ok(());
        };
        match t.engine.inspect_network(network, None).await {
            Ok(_) => Ok(()),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Err(Status::new(
                Code::FailedPrecondition,
                format!("{SPEC}.network: the Docker Engine has no network {network:?}"),
            )),
            Err(e) => {
                Err(EngineError::new(format!("inspecting network {network:?}"), e).to_status())
            }
        }
    }
}

/// CreateMachine's AlreadyExists when the name's container is another machine's: it says only
/// that the name is taken, never whose it is (another tenant's UID, cluster or labels).
fn name_taken(name: &str) -> Status {
    Status::new(
        Code::AlreadyExists,
        format!("the name {name:?} is taken on the Docker Engine; one name is one machine"),
    )
}
