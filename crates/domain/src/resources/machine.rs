//! A stored machine, its phase and the status the controller keeps. Apart from sets and
//! deployments because a machine is what they make: their templates check a machine spec with
//! `check_machine_spec`, the one rule shared with it.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{PRESERVE_ANNOTATION, is_zero_u32};
use crate::code::Status;
use crate::machine::{ClassSpec, Condition, MachineSpec, NodeAddress, ObjectMeta};
use crate::names::validate_dns1123_label;

/// A machine's phase, as MCM's `MachinePhase` names them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum MachinePhase {
    /// Stored; nothing asked of the driver yet.
    #[default]
    Pending,
    /// CreateMachine asked; the VM is not running and initialised yet.
    Creating,
    /// The VM runs and is initialised.
    Running,
    /// The VM stopped answering as running (gone, stopped); Failed after the health timeout.
    Unknown,
    /// Creation or health timed out; a machine set replaces it.
    Failed,
    /// Being deleted: the VM is deleted, then the machine.
    Terminating,
}

impl MachinePhase {
    /// The phase's name.
    pub fn as_str(self) -> &'static str {
        match self {
            MachinePhase::Pending => "Pending",
            MachinePhase::Creating => "Creating",
            MachinePhase::Running => "Running",
            MachinePhase::Unknown => "Unknown",
            MachinePhase::Failed => "Failed",
            MachinePhase::Terminating => "Terminating",
        }
    }

    /// The phase a name names, as [`MachinePhase::as_str`] writes it.
    pub fn parse(name: &str) -> Option<MachinePhase> {
        [
            MachinePhase::Pending,
            MachinePhase::Creating,
            MachinePhase::Running,
            MachinePhase::Unknown,
            MachinePhase::Failed,
            MachinePhase::Terminating,
        ]
        .into_iter()
        .find(|p| p.as_str() == name)
    }
}

impl fmt::Display for MachinePhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the controller last asked of the driver for a machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum OperationType {
    /// CreateMachine.
    Create,
    /// InitializeMachine.
    Initialize,
    /// GetMachineStatus.
    HealthCheck,
    /// DeleteMachine.
    Delete,
}

/// How the last operation went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum OperationState {
    /// Asked, not answered yet, or answered "not yet".
    Processing,
    /// Done.
    Successful,
    /// Refused or failed; `errorCode` says how.
    Failed,
}

/// MCM's `LastOperation`: the last call about a machine and its outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct LastOperation {
    /// Which call.
    #[serde(rename = "type")]
    pub operation: OperationType,
    /// How it went.
    pub state: OperationState,
    /// In words (the driver's message on failure; never a secret).
    #[serde(default)]
    pub description: String,
    /// The machine code's name of a failure (`ResourceExhausted`, `Unavailable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// When (RFC 3339).
    pub last_update_time: String,
}

/// A machine's status, written by the controller only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// Where the machine is in its life.
    #[serde(default)]
    pub phase: MachinePhase,
    /// When `phase` last changed (RFC 3339): the creation and health timeouts count from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_transition_time: Option<String>,
    /// The VM's id at the provider, once made.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "String::is_empty"
    )]
    pub provider_id: String,
    /// The node name the VM has.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// Its addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<NodeAddress>,
    /// Its conditions, as the driver last reported them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The last call about it and its outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,
    /// Failed calls in a row (the retry backoff grows with it).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub failures: u32,
}

/// A stored machine: a class reference and labels; the controller makes the VM and keeps its status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MachineResource {
    /// `berth.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `Machine`.
    #[serde(default)]
    pub kind: String,
    /// Name (the VM's name), namespace, labels, annotations ([`PRESERVE_ANNOTATION`]).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `class` (required) and an optional `nodeTemplate`; `providerID` is the controller's.
    #[serde(default)]
    pub spec: MachineSpec,
    /// The controller's.
    #[serde(default)]
    pub status: MachineStatus,
}

impl MachineResource {
    /// A write's own rules: a class named in this namespace; no providerID (the controller sets
    /// it from what it made, so no caller can point a machine at a VM it did not make).
    pub fn check(&self) -> Result<(), Status> {
        check_machine_spec("spec", &self.spec)
    }

    /// Whether [`PRESERVE_ANNOTATION`] keeps it from controller deletions.
    pub fn preserved(&self) -> bool {
        self.metadata
            .annotations
            .get(PRESERVE_ANNOTATION)
            .is_some_and(|v| v == "true")
    }
}

pub(super) fn check_machine_spec(field: &str, spec: &MachineSpec) -> Result<(), Status> {
    check_class_reference(&format!("{field}.class"), &spec.class)?;
    if !spec.provider_id.is_empty() {
        return Err(Status::invalid(
            &format!("{field}.providerID"),
            "is set by the controller from the VM it makes; leave it out",
        ));
    }
    Ok(())
}

fn check_class_reference(field: &str, class: &ClassSpec) -> Result<(), Status> {
    validate_dns1123_label(&format!("{field}.name"), &class.name)?;
    if !class.kind.is_empty() && class.kind != "MachineClass" {
        return Err(Status::invalid(
            &format!("{field}.kind"),
            "must be MachineClass (or absent)",
        ));
    }
    Ok(())
}
