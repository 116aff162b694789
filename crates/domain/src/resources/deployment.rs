//! A stored machine deployment: its spec, its status and when a roll is complete. Apart because
//! it is one kind; how it rolls is in `rollout`, what it shares with a machine set in `template`.

use serde::{Deserialize, Serialize};

use super::rollout::{DeploymentStrategy, StrategyType};
use super::template::{LabelSelector, MachineTemplate, check_replicated};
use crate::code::Status;
use crate::machine::{Condition, ObjectMeta};

/// A machine deployment's spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentSpec {
    /// How many machines to keep.
    #[serde(default)]
    pub replicas: u32,
    /// Which machine sets (and machines) are the deployment's.
    #[serde(default)]
    pub selector: LabelSelector,
    /// What each machine is; a change (or a change of its class) rolls the machines.
    #[serde(default)]
    pub template: MachineTemplate,
    /// How a roll replaces machines.
    #[serde(default)]
    pub strategy: DeploymentStrategy,
    /// While true, template changes wait (scaling still happens).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
}

/// A machine deployment's status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentStatus {
    /// Machines of all its sets that are not failed or being deleted.
    #[serde(default)]
    pub replicas: u32,
    /// Of those, of the current template.
    #[serde(default)]
    pub updated_replicas: u32,
    /// Of all, Running.
    #[serde(default)]
    pub ready_replicas: u32,
    /// Of all, Running (no minimum ready time yet, so the same).
    #[serde(default)]
    pub available_replicas: u32,
    /// `spec.replicas` minus the available ones (never below zero).
    #[serde(default)]
    pub unavailable_replicas: u32,
    /// The generation this status was made for.
    #[serde(default)]
    pub observed_generation: i64,
    /// The current template's hash (its sets carry it as [`TEMPLATE_HASH_LABEL`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub template_hash: String,
    /// The generation of the template's class this status was made for: a class change rolls
    /// the machines without changing the deployment's own generation, so a client waiting for a
    /// roll compares this with the class's `metadata.generation`.
    #[serde(default)]
    pub observed_class_generation: i64,
    /// `Available` and `Progressing`, as Kubernetes' Deployment says them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl MachineDeploymentStatus {
    /// Whether the roll to the current template is complete for `spec` at `generation`: every
    /// replica updated and available, and nothing left of old templates.
    pub fn complete(&self, spec: &MachineDeploymentSpec, generation: i64) -> bool {
        self.observed_generation >= generation
            && self.updated_replicas == spec.replicas
            && self.replicas == spec.replicas
            && self.available_replicas == spec.replicas
    }
}

/// A stored machine deployment: machine sets rolled from one template to the next.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MachineDeployment {
    /// `berth.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `MachineDeployment`.
    #[serde(default)]
    pub kind: String,
    /// Name, namespace, labels.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Replicas, selector, template, strategy.
    #[serde(default)]
    pub spec: MachineDeploymentSpec,
    /// The controller's.
    #[serde(default)]
    pub status: MachineDeploymentStatus,
}

impl MachineDeployment {
    /// A write's own rules, with the operator's replica ceiling.
    pub fn check(&self, max_replicas: u32) -> Result<(), Status> {
        check_replicated(
            "spec",
            self.spec.replicas,
            max_replicas,
            &self.spec.selector,
            &self.spec.template,
        )?;
        if let Some(rolling) = &self.spec.strategy.rolling_update {
            // Kubernetes' rules: a Recreate has no bounds to give, and with neither a machine
            // above replicas nor one below, a roll could never begin.
            if self.spec.strategy.strategy_type == StrategyType::Recreate {
                return Err(Status::invalid(
                    "spec.strategy.rollingUpdate",
                    "may not be given when spec.strategy.type is Recreate",
                ));
            }
            rolling
                .max_surge
                .check("spec.strategy.rollingUpdate.maxSurge")?;
            rolling
                .max_unavailable
                .check("spec.strategy.rollingUpdate.maxUnavailable")?;
            if rolling.max_surge.is_zero() && rolling.max_unavailable.is_zero() {
                return Err(Status::invalid(
                    "spec.strategy.rollingUpdate.maxUnavailable",
                    "may not be 0 when maxSurge is 0: the roll could never begin",
                ));
            }
        }
        Ok(())
    }
}
