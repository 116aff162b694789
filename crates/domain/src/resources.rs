//! The objects the machine controller stores and reconciles: secrets, machine classes, machines,
//! machine sets and machine deployments, shaped as Kubernetes objects (`apiVersion: berth.io/v1`,
//! `kind`, `metadata`, `spec`, `status`) with MCM's field names where MCM has the concept
//! (`spec.class.name`, `spec.replicas`, `spec.selector.matchLabels`, `spec.template`,
//! `providerSpec`, `secretRef`).
//!
//! A machine class is [`crate::MachineClass`] itself (MCM's class has no `spec`: its fields sit at
//! the top), so a stored class goes to the driver unchanged. The other kinds are here, with the
//! rules a write must meet ([`Kind::check_write`]); the controller answers a broken rule with the
//! [`Status`] these return, which names the field.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::code::{Code, Status};
use crate::machine::{ClassSpec, Condition, MachineClass, MachineSpec, NodeAddress, ObjectMeta};
use crate::names::{Labels, validate_dns1123_label, validate_labels};

/// The API version of every stored object.
pub const API_VERSION: &str = "berth.io/v1";

/// A list's `metadata`: the version a watch of the same list resumes from, so nothing between the
/// list and the watch is missed.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ListMeta {
    /// The version the list was read at (digits, as a string).
    pub resource_version: String,
}

/// The finalizer the controller puts on every machine: the machine's row stays until its VM or
/// container is deleted, so a deletion is never forgotten half-done.
pub const MACHINE_FINALIZER: &str = "berth.io/machine";

/// The finalizer on machine sets and deployments: the object stays until what it owns is gone.
pub const OWNER_FINALIZER: &str = "berth.io/owned";

/// The annotation that keeps a machine from every controller action that would delete it (MCM
/// #1146): a scale-down picks another, a failed one is kept. A person's own DELETE still deletes it.
pub const PRESERVE_ANNOTATION: &str = "berth.io/preserve";

/// The label a machine deployment puts on the machine set (and its machines) made for one
/// template, valued with the template's hash.
pub const TEMPLATE_HASH_LABEL: &str = "berth.io/template-hash";

/// The most bytes a secret's values may hold together (Kubernetes' limit for a Secret).
pub const MAX_SECRET_BYTES: usize = 1024 * 1024;

/// The most bytes an object's annotations may hold together (Kubernetes' limit).
pub const MAX_ANNOTATION_BYTES: usize = 256 * 1024;

/// The longest machine-deployment name: its sets are `<name>-<10 hex>`, their machines
/// `<set>-<5 characters>`, and a machine's name must stay a DNS-1123 label (it names the VM).
pub const MAX_DEPLOYMENT_NAME_LEN: usize = 63 - 11 - 6;
/// The longest machine-set name (its machines are `<set>-<5 characters>`).
pub const MAX_SET_NAME_LEN: usize = 63 - 6;

/// A kind of stored object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Cloud credentials, write-only.
    Secret,
    /// A provider, its spec and its secret.
    MachineClass,
    /// One VM or container.
    Machine,
    /// N machines of one template.
    MachineSet,
    /// Machine sets rolled from one template to the next.
    MachineDeployment,
}

impl Kind {
    /// Every kind, in the order `apply` makes them (what a kind refers to comes first).
    pub const ALL: [Kind; 5] = [
        Kind::Secret,
        Kind::MachineClass,
        Kind::MachineDeployment,
        Kind::MachineSet,
        Kind::Machine,
    ];

    /// The kind's name, as `kind:` says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Secret => "Secret",
            Kind::MachineClass => "MachineClass",
            Kind::Machine => "Machine",
            Kind::MachineSet => "MachineSet",
            Kind::MachineDeployment => "MachineDeployment",
        }
    }

    /// The path segment of its routes (`/v1/namespaces/{ns}/<plural>`).
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Secret => "secrets",
            Kind::MachineClass => "machineclasses",
            Kind::Machine => "machines",
            Kind::MachineSet => "machinesets",
            Kind::MachineDeployment => "machinedeployments",
        }
    }

    /// The kind a route's path segment names.
    pub fn from_plural(plural: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.plural() == plural)
    }

    /// The kind `kind:` names (exactly, as Kubernetes matches it).
    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The longest name an object of this kind may have.
    pub fn max_name_len(self) -> usize {
        match self {
            Kind::MachineDeployment => MAX_DEPLOYMENT_NAME_LEN,
            Kind::MachineSet => MAX_SET_NAME_LEN,
            _ => 63,
        }
    }

    /// The checks every write of an object of this kind must pass that need nothing but the body:
    /// `apiVersion` and `kind` (absent or right), the name (a DNS-1123 label of at most
    /// [`Kind::max_name_len`]), the namespace (absent or the path's), labels and annotations. The
    /// kind's own rules are its type's `check`.
    pub fn check_write(
        self,
        meta: &ObjectMeta,
        api_version: &str,
        kind: &str,
        namespace: &str,
    ) -> Result<(), Status> {
        if !api_version.is_empty() && api_version != API_VERSION {
            return Err(Status::invalid(
                "apiVersion",
                format!("must be {API_VERSION} (or absent)"),
            ));
        }
        if !kind.is_empty() && kind != self.as_str() {
            return Err(Status::invalid(
                "kind",
                format!("must be {} on this route (or absent)", self.as_str()),
            ));
        }
        validate_dns1123_label("metadata.name", &meta.name)?;
        if meta.name.len() > self.max_name_len() {
            return Err(Status::invalid(
                "metadata.name",
                format!(
                    "a {} name is at most {} characters (the names of what it makes must stay DNS-1123 labels)",
                    self.as_str(),
                    self.max_name_len()
                ),
            ));
        }
        if !meta.namespace.is_empty() && meta.namespace != namespace {
            return Err(Status::invalid(
                "metadata.namespace",
                "must be the namespace of the route (or absent)",
            ));
        }
        validate_labels("metadata.labels", &meta.labels)?;
        check_annotations("metadata.annotations", &meta.annotations)?;
        Ok(())
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn check_annotations(field: &str, annotations: &BTreeMap<String, String>) -> Result<(), Status> {
    let mut total = 0usize;
    for (key, value) in annotations {
        crate::names::validate_label_key(&format!("{field} key"), key)?;
        total = total.saturating_add(key.len() + value.len());
    }
    if total > MAX_ANNOTATION_BYTES {
        return Err(Status::invalid(
            field,
            format!("keys and values together are at most {MAX_ANNOTATION_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// A stored secret: cloud credentials (and user data) a machine class refers to.
///
/// Its values are write-only: a write sends `data` (base64) and/or `stringData`; a read answers
/// `keys` and never a value. Its `Debug` prints keys only.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SecretResource {
    /// `berth.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `Secret`.
    #[serde(default)]
    pub kind: String,
    /// Name, namespace, labels; uid and resourceVersion are the controller's.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// A free-form type, as Kubernetes' (`Opaque` when absent).
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub secret_type: String,
    /// Base64 values (write only).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "crate::machine::base64_values::deserialize"
    )]
    pub data: BTreeMap<String, String>,
    /// Plain values (write only; win over `data` for the same key).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub string_data: BTreeMap<String, String>,
    /// The keys the secret holds (read only: what a read answers in place of values).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
}

impl fmt::Debug for SecretResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretResource")
            .field("metadata", &self.metadata)
            .field("keys", &self.as_secret().keys())
            .field("values", &"[REDACTED]")
            .finish()
    }
}

impl SecretResource {
    /// The values as the driver's [`crate::Secret`] carries them.
    pub fn as_secret(&self) -> crate::Secret {
        crate::Secret {
            metadata: None,
            data: self.data.clone(),
            string_data: self.string_data.clone(),
        }
    }

    /// A write's own rules: at least one value (values are write-only, so a body printed by a
    /// read, which has none, cannot silently empty a secret), keys as Kubernetes allows them, and
    /// at most [`MAX_SECRET_BYTES`] of values.
    pub fn check(&self) -> Result<(), Status> {
        if self.data.is_empty() && self.string_data.is_empty() {
            return Err(Status::invalid(
                "data",
                "a secret's values are write-only and a read never returns them: send them in data (base64) or stringData",
            ));
        }
        let mut total = 0usize;
        for (field, map) in [("data", &self.data), ("stringData", &self.string_data)] {
            for (key, value) in map {
                let ok = !key.is_empty()
                    && key.len() <= 253
                    && key
                        .bytes()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
                if !ok {
                    return Err(Status::invalid(
                        &format!("{field} key"),
                        "a key is 1 to 253 characters of letters, digits, '-', '_' and '.'",
                    ));
                }
                total = total.saturating_add(value.len());
            }
        }
        if total > MAX_SECRET_BYTES {
            return Err(Status::invalid(
                "data",
                format!("values together are at most {MAX_SECRET_BYTES} bytes"),
            ));
        }
        if self.secret_type.len() > 253 {
            return Err(Status::invalid("type", "is at most 253 characters"));
        }
        Ok(())
    }
}

/// The checks of a machine class write that need no driver: its references stay in its own
/// namespace (a tenant may not point at another's secret), and `provider` is given. The provider's
/// own rules (its spec, its secret's keys) are the driver's, which the controller asks.
pub fn check_class(class: &MachineClass) -> Result<(), Status> {
    if class.provider.is_empty() {
        return Err(Status::invalid(
            "provider",
            "is required (Alicloud or Docker)",
        ));
    }
    if !class.provider_spec.is_object() {
        return Err(Status::invalid(
            "providerSpec",
            "must be an object (the provider's spec)",
        ));
    }
    let Some(secret_ref) = &class.secret_ref else {
        return Err(Status::invalid(
            "secretRef.name",
            "is required: the name of a secret in this namespace",
        ));
    };
    check_local_reference(
        "secretRef",
        &secret_ref.name,
        &secret_ref.namespace,
        &class.metadata.namespace,
    )?;
    if let Some(credentials) = &class.credentials_secret_ref {
        check_local_reference(
            "credentialsSecretRef",
            &credentials.name,
            &credentials.namespace,
            &class.metadata.namespace,
        )?;
    }
    Ok(())
}

fn check_local_reference(
    field: &str,
    name: &str,
    namespace: &str,
    own: &str,
) -> Result<(), Status> {
    validate_dns1123_label(&format!("{field}.name"), name)?;
    if !namespace.is_empty() && namespace != own {
        return Err(Status::invalid(
            &format!("{field}.namespace"),
            "must be the class's own namespace (or absent): a class may only use secrets beside it",
        ));
    }
    Ok(())
}

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

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
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

fn check_machine_spec(field: &str, spec: &MachineSpec) -> Result<(), Status> {
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

fn check_replicated(
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

/// A count or a percentage of the desired replicas (`maxSurge: 1`, `maxUnavailable: "25%"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum IntOrPercent {
    /// A count.
    Int(u32),
    /// `N%`, 0 to 100.
    Percent(String),
}

impl IntOrPercent {
    /// The count this is of `total`: a percentage rounded up (surge) or down (unavailable), as
    /// Kubernetes rounds them.
    pub fn resolve(&self, total: u32, round_up: bool) -> u32 {
        match self {
            IntOrPercent::Int(n) => *n,
            IntOrPercent::Percent(text) => {
                let percent = parse_percent(text).unwrap_or(0);
                let scaled = u64::from(total) * u64::from(percent);
                let n = if round_up {
                    scaled.div_ceil(100)
                } else {
                    scaled / 100
                };
                u32::try_from(n).unwrap_or(u32::MAX)
            }
        }
    }

    fn check(&self, field: &str) -> Result<(), Status> {
        match self {
            IntOrPercent::Int(_) => Ok(()),
            IntOrPercent::Percent(text) => parse_percent(text).map(|_| ()).ok_or_else(|| {
                Status::invalid(
                    field,
                    "must be a whole number or a percentage from 0% to 100%",
                )
            }),
        }
    }
}

fn parse_percent(text: &str) -> Option<u32> {
    let digits = text.strip_suffix('%')?;
    if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u32>().ok().filter(|n| *n <= 100)
}

/// How a deployment replaces machines of an old template.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum StrategyType {
    /// A few at a time, within maxSurge and maxUnavailable.
    #[default]
    RollingUpdate,
    /// Every old machine first, then the new ones.
    Recreate,
}

/// `spec.strategy.rollingUpdate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdate {
    /// How many machines may exist above `replicas` during a roll (default 1).
    #[serde(default = "one")]
    pub max_surge: IntOrPercent,
    /// How many of `replicas` may be unavailable during a roll (default 0).
    #[serde(default = "zero")]
    pub max_unavailable: IntOrPercent,
}

fn one() -> IntOrPercent {
    IntOrPercent::Int(1)
}

fn zero() -> IntOrPercent {
    IntOrPercent::Int(0)
}

impl Default for RollingUpdate {
    fn default() -> Self {
        RollingUpdate {
            max_surge: one(),
            max_unavailable: zero(),
        }
    }
}

/// `spec.strategy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DeploymentStrategy {
    /// `RollingUpdate` (default) or `Recreate`.
    #[serde(default, rename = "type")]
    pub strategy_type: StrategyType,
    /// The rolling update's bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdate>,
}

impl DeploymentStrategy {
    /// `(maxSurge, maxUnavailable)` as counts of `replicas`; both zero would never progress, so
    /// the unavailable one is then 1 (Kubernetes' rule).
    pub fn bounds(&self, replicas: u32) -> (u32, u32) {
        let rolling = self.rolling_update.clone().unwrap_or_default();
        let surge = rolling.max_surge.resolve(replicas, true);
        let unavailable = rolling.max_unavailable.resolve(replicas, false);
        if surge == 0 && unavailable == 0 {
            (0, 1)
        } else {
            (surge, unavailable)
        }
    }
}

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
            rolling
                .max_surge
                .check("spec.strategy.rollingUpdate.maxSurge")?;
            rolling
                .max_unavailable
                .check("spec.strategy.rollingUpdate.maxUnavailable")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(labels: &[(&str, &str)], class: &str) -> MachineTemplate {
        let mut t = MachineTemplate::default();
        t.metadata.labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        t.spec.class.name = class.into();
        t
    }

    fn set(replicas: u32) -> MachineSet {
        let mut s = MachineSet::default();
        s.metadata.name = "workers".into();
        s.spec.replicas = replicas;
        s.spec
            .selector
            .match_labels
            .insert("pool".into(), "a".into());
        s.spec.template = template(&[("pool", "a")], "small");
        s
    }

    #[test]
    fn kinds_round_trip_their_names_and_routes() {
        for kind in Kind::ALL {
            assert_eq!(Kind::parse(kind.as_str()), Some(kind));
            assert_eq!(Kind::from_plural(kind.plural()), Some(kind));
        }
        assert_eq!(Kind::from_plural("machine"), None);
        assert_eq!(Kind::parse("machine"), None);
    }

    #[test]
    fn a_write_names_the_broken_field() {
        let mut meta = ObjectMeta {
            name: "w".into(),
            ..ObjectMeta::default()
        };
        Kind::Machine.check_write(&meta, "", "", "ns").unwrap();
        Kind::Machine
            .check_write(&meta, API_VERSION, "Machine", "ns")
            .unwrap();
        let e = Kind::Machine
            .check_write(&meta, "v1", "", "ns")
            .unwrap_err();
        assert!(e.message.starts_with("apiVersion:"), "{e}");
        let e = Kind::Machine
            .check_write(&meta, "", "MachineSet", "ns")
            .unwrap_err();
        assert!(e.message.starts_with("kind:"), "{e}");
        meta.namespace = "other".into();
        let e = Kind::Machine.check_write(&meta, "", "", "ns").unwrap_err();
        assert!(e.message.starts_with("metadata.namespace:"), "{e}");
        meta.namespace = String::new();
        meta.name = "a".repeat(50);
        Kind::MachineSet.check_write(&meta, "", "", "ns").unwrap();
        let e = Kind::MachineDeployment
            .check_write(&meta, "", "", "ns")
            .unwrap_err();
        assert!(e.message.contains("at most 46"), "{e}");
        meta.name = "Bad_Name".into();
        assert_eq!(
            Kind::Machine
                .check_write(&meta, "", "", "ns")
                .unwrap_err()
                .code,
            Code::InvalidArgument
        );
    }

    #[test]
    fn a_secret_write_carries_values_and_a_read_prints_none() {
        let mut s = SecretResource::default();
        let e = s.check().unwrap_err();
        assert!(e.message.starts_with("data:"), "{e}");
        s.string_data
            .insert("accessKeySecret".into(), "very-secret".into());
        s.check().unwrap();
        assert!(!format!("{s:?}").contains("very-secret"));
        s.string_data.insert("bad key".into(), "x".into());
        assert!(
            s.check()
                .unwrap_err()
                .message
                .starts_with("stringData key:")
        );
        let refused = serde_json::from_value::<SecretResource>(
            serde_json::json!({"data": {"k": "not base64!"}}),
        );
        assert!(refused.is_err());
    }

    #[test]
    fn a_class_uses_only_secrets_beside_it() {
        let mut c = MachineClass {
            provider: "Docker".into(),
            ..MachineClass::default()
        };
        c.metadata.namespace = "team-a".into();
        assert!(
            check_class(&c)
                .unwrap_err()
                .message
                .starts_with("providerSpec:")
        );
        c.provider_spec = serde_json::json!({"image": "busybox"});
        assert!(
            check_class(&c)
                .unwrap_err()
                .message
                .starts_with("secretRef.name:")
        );
        c.secret_ref = Some(crate::machine::SecretReference {
            name: "creds".into(),
            namespace: "team-b".into(),
        });
        let e = check_class(&c).unwrap_err();
        assert!(e.message.starts_with("secretRef.namespace:"), "{e}");
        c.secret_ref.as_mut().unwrap().namespace = "team-a".into();
        check_class(&c).unwrap();
        c.provider = String::new();
        assert!(
            check_class(&c)
                .unwrap_err()
                .message
                .starts_with("provider:")
        );
    }

    #[test]
    fn a_machine_cannot_name_its_own_vm() {
        let mut m = MachineResource::default();
        m.spec.class.name = "small".into();
        m.check().unwrap();
        m.spec.provider_id = "cn-shanghai.i-other".into();
        assert!(
            m.check()
                .unwrap_err()
                .message
                .starts_with("spec.providerID:")
        );
        m.spec.provider_id = String::new();
        m.spec.class.kind = "AlicloudMachineClass".into();
        assert!(
            m.check()
                .unwrap_err()
                .message
                .starts_with("spec.class.kind:")
        );
        assert!(!m.preserved());
        m.metadata
            .annotations
            .insert(PRESERVE_ANNOTATION.into(), "true".into());
        assert!(m.preserved());
    }

    #[test]
    fn a_set_selects_what_it_makes_within_the_ceiling() {
        set(3).check(10).unwrap();
        let e = set(11).check(10).unwrap_err();
        assert_eq!(e.code, Code::FailedPrecondition);
        assert!(e.message.contains("BERTH_CONTROLLER_MAX_REPLICAS"), "{e}");
        let mut s = set(1);
        s.spec.template.metadata.labels.clear();
        let e = s.check(10).unwrap_err();
        assert!(
            e.message.starts_with("spec.template.metadata.labels:"),
            "{e}"
        );
        let mut s = set(1);
        s.spec.selector.match_labels.clear();
        assert!(
            s.check(10)
                .unwrap_err()
                .message
                .starts_with("spec.selector.matchLabels:")
        );
        let mut s = set(1);
        s.spec.template.spec.class.name = String::new();
        assert!(
            s.check(10)
                .unwrap_err()
                .message
                .starts_with("spec.template.spec.class.name:")
        );
    }

    #[test]
    fn surge_and_unavailable_resolve_as_kubernetes_rounds_them() {
        let p = |s: &str| IntOrPercent::Percent(s.into());
        assert_eq!(p("25%").resolve(10, true), 3);
        assert_eq!(p("25%").resolve(10, false), 2);
        assert_eq!(IntOrPercent::Int(4).resolve(10, false), 4);
        let strategy = DeploymentStrategy {
            strategy_type: StrategyType::RollingUpdate,
            rolling_update: Some(RollingUpdate {
                max_surge: IntOrPercent::Int(0),
                max_unavailable: p("10%"),
            }),
        };
        // 10% of 5 rounds down to 0: with no surge either, one may be unavailable.
        assert_eq!(strategy.bounds(5), (0, 1));
        assert_eq!(DeploymentStrategy::default().bounds(5), (1, 0));
        let mut d = MachineDeployment::default();
        d.spec.replicas = 2;
        d.spec.selector = set(1).spec.selector;
        d.spec.template = set(1).spec.template;
        d.check(10).unwrap();
        for bad in ["101%", "%", "ten%", "5"] {
            d.spec.strategy.rolling_update = Some(RollingUpdate {
                max_surge: p(bad),
                max_unavailable: IntOrPercent::Int(0),
            });
            let e = d.check(10).unwrap_err();
            assert!(
                e.message
                    .starts_with("spec.strategy.rollingUpdate.maxSurge:"),
                "{bad}: {e}"
            );
        }
        let parsed: DeploymentStrategy = serde_json::from_value(serde_json::json!(
            {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 1}}
        ))
        .unwrap();
        assert_eq!(parsed.bounds(4), (2, 1));
    }
}
