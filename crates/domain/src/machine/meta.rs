//! The parts of Kubernetes' object metadata Berth uses: apart because every object, driven or
//! stored, carries them, and their decoding rules (an integral `generation`) are shared.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::names::Labels;

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
