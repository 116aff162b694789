//! One machine's reconcile, as MCM's machine controller runs it:
//!
//! - Pending: recorded as Creating (before any call, so a crash after the call still knows a VM may
//!   exist), then in the same step CreateMachine, which adopts a VM the same name and uid already
//!   have, and at once InitializeMachine (MCM's creation flow); initialised → Running;
//! - Creating (the VM was not ready, or a step failed): GetMachineStatus; Uninitialized (17) →
//!   InitializeMachine; initialised → Running; past the creation timeout → Failed;
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
use domain::machine::{
    InitializeMachineResponse, Machine, MachineClass, MachineRequest, MachineSpec,
};
use domain::resources::{
    Kind, LastOperation, MACHINE_FINALIZER, MachinePhase, MachineResource, MachineStatus,
    OperationState, OperationType,
};
use domain::{Code, Status};
use serde_json::{Value, json};

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
        // To the millisecond, unlike the other times: a class or secret changed after it (in the
        // same second too) cuts the backoff short, one changed before it does not.
        last_update_time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    }
}

impl Step<'_> {
    fn name(&self) -> &str {
        &self.machine.metadata.name
    }

    /// The machine's status after `edit`, as the object stores it.
    fn edited(&self, edit: impl FnOnce(&mut MachineStatus)) -> Result<Value, StoreError> {
        let mut status = self.machine.status.clone();
        let before = status.phase;
        edit(&mut status);
        if status.phase != before {
            status.phase_transition_time = Some(now());
        }
        serde_json::to_value(&status).map_err(|e| StoreError::Corrupt {
            what: self.name().to_string(),
            why: e.to_string(),
        })
    }

    /// Writes the machine's status through `edit`, for this incarnation (uid) only.
    async fn status(&self, edit: impl FnOnce(&mut MachineStatus)) -> Result<(), StoreError> {
        let value = self.edited(edit)?;
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
        // Its class or secret changed since: that may be the fix, so at once.
        if self.controller.class_changed_since(
            self.namespace,
            &self.machine.spec.class.name,
            &last.last_update_time,
        ) {
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
        self.failed_knowing(op, failure, None).await
    }

    /// [`Step::failed`], also recording what is known of the VM.
    async fn failed_knowing(
        &self,
        op: OperationType,
        failure: Failure,
        vm: Option<&Vm>,
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
            if let Some(vm) = vm {
                vm.record(s);
            }
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
            return self.begin_creating().await;
        }
        if self.timed_out(self.controller.settings.creation_timeout) {
            return self
                .fail("the VM was not running and initialised within the creation timeout")
                .await;
        }
        // Again before this call (the first was recorded with Creating): the orphan collector
        // may have forgotten a machine whose VM it found gone.
        let store = &self.controller.writer.store;
        let class_name = &self.machine.spec.class.name;
        store
            .record_made(
                self.namespace,
                self.name(),
                &self.machine.metadata.uid,
                class_name,
            )
            .await?;
        self.create_and_initialize().await
    }

    /// Pending: records Creating, then creates. Creating is recorded before any call, so after a
    /// crash the machine still says a VM may exist; in the same commit the made-machines record,
    /// so a VM this call makes whose machine is then gone (a timed-out create that finished after
    /// the machine's delete) is one the orphan collector may delete.
    async fn begin_creating(&self) -> Result<Option<Duration>, StoreError> {
        let status = self.edited(|s| {
            s.phase = MachinePhase::Creating;
            s.last_operation = Some(operation(
                OperationType::Create,
                OperationState::Processing,
                "Creating the VM",
                None,
            ));
        })?;
        let written = self
            .controller
            .writer
            .store
            .update_as_made(
                self.namespace,
                self.name(),
                &self.machine.metadata.uid,
                &self.machine.spec.class.name,
                Box::new(move |body, _| {
                    body["status"] = status;
                    Ok(())
                }),
            )
            .await;
        let creating: MachineResource = match written {
            Ok(written) => written.object().decode()?,
            Err(StoreError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        Step {
            controller: self.controller,
            namespace: self.namespace,
            machine: &creating,
        }
        .create_and_initialize()
        .await
    }

    /// CreateMachine (which adopts a VM the same name and uid already have), then at once
    /// InitializeMachine, as MCM's creation flow does: a VM that runs and is initialised is
    /// Running after two calls and one write.
    async fn create_and_initialize(&self) -> Result<Option<Duration>, StoreError> {
        let (mut request, class) = match self.request().await {
            Ok(r) => r,
            Err(f) => return self.failed(OperationType::Create, f).await,
        };
        let driver = &self.controller.writer.driver;
        self.controller
            .pace(self.namespace, &class.metadata.name)
            .await;
        let made = match driver.create(&request).await {
            Ok(made) => made,
            Err(e) => return self.failed(OperationType::Create, e.into()).await,
        };
        let vm = Vm {
            provider_id: made.provider_id,
            node_name: made.node_name,
            addresses: made.addresses,
            conditions: None,
        };
        request.machine.spec.provider_id = vm.provider_id.clone();
        let initialized = driver.initialize(&request).await;
        self.after_initialize(initialized, vm).await
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
                let initialized = driver.initialize(&request).await;
                let vm = Vm {
                    provider_id: vm.provider_id,
                    node_name: vm.node_name,
                    addresses: vm.addresses,
                    conditions: Some(vm.conditions),
                };
                self.after_initialize(initialized, vm).await
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

    /// What InitializeMachine's answer means for a Creating machine whose VM exists (`vm`, as
    /// the call before said it): Running once initialised; asked again after a while when the
    /// VM is not ready yet (Uninitialized); Failed when its bootstrap ran and failed (it runs only
    /// once); a provider without the call (Unimplemented) counts as initialised once
    /// GetMachineStatus says so.
    async fn after_initialize(
        &self,
        answer: Result<InitializeMachineResponse, ClientError>,
        vm: Vm,
    ) -> Result<Option<Duration>, StoreError> {
        let settings = &self.controller.settings;
        match answer {
            Ok(done) => {
                self.status(|s| {
                    vm.record(s);
                    let answered = Vm {
                        provider_id: done.provider_id,
                        node_name: done.node_name,
                        addresses: done.addresses,
                        conditions: None,
                    };
                    answered.record(s);
                    s.phase = MachinePhase::Running;
                    s.failures = 0;
                    s.last_operation = Some(operation(
                        OperationType::Initialize,
                        OperationState::Successful,
                        "Initialised",
                        None,
                    ));
                })
                .await?;
                // InitializeMachine says nothing of the VM's conditions: the first health check
                // (GetMachineStatus) comes soon, not a whole resync later, so a machine read just
                // after it runs shows them within a second or so.
                let first_check = if vm.conditions.is_none() {
                    settings.backoff_base
                } else {
                    settings.resync
                };
                Ok(Some(first_check.min(settings.resync)))
            }
            Err(e) if e.code() == Code::Unimplemented => {
                self.status(|s| {
                    vm.record(s);
                    s.failures = 0;
                    s.last_operation = Some(operation(
                        OperationType::Create,
                        OperationState::Successful,
                        "The VM exists",
                        None,
                    ));
                })
                .await?;
                // Not at once: GetMachineStatus says when it is initialised, and a VM it says is
                // not (a provider at odds with itself) must not be asked in a tight loop.
                Ok(Some(settings.backoff_base))
            }
            Err(e)
                if e.status
                    .message
                    .contains(domain::machine::BOOTSTRAP_RUNS_ONCE) =>
            {
                let message = e.status.message.clone();
                self.status(|s| {
                    vm.record(s);
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
                    vm.record(s);
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
            Err(e) => {
                self.failed_knowing(OperationType::Initialize, e.into(), Some(&vm))
                    .await
            }
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

/// What a driver call said of a machine's VM.
struct Vm {
    provider_id: String,
    node_name: String,
    addresses: Vec<domain::machine::NodeAddress>,
    /// GetMachineStatus's conditions; the other calls say none.
    conditions: Option<Vec<domain::machine::Condition>>,
}

impl Vm {
    /// Writes what is known into `status`, leaving what is not as it was.
    fn record(&self, status: &mut MachineStatus) {
        if !self.provider_id.is_empty() {
            status.provider_id = self.provider_id.clone();
        }
        if !self.node_name.is_empty() {
            status.node_name = self.node_name.clone();
        }
        if !self.addresses.is_empty() {
            status.addresses = self.addresses.clone();
        }
        if let Some(conditions) = &self.conditions {
            status.conditions = conditions.clone();
        }
    }
}
