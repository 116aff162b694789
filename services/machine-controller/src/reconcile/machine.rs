//! One machine's reconcile, as MCM's machine controller runs it:
//!
//! - Pending: recorded as Creating (before any call, so a crash after the call still knows a VM may
//!   exist), then CreateMachine, which adopts a VM the same name and uid already have;
//! - Creating: GetMachineStatus; Uninitialized (17) → InitializeMachine; initialised → Running;
//!   past the creation timeout → Failed;
//! - Running: GetMachineStatus at every resync; a VM gone or not running → Unknown; Unknown past
//!   the health timeout → Failed; healthy again → Running;
//! - deletion asked: Terminating, DeleteMachine (retried, honouring Retry-After), then the
//!   finalizer goes and the machine with it.
//!
//! Calls that fail are retried with a backoff that doubles per failure in a row; ResourceExhausted
//! waits the long `exhausted_retry` (MCM #977). Create and delete calls are paced per class.

use std::sync::Arc;
use std::time::Duration;

use client::ClientError;
use domain::machine::{Machine, MachineClass, MachineRequest, MachineSpec};
use domain::resources::{
    Kind, LastOperation, MACHINE_FINALIZER, MachinePhase, MachineResource, MachineStatus,
    OperationState, OperationType,
};
use domain::{Code, Status};
use serde_json::json;

use super::{Controller, elapsed_since};
use crate::store::{StoreError, now};

/// Reconciles the machine `namespace/name`; says when to look again.
pub async fn reconcile(
    controller: &Arc<Controller>,
    namespace: &str,
    name: &str,
) -> Result<Option<Duration>, StoreError> {
    let store = &controller.writer.store;
    let Some(stored) = store.get(Kind::Machine, namespace, name).await? else {
        return Ok(None);
    };
    let machine: MachineResource = stored.decode()?;
    let step = Step {
        controller,
        namespace,
        machine: &machine,
    };
    let deleting = machine.metadata.deletion_timestamp.is_some();
    let creating = matches!(machine.status.phase, MachinePhase::Pending)
        || (machine.status.phase == MachinePhase::Creating
            && machine.status.provider_id.is_empty());
    if !deleting
        && matches!(
            machine.status.phase,
            MachinePhase::Failed | MachinePhase::Terminating
        )
    {
        return Ok(None);
    }
    let next: &[OperationType] = match (deleting, creating) {
        (true, _) => &[OperationType::Delete],
        (false, true) => &[OperationType::Create],
        (false, false) => &[OperationType::HealthCheck, OperationType::Initialize],
    };
    // A resync, or a restart, must not retry a failed call before its backoff is over.
    if let Some(wait) = step.backoff_left(next) {
        return Ok(Some(wait));
    }
    match (deleting, creating) {
        (true, _) => step.delete().await,
        (false, true) => step.create().await,
        (false, false) => step.check().await,
    }
}

struct Step<'a> {
    controller: &'a Arc<Controller>,
    namespace: &'a str,
    machine: &'a MachineResource,
}

/// A call's failure, as the status says it and when to retry.
struct Failure {
    code: Code,
    message: String,
    retry_after: Option<Duration>,
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        Failure {
            code: e.code(),
            message: e.status.message.clone(),
            retry_after: e.retry_after,
        }
    }
}

impl From<Status> for Failure {
    fn from(s: Status) -> Self {
        Failure {
            code: s.code,
            message: s.message,
            retry_after: None,
        }
    }
}

fn operation(
    operation: OperationType,
    state: OperationState,
    description: impl Into<String>,
    code: Option<Code>,
) -> LastOperation {
    LastOperation {
        operation,
        state,
        description: description.into(),
        error_code: code.map(|c| c.name().to_string()),
        last_update_time: now(),
    }
}

impl Step<'_> {
    fn name(&self) -> &str {
        &self.machine.metadata.name
    }

    /// Writes the machine's status through `edit`, for this incarnation (uid) only.
    async fn status(&self, edit: impl FnOnce(&mut MachineStatus)) -> Result<(), StoreError> {
        let mut status = self.machine.status.clone();
        let before = status.phase;
        edit(&mut status);
        if status.phase != before {
            status.phase_transition_time = Some(now());
        }
        let value = serde_json::to_value(&status).map_err(|e| StoreError::Corrupt {
            what: self.name().to_string(),
            why: e.to_string(),
        })?;
        let written = self
            .controller
            .writer
            .store
            .update(
                Kind::Machine,
                self.namespace,
                self.name(),
                Some(&self.machine.metadata.uid),
                None,
                |body, _| {
                    body["status"] = value;
                    Ok(())
                },
            )
            .await;
        match written {
            // Gone meanwhile (deleted, or another incarnation): nothing to write.
            Err(StoreError::NotFound { .. }) => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// The driver request for this machine: its class and the class's secret, from the store.
    async fn request(&self) -> Result<(MachineRequest, MachineClass), Failure> {
        let class_name = &self.machine.spec.class.name;
        let writer = &self.controller.writer;
        let stored = writer
            .store
            .get(Kind::MachineClass, self.namespace, class_name)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?
            .ok_or_else(|| {
                Status::new(
                    Code::FailedPrecondition,
                    format!(
                        "machine class {class_name:?} is not in namespace {:?}",
                        self.namespace
                    ),
                )
            })?;
        let class: MachineClass = stored
            .decode()
            .map_err(|e| Status::internal(e.to_string()))?;
        let secret = writer.secret_of(self.namespace, &class).await?;
        let m = &self.machine.metadata;
        let machine = Machine {
            metadata: domain::machine::ObjectMeta {
                name: m.name.clone(),
                namespace: self.namespace.to_string(),
                uid: m.uid.clone(),
                labels: m.labels.clone(),
                ..Default::default()
            },
            spec: MachineSpec {
                class: self.machine.spec.class.clone(),
                provider_id: self.machine.status.provider_id.clone(),
                node_template: self.machine.spec.node_template.clone(),
            },
            status: serde_json::Value::Null,
        };
        let request = MachineRequest {
            machine,
            machine_class: class.clone(),
            secret: secret.as_secret(),
        };
        Ok((request, class))
    }

    /// What is left of the wait after the last call of one of `next` failed: the long
    /// `exhausted_retry` after ResourceExhausted, else the backoff for the failures so far,
    /// counted from the recorded failure (so it holds across resyncs and restarts).
    fn backoff_left(&self, next: &[OperationType]) -> Option<Duration> {
        let status = &self.machine.status;
        let last = status.last_operation.as_ref()?;
        if last.state != OperationState::Failed || !next.contains(&last.operation) {
            return None;
        }
        let settings = &self.controller.settings;
        let wait = if last.error_code.as_deref() == Some(Code::ResourceExhausted.name()) {
            settings.exhausted_retry
        } else {
            settings.backoff(status.failures)
        };
        let left = wait.saturating_sub(elapsed_since(Some(&last.last_update_time)));
        (!left.is_zero()).then_some(left)
    }

    /// Records a failed call and says when to retry it.
    async fn failed(
        &self,
        op: OperationType,
        failure: Failure,
    ) -> Result<Option<Duration>, StoreError> {
        let failures = self.machine.status.failures.saturating_add(1);
        let settings = &self.controller.settings;
        let delay = if failure.code == Code::ResourceExhausted {
            settings.exhausted_retry
        } else {
            failure
                .retry_after
                .unwrap_or_default()
                .max(settings.backoff(failures))
        };
        let message = failure.message.clone();
        self.status(|s| {
            s.failures = failures;
            s.last_operation = Some(operation(
                op,
                OperationState::Failed,
                message,
                Some(failure.code),
            ));
        })
        .await?;
        Ok(Some(delay))
    }

    async fn create(&self) -> Result<Option<Duration>, StoreError> {
        if self.machine.status.phase == MachinePhase::Pending {
            // Recorded before the call: after a crash the machine still says a VM may exist.
            self.status(|s| {
                s.phase = MachinePhase::Creating;
                s.last_operation = Some(operation(
                    OperationType::Create,
                    OperationState::Processing,
                    "Creating the VM",
                    None,
                ));
            })
            .await?;
            return Ok(Some(Duration::ZERO));
        }
        if self.timed_out(self.controller.settings.creation_timeout) {
            return self
                .fail("the VM was not running and initialised within the creation timeout")
                .await;
        }
        let (request, class) = match self.request().await {
            Ok(r) => r,
            Err(f) => return self.failed(OperationType::Create, f).await,
        };
        // Recorded before the call: a VM this call makes whose machine is then gone (a timed-out
        // create that finished after the machine's delete) is one the orphan collector may delete.
        self.controller
            .writer
            .store
            .record_made(
                self.namespace,
                self.name(),
                &self.machine.metadata.uid,
                &class.metadata.name,
            )
            .await?;
        self.controller
            .pace(self.namespace, &class.metadata.name)
            .await;
        match self.controller.writer.driver.create(&request).await {
            Ok(made) => {
                self.status(|s| {
                    s.provider_id = made.provider_id;
                    s.node_name = made.node_name;
                    if !made.addresses.is_empty() {
                        s.addresses = made.addresses;
                    }
                    s.failures = 0;
                    s.last_operation = Some(operation(
                        OperationType::Create,
                        OperationState::Successful,
                        "The VM exists",
                        None,
                    ));
                })
                .await?;
                Ok(Some(Duration::ZERO))
            }
            Err(e) => self.failed(OperationType::Create, e.into()).await,
        }
    }

    fn timed_out(&self, limit: Duration) -> bool {
        elapsed_since(self.machine.status.phase_transition_time.as_deref()) > limit
    }

    async fn fail(&self, why: &str) -> Result<Option<Duration>, StoreError> {
        let why = why.to_string();
        self.status(|s| {
            s.phase = MachinePhase::Failed;
            s.last_operation = Some(operation(
                OperationType::HealthCheck,
                OperationState::Failed,
                why,
                Some(Code::DeadlineExceeded),
            ));
        })
        .await?;
        Ok(None)
    }

    /// GetMachineStatus, and what its answer means for the phase.
    async fn check(&self) -> Result<Option<Duration>, StoreError> {
        let settings = &self.controller.settings;
        let (request, _) = match self.request().await {
            Ok(r) => r,
            Err(f) => return self.failed(OperationType::HealthCheck, f).await,
        };
        let driver = &self.controller.writer.driver;
        let phase = self.machine.status.phase;
        match driver.status_even_uninitialized(&request).await {
            Ok((vm, true)) => {
                self.status(|s| {
                    s.phase = MachinePhase::Running;
                    s.provider_id = vm.provider_id;
                    s.node_name = vm.node_name;
                    s.addresses = vm.addresses;
                    s.conditions = vm.conditions;
                    s.failures = 0;
                    if phase != MachinePhase::Running {
                        s.last_operation = Some(operation(
                            OperationType::HealthCheck,
                            OperationState::Successful,
                            "The VM runs",
                            None,
                        ));
                    }
                })
                .await?;
                Ok(Some(settings.resync))
            }
            Ok((vm, false)) if phase == MachinePhase::Creating => {
                if self.timed_out(settings.creation_timeout) {
                    return self
                        .fail("the VM was not initialised within the creation timeout")
                        .await;
                }
                match driver.initialize(&request).await {
                    Ok(_) => {
                        self.status(|s| {
                            s.phase = MachinePhase::Running;
                            s.provider_id = vm.provider_id;
                            s.node_name = vm.node_name;
                            s.addresses = vm.addresses;
                            s.conditions = vm.conditions;
                            s.failures = 0;
                            s.last_operation = Some(operation(
                                OperationType::Initialize,
                                OperationState::Successful,
                                "Initialised",
                                None,
                            ));
                        })
                        .await?;
                        Ok(Some(settings.resync))
                    }
                    Err(e)
                        if e.status
                            .message
                            .contains(domain::machine::BOOTSTRAP_RUNS_ONCE) =>
                    {
                        let message = e.status.message.clone();
                        self.status(|s| {
                            s.phase = MachinePhase::Failed;
                            s.last_operation = Some(operation(
                                OperationType::Initialize,
                                OperationState::Failed,
                                message,
                                Some(e.code()),
                            ));
                        })
                        .await?;
                        Ok(None)
                    }
                    Err(e) if e.code() == Code::Uninitialized => {
                        let message = e.status.message.clone();
                        self.status(|s| {
                            s.last_operation = Some(operation(
                                OperationType::Initialize,
                                OperationState::Processing,
                                message,
                                Some(Code::Uninitialized),
                            ));
                        })
                        .await?;
                        Ok(Some(settings.backoff_base))
                    }
                    Err(e) => self.failed(OperationType::Initialize, e.into()).await,
                }
            }
            Ok((_, false)) => self.unhealthy("the VM is not running").await,
            Err(e) if e.code() == Code::NotFound && phase == MachinePhase::Creating => {
                // Gone before it ran: make it again (CreateMachine adopts or makes by name and uid).
                self.status(|s| {
                    s.provider_id = String::new();
                    s.last_operation = Some(operation(
                        OperationType::Create,
                        OperationState::Processing,
                        "The VM was not found; creating it again",
                        Some(Code::NotFound),
                    ));
                })
                .await?;
                Ok(Some(Duration::ZERO))
            }
            Err(e) if e.code() == Code::NotFound => self.unhealthy("no VM backs the machine").await,
            Err(e) => self.failed(OperationType::HealthCheck, e.into()).await,
        }
    }

    /// The VM is gone or not running: Unknown, and Failed once the health timeout passed.
    async fn unhealthy(&self, why: &str) -> Result<Option<Duration>, StoreError> {
        let settings = &self.controller.settings;
        if self.machine.status.phase == MachinePhase::Unknown
            && self.timed_out(settings.health_timeout)
        {
            return self
                .fail(&format!("{why}, for longer than the health timeout"))
                .await;
        }
        let why = why.to_string();
        self.status(|s| {
            s.phase = MachinePhase::Unknown;
            s.last_operation = Some(operation(
                OperationType::HealthCheck,
                OperationState::Failed,
                why,
                Some(Code::NotFound),
            ));
        })
        .await?;
        Ok(Some(settings.resync.min(settings.health_timeout)))
    }

    async fn delete(&self) -> Result<Option<Duration>, StoreError> {
        if !self
            .machine
            .metadata
            .finalizers
            .iter()
            .any(|f| f == MACHINE_FINALIZER)
        {
            return Ok(None);
        }
        if self.machine.status.phase != MachinePhase::Terminating {
            self.status(|s| {
                s.phase = MachinePhase::Terminating;
                s.last_operation = Some(operation(
                    OperationType::Delete,
                    OperationState::Processing,
                    "Deleting the VM",
                    None,
                ));
            })
            .await?;
            return Ok(Some(Duration::ZERO));
        }
        let (request, class) = match self.request().await {
            Ok(r) => r,
            Err(f) => return self.failed(OperationType::Delete, f).await,
        };
        self.controller
            .pace(self.namespace, &class.metadata.name)
            .await;
        match self.controller.writer.driver.delete(&request).await {
            Ok(_) => {
                let store = &self.controller.writer.store;
                let removed = store
                    .update(
                        Kind::Machine,
                        self.namespace,
                        self.name(),
                        Some(&self.machine.metadata.uid),
                        None,
                        |body, _| {
                            if let Some(f) = body["metadata"]["finalizers"].as_array_mut() {
                                f.retain(|x| x != &json!(MACHINE_FINALIZER));
                            }
                            Ok(())
                        },
                    )
                    .await;
                match removed {
                    Ok(_) | Err(StoreError::NotFound { .. }) => Ok(None),
                    Err(e) => Err(e),
                }
            }
            Err(e) => self.failed(OperationType::Delete, e.into()).await,
        }
    }
}
