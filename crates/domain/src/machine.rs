//! Machines, machine classes, secrets and the driver contract's request/response types.
//!
//! Field names follow MCM's Go/Kubernetes JSON (`providerID`, `nodeName`, `machineList`, ...), so a
//! body written for MCM's types decodes here unchanged. Unknown fields are ignored, as Kubernetes
//! clients expect.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::code::Status;
use crate::names::Labels;

/// Words in every answer that says the cloud refused a class's access key (a 401 from the
/// machine driver), so a client can tell it from the gateway refusing the caller's own Berth token.
pub const CLOUD_KEY_REFUSED: &str = "not a Berth credential";

/// Words in every answer about a machine whose bootstrap ended and will not run again (it failed,
/// or its result was lost): still MCM's Uninitialized, but no retry makes it initialised, so a
/// client tells it from "not yet" (the CLI exits 1 for it, not 3).
pub const BOOTSTRAP_RUNS_ONCE: &str = "it runs only once";

/// An integer as JSON Schema's `integer` allows it, `3` or `3.0`, within int64 (a client may write
/// a large one as a float: `2.5e16`).
fn integral<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    use serde::Deserialize as _;
    use serde::de::Error as _;
    let n = serde_json::Number::deserialize(d)?;
    if let Some(i) = n.as_i64() {
        return Ok(i);
    }
    match n.as_f64() {
        // Both bounds as f64 are ±2^63, and a literal just past either one (-2^63 - 1) rounds to
        // them: only what lies strictly between is surely in range.
        Some(f) if f.fract() == 0.0 && f > i64::MIN as f64 && f < i64::MAX as f64 => Ok(f as i64),
        _ => Err(D::Error::custom(format!(
            "{n} is not an integer within int64"
        ))),
    }
}

/// The providers a class may name.
pub const PROVIDERS: [&str; 2] = ["Alicloud", "Docker"];

/// What an OpenAPI document states of `MachineClass` beyond its Rust type: the providers, and the
/// two fields every provider needs. The driver and the machine controller both document the
/// schema, and the gateway merges their documents into one, so both state it through this.
pub fn document_machine_class(class: &mut serde_json::Value) {
    class["properties"]["provider"]["enum"] = serde_json::json!(PROVIDERS);
    class["required"] = serde_json::json!(["provider", "providerSpec"]);
}

/// The parts of Kubernetes `ObjectMeta` Berth uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// The object's name.
    #[serde(default)]
    pub name: String,
    /// The object's namespace, if namespaced.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The object's unique id, stable across its life.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Labels (Kubernetes' own; the driver passes them on without holding them to label rules).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = BTreeMap<String, String>))]
    pub labels: Labels,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The version of a stored object (machine-controller): changes on every write, a string as in
    /// Kubernetes. The driver ignores it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// How many times a stored object's spec has changed (machine-controller). The driver ignores it.
    #[serde(
        default,
        skip_serializing_if = "is_zero",
        deserialize_with = "integral"
    )]
    pub generation: i64,
    /// When a stored object was made (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
    /// When a stored object was asked to go (RFC 3339): it stays, read-only, until its finalizers
    /// are done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
    /// What must happen before a stored object is gone (`berth.io/machine`: its VM is deleted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
    /// The stored objects this one belongs to (a machine to its machine set, a set to its
    /// deployment).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// A reference from a stored object to the one that owns it, as Kubernetes writes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    /// The owner's API version (`berth.io/v1`).
    #[serde(default)]
    pub api_version: String,
    /// The owner's kind (`MachineSet`, `MachineDeployment`).
    #[serde(default)]
    pub kind: String,
    /// The owner's name.
    #[serde(default)]
    pub name: String,
    /// The owner's uid.
    #[serde(default)]
    pub uid: String,
    /// Whether the owner is the one controller of this object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
}

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

/// A Kubernetes `Secret`: `data` values are base64, `stringData` values plain (and win over `data`, as
/// in Kubernetes).
///
/// Its `Debug` and `Display` print the keys only, never a value, so a secret that reaches a log by
/// accident leaks nothing. It does serialise its values, because a client must send them to the driver.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Secret {
    /// Name and namespace, if the caller sent them (MCM does not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// Base64-encoded values (the standard alphabet, padded, no white space). Every one is checked
    /// when a secret is read, as Kubernetes checks a Secret's: a value that is not base64 is refused
    /// naming its key, even where `stringData` holds the same key and wins.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "base64_values::deserialize"
    )]
    pub data: BTreeMap<String, String>,
    /// Plain values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub string_data: BTreeMap<String, String>,
}

impl Secret {
    /// The value of `key`: `stringData` first, then `data` decoded from base64. A `data` value that is
    /// not base64 (one set in code; a decoded secret has none) is an InvalidArgument naming the key
    /// (never the value).
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, Status> {
        if let Some(v) = self.string_data.get(key) {
            return Ok(Some(v.clone().into_bytes()));
        }
        self.get_data(key)
    }

    /// The value of `key` in `data`, decoded from base64, whatever `stringData` holds (a request is
    /// checked for all it sends, not only for what wins).
    pub fn get_data(&self, key: &str) -> Result<Option<Vec<u8>>, Status> {
        match self.data.get(key) {
            None => Ok(None),
            Some(v) => base64::engine::general_purpose::STANDARD
                .decode(v)
                .map(Some)
                .map_err(|_| {
                    Status::invalid(&format!("secret.data[{key}]"), "is not valid base64")
                }),
        }
    }

    /// The value of `key` as UTF-8 text, trimmed of surrounding white space (a trailing newline from
    /// `echo | base64` is a classic).
    pub fn get_str(&self, key: &str) -> Result<Option<String>, Status> {
        match self.get(key)? {
            None => Ok(None),
            Some(bytes) => String::from_utf8(bytes)
                .map(|s| Some(s.trim().to_string()))
                .map_err(|_| Status::invalid(&format!("secret.data[{key}]"), "is not UTF-8 text")),
        }
    }

    /// The keys present, from both maps, without values.
    pub fn keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self
            .data
            .keys()
            .chain(self.string_data.keys())
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// A secret with these plain values (for tests and tools).
    pub fn from_string_data<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Secret {
            metadata: None,
            data: BTreeMap::new(),
            string_data: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("keys", &self.keys())
            .field("values", &"[REDACTED]")
            .finish()
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Secret(keys: {}; values redacted)",
            self.keys().join(", ")
        )
    }
}

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

/// A CSI persistent volume source.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct CsiVolumeSource {
    /// The CSI driver name.
    #[serde(default)]
    pub driver: String,
    /// The driver's id for the volume.
    #[serde(default)]
    pub volume_handle: String,
    /// Driver attributes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub volume_attributes: BTreeMap<String, String>,
}

/// A FlexVolume persistent volume source.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FlexVolumeSource {
    /// The FlexVolume driver name.
    #[serde(default)]
    pub driver: String,
    /// Driver options (`volumeId` for Alicloud disks).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, String>,
}

/// The parts of a Kubernetes `PersistentVolumeSpec` drivers map to volume ids; other sources are kept
/// as raw JSON so nothing a caller sends is rejected for being unfamiliar.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PersistentVolumeSpec {
    /// A CSI source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csi: Option<CsiVolumeSource>,
    /// A FlexVolume source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flex_volume: Option<FlexVolumeSource>,
    /// Every other field, untouched.
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub other: serde_json::Map<String, serde_json::Value>,
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

/// `Secret.data` as read from JSON: every value base64, refused where it is not with the value's own
/// path (`secret.data.<key>`) and a rule that never repeats it.
pub(crate) mod base64_values {
    use std::collections::BTreeMap;

    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, de::Error as _};

    /// A `data` value that decodes as base64.
    struct Encoded(String);

    impl<'de> Deserialize<'de> for Encoded {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let text = String::deserialize(d)?;
            match base64::engine::general_purpose::STANDARD.decode(&text) {
                Ok(_) => Ok(Encoded(text)),
                Err(_) => Err(D::Error::custom(
                    "is not valid base64 (standard alphabet, padded, no white space)",
                )),
            }
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, String>, D::Error> {
        let map = BTreeMap::<String, Encoded>::deserialize(d)?;
        Ok(map.into_iter().map(|(k, v)| (k, v.0)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generation_is_any_integral_number_within_int64() {
        let meta =
            |g: &str| serde_json::from_str::<ObjectMeta>(&format!("{{\"generation\": {g}}}"));
        assert_eq!(meta("7").unwrap().generation, 7);
        assert_eq!(
            meta("2.6701548458116744e16").unwrap().generation,
            26701548458116744
        );
        assert!(
            meta("1.5")
                .unwrap_err()
                .to_string()
                .contains("not an integer")
        );
        assert!(meta("1e19").is_err());
        assert!(meta("-9223372036854775809").is_err());
        assert!(meta("9223372036854775808").is_err());
        assert!(meta("\"3\"").is_err());
    }

    #[test]
    fn secret_debug_and_display_never_show_values() {
        let mut s = Secret::from_string_data([("alicloudAccessKeySecret", "hunter2-very-secret")]);
        s.data
            .insert("userData".into(), "c2VjcmV0LXVzZXItZGF0YQ==".into());
        for text in [format!("{s:?}"), format!("{s:#?}"), s.to_string()] {
            assert!(!text.contains("hunter2"), "{text}");
            assert!(!text.contains("c2VjcmV0"), "{text}");
            assert!(!text.contains("secret-user-data"), "{text}");
            assert!(text.contains("alicloudAccessKeySecret"), "{text}");
        }
    }

    #[test]
    fn secret_values_decode_with_string_data_winning() {
        let mut s = Secret::default();
        s.data.insert("a".into(), "aGVsbG8K".into());
        s.data.insert("b".into(), "not base64!".into());
        s.data.insert("c".into(), "eA==".into());
        s.string_data.insert("c".into(), "plain".into());
        assert_eq!(s.get_str("a").unwrap().as_deref(), Some("hello"));
        assert_eq!(s.get_str("c").unwrap().as_deref(), Some("plain"));
        assert_eq!(s.get("missing").unwrap(), None);
        let e = s.get("b").unwrap_err();
        assert_eq!(e.message, "secret.data[b]: is not valid base64");
    }

    #[test]
    fn every_data_value_is_base64_even_where_string_data_wins() {
        let ok: Secret = serde_json::from_str(
            r#"{"data": {"a": "aGVsbG8K", "b": ""}, "stringData": {"a": "x"}}"#,
        )
        .unwrap();
        assert_eq!(ok.get_str("a").unwrap().as_deref(), Some("x"));
        for bad in [
            r#""\u0084""#,
            r#"" aGVsbG8K""#,
            r#""aGVsbG8K\n""#,
            r#""aGVsbG8""#,
            r#""aGVsbG9=""#,
        ] {
            let body =
                format!(r#"{{"data": {{"userData": {bad}}}, "stringData": {{"userData": ""}}}}"#);
            let e = serde_json::from_str::<Secret>(&body)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("is not valid base64"), "{bad}: {e}");
        }
    }

    #[test]
    fn driver_types_use_mcm_json_names() {
        let body = serde_json::json!({
            "machine": {"metadata": {"name": "m-1", "uid": "u1"}, "spec": {"providerID": "cn-beijing.i-1", "unknown": 1}},
            "machineClass": {"provider": "Alicloud", "providerSpec": {"imageID": "x"}, "secretRef": {"name": "s", "namespace": "n"}},
            "secret": {"data": {"k": "dg=="}}
        });
        let req: MachineRequest = serde_json::from_value(body).unwrap();
        assert_eq!(req.machine.spec.provider_id, "cn-beijing.i-1");
        assert_eq!(req.machine_class.provider, "Alicloud");
        let resp = CreateMachineResponse {
            provider_id: "p".into(),
            node_name: "n".into(),
            last_known_state: "s".into(),
            addresses: vec![NodeAddress {
                kind: "InternalIP".into(),
                address: "10.0.0.1".into(),
            }],
        };
        let v = serde_json::to_value(resp).unwrap();
        assert_eq!(v["providerID"], "p");
        assert_eq!(v["nodeName"], "n");
        assert_eq!(v["lastKnownState"], "s");
        assert_eq!(v["addresses"][0]["type"], "InternalIP");
        let list = ListMachinesResponse {
            machine_list: [("p".to_string(), "m".to_string())].into(),
        };
        assert_eq!(serde_json::to_value(list).unwrap()["machineList"]["p"], "m");
        let ids = GetVolumeIdsResponse {
            volume_ids: vec!["d-1".into()],
        };
        assert_eq!(serde_json::to_value(ids).unwrap()["volumeIDs"][0], "d-1");
    }

    #[test]
    fn pv_specs_tolerate_unknown_sources() {
        let v = serde_json::json!({"pvSpecs": [
            {"csi": {"driver": "diskplugin.csi.alibabacloud.com", "volumeHandle": "d-1"}, "capacity": {"storage": "10Gi"}},
            {"flexVolume": {"driver": "alicloud/disk", "options": {"volumeId": "d-2"}}},
            {"nfs": {"server": "x", "path": "/"}}
        ]});
        let req: GetVolumeIdsRequest = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(req.pv_specs[0].csi.as_ref().unwrap().volume_handle, "d-1");
        assert_eq!(
            req.pv_specs[1].flex_volume.as_ref().unwrap().options["volumeId"],
            "d-2"
        );
        assert!(req.pv_specs[2].other.contains_key("nfs"));
        assert_eq!(serde_json::to_value(&req).unwrap(), v);
    }
}
