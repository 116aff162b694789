//! The persistent volume sources drivers map to volume ids: apart because GetVolumeIDs is the one
//! call that reads them, and unknown sources are kept as they came.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
