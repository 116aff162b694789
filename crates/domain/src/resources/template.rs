//! What a machine set or a machine deployment makes machines from: a selector and a template,
//! and the rules both kinds share for them. Apart because it is common to the two, so neither
//! file holds the other's rules.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::check_annotations;
use super::machine::check_machine_spec;
use crate::code::{Code, Status};
use crate::machine::MachineSpec;
use crate::names::{Labels, validate_labels};

/// `spec.selector`: the labels a set's machines (or a deployment's sets) carry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Every one of these labels, with these values.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = BTreeMap<String, String>))]
    pub match_labels: Labels,
}

impl LabelSelector {
    /// Whether `labels` carry every label of the selector.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    }
}

/// A template's metadata: what each machine made from it carries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TemplateMeta {
    /// Labels (they must carry the selector's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = BTreeMap<String, String>))]
    pub labels: Labels,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// `spec.template`: the machine each replica is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MachineTemplate {
    /// Labels and annotations of each machine.
    #[serde(default)]
    pub metadata: TemplateMeta,
    /// The machine's spec (`class.name`).
    #[serde(default)]
    pub spec: MachineSpec,
}

pub(super) fn check_replicated(
    field: &str,
    replicas: u32,
    max_replicas: u32,
    selector: &LabelSelector,
    template: &MachineTemplate,
) -> Result<(), Status> {
    // The documents say int32, as Kubernetes' replicas are.
    if replicas > i32::MAX as u32 {
        return Err(Status::invalid(
            &format!("{field}.replicas"),
            "must be at most 2147483647 (an int32)",
        ));
    }
    if replicas > max_replicas {
        return Err(Status::new(
            Code::FailedPrecondition,
            format!(
                "{field}.replicas: at most {max_replicas}, the ceiling this controller's operator set (BERTH_CONTROLLER_MAX_REPLICAS)"
            ),
        ));
    }
    if selector.match_labels.is_empty() {
        return Err(Status::invalid(
            &format!("{field}.selector.matchLabels"),
            "must name at least one label, or the set would own every machine of the namespace",
        ));
    }
    validate_labels(
        &format!("{field}.selector.matchLabels"),
        &selector.match_labels,
    )?;
    validate_labels(
        &format!("{field}.template.metadata.labels"),
        &template.metadata.labels,
    )?;
    check_annotations(
        &format!("{field}.template.metadata.annotations"),
        &template.metadata.annotations,
    )?;
    if !selector.matches(&template.metadata.labels) {
        return Err(Status::invalid(
            &format!("{field}.template.metadata.labels"),
            "must carry every label of spec.selector.matchLabels, or the machines made would not be selected",
        ));
    }
    check_machine_spec(&format!("{field}.template.spec"), &template.spec)
}
