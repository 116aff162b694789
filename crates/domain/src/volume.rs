//! Volumes: what a client asks for ([`VolumeProvisionerProfile`]), what Berth keeps ([`Volume`]).
//!
//! A profile is parsed into a [`VolumeSpec`] once, at the edge: the capacity becomes exact bytes, names
//! and labels are checked, defaults are filled in. Two requests for the same volume are "the same" when
//! their normalised specs are equal, which is what makes AddStorage idempotent.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::code::Status;
use crate::names::{Labels, validate_dns1123_label, validate_labels, validate_volume_name};
use crate::quantity::Quantity;

/// The namespace a volume lives in when the caller names none.
pub const DEFAULT_NAMESPACE: &str = "default";
/// The most replicas a volume may ask for.
pub const MAX_REPLICAS: u32 = 16;

/// AddStorage's body: what the caller wants.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(example = json!({"name": "data-1", "capacity": "1Gi", "labels": {"app": "db"}}))
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeProvisionerProfile {
    /// The volume's name: a DNS-1123 subdomain of at most 63 characters.
    #[cfg_attr(
        feature = "openapi",
        schema(
            pattern = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$",
            min_length = 1,
            max_length = 63,
            example = "data-1"
        )
    )]
    pub name: String,
    /// The namespace, a DNS-1123 label (`default` when absent or empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$", max_length = 63)
    )]
    pub namespace: Option<String>,
    /// The capacity, as a Kubernetes quantity (`10Gi`, `500M`, `1.5Gi`, `1e9`): a whole number of
    /// bytes, more than 0 and less than 8Ei. The pattern allows the forms that are always whole
    /// bytes (decimal units with no more fraction digits than their power, binary units with `.5`,
    /// `.25` or `.75`, integer exponents); other fractional and exponent forms (`1.125Ki`, `1000m`,
    /// `1.5e3`) are accepted too when they come to whole bytes.
    #[cfg_attr(
        feature = "openapi",
        schema(
            pattern = "^\\+?(0*[1-9][0-9]{0,17}(\\.0*)?|(0*[1-9][0-9]{0,14}(\\.[0-9]{0,3}0*)?|0*\\.[0-9]{0,2}[1-9]0*)k|(0*[1-9][0-9]{0,11}(\\.[0-9]{0,6}0*)?|0*\\.[0-9]{0,5}[1-9]0*)M|(0*[1-9][0-9]{0,8}(\\.[0-9]{0,9}0*)?|0*\\.[0-9]{0,8}[1-9]0*)G|(0*[1-9][0-9]{0,5}(\\.[0-9]{0,12}0*)?|0*\\.[0-9]{0,11}[1-9]0*)T|(0*[1-9][0-9]{0,2}(\\.[0-9]{0,15}0*)?|0*\\.[0-9]{0,14}[1-9]0*)P|(0*[1-8](\\.[0-9]{0,18}0*)?|0*9(\\.0*)?|0*\\.[0-9]{0,17}[1-9]0*)E|(0*[1-9][0-9]{0,14}(\\.(0*|[27]?50*))?|0*\\.[27]?50*)Ki|(0*[1-9][0-9]{0,11}(\\.(0*|[27]?50*))?|0*\\.[27]?50*)Mi|(0*[1-9][0-9]{0,8}(\\.(0*|[27]?50*))?|0*\\.[27]?50*)Gi|(0*[1-9][0-9]{0,5}(\\.(0*|[27]?50*))?|0*\\.[27]?50*)Ti|(0*[1-9][0-9]{0,2}(\\.(0*|[27]?50*))?|0*\\.[27]?50*)Pi|(0*[1-7](\\.(0*|[27]?50*))?|0*\\.[27]?50*)Ei|0*[1-9][0-9]{0,8}[eE]\\+?0*[0-9]|0*[1-9][eE]\\+?0*1[0-8])$",
            example = "1Gi"
        )
    )]
    pub capacity: String,
    /// The orchestrator to use, a DNS-1123 label (the registry's default when absent or empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$", max_length = 63)
    )]
    pub orchestrator: Option<String>,
    /// How many replicas, 1 to 16 (1 when absent).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole_number"
    )]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 16))]
    pub replicas: Option<u32>,
    /// Labels to select the volume by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::schema::Labels>))]
    pub labels: Option<Labels>,
    /// Backend parameters (`format: file|directory`, `reclaimPolicy: Delete|Retain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::schema::VolumeParameters>))]
    pub parameters: Option<BTreeMap<String, String>>,
}

/// What happens to the backend object when the volume is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReclaimPolicy {
    /// Remove the backend object (the default).
    #[default]
    Delete,
    /// Keep the backend object; only Berth's record goes.
    Retain,
}

/// The parameters Berth interprets, and the only ones a volume may carry.
pub mod params {
    /// `Delete` (default) or `Retain`.
    pub const RECLAIM_POLICY: &str = "reclaimPolicy";
    /// `directory` (default) or `file` (a sparse file of the exact capacity), for the local backend.
    pub const FORMAT: &str = "format";
}

/// A validated, normalised request for a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeSpec {
    /// The name.
    pub name: String,
    /// The namespace.
    pub namespace: String,
    /// The capacity in exact bytes (with the unit family it was written in).
    pub capacity: Quantity,
    /// The orchestrator asked for, if any; resolved against the registry later.
    pub orchestrator: Option<String>,
    /// Replicas, at least 1.
    pub replicas: u32,
    /// Labels.
    pub labels: Labels,
    /// Parameters.
    pub parameters: BTreeMap<String, String>,
}

impl VolumeSpec {
    /// The reclaim policy from the parameters (validated when the spec was made).
    pub fn reclaim_policy(&self) -> ReclaimPolicy {
        match self
            .parameters
            .get(params::RECLAIM_POLICY)
            .map(String::as_str)
        {
            Some("Retain") => ReclaimPolicy::Retain,
            _ => ReclaimPolicy::Delete,
        }
    }
}

impl VolumeProvisionerProfile {
    /// Checks every field and fills in defaults; the first rule broken is reported, naming its field.
    pub fn validate(&self) -> Result<VolumeSpec, Status> {
        validate_volume_name("name", &self.name)?;
        let namespace = self
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
        validate_dns1123_label("namespace", &namespace)?;
        let capacity = Quantity::parse_field("capacity", &self.capacity)?;
        if capacity.bytes() == 0 {
            return Err(Status::invalid("capacity", "must be more than 0 bytes"));
        }
        let orchestrator = self.orchestrator.clone().filter(|o| !o.is_empty());
        if let Some(o) = &orchestrator {
            validate_dns1123_label("orchestrator", o)?;
        }
        let replicas = self.replicas.unwrap_or(1);
        if !(1..=MAX_REPLICAS).contains(&replicas) {
            return Err(Status::invalid(
                "replicas",
                format!("must be between 1 and {MAX_REPLICAS}, got {replicas}"),
            ));
        }
        let labels = self.labels.clone().unwrap_or_default();
        validate_labels("labels", &labels)?;
        let parameters = self.parameters.clone().unwrap_or_default();
        // Only the parameters some backend reads: one that nothing reads would be kept and shown
        // as if it had an effect.
        if let Some(unknown) = parameters
            .keys()
            .find(|k| ![params::RECLAIM_POLICY, params::FORMAT].contains(&k.as_str()))
        {
            let shown: String = unknown.chars().take(64).collect();
            return Err(Status::invalid(
                "parameters",
                format!(
                    "{shown:?} is not a parameter; the parameters are format and reclaimPolicy"
                ),
            ));
        }
        if let Some(p) = parameters.get(params::RECLAIM_POLICY)
            && p != "Delete"
            && p != "Retain"
        {
            return Err(Status::invalid(
                "parameters.reclaimPolicy",
                format!("must be Delete or Retain, got {p:?}"),
            ));
        }
        if let Some(f) = parameters.get(params::FORMAT)
            && f != "directory"
            && f != "file"
        {
            return Err(Status::invalid(
                "parameters.format",
                format!("must be directory or file, got {f:?}"),
            ));
        }
        Ok(VolumeSpec {
            name: self.name.clone(),
            namespace,
            capacity,
            orchestrator,
            replicas,
            labels,
            parameters,
        })
    }
}

/// The phase of a volume's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum VolumePhase {
    /// Recorded, not yet handed to a backend.
    Pending,
    /// The backend is creating it.
    Provisioning,
    /// Usable.
    Ready,
    /// The backend could not create it; `reason` and `message` say why.
    Failed,
    /// Being deleted.
    Deleting,
}

impl VolumePhase {
    /// The phase's name as stored and sent.
    pub fn as_str(self) -> &'static str {
        match self {
            VolumePhase::Pending => "Pending",
            VolumePhase::Provisioning => "Provisioning",
            VolumePhase::Ready => "Ready",
            VolumePhase::Failed => "Failed",
            VolumePhase::Deleting => "Deleting",
        }
    }

    /// The phase with this name.
    pub fn parse(s: &str) -> Option<Self> {
        [
            VolumePhase::Pending,
            VolumePhase::Provisioning,
            VolumePhase::Ready,
            VolumePhase::Failed,
            VolumePhase::Deleting,
        ]
        .into_iter()
        .find(|p| p.as_str() == s)
    }
}

impl fmt::Display for VolumePhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A volume's identity and bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct VolumeMeta {
    /// Name, unique within the namespace.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Unique id, never reused.
    pub uid: String,
    /// Labels.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::Labels))]
    pub labels: Labels,
    /// When it was created (RFC 3339, UTC).
    pub creation_timestamp: String,
    /// Changes on every write; a client can tell two reads apart by it.
    #[serde(default)]
    pub resource_version: String,
}

/// What the volume is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct VolumeSpecView {
    /// The orchestrator that holds it.
    pub orchestrator: String,
    /// The capacity in canonical quantity form.
    pub capacity: String,
    /// The capacity in bytes.
    pub capacity_bytes: u64,
    /// Replicas.
    pub replicas: u32,
    /// Parameters.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::VolumeParameters))]
    pub parameters: BTreeMap<String, String>,
}

/// Where the volume is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct VolumeStatus {
    /// The phase.
    pub phase: VolumePhase,
    /// A one-word reason for the phase.
    #[serde(default)]
    pub reason: String,
    /// A sentence for people.
    #[serde(default)]
    pub message: String,
    /// Where the backend put it (a path, a Docker volume name).
    #[serde(default)]
    pub location: String,
    /// Conditions.
    #[serde(default)]
    pub conditions: Vec<crate::machine::Condition>,
}

/// A volume as Berth returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Volume {
    /// `berth.io/v1`, as every Berth object says (what `berth apply -f` reads back).
    #[serde(rename = "apiVersion", default = "api_version")]
    #[cfg_attr(feature = "openapi", schema(example = "berth.io/v1"))]
    pub api_version: String,
    /// `Volume`.
    #[serde(default = "volume_kind")]
    #[cfg_attr(feature = "openapi", schema(example = "Volume"))]
    pub kind: String,
    /// Identity.
    pub metadata: VolumeMeta,
    /// What it is.
    pub spec: VolumeSpecView,
    /// Where it is in its life.
    pub status: VolumeStatus,
}

fn api_version() -> String {
    crate::resources::API_VERSION.to_string()
}

fn volume_kind() -> String {
    VOLUME_KIND.to_string()
}

/// A volume's `kind`.
pub const VOLUME_KIND: &str = "Volume";

/// A page of volumes. `items` is `[]`, never `null`, when there are none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VolumeList {
    /// With a `namespace`: the version that namespace was at when the list began
    /// (`watch=true&resourceVersion=` streams what came after). Each namespace has its own sequence,
    /// so a list of several has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<crate::resources::ListMeta>,
    /// The volumes of this page.
    pub items: Vec<Volume>,
    /// The token for the next page; absent on the last page.
    #[serde(default, rename = "continue", skip_serializing_if = "Option::is_none")]
    pub continue_token: Option<String>,
}

/// DeleteStorage's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeleteResult {
    /// Whether there was a volume to delete.
    pub deleted: bool,
}

/// What a volume uses (`GET /v1/volumes/{namespace}/{name}/stats`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct VolumeStats {
    /// The volume's namespace.
    pub namespace: String,
    /// The volume's name.
    pub name: String,
    /// The volume's uid.
    pub uid: String,
    /// The capacity it was created with, in bytes.
    pub capacity_bytes: u64,
    /// Bytes in use on the backend; absent when the backend cannot tell (see `source`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    /// What the volume can still take, in bytes: its capacity less what it uses, and no more than
    /// the file system holding it has free; absent when neither is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// Where the backend keeps it.
    pub location: String,
    /// How `usedBytes` was measured: `walk` (allocated blocks of every file), `file` (allocated blocks
    /// of the sparse file), `docker` (the Engine's usage data), or `unavailable`.
    pub source: String,
}

/// What a volume of `capacity` bytes can still take: its capacity less `used` (nothing once it
/// holds more than its capacity, as a directory can), and no more than the `free` bytes of the file
/// system holding it. `None` when neither the use nor the free space is known.
pub fn still_available(capacity: u64, used: Option<u64>, free: Option<u64>) -> Option<u64> {
    let within = used.map(|used| capacity.saturating_sub(used));
    match (within, free) {
        (Some(within), Some(free)) => Some(within.min(free)),
        (within, free) => within.or(free.map(|free| free.min(capacity))),
    }
}

/// A backend object that Berth placed or labelled but that no volume owns (a leftover of a crash, or of
/// something removed behind Berth's back).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Orphan {
    /// The orchestrator whose backend holds it.
    pub orchestrator: String,
    /// That orchestrator's kind.
    pub kind: crate::orchestrator::OrchestratorKind,
    /// Where it is (a path, a Docker volume name).
    pub location: String,
    /// The uid Berth gave it.
    pub uid: String,
    /// The namespace it was made for.
    pub namespace: String,
    /// The name it was made for.
    pub name: String,
}

/// `GET /v1/orphans`: what a fresh scan of every known backend found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct OrphanList {
    /// The orphans; `[]` when there are none.
    pub items: Vec<Orphan>,
    /// `report` (orphans are only listed) or `delete` (the reconciler removes them).
    pub policy: String,
    /// Backends that could not be scanned, with why (`docker: Docker Engine ... does not answer`).
    #[serde(default)]
    pub unscanned: Vec<String>,
}

/// `replicas` as JSON Schema counts integers: `2` and `2.0` are the same whole number (a generated
/// client or a JSON library may well send the second); `2.5`, a negative or an oversized number is
/// refused with the expected type, never echoing the value.
fn whole_number<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u32>, D::Error> {
    struct WholeNumber;
    impl serde::de::Visitor<'_> for WholeNumber {
        type Value = Option<u32>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a whole number")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            u32::try_from(v)
                .map(Some)
                .map_err(|_| E::custom("a whole number up to 4294967295"))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            u64::try_from(v)
                .map_err(|_| E::custom("a whole number, not negative"))
                .and_then(|v| self.visit_u64(v))
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
            if v.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&v) {
                // Whole and in range: the cast is exact.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                Ok(Some(v as u32))
            } else {
                Err(E::custom("a whole number"))
            }
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    deserializer.deserialize_any(WholeNumber)
}

#[cfg(test)]
mod tests {

    #[test]
    fn what_a_volume_can_still_take_is_bounded_by_its_capacity_and_the_disk() {
        assert_eq!(still_available(100, Some(30), Some(1_000)), Some(70));
        assert_eq!(still_available(100, Some(30), Some(10)), Some(10));
        assert_eq!(still_available(100, Some(300), Some(1_000)), Some(0));
        assert_eq!(still_available(100, None, Some(1_000)), Some(100));
        assert_eq!(still_available(100, Some(30), None), Some(70));
        assert_eq!(still_available(100, None, None), None);
    }

    use super::*;

    #[test]
    fn replicas_take_any_whole_json_number() {
        let read = |replicas: &str| {
            serde_json::from_str::<VolumeProvisionerProfile>(&format!(
                r#"{{"name": "v", "capacity": "1Gi", "replicas": {replicas}}}"#
            ))
            .map(|p| p.replicas)
        };
        assert_eq!(read("2").unwrap(), Some(2));
        assert_eq!(read("2.0").unwrap(), Some(2));
        assert_eq!(read("null").unwrap(), None);
        for bad in ["2.5", "-1", "1e10", "\"2\""] {
            let e = read(bad).unwrap_err().to_string();
            assert!(e.contains("whole number"), "{bad}: {e}");
        }
    }
    use crate::code::Code;

    fn profile() -> VolumeProvisionerProfile {
        VolumeProvisionerProfile {
            name: "data".into(),
            capacity: "10Gi".into(),
            ..Default::default()
        }
    }

    #[test]
    fn defaults_are_filled_in() {
        let spec = profile().validate().unwrap();
        assert_eq!(spec.namespace, "default");
        assert_eq!(spec.capacity.bytes(), 10 << 30);
        assert_eq!(spec.replicas, 1);
        assert_eq!(spec.reclaim_policy(), ReclaimPolicy::Delete);
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases: Vec<(VolumeProvisionerProfile, &str)> = vec![
            (
                VolumeProvisionerProfile {
                    name: "../x".into(),
                    ..profile()
                },
                "name: ",
            ),
            (
                VolumeProvisionerProfile {
                    name: "a".repeat(64),
                    ..profile()
                },
                "name: ",
            ),
            (
                VolumeProvisionerProfile {
                    namespace: Some("A".into()),
                    ..profile()
                },
                "namespace: ",
            ),
            (
                VolumeProvisionerProfile {
                    capacity: "100m".into(),
                    ..profile()
                },
                "capacity: ",
            ),
            (
                VolumeProvisionerProfile {
                    capacity: "0".into(),
                    ..profile()
                },
                "capacity: ",
            ),
            (
                VolumeProvisionerProfile {
                    replicas: Some(0),
                    ..profile()
                },
                "replicas: ",
            ),
            (
                VolumeProvisionerProfile {
                    orchestrator: Some("x/y".into()),
                    ..profile()
                },
                "orchestrator: ",
            ),
            (
                VolumeProvisionerProfile {
                    labels: Some([("a".to_string(), "b c".to_string())].into()),
                    ..profile()
                },
                "labels[a]: ",
            ),
            (
                VolumeProvisionerProfile {
                    parameters: Some([("reclaimPolicy".to_string(), "Keep".to_string())].into()),
                    ..profile()
                },
                "parameters.reclaimPolicy: ",
            ),
        ];
        for (p, prefix) in cases {
            let e = p.validate().unwrap_err();
            assert_eq!(e.code, Code::InvalidArgument);
            assert!(e.message.starts_with(prefix), "{prefix}: {}", e.message);
        }
    }

    #[test]
    fn unknown_profile_fields_are_refused() {
        let e = serde_json::from_str::<VolumeProvisionerProfile>(
            r#"{"name":"a","capacity":"1Gi","size":"2"}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("unknown field `size`"));
    }

    #[test]
    fn empty_list_serialises_as_empty_array() {
        assert_eq!(
            serde_json::to_string(&VolumeList::default()).unwrap(),
            r#"{"items":[]}"#
        );
    }

    #[test]
    fn a_parameter_no_backend_reads_is_refused() {
        let profile = VolumeProvisionerProfile {
            name: "v".into(),
            capacity: "1Mi".into(),
            parameters: Some([("device".to_string(), "/etc".to_string())].into()),
            ..Default::default()
        };
        let e = profile.validate().unwrap_err();
        assert!(
            e.message.contains("\"device\" is not a parameter"),
            "{}",
            e.message
        );
    }
}
