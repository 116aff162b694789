//! A stored machine set. Apart because it is one kind with its own spec and status; what it
//! shares with a deployment is in `template`.

use serde::{Deserialize, Serialize};

use super::is_zero_u32;
use super::template::{LabelSelector, MachineTemplate, check_replicated};
use crate::code::Status;
use crate::machine::{Condition, ObjectMeta};

/// A machine set's spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MachineSetSpec {
    /// How many machines to keep.
    #[serde(default)]
    pub replicas: u32,
    /// Which machines are the set's.
    #[serde(default)]
    pub selector: LabelSelector,
    /// What each machine is.
    #[serde(default)]
    pub template: MachineTemplate,
}

/// A machine set's status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MachineSetStatus {
    /// Machines it owns that are not failed or being deleted.
    #[serde(default)]
    pub replicas: u32,
    /// Of those, Running.
    #[serde(default)]
    pub ready_replicas: u32,
    /// Of those, Running (no minimum ready time yet, so the same).
    #[serde(default)]
    pub available_replicas: u32,
    /// Failed machines it keeps (preserved ones).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub failed_replicas: u32,
    /// The generation this status was made for.
    #[serde(default)]
    pub observed_generation: i64,
    /// Failed creations in a row: the next is delayed by a backoff that grows with it (MCM #483).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub failures: u32,
    /// `ReplicaFailure` when machines keep failing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A stored machine set: keeps `replicas` machines of its template, replacing failed ones.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MachineSet {
    /// `berth.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `MachineSet`.
    #[serde(default)]
    pub kind: String,
    /// Name, namespace, labels.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Replicas, selector, template.
    #[serde(default)]
    pub spec: MachineSetSpec,
    /// The controller's.
    #[serde(default)]
    pub status: MachineSetStatus,
}

impl MachineSet {
    /// A write's own rules, with the operator's replica ceiling.
    pub fn check(&self, max_replicas: u32) -> Result<(), Status> {
        check_replicated(
            "spec",
            self.spec.replicas,
            max_replicas,
            &self.spec.selector,
            &self.spec.template,
        )
    }
}
