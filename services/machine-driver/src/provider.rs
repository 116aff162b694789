//! The provider SPI: what a cloud plugin implements ([`Provider`]) and how the service picks one for
//! a request ([`Providers`], keyed by `MachineClass.provider`).
//!
//! A provider is MCM's `driver.Driver` in async Rust: the same six methods over the same request and
//! response types (`domain::machine`), failing with a [`Status`] whose code MCM understands. The
//! registry is built once at start; each provider (`Alicloud`, `Docker`) is one
//! [`Providers::with`] call in `lib.rs`, nothing else changes.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use domain::machine::{
    CreateMachineResponse, DeleteMachineResponse, GetMachineStatusResponse, GetVolumeIdsRequest,
    GetVolumeIdsResponse, InitializeMachineResponse, ListMachinesRequest, ListMachinesResponse,
    MachineClass, MachineRequest, PersistentVolumeSpec,
};
use domain::{Code, Status};
use service_kit::tenancy::Namespaces;
use tracing::Instrument as _;

/// The condition type through which a provider's GetMachineStatus says whether the VM is
/// initialised. `False` means the VM exists but is not initialised yet (stopped, still starting):
/// the API then answers MCM's Uninitialized (17) with the condition's message, and keeps the VM's
/// providerID, nodeName, addresses and conditions in the answer, because MCM's creation flow reads
/// providerID and nodeName from the response that comes with code 17 before it calls
/// InitializeMachine. Without this condition a VM counts as initialised.
pub const INITIALIZED_CONDITION: &str = "Initialized";

/// Which call a request is checked for. CreateMachine checks everything a new VM needs, and the
/// stricter rules for a new name; the other calls check only what it takes to find the VM, so a
/// machine whose class changed since it was made can still be looked at and deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckedFor {
    /// CreateMachine.
    Create,
    /// Every call that finds an existing VM (status, initialise, delete, volume ids).
    Lookup,
}

/// The label (Docker) or tag (ECS) each provider stamps on what it creates: the machine's namespace
/// (`machine.metadata.namespace`, the empty one read as `default`). What carries no stamp (made
/// before namespaces existed) is in `default`. A container or instance found for a request whose
/// stamp differs from the request's namespace is another tenant's: it is neither shown, nor
/// adopted, nor changed.
pub const NAMESPACE_STAMP: &str = "berth.io/namespace";

/// The namespace a stamp value (or no stamp) puts a machine in.
pub fn stamped_namespace(stamp: Option<&str>) -> &str {
    service_kit::tenancy::effective_namespace(stamp.unwrap_or_default())
}

/// The namespace a request's machine is in: `machine.metadata.namespace`, empty read as `default`.
pub fn request_namespace(req: &MachineRequest) -> &str {
    service_kit::tenancy::effective_namespace(&req.machine.metadata.namespace)
}

/// One machine as a provider lists it: the VM's machine name, and the namespace and machine UID
/// stamped on it (what ListMachines filters by, and what the machine quota counts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The machine name the VM backs.
    pub name: String,
    /// Its namespace ([`NAMESPACE_STAMP`], `default` without one).
    pub namespace: String,
    /// The machine UID it was made for (empty when none was recorded).
    pub uid: String,
}

/// Collects a provider spec's rule violations so one answer names every bad field. A field is
/// either malformed (the request's own mistake: InvalidArgument, 400) or well-formed but outside
/// what this driver's operator allows (a region, a registry, privileged mode, a host directory:
/// FailedPrecondition, 412, naming the setting that would allow it). Every malformed field is
/// reported first, so the answer to a request depends on where it was sent only once the request is
/// well-formed.
#[derive(Default)]
pub(crate) struct Violations {
    /// Put before every field named (`machineClass.providerSpec`), or nothing.
    prefix: &'static str,
    shape: Vec<String>,
    operator: Vec<String>,
}

impl Violations {
    /// Violations of fields under `prefix`.
    pub(crate) fn under(prefix: &'static str) -> Self {
        Violations {
            prefix,
            ..Violations::default()
        }
    }

    /// A malformed field.
    pub(crate) fn add(&mut self, field: &str, rule: impl std::fmt::Display) {
        let line = self.line(field, rule);
        self.shape.push(line);
    }

    /// A malformed field whose refusal is already worded in full (a [`Status`]'s message).
    pub(crate) fn add_worded(&mut self, refusal: String) {
        self.shape.push(refusal);
    }

    /// A well-formed field this driver's operator does not allow.
    pub(crate) fn not_allowed(&mut self, field: &str, rule: impl std::fmt::Display) {
        let line = self.line(field, rule);
        self.operator.push(line);
    }

    fn line(&self, field: &str, rule: impl std::fmt::Display) -> String {
        if self.prefix.is_empty() {
            format!("{field}: {rule}")
        } else {
            format!("{}.{field}: {rule}", self.prefix)
        }
    }

    /// Every malformed field (400), else every refused one (412), else nothing.
    pub(crate) fn into_result(self) -> Result<(), Status> {
        if !self.shape.is_empty() {
            Err(Status::new(Code::InvalidArgument, self.shape.join("; ")))
        } else if !self.operator.is_empty() {
            Err(Status::new(
                Code::FailedPrecondition,
                self.operator.join("; "),
            ))
        } else {
            Ok(())
        }
    }
}

/// What a DeleteMachine that found nothing of the caller's adds when the machine's name is held
/// by a `what` (VM, container) made for another machine UID in the caller's own namespace: that one
/// is left running, and how to reach it.
pub fn held_by_another(name: &str, what: &str) -> String {
    format!(
        "; but machine name {name:?} is held by a {what} made for another machine UID in this namespace, which this call leaves running: send that machine's UID (machine.metadata.uid) or its providerID to delete it"
    )
}

/// A machine provider plugin (MCM's `driver.Driver`).
///
/// Every method is called with the class the registry chose the plugin for (except
/// [`Provider::get_volume_ids`], which has no class) and must:
/// - never log, trace or echo a secret value (the `secret` of a request, user data included);
/// - be safe to call again with the same request (MCM retries everything);
/// - answer MCM's codes: NotFound (5) for a missing VM on status, OK for a missing VM on delete, ...
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// The name `MachineClass.provider` selects this plugin by (`Alicloud`, `Docker`).
    fn name(&self) -> &'static str;

    /// One sentence for `GET /v1/providers`.
    fn description(&self) -> String;

    /// The checks of a CreateMachine that need no call to the cloud or the Engine: the request's
    /// shape (400) and what this driver's settings refuse (412), as CreateMachine answers them. The
    /// machine quota is counted only for a request that passes them, so a malformed one is told
    /// what is wrong with it rather than to delete a machine.
    fn check_create(&self, req: &MachineRequest) -> Result<(), Status>;

    /// CreateMachine: makes (or adopts) the VM backing `machine`.
    async fn create_machine(&self, req: &MachineRequest) -> Result<CreateMachineResponse, Status>;

    /// InitializeMachine: the post-creation step; Uninitialized (17) while it cannot finish yet.
    async fn initialize_machine(
        &self,
        req: &MachineRequest,
    ) -> Result<InitializeMachineResponse, Status>;

    /// DeleteMachine: releases the VM and whatever it left behind; a missing VM is OK.
    async fn delete_machine(&self, req: &MachineRequest) -> Result<DeleteMachineResponse, Status>;

    /// GetMachineStatus: NotFound (5) when no VM backs the machine, OutOfRange (11) when several do;
    /// a VM that exists but is not initialised is answered with an [`INITIALIZED_CONDITION`]
    /// `False` (which the API turns into Uninitialized, 17).
    async fn get_machine_status(
        &self,
        req: &MachineRequest,
    ) -> Result<GetMachineStatusResponse, Status>;

    /// Every VM the class identifies, provider id → the machine it backs.
    async fn machines(&self, req: &ListMachinesRequest)
    -> Result<BTreeMap<String, Listed>, Status>;

    /// ListMachines: [`Provider::machines`] in a span naming the provider and the class, keeping
    /// only the machines in namespaces the caller may see (`visible`). Every provider answers it
    /// this way, so only `machines` differs, and the tenancy filter is in this one place.
    async fn list_machines(
        &self,
        req: &ListMachinesRequest,
        visible: &Namespaces,
    ) -> Result<ListMachinesResponse, Status> {
        let span = tracing::debug_span!(
            "list_machines",
            provider = self.name(),
            class = %req.machine_class.metadata.name
        );
        let machine_list = self
            .machines(req)
            .instrument(span)
            .await?
            .into_iter()
            .filter(|(_, m)| visible.allows(&m.namespace))
            .map(|(id, m)| (id, m.name))
            .collect();
        Ok(ListMachinesResponse { machine_list })
    }

    /// The machines stamped with `namespace` ([`NAMESPACE_STAMP`]) that the request's account and
    /// region (Alicloud) or Engine (Docker) hold, of any class: what the machine quota counts.
    async fn namespace_machines(
        &self,
        req: &MachineRequest,
        namespace: &str,
    ) -> Result<Vec<Listed>, Status>;

    /// The answer to a call about a machine no VM backs: NotFound in this provider's words (also
    /// the answer for a machine in a namespace the caller may not see).
    fn missing(&self, machine_name: &str) -> Status;

    /// DeleteMachine's answer when no VM backs the machine, in this provider's words.
    fn nothing_to_delete(&self, machine_name: &str) -> DeleteMachineResponse;

    /// The volume id of one PersistentVolume spec, when it is a volume this provider makes.
    fn volume_id(&self, pv: &PersistentVolumeSpec) -> Option<String>;

    /// GetVolumeIDs: the ids of the specs this provider can map ([`Provider::volume_id`]), in
    /// order; others are skipped. Every provider answers it this way, so only `volume_id` differs.
    async fn get_volume_ids(
        &self,
        req: &GetVolumeIdsRequest,
    ) -> Result<GetVolumeIdsResponse, Status> {
        let volume_ids = req
            .pv_specs
            .iter()
            .filter_map(|pv| self.volume_id(pv))
            .collect();
        Ok(GetVolumeIdsResponse { volume_ids })
    }
}

pub use domain::machine::{ProviderInfo, ProviderList};

/// The provider plugins this driver has, by name.
#[derive(Clone, Default)]
pub struct Providers {
    by_name: BTreeMap<&'static str, Arc<dyn Provider>>,
}

impl std::fmt::Debug for Providers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.by_name.keys()).finish()
    }
}

impl Providers {
    /// No providers.
    pub fn new() -> Self {
        Providers::default()
    }

    /// Adds (or replaces) a provider under its [`Provider::name`].
    pub fn with(mut self, provider: Arc<dyn Provider>) -> Self {
        self.by_name.insert(provider.name(), provider);
        self
    }

    /// The names, sorted.
    pub fn names(&self) -> Vec<&'static str> {
        self.by_name.keys().copied().collect()
    }

    /// What `GET /v1/providers` answers.
    pub fn list(&self) -> ProviderList {
        ProviderList {
            providers: self
                .by_name
                .values()
                .map(|p| ProviderInfo {
                    name: p.name().to_owned(),
                    description: p.description(),
                })
                .collect(),
        }
    }

    /// The provider `class.provider` names. The match is exact, as MCM's is; an unknown name is an
    /// InvalidArgument in MCM's words, naming the providers this driver has.
    pub fn for_class(&self, class: &MachineClass) -> Result<Arc<dyn Provider>, Status> {
        self.by_name
            .get(class.provider.as_str())
            .cloned()
            .ok_or_else(|| {
                let have = self
                    .names()
                    .iter()
                    .map(|n| format!("'{n}'"))
                    .collect::<Vec<_>>()
                    .join(", ");
                Status::new(
                    Code::InvalidArgument,
                    format!(
                        "machineClass.provider: requested for Provider '{}', we only support {have}",
                        class.provider
                    ),
                )
            })
    }

    /// GetVolumeIDs has no class to choose a provider by, so each spec goes to every provider in
    /// name order and the first that maps it wins; specs no provider maps are skipped (MCM: "MAY
    /// skip PVs it cannot map"). The answer keeps the order of the specs.
    pub async fn get_volume_ids(
        &self,
        req: &GetVolumeIdsRequest,
    ) -> Result<GetVolumeIdsResponse, Status> {
        let mut volume_ids = Vec::new();
        for spec in &req.pv_specs {
            let one = GetVolumeIdsRequest {
                pv_specs: vec![spec.clone()],
            };
            for provider in self.by_name.values() {
                let mapped = provider.get_volume_ids(&one).await?;
                if let Some(id) = mapped.volume_ids.into_iter().next() {
                    volume_ids.push(id);
                    break;
                }
            }
        }
        Ok(GetVolumeIdsResponse { volume_ids })
    }
}

/// Decodes a provider's `providerSpec` (at `field`) with the rules every request body has: a refusal is
/// an InvalidArgument naming the path that failed and what was expected, never the value (MCM answers
/// Internal here, which no retry can fix). `holding` says what the object should hold.
pub(crate) fn decode_spec<T: serde::de::DeserializeOwned>(
    raw: &serde_json::Value,
    field: &str,
    holding: &str,
) -> Result<T, domain::Status> {
    if !raw.is_object() {
        return Err(domain::Status::invalid(
            field,
            format!("must be a JSON object with {holding}"),
        ));
    }
    service_kit::extract::decode_value(raw).map_err(|(path, rule)| {
        let at = if path == "." {
            field.to_owned()
        } else {
            format!("{field}.{path}")
        };
        domain::Status::invalid(&at, rule)
    })
}

/// A whole number as JSON Schema counts integers: `50` and `50.0` are the same (a generated client or
/// a JSON library may send either), so a spec field the documents call an integer takes both; a
/// fraction, or a number outside `T`, is refused with the expected type, never echoing the value.
/// `null` is `None`.
pub(crate) fn optional_whole<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64> + TryFrom<u64>,
{
    struct Whole<T>(std::marker::PhantomData<T>);
    impl<T: TryFrom<i64> + TryFrom<u64>> serde::de::Visitor<'_> for Whole<T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "a whole number that fits {}", std::any::type_name::<T>())
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            T::try_from(v).map(Some).map_err(|_| {
                E::invalid_value(serde::de::Unexpected::Other("a number out of range"), &self)
            })
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            T::try_from(v).map(Some).map_err(|_| {
                E::invalid_value(serde::de::Unexpected::Other("a number out of range"), &self)
            })
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
            // Whole and within i64: the cast is exact (2^63 itself is out of range).
            #[allow(clippy::cast_possible_truncation)]
            if v.fract() == 0.0
                && (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&v)
            {
                self.visit_i64(v as i64)
            } else {
                Err(E::invalid_type(
                    serde::de::Unexpected::Other("a fraction or an out-of-range number"),
                    &self,
                ))
            }
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    deserializer.deserialize_any(Whole(std::marker::PhantomData))
}

/// [`optional_whole`] where `null` (or nothing) is the type's zero, as Go's decoder leaves a field.
pub(crate) fn nullable_whole<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64> + TryFrom<u64> + Default,
{
    Ok(optional_whole(deserializer)?.unwrap_or_default())
}
