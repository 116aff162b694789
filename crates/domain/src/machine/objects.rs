//! A Machine, a MachineClass and their parts, in MCM's JSON: apart because they are what a
//! driver is asked to act on, as opposed to the calls' own bodies and answers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ObjectMeta;

/// A reference to a Kubernetes Secret.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SecretReference {
    /// Name of the secret.
    #[serde(default)]
    pub name: String,
    /// Namespace of the secret.
    #[serde(default)]
    pub namespace: String,
}

/// A machine's class reference (`spec.class`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ClassSpec {
    /// API group of the class.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    /// Kind of the class (`MachineClass`).
    #[serde(default)]
    pub kind: String,
    /// Name of the class.
    #[serde(default)]
    pub name: String,
}

/// The node template a class or machine carries (capacity, instance type, zone).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct NodeTemplate {
    /// Resource capacity (`cpu`, `gpu`, `memory`), as quantities.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, String>,
    /// Instance type.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub instance_type: String,
    /// Region.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub region: String,
    /// Zone.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub zone: String,
    /// CPU architecture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
}

/// A machine's spec: the parts a driver reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// The class this machine is made from.
    #[serde(default)]
    pub class: ClassSpec,
    /// The cloud's id for the VM once it exists (`<region>.<instanceId>` for Alicloud).
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "String::is_empty"
    )]
    pub provider_id: String,
    /// A per-machine node template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_template: Option<NodeTemplate>,
}

/// An MCM `Machine` (`machine.sapcloud.io/v1alpha1`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    /// Name, namespace, uid; the name becomes the VM's name.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The spec.
    #[serde(default)]
    pub spec: MachineSpec,
    /// The status MCM keeps; drivers do not interpret it (any JSON value).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub status: serde_json::Value,
}

/// An MCM `MachineClass`: which provider, and the provider's raw spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MachineClass {
    /// `berth.io/v1` when stored in the machine controller; MCM's own otherwise (ignored).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// `MachineClass` when stored in the machine controller (ignored by the driver).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Name and namespace.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The provider plugin (`Alicloud`, `Docker`).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(pattern = "^(Alicloud|Docker)$"))]
    pub provider: String,
    /// The provider's own spec, decoded by the provider plugin.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub provider_spec: serde_json::Value,
    /// The secret holding user data and/or credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
    /// A separate credentials secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<SecretReference>,
    /// The node template of machines of this class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_template: Option<NodeTemplate>,
}
