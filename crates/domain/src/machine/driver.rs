//! The driver contract's request and response types, one per call, with the addresses and
//! conditions the answers carry: apart because they are the wire format of the machine driver's
//! API, as MCM names it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Machine, MachineClass, PersistentVolumeSpec, Secret};

/// A node address (`InternalIP`, `ExternalIP`, `Hostname`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeAddress {
    /// The address type.
    #[serde(rename = "type")]
    pub kind: String,
    /// The address.
    pub address: String,
}

/// A condition on a machine, as Kubernetes node conditions are shaped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// What this condition is about (`InstanceStatus`, `Ready`).
    #[serde(rename = "type")]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// A one-word reason (the ECS status, say).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// A sentence for people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When it last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// The body of CreateMachine, InitializeMachine, DeleteMachine and GetMachineStatus.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct MachineRequest {
    /// The machine to act on.
    pub machine: Machine,
    /// Its class.
    pub machine_class: MachineClass,
    /// Credentials and user data.
    pub secret: Secret,
}

/// CreateMachineRequest.
pub type CreateMachineRequest = MachineRequest;
/// InitializeMachineRequest.
pub type InitializeMachineRequest = MachineRequest;
/// DeleteMachineRequest.
pub type DeleteMachineRequest = MachineRequest;
/// GetMachineStatusRequest.
pub type GetMachineStatusRequest = MachineRequest;

/// The answer to CreateMachine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct CreateMachineResponse {
    /// The cloud's id of the VM.
    #[serde(rename = "providerID")]
    pub provider_id: String,
    /// The node name the VM registers as.
    pub node_name: String,
    /// Where the operation got to, for a later call to continue from.
    #[serde(default)]
    pub last_known_state: String,
    /// The VM's addresses.
    #[serde(default)]
    pub addresses: Vec<NodeAddress>,
}

/// The answer to InitializeMachine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct InitializeMachineResponse {
    /// The cloud's id of the VM.
    #[serde(rename = "providerID")]
    pub provider_id: String,
    /// The node name.
    pub node_name: String,
    /// The VM's addresses.
    #[serde(default)]
    pub addresses: Vec<NodeAddress>,
}

/// The answer to DeleteMachine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DeleteMachineResponse {
    /// Where the deletion got to.
    #[serde(default)]
    pub last_known_state: String,
}

/// The answer to GetMachineStatus.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct GetMachineStatusResponse {
    /// The cloud's id of the VM.
    #[serde(rename = "providerID")]
    pub provider_id: String,
    /// The node name.
    pub node_name: String,
    /// The VM's addresses.
    #[serde(default)]
    pub addresses: Vec<NodeAddress>,
    /// Conditions, one carrying the cloud's own status of the VM.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// The answer to CheckMachineClass (Berth's own call): the class and secret pass every check
/// CreateMachine makes without calling the cloud or the Engine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ClassCheck {
    /// The provider plugin that checked it.
    pub provider: String,
}

/// The body of ListMachines.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ListMachinesRequest {
    /// The class whose machines to list.
    pub machine_class: MachineClass,
    /// Credentials.
    pub secret: Secret,
}

/// The answer to ListMachines: provider id → machine name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ListMachinesResponse {
    /// Provider id → machine name, for every VM the class's tags identify.
    pub machine_list: BTreeMap<String, String>,
}

/// The body of GetVolumeIDs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct GetVolumeIdsRequest {
    /// The specs to map.
    pub pv_specs: Vec<PersistentVolumeSpec>,
}

/// The answer to GetVolumeIDs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GetVolumeIdsResponse {
    /// The provider volume ids found, in the order of the specs.
    #[serde(rename = "volumeIDs")]
    pub volume_ids: Vec<String>,
}

/// One provider plugin, as `GET /v1/providers` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProviderInfo {
    /// The `MachineClass.provider` value that selects it (`Alicloud`).
    pub name: String,
    /// What it drives.
    pub description: String,
}

/// The answer of `GET /v1/providers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProviderList {
    /// The providers, sorted by name.
    pub providers: Vec<ProviderInfo>,
}
