//! The Alicloud provider spec (`MachineClass.providerSpec`): its fields, how it is decoded, the
//! tags it scopes lookups by, and the RunInstances request it becomes.
//!
//! Field names are those of MCM's `pkg/alicloud/apis/alicloud_provider_spec.go` (docs/design.md,
//! “The Alicloud provider spec”), `IoOptimized` with its capital I included; unknown fields are
//! ignored, as Go's decoder does, except a slip for a known one (`instanceTyp`), which is refused
//! naming the field meant. The rules a decoded spec must pass are in `spec/rules.rs` (the
//! historical in-tree ones, with their messages, plus what ECS itself would refuse later); the
//! document's description of them is [`schema`]. The machine's own names and tags are in
//! [`super::identity`], the secret's keys in [`super::secret`], the region policy in
//! [`super::region`].

use std::collections::BTreeMap;

use alicloud::{DataDisk, RunInstances, SystemDisk, Tag};
use domain::{Status, names};
use serde::{Deserialize, Deserializer};

use super::identity::{CLUSTER_TAG, MACHINE_TAG, OWNER_TAG, Owner, ROLE_TAG};
use crate::provider::{NAMESPACE_STAMP, Violations};

mod rules;
pub mod schema;

/// Where the spec sits in a request body; every field error starts with it.
const SPEC: &str = "machineClass.providerSpec";

/// ECS allows 20 tags on a resource; three are [`MACHINE_TAG`], [`OWNER_TAG`] and
/// [`NAMESPACE_STAMP`].
const MAX_SPEC_TAGS: usize = 17;
/// ECS's longest tag key and value, in characters.
const MAX_TAG_LEN: usize = 128;
/// The category of ECS's local (ephemeral) SSDs, which have their own size range.
const EPHEMERAL_SSD: &str = "DiskEphemeralSSD";
/// The largest ephemeral SSD ECS makes, in GiB.
const MAX_EPHEMERAL_SSD_GIB: i64 = 800;

/// `null` decodes as the type's default, as Go's `encoding/json` leaves a field at its zero value.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// `systemDisk`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct SystemDiskSpec {
    /// `category` (`cloud_efficiency`, `cloud_essd`, ...).
    #[serde(deserialize_with = "nullable")]
    pub category: String,
    /// `size` in GiB; 0 means ECS's default.
    #[serde(deserialize_with = "crate::provider::nullable_whole")]
    pub size: i64,
}

/// One of `dataDisks`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct DataDiskSpec {
    /// `name`, part of the ECS disk name `<machine>-<name>-data-disk`.
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    /// `category`.
    #[serde(deserialize_with = "nullable")]
    pub category: String,
    /// `description`.
    #[serde(deserialize_with = "nullable")]
    pub description: String,
    /// `encrypted`.
    #[serde(deserialize_with = "nullable")]
    pub encrypted: bool,
    /// `deleteWithInstance`; unset means true.
    #[serde(rename = "deleteWithInstance")]
    pub delete_with_instance: Option<bool>,
    /// `size` in GiB.
    #[serde(deserialize_with = "crate::provider::nullable_whole")]
    pub size: i64,
}

/// MCM's Alicloud `ProviderSpec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct ProviderSpec {
    /// `apiVersion` (informational).
    #[serde(rename = "apiVersion", deserialize_with = "nullable")]
    pub api_version: String,
    /// `imageID`.
    #[serde(rename = "imageID", deserialize_with = "nullable")]
    pub image_id: String,
    /// `instanceType`.
    #[serde(rename = "instanceType", deserialize_with = "nullable")]
    pub instance_type: String,
    /// `region`.
    #[serde(deserialize_with = "nullable")]
    pub region: String,
    /// `zoneID`.
    #[serde(rename = "zoneID", deserialize_with = "nullable")]
    pub zone_id: String,
    /// `securityGroupID`.
    #[serde(rename = "securityGroupID", deserialize_with = "nullable")]
    pub security_group_id: String,
    /// `vSwitchID`.
    #[serde(rename = "vSwitchID", deserialize_with = "nullable")]
    pub v_switch_id: String,
    /// `privateIPAddress`.
    #[serde(rename = "privateIPAddress", deserialize_with = "nullable")]
    pub private_ip_address: String,
    /// `systemDisk`.
    #[serde(rename = "systemDisk")]
    pub system_disk: Option<SystemDiskSpec>,
    /// `dataDisks`.
    #[serde(rename = "dataDisks", deserialize_with = "nullable")]
    pub data_disks: Vec<DataDiskSpec>,
    /// `instanceChargeType` (`PostPaid`/`PrePaid`).
    #[serde(rename = "instanceChargeType", deserialize_with = "nullable")]
    pub instance_charge_type: String,
    /// `internetChargeType` (`PayByTraffic`/`PayByBandwidth`).
    #[serde(rename = "internetChargeType", deserialize_with = "nullable")]
    pub internet_charge_type: String,
    /// `internetMaxBandwidthIn` (Mbit/s).
    #[serde(
        rename = "internetMaxBandwidthIn",
        deserialize_with = "crate::provider::optional_whole"
    )]
    pub internet_max_bandwidth_in: Option<i64>,
    /// `internetMaxBandwidthOut` (Mbit/s).
    #[serde(
        rename = "internetMaxBandwidthOut",
        deserialize_with = "crate::provider::optional_whole"
    )]
    pub internet_max_bandwidth_out: Option<i64>,
    /// `spotStrategy` (`NoSpot`/`SpotWithPriceLimit`/`SpotAsPriceGo`).
    #[serde(rename = "spotStrategy", deserialize_with = "nullable")]
    pub spot_strategy: String,
    /// `IoOptimized` (`none`/`optimized`); the capital I is MCM's.
    #[serde(
        rename = "IoOptimized",
        alias = "ioOptimized",
        deserialize_with = "nullable"
    )]
    pub io_optimized: String,
    /// `tags`: must hold a `kubernetes.io/cluster/...` and a `kubernetes.io/role/...` key.
    pub tags: Option<BTreeMap<String, String>>,
    /// `keyPairName`.
    #[serde(rename = "keyPairName", deserialize_with = "nullable")]
    pub key_pair_name: String,
}

/// The spec's fields, as MCM names them ([`ProviderSpec`]).
const SPEC_FIELDS: &[&str] = &[
    "apiVersion",
    "imageID",
    "instanceType",
    "region",
    "zoneID",
    "securityGroupID",
    "vSwitchID",
    "privateIPAddress",
    "systemDisk",
    "dataDisks",
    "instanceChargeType",
    "internetChargeType",
    "internetMaxBandwidthIn",
    "internetMaxBandwidthOut",
    "spotStrategy",
    "IoOptimized",
    "ioOptimized",
    "tags",
    "keyPairName",
];
/// `systemDisk`'s fields ([`SystemDiskSpec`]).
const SYSTEM_DISK_FIELDS: &[&str] = &["category", "size"];
/// A data disk's fields ([`DataDiskSpec`]).
const DATA_DISK_FIELDS: &[&str] = &[
    "name",
    "category",
    "description",
    "encrypted",
    "deleteWithInstance",
    "size",
];
/// Fields MCM's classes carry that Berth does not read, accepted and ignored whatever they are
/// near: the in-tree `AlicloudMachineClass` spec's secret references, which a providerSpec
/// converted from one still holds (Berth takes the secret from the request, or the class's
/// `secretRef` beside the spec), and `kind`, which goes with `apiVersion`.
pub const KNOWN_UNREAD_FIELDS: &[&str] = &["secretRef", "credentialsSecretRef", "kind"];

/// Refuses a field that is a slip for one of the spec's (`instanceTyp`, `zoneId`, a disk's
/// `categroy`), naming the one meant. Other unknown fields stay accepted and ignored, as MCM's
/// decoder ignores them (a class written for a newer MCM still works), but a misspelt field
/// would leave its setting at ECS's default (or fail as "required" without saying why).
fn refuse_near_misses(raw: &serde_json::Value) -> Result<(), Status> {
    fn check(
        v: &mut Violations,
        object: &serde_json::Map<String, serde_json::Value>,
        at: &str,
        fields: &[&str],
    ) {
        for key in object.keys() {
            if fields.contains(&key.as_str()) || KNOWN_UNREAD_FIELDS.contains(&key.as_str()) {
                continue;
            }
            if let Some(meant) = names::near_miss(key, fields.iter().copied()) {
                v.add(
                    &format!("{at}{}", key.escape_debug()),
                    format!(
                        "is not a field of the Alicloud provider spec: did you mean {meant}? (fields far from every known one are ignored, as MCM ignores them)"
                    ),
                );
            }
        }
    }
    let Some(spec) = raw.as_object() else {
        return Ok(());
    };
    let mut v = Violations::default();
    check(&mut v, spec, &format!("{SPEC}."), SPEC_FIELDS);
    if let Some(disk) = spec.get("systemDisk").and_then(|d| d.as_object()) {
        check(
            &mut v,
            disk,
            &format!("{SPEC}.systemDisk."),
            SYSTEM_DISK_FIELDS,
        );
    }
    if let Some(disks) = spec.get("dataDisks").and_then(|d| d.as_array()) {
        for (i, disk) in disks.iter().enumerate() {
            if let Some(disk) = disk.as_object() {
                check(
                    &mut v,
                    disk,
                    &format!("{SPEC}.dataDisks[{i}]."),
                    DATA_DISK_FIELDS,
                );
            }
        }
    }
    v.into_result()
}

impl ProviderSpec {
    /// Decodes `providerSpec`; a decode error is an InvalidArgument naming the path that failed
    /// (MCM answers Internal here, which no retry can fix).
    pub fn decode(raw: &serde_json::Value) -> Result<Self, Status> {
        refuse_near_misses(raw)?;
        crate::provider::decode_spec(
            raw,
            SPEC,
            "the Alicloud provider spec (imageID, instanceType, region, ...)",
        )
    }

    /// The tags that scope lookups to this class's cluster (`kubernetes.io/cluster/...`).
    pub fn cluster_tags(&self) -> Vec<Tag> {
        self.tags_where(|k| k.contains(CLUSTER_TAG))
    }

    /// The tags ListMachines filters by: every cluster and role tag, as MCM's does.
    pub fn list_tags(&self) -> Vec<Tag> {
        self.tags_where(|k| k.contains(CLUSTER_TAG) || k.contains(ROLE_TAG))
    }

    fn tags_where(&self, keep: impl Fn(&str) -> bool) -> Vec<Tag> {
        self.tags
            .iter()
            .flatten()
            .filter(|(k, _)| keep(k))
            .map(|(k, v)| Tag::new(k, v))
            .collect()
    }

    /// RunInstances for `machine_name`, as MCM's request builder makes it, plus the machine and owner
    /// tags. The client token is left for the caller.
    pub fn run_instances(
        &self,
        machine_name: &str,
        owner: &Owner,
        namespace: &str,
        user_data: Option<Vec<u8>>,
    ) -> RunInstances {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        let mut tags: Vec<Tag> = self
            .tags
            .iter()
            .flatten()
            .map(|(k, v)| Tag::new(k, v))
            .collect();
        tags.push(Tag::new(MACHINE_TAG, machine_name));
        tags.push(Tag::new(OWNER_TAG, owner.tag_value()));
        tags.push(Tag::new(NAMESPACE_STAMP, namespace));
        RunInstances {
            image_id: self.image_id.clone(),
            instance_type: self.instance_type.clone(),
            zone_id: some(&self.zone_id),
            security_group_id: some(&self.security_group_id),
            v_switch_id: some(&self.v_switch_id),
            private_ip_address: some(&self.private_ip_address),
            instance_name: Some(machine_name.to_owned()),
            instance_charge_type: some(&self.instance_charge_type),
            internet_charge_type: some(&self.internet_charge_type),
            internet_max_bandwidth_in: self
                .internet_max_bandwidth_in
                .and_then(|n| u32::try_from(n).ok()),
            internet_max_bandwidth_out: self
                .internet_max_bandwidth_out
                .and_then(|n| u32::try_from(n).ok()),
            spot_strategy: some(&self.spot_strategy),
            io_optimized: some(&self.io_optimized),
            key_pair_name: some(&self.key_pair_name),
            system_disk: self.system_disk.as_ref().map(|d| SystemDisk {
                category: some(&d.category),
                size_gib: u32::try_from(d.size).ok().filter(|s| *s > 0),
                ..SystemDisk::default()
            }),
            data_disks: self
                .data_disks
                .iter()
                .map(|d| DataDisk {
                    category: some(&d.category),
                    size_gib: u32::try_from(d.size).ok(),
                    disk_name: Some(format!("{machine_name}-{}-data-disk", d.name)),
                    description: some(&d.description),
                    encrypted: Some(d.encrypted),
                    // ECS refuses DeleteWithInstance on ephemeral disks (MCM sends nil for them).
                    delete_with_instance: (d.category != EPHEMERAL_SSD)
                        .then(|| d.delete_with_instance.unwrap_or(true)),
                    snapshot_id: None,
                })
                .collect(),
            tags,
            user_data,
            ..RunInstances::default()
        }
    }
}

#[cfg(test)]
mod tests;
