//! The Alicloud provider spec (`MachineClass.providerSpec`), its validation, the secret's keys, and
//! how they become a RunInstances request.
//!
//! Field names are those of MCM's `pkg/alicloud/apis/alicloud_provider_spec.go` (docs/design.md,
//! “The Alicloud provider spec”), `IoOptimized` with its capital I included; unknown fields are
//! ignored, as Go's decoder does, except a slip for a known one (`instanceTyp`), which is refused
//! naming the field meant. The rules are the historical in-tree ones (MCM's deleted
//! `alicloudmachineclass.go`), with their messages, plus what ECS itself would refuse later (enums,
//! ranges, tag limits), so a bad class is an InvalidArgument naming the field instead of an ECS
//! error minutes later.
//!
//! Two caller values pick where the driver connects: `providerSpec.region` and the region part of
//! `machine.spec.providerID`. Both become a [`Region`] (ECS's region-id grammar) and must pass the
//! [`RegionPolicy`] before any client is made, so neither can point a request at another host.

use std::collections::{BTreeMap, BTreeSet};

use alicloud::{Credentials, DataDisk, Instance, Region, RunInstances, SystemDisk, Tag};
use domain::machine::{Machine, Secret};
use domain::{Code, Status, names};
use serde::{Deserialize, Deserializer};
use sha2::{Digest as _, Sha256};

use crate::provider::{NAMESPACE_STAMP, Violations};

/// Where the spec sits in a request body; every field error starts with it.
const SPEC: &str = "machineClass.providerSpec";

/// Tag keys containing this identify the cluster (`kubernetes.io/cluster/<name>`).
pub const CLUSTER_TAG: &str = "kubernetes.io/cluster/";
/// Tag keys containing this identify the role (`kubernetes.io/role/<role>/...`).
pub const ROLE_TAG: &str = "kubernetes.io/role/";
/// The tag Berth adds to every instance (and, through ECS, its disks and NICs): the machine's name.
/// Leftover disks and network interfaces are found by it after the instance is gone.
pub const MACHINE_TAG: &str = "berth.io/machine";
/// The tag Berth adds to every instance: the UID of the machine it was created for (empty for a
/// machine without one). It decides who a machine name's VM belongs to when creates race.
pub const OWNER_TAG: &str = "berth.io/machine-uid";
/// ECS allows 20 tags on a resource; three are [`MACHINE_TAG`], [`OWNER_TAG`] and
/// [`NAMESPACE_STAMP`].
const MAX_SPEC_TAGS: usize = 17;
/// The longest machine UID accepted: an ECS tag value's limit (Kubernetes UIDs have 36 characters).
const MAX_UID_LEN: usize = 128;
/// ECS's longest tag key and value, in characters.
const MAX_TAG_LEN: usize = 128;
/// The category of ECS's local (ephemeral) SSDs, which have their own size range.
const EPHEMERAL_SSD: &str = "DiskEphemeralSSD";
/// The largest ephemeral SSD ECS makes, in GiB.
const MAX_EPHEMERAL_SSD_GIB: i64 = 800;
/// ECS's largest `UserData`, base64-encoded.
const MAX_USER_DATA_BASE64: usize = 32 * 1024;

/// The Alicloud CSI disk driver whose `volumeHandle` is an ECS disk id.
pub const CSI_DISK_DRIVER: &str = "diskplugin.csi.alibabacloud.com";

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

/// The Alicloud spec's own rule shapes (MCM's messages), beside the shared ones.
impl Violations {
    fn required(&mut self, value: &str, field: &str, message: &str) {
        if value.trim().is_empty() {
            self.add(&format!("{SPEC}.{field}"), message);
        }
    }

    fn one_of(&mut self, value: &str, field: &str, allowed: &[&str]) {
        if !value.is_empty() && !allowed.contains(&value) {
            self.add(
                &format!("{SPEC}.{field}"),
                format!(
                    "Unsupported value: {}: supported values: {allowed:?}",
                    shown(value)
                ),
            );
        }
    }

    /// A free string's length bound, then its grammar; nothing for an empty one.
    fn grammar(&mut self, value: &str, field: &str, g: &Grammar) {
        if value.is_empty() {
            return;
        }
        let field = format!("{SPEC}.{field}");
        let length = value.chars().count();
        if length > g.max {
            self.add(
                &field,
                format!(
                    "is {length} characters long; the limit is {}: {}",
                    g.max, g.rule
                ),
            );
        } else if !(g.matches)(value) {
            self.add(&field, format!("must be {}", g.rule));
        }
    }

    fn range(&mut self, value: i64, field: &str, low: i64, high: i64) {
        if !(low..=high).contains(&value) {
            self.add(
                &format!("{SPEC}.{field}"),
                format!("Invalid value: {value}: must be between {low} and {high}, inclusive"),
            );
        }
    }
}

/// One of the spec's free strings as ECS bounds it: its longest length in characters and its
/// grammar (`matches`, mirrored by [`schema`]'s pattern `pattern`, held to it by the tests). An empty
/// value is left to the required-field rules.
struct Grammar {
    max: usize,
    pattern: &'static str,
    rule: &'static str,
    matches: fn(&str) -> bool,
}

/// Whether `s` is one or more of `ok`'s characters.
fn all_of(s: &str, ok: fn(u8) -> bool) -> bool {
    !s.is_empty() && s.bytes().all(ok)
}

/// Lower-case letters and digits, ECS's resource id alphabet.
fn id_char(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// A text ECS takes as a description or tag: no control characters, no `http://` or `https://`.
fn plain_text(s: &str) -> bool {
    !s.chars().any(char::is_control) && !s.contains("http://") && !s.contains("https://")
}

/// `imageID`: an image id (`m-bp1...`) or a public image's name (`ubuntu_22_04_x64_20G_alibase_20230515.vhd`).
const IMAGE_ID: Grammar = Grammar {
    max: 128,
    pattern: "^[A-Za-z0-9][A-Za-z0-9._-]*$",
    rule: "an ECS image id: at most 128 letters, digits, '.', '_' or '-', starting with a letter or digit",
    matches: |s| {
        s.as_bytes()[0].is_ascii_alphanumeric()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    },
};
/// `instanceType`: `ecs.` and dot-separated words (`ecs.g6.large`).
const INSTANCE_TYPE: Grammar = Grammar {
    max: 64,
    pattern: "^ecs(\\.[a-z0-9-]+)+$",
    rule: "an ECS instance type such as ecs.g6.large: at most 64 characters, 'ecs' and dot-separated words of lower-case letters, digits and '-'",
    matches: |s| {
        s.strip_prefix("ecs.").is_some_and(|rest| {
            rest.split('.')
                .all(|w| all_of(w, |b| id_char(b) || b == b'-'))
        })
    },
};
/// `zoneID`: `cn-shanghai-b`, `ap-southeast-1a`.
const ZONE_ID: Grammar = Grammar {
    max: 64,
    pattern: "^[a-z][a-z0-9-]*[a-z0-9]$",
    rule: "an ECS zone id such as cn-shanghai-b: at most 64 lower-case letters, digits and '-', starting with a letter and not ending with '-'",
    matches: |s| {
        s.len() >= 2
            && s.as_bytes()[0].is_ascii_lowercase()
            && !s.ends_with('-')
            && s.bytes().all(|b| id_char(b) || b == b'-')
    },
};
/// `securityGroupID`: `sg-` and the id.
const SECURITY_GROUP_ID: Grammar = Grammar {
    max: 64,
    pattern: "^sg-[a-z0-9]+$",
    rule: "an ECS security group id: 'sg-' and lower-case letters and digits, at most 64 characters",
    matches: |s| s.strip_prefix("sg-").is_some_and(|r| all_of(r, id_char)),
};
/// `vSwitchID`: `vsw-` and the id.
const V_SWITCH_ID: Grammar = Grammar {
    max: 64,
    pattern: "^vsw-[a-z0-9]+$",
    rule: "an ECS vSwitch id: 'vsw-' and lower-case letters and digits, at most 64 characters",
    matches: |s| s.strip_prefix("vsw-").is_some_and(|r| all_of(r, id_char)),
};
/// `keyPairName`: ECS's key pair names, 2 to 128 characters (the Latin ones).
const KEY_PAIR_NAME: Grammar = Grammar {
    max: 128,
    pattern: "^[A-Za-z][A-Za-z0-9:_-]+$",
    rule: "an ECS key pair name: 2 to 128 characters, a letter and then letters, digits, ':', '_' or '-'",
    matches: |s| {
        s.len() >= 2
            && s.as_bytes()[0].is_ascii_alphabetic()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'_' | b'-'))
    },
};
/// `privateIPAddress`: a dotted IPv4 address.
const PRIVATE_IP: Grammar = Grammar {
    max: 15,
    pattern: "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$",
    rule: "an IPv4 address in dotted form (such as 192.168.0.10)",
    matches: |s| {
        s.parse::<std::net::Ipv4Addr>().is_ok()
            && s.split('.').all(|p| p == "0" || !p.starts_with('0'))
    },
};
/// A disk `category`: `cloud_efficiency`, `cloud_essd`, `DiskEphemeralSSD`, ...
const DISK_CATEGORY: Grammar = Grammar {
    max: 64,
    pattern: "^[A-Za-z][A-Za-z0-9_]*$",
    rule: "an ECS disk category such as cloud_essd: at most 64 letters, digits and '_', starting with a letter",
    matches: |s| {
        s.as_bytes()[0].is_ascii_alphabetic()
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    },
};
/// `apiVersion` (informational): `group/version`.
const API_VERSION: Grammar = Grammar {
    max: 253,
    pattern: "^[A-Za-z0-9./-]+$",
    rule: "an API version such as mcm.gardener.cloud/v1alpha1: at most 253 letters, digits, '.', '/' and '-'",
    matches: |s| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'/' | b'-'))
    },
};
/// A data disk's `description`: ECS's 256 characters of text.
const DISK_DESCRIPTION: Grammar = Grammar {
    max: 256,
    pattern: "^[^\\x00-\\x1f\\x7f-\\x9f]*$",
    rule: "at most 256 characters of text: no control characters, no http:// or https://",
    matches: plain_text,
};

/// How a value that broke a rule is named in a message: itself when short and printable, else
/// its length only (a 100,000-character value is never echoed).
fn shown(value: &str) -> String {
    if value.chars().count() <= 64 && !value.chars().any(char::is_control) {
        format!("{value:?}")
    } else {
        format!("a value of {} characters", value.chars().count())
    }
}

/// Whether a data disk name matches MCM's `^[a-zA-Z][a-zA-Z0-9\.\-_:]+$`.
fn disk_name_matches(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.len() >= 2
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))
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

    /// The checks every method needs: a region this driver may talk to and the cluster and role tags
    /// that scope what this class may see and touch. Returns the region.
    pub fn validate_scope(&self, regions: &RegionPolicy) -> Result<Region, Status> {
        let mut v = Violations::default();
        let region = self.check_scope(&mut v, regions);
        v.into_result()?;
        region.ok_or_else(|| Status::invalid(&format!("{SPEC}.region"), "Region is required"))
    }

    /// Every rule, for CreateMachine. Returns the region.
    pub fn validate_for_create(&self, regions: &RegionPolicy) -> Result<Region, Status> {
        let mut v = Violations::default();
        v.required(&self.image_id, "imageID", "ImageID is required");
        let region = self.check_scope(&mut v, regions);
        v.required(&self.zone_id, "zoneID", "ZoneID is required");
        v.required(
            &self.instance_type,
            "instanceType",
            "InstanceType is required",
        );
        v.required(&self.v_switch_id, "vSwitchID", "VSwitchID is required");
        v.required(
            &self.key_pair_name,
            "keyPairName",
            "KeyPairName is required",
        );
        v.one_of(
            &self.instance_charge_type,
            "instanceChargeType",
            &["PostPaid", "PrePaid"],
        );
        v.one_of(
            &self.internet_charge_type,
            "internetChargeType",
            &["PayByTraffic", "PayByBandwidth"],
        );
        v.one_of(
            &self.spot_strategy,
            "spotStrategy",
            &["NoSpot", "SpotWithPriceLimit", "SpotAsPriceGo"],
        );
        v.one_of(&self.io_optimized, "IoOptimized", &["none", "optimized"]);
        if let Some(n) = self.internet_max_bandwidth_in {
            v.range(n, "internetMaxBandwidthIn", 0, 200);
        }
        if let Some(n) = self.internet_max_bandwidth_out {
            v.range(n, "internetMaxBandwidthOut", 0, 100);
        }
        if let Some(d) = &self.system_disk
            && d.size != 0
        {
            v.range(d.size, "systemDisk.size", 20, 2048);
        }
        self.check_strings(&mut v);
        self.check_data_disks(&mut v);
        self.check_tag_limits(&mut v);
        v.into_result()?;
        region.ok_or_else(|| Status::invalid(&format!("{SPEC}.region"), "Region is required"))
    }

    /// The region and tag rules; the region when it passes.
    fn check_scope(&self, v: &mut Violations, regions: &RegionPolicy) -> Option<Region> {
        let region = if self.region.is_empty() {
            v.add(&format!("{SPEC}.region"), "Region is required");
            None
        } else {
            match regions.admit(&self.region) {
                Ok(r) => Some(r),
                Err(rule) if rule.is_the_operators() => {
                    v.not_allowed(&format!("{SPEC}.region"), rule);
                    None
                }
                Err(rule) => {
                    v.add(&format!("{SPEC}.region"), rule);
                    None
                }
            }
        };
        match &self.tags {
            None => v.add(
                &format!("{SPEC}.tags"),
                "Tags required for Alicloud machines",
            ),
            Some(tags) if tags.is_empty() => v.add(
                &format!("{SPEC}.tags"),
                "Tags required for Alicloud machines",
            ),
            Some(tags) => {
                if !tags.keys().any(|k| k.contains(CLUSTER_TAG)) {
                    v.add(
                        &format!("{SPEC}.tags"),
                        "Tag required of the form kubernetes.io/cluster/****",
                    );
                }
                if !tags.keys().any(|k| k.contains(ROLE_TAG)) {
                    v.add(
                        &format!("{SPEC}.tags"),
                        "Tag required of the form kubernetes.io/role/****",
                    );
                }
            }
        }
        region
    }

    /// Every free string of the spec against its bound and grammar ([`Grammar`]): a value ECS would
    /// refuse, or one no instance type, id or name could be, is a 400 naming the field and the rule,
    /// never a RunInstances call.
    fn check_strings(&self, v: &mut Violations) {
        v.grammar(&self.api_version, "apiVersion", &API_VERSION);
        for (value, field, g) in [
            (&self.image_id, "imageID", &IMAGE_ID),
            (&self.instance_type, "instanceType", &INSTANCE_TYPE),
            (&self.zone_id, "zoneID", &ZONE_ID),
            (&self.v_switch_id, "vSwitchID", &V_SWITCH_ID),
            (&self.key_pair_name, "keyPairName", &KEY_PAIR_NAME),
        ] {
            // Blank ones are refused as required already.
            if !value.trim().is_empty() {
                v.grammar(value, field, g);
            }
        }
        v.grammar(
            &self.security_group_id,
            "securityGroupID",
            &SECURITY_GROUP_ID,
        );
        v.grammar(&self.private_ip_address, "privateIPAddress", &PRIVATE_IP);
        if let Some(d) = &self.system_disk {
            v.grammar(&d.category, "systemDisk.category", &DISK_CATEGORY);
        }
    }

    fn check_data_disks(&self, v: &mut Violations) {
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, d) in self.data_disks.iter().enumerate() {
            let field = format!("{SPEC}.dataDisks[{i}]");
            if d.name.is_empty() {
                v.add(&format!("{field}.name"), "Data Disk name is required");
            } else {
                if !disk_name_matches(&d.name) {
                    v.add(
                        &format!("{field}.name"),
                        format!(
                            "Disk name given: {} does not match the expected pattern (regex used for validation is '^[a-zA-Z][a-zA-Z0-9\\.\\-_:]+$')",
                            if d.name.chars().count() <= 64 { d.name.clone() } else { shown(&d.name) }
                        ),
                    );
                }
                if d.name.len() > 64 {
                    v.add(
                        &format!("{field}.name"),
                        "Data Disk Name length must be between 1 and 64",
                    );
                }
                *seen.entry(d.name.as_str()).or_default() += 1;
            }
            // ECS's own ranges, so a class is refused here, naming the field, rather than by
            // RunInstances: 20 GiB to 32 TiB, and at most 800 GiB for a local SSD.
            let high = if d.category == EPHEMERAL_SSD {
                MAX_EPHEMERAL_SSD_GIB
            } else {
                32768
            };
            v.range(d.size, &format!("dataDisks[{i}].size"), 20, high);
            if d.category.is_empty() {
                v.add(
                    &format!("{field}.category"),
                    "Data Disk category is required",
                );
            }
            v.grammar(
                &d.category,
                &format!("dataDisks[{i}].category"),
                &DISK_CATEGORY,
            );
            v.grammar(
                &d.description,
                &format!("dataDisks[{i}].description"),
                &DISK_DESCRIPTION,
            );
        }
        for (name, n) in seen {
            if n > 1 {
                v.add(
                    &format!("{SPEC}.dataDisks"),
                    format!("Data Disk Name '{name}' duplicated {n} times, Name must be unique"),
                );
            }
        }
        if self.data_disks.len() > 16 {
            v.add(
                &format!("{SPEC}.dataDisks"),
                "ECS allows at most 16 data disks",
            );
        }
    }

    fn check_tag_limits(&self, v: &mut Violations) {
        let Some(tags) = &self.tags else { return };
        if tags.len() > MAX_SPEC_TAGS {
            v.add(
                &format!("{SPEC}.tags"),
                format!(
                    "has {} tags; at most {MAX_SPEC_TAGS} are allowed (ECS takes 20 and Berth adds {MACHINE_TAG}, {OWNER_TAG} and {NAMESPACE_STAMP})",
                    tags.len()
                ),
            );
        }
        // ECS counts a tag's key and value in characters, not bytes.
        for (k, value) in tags {
            // The key names the field; one that breaks the rules is named by its length only.
            let field = if k.chars().count() <= MAX_TAG_LEN && plain_text(k) {
                format!("{SPEC}.tags[{k}]")
            } else {
                format!("{SPEC}.tags[<a key of {} characters>]", k.chars().count())
            };
            if k.is_empty() || k.chars().count() > MAX_TAG_LEN {
                v.add(&field, "a tag key must be 1 to 128 characters");
            }
            if k.starts_with("aliyun") || k.starts_with("acs:") {
                v.add(&field, "tag keys may not start with 'aliyun' or 'acs:'");
            }
            if k == MACHINE_TAG {
                v.add(&field, "is set by the driver to the machine's name");
            }
            if k == OWNER_TAG {
                v.add(&field, "is set by the driver to the machine's UID");
            }
            if k == NAMESPACE_STAMP {
                v.add(&field, "is set by the driver to the machine's namespace");
            }
            if value.chars().count() > MAX_TAG_LEN {
                v.add(&field, "a tag value must be at most 128 characters");
            }
            if !plain_text(k) || !plain_text(value) {
                v.add(
                    &field,
                    "a tag key or value may hold no control characters, http:// or https://",
                );
            }
            if value.starts_with("aliyun") || value.starts_with("acs:") {
                v.add(&field, "tag values may not start with 'aliyun' or 'acs:'");
            }
        }
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

/// What every call checks first, before any ECS call: the machine's name ([`machine_name`]) and
/// owner ([`Owner::of`]).
pub fn name_and_owner(machine: &Machine, for_create: bool) -> Result<(String, Owner), Status> {
    Ok((machine_name(machine, for_create)?, Owner::of(machine)?))
}

/// The longest name CreateMachine takes: an ECS instance name is 2 to 128 characters.
const MAX_CREATE_NAME_LEN: usize = 128;

/// The machine's name, which is the ECS `InstanceName` and the lookup key: a DNS-1123 subdomain
/// (so never an ECS wildcard `*`) of dot-separated parts of at most 63 characters, at most 253
/// characters, and for CreateMachine 2 to 128 characters as ECS requires. The message states the
/// rule that failed: the 128 for CreateMachine, else the subdomain's (a part's 63, the 253).
pub fn machine_name(machine: &Machine, for_create: bool) -> Result<String, Status> {
    let name = machine.metadata.name.as_str();
    let field = "machine.metadata.name";
    let ecs_length = || {
        Status::invalid(
            field,
            format!(
                "{:?} is {} characters long; ECS instance names are 2 to {MAX_CREATE_NAME_LEN} characters",
                name.chars().take(80).collect::<String>(),
                name.len()
            ),
        )
    };
    if for_create && name.len() > MAX_CREATE_NAME_LEN {
        return Err(ecs_length());
    }
    names::validate_dns1123_subdomain(field, name, names::MAX_SUBDOMAIN_LEN)?;
    if for_create && name.len() < 2 {
        return Err(ecs_length());
    }
    Ok(name.to_owned())
}

/// The first non-empty value of `keys` in the secret, trimmed.
fn first_key(secret: &Secret, keys: &[&str]) -> Result<Option<String>, Status> {
    Ok(first_key_named(secret, keys)?.map(|(_, v)| v))
}

/// The first of `keys` the secret has a non-empty value for, with that key.
fn first_key_named<'k>(
    secret: &Secret,
    keys: &[&'k str],
) -> Result<Option<(&'k str, String)>, Status> {
    for key in keys {
        if let Some(v) = secret.get_str(key)?
            && !v.is_empty()
        {
            return Ok(Some((key, v)));
        }
    }
    Ok(None)
}

/// The access key id Berth's examples (`examples/machine.yaml`, `examples/machine-request.json`)
/// ship in place of a real one.
pub const EXAMPLE_KEY_ID_PLACEHOLDER: &str = "EMULATOR_ACCESS_KEY_ID";
/// The access key secret Berth's examples ship in place of a real one (public text, not a secret).
pub const EXAMPLE_KEY_SECRET_PLACEHOLDER: &str = "EMULATOR_ACCESS_KEY_SECRET";

/// An InvalidArgument when the secret still holds the examples' placeholders: signing with them
/// can only earn ECS's `InvalidAccessKeyId.NotFound`, which reads like a Berth login problem, so the
/// driver says what is wrong and how to fix it without calling ECS. Only the placeholder itself is
/// ever named, never a value the caller chose.
fn refuse_placeholders(id: (&str, &str), key_secret: (&str, &str)) -> Result<(), Status> {
    let stale: Vec<String> = [
        (id, EXAMPLE_KEY_ID_PLACEHOLDER),
        (key_secret, EXAMPLE_KEY_SECRET_PLACEHOLDER),
    ]
    .into_iter()
    .filter(|((_, value), placeholder)| value == placeholder)
    .map(|((key, _), placeholder)| {
        format!("secret.data[{key}] still holds the example's placeholder {placeholder}")
    })
    .collect();
    if stale.is_empty() {
        return Ok(());
    }
    Err(Status::new(
        Code::InvalidArgument,
        format!(
            "{}: replace {} with the access key of the ECS endpoint the driver calls: under `berth up`, the emulator's key id and secret that `berth up` prints when it starts; on Alibaba Cloud, an AccessKey of your account",
            stale.join(", and "),
            if stale.len() > 1 { "them" } else { "it" }
        ),
    ))
}

/// The access key from the secret: `alicloudAccessKeyID` (else `accessKeyID`) and
/// `alicloudAccessKeySecret` (else `accessKeySecret`), plus an optional STS token
/// (`alicloudSecurityToken`, else `securityToken`). A missing key, or one still holding the
/// examples' placeholder, is an InvalidArgument naming the key; no message ever carries a value
/// the caller chose.
pub fn credentials(secret: &Secret) -> Result<Credentials, Status> {
    let missing = |key: &str, fallback: &str| {
        Status::invalid(
            &format!("secret.data[{key}]"),
            format!("is required (or its fallback {fallback})"),
        )
    };
    let (id_key, id) = first_key_named(secret, &["alicloudAccessKeyID", "accessKeyID"])?
        .ok_or_else(|| missing("alicloudAccessKeyID", "accessKeyID"))?;
    let (secret_key, key_secret) =
        first_key_named(secret, &["alicloudAccessKeySecret", "accessKeySecret"])?
            .ok_or_else(|| missing("alicloudAccessKeySecret", "accessKeySecret"))?;
    refuse_placeholders((id_key, &id), (secret_key, &key_secret))?;
    // Both token keys of `data` hold base64 of ASCII text, whichever of them (or of stringData's)
    // is used: the document says so of each, and a request is refused for what it sends, not only
    // for what this call happens to read.
    for key in ["alicloudSecurityToken", "securityToken"] {
        if secret.get_data(key)?.is_some_and(|token| !token.is_ascii()) {
            return Err(Status::invalid(
                &format!("secret.data[{key}]"),
                "must be base64 of ASCII text (an STS token)",
            ));
        }
    }
    let credentials = Credentials::new(id, key_secret);
    Ok(
        match first_key(secret, &["alicloudSecurityToken", "securityToken"])? {
            Some(token) => credentials.with_security_token(token),
            None => credentials,
        },
    )
}

/// `userData`, raw (the ECS client base64-encodes it), if the secret has it. Too large for ECS is an
/// InvalidArgument that gives sizes only.
pub fn user_data(secret: &Secret) -> Result<Option<Vec<u8>>, Status> {
    let Some(data) = secret.get("userData")? else {
        return Ok(None);
    };
    let encoded = data.len().div_ceil(3) * 4;
    if encoded > MAX_USER_DATA_BASE64 {
        return Err(Status::invalid(
            "secret.data[userData]",
            format!(
                "is {} bytes, {encoded} base64-encoded; ECS accepts at most {MAX_USER_DATA_BASE64} encoded bytes",
                data.len()
            ),
        ));
    }
    Ok((!data.is_empty()).then_some(data))
}

/// `<region>.<instanceId>`, the Alibaba cloud-controller-manager's provider id.
pub fn provider_id(region: &str, instance_id: &str) -> String {
    format!("{region}.{instance_id}")
}

/// Whether `id` looks like an ECS instance id: `i-` and lower-case letters and digits.
fn is_instance_id(id: &str) -> bool {
    id.len() <= 64
        && id.strip_prefix("i-").is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

/// Splits a provider id into (region, instance id) as MCM does (the id follows the last `.`), and
/// checks both parts: the region is a [`Region`] the policy admits (it picks the endpoint the
/// instance is looked up at), the id an ECS instance id. A bare instance id means the class's
/// region. Errors name the field, never repeat the value.
pub fn decode_provider_id<'p>(
    provider_id: &'p str,
    regions: &RegionPolicy,
) -> Result<(Option<Region>, &'p str), Status> {
    const FIELD: &str = "machine.spec.providerID";
    let malformed = || {
        Status::invalid(
            FIELD,
            "is not of the form <region>.<instanceId> (an ECS region id, a dot, and an instance id such as i-bp67acfmxazb4p)",
        )
    };
    let (region, id) = match provider_id.rsplit_once('.') {
        Some((region, id)) => (Some(region), id),
        None => (None, provider_id),
    };
    if !is_instance_id(id) {
        return Err(malformed());
    }
    let region = match region {
        None => None,
        Some(r) => Some(regions.admit(r).map_err(|rule| match Region::parse(r) {
            // A well-formed region the policy refuses: say so (the value is safe to name).
            Ok(_) if rule.is_the_operators() => Status::new(
                Code::FailedPrecondition,
                format!("{FIELD}: names region {r:?}, which {rule}"),
            ),
            Ok(_) => Status::invalid(FIELD, format!("names region {r:?}, which {rule}")),
            Err(_) => malformed(),
        })?),
    };
    Ok((region, id))
}

/// Which regions the driver may call: ECS's grammar always; then the operator's allow-list when
/// there is one (`BERTH_ALICLOUD_REGIONS`), else, when calls go to the regional endpoints, the
/// regions ECS is known to serve. With an endpoint override (an emulator) any well-formed region
/// goes, since the region then picks no host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegionPolicy {
    /// The operator's allow-list; empty means none.
    pub allowed: BTreeSet<Region>,
    /// Whether a region must be one ECS is known to serve (no endpoint override).
    pub known_only: bool,
}

/// The rule a region broke ([`RegionPolicy::admit`]); its text completes a sentence that starts
/// with the field, and never holds the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegionRefusal {
    /// Not a region id at all.
    #[error(transparent)]
    Malformed(#[from] ::alicloud::RegionError),
    /// Not on the operator's allow-list; `known`: a region ECS serves.
    #[error("is not a region this driver is allowed to use (the operator's allow-list)")]
    NotAllowed {
        /// Whether ECS is known to serve it.
        known: bool,
    },
    /// Not a region ECS is known to serve, and no allow-list names it.
    #[error(
        "is not a region this driver knows an ECS endpoint for (an operator can allow it with the driver's region allow-list, BERTH_ALICLOUD_REGIONS)"
    )]
    NotKnown,
}

impl RegionRefusal {
    /// Whether only this driver's set-up refuses the region (a precondition of where the request
    /// was sent, 412): every well-formed region is, since what a driver admits depends on its
    /// settings (an allow-list, an endpoint override such as `berth up`'s emulator, which takes any).
    /// Only a malformed one is the request's own mistake (400), as the document's grammar says.
    pub fn is_the_operators(&self) -> bool {
        !matches!(self, RegionRefusal::Malformed(_))
    }
}

impl RegionPolicy {
    /// Parses `value` and checks it against the policy; the error is the rule that failed, without
    /// the value.
    pub fn admit(&self, value: &str) -> Result<Region, RegionRefusal> {
        let region = Region::parse(value)?;
        if !self.allowed.is_empty() {
            if !self.allowed.contains(&region) {
                return Err(RegionRefusal::NotAllowed {
                    known: region.is_known(),
                });
            }
        } else if self.known_only && !region.is_known() {
            return Err(RegionRefusal::NotKnown);
        }
        Ok(region)
    }
}

/// Who a VM is made for: the machine's UID, or a machine without one. Recorded on the instance as
/// [`OWNER_TAG`] (the UID, or an empty value), so every driver replica can tell whose a VM is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner(String);

impl Owner {
    /// The owner a request speaks for. A UID is at most 128 characters (an ECS tag value) of ASCII
    /// letters, digits, `-`, `_` and `.`, as Kubernetes UIDs (UUIDs) are.
    pub fn of(machine: &Machine) -> Result<Owner, Status> {
        let uid = machine.metadata.uid.as_str();
        let ok = uid.len() <= MAX_UID_LEN
            && uid
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && !uid.starts_with("aliyun");
        if !ok {
            return Err(Status::invalid(
                "machine.metadata.uid",
                format!(
                    "must be at most {MAX_UID_LEN} ASCII letters, digits, '-', '_' or '.' (a Kubernetes UID)"
                ),
            ));
        }
        Ok(Owner(uid.to_owned()))
    }

    /// Whom an instance was made for; `None` for an instance without the owner tag (made outside
    /// Berth, or before Berth recorded owners).
    pub fn of_instance(instance: &Instance) -> Option<Owner> {
        instance.tag(OWNER_TAG).map(|v| Owner(v.to_owned()))
    }

    /// The value of [`OWNER_TAG`].
    pub fn tag_value(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            f.write_str("a machine without a UID")
        } else {
            write!(f, "machine UID {:?}", self.0)
        }
    }
}

/// The node name of an instance: its default ECS host name, lower-cased (`i-abc` → `izabcz`).
pub fn node_name(instance_id: &str) -> String {
    format!("{}z", instance_id.replacen('-', "z", 1))
}

/// Token `n` of a machine's RunInstances `ClientToken` series: a SHA-256 (64 hex characters, ECS's
/// limit) of its UID, or of namespace/name when it has none, and `n`. Every attempt of CreateMachine
/// for the machine walks the series from 0, so its retries send the same tokens in the same order
/// and ECS never makes a second VM for one token. The walk moves past token `n` only when ECS
/// answers it with an instance that no longer exists: the machine's VM was released and the
/// machine (the same UID, as the examples reuse one) is being created again. Token 0 is the token
/// Berth has always sent, so VMs made before the series existed are still found by it.
pub fn client_token(machine: &Machine, n: u32) -> String {
    let m = &machine.metadata;
    let key = if m.uid.is_empty() {
        format!("name:{}/{}", m.namespace, m.name)
    } else {
        format!("uid:{}", m.uid)
    };
    let mut h = Sha256::new();
    h.update(b"berth/alicloud/RunInstances/v1\n");
    h.update(key.as_bytes());
    if n > 0 {
        h.update(format!("\n#{n}").as_bytes());
    }
    hex::encode(h.finalize())
}

/// The CSI drivers whose `volumeHandle` is an ECS disk id: the Alicloud disk plugin plus `extra`.
pub fn csi_drivers(extra: &[String]) -> BTreeSet<String> {
    std::iter::once(CSI_DISK_DRIVER.to_owned())
        .chain(extra.iter().cloned())
        .collect()
}

/// The document's description of what the Alicloud provider accepts: the rules above as JSON Schema,
/// so a request a generator makes from the document is one the driver takes (tests below hold each
/// pattern to its validator). Every call decodes the whole spec, so every field's type holds for
/// every call; the region and tag rules ([`ProviderSpec::validate_scope`]) hold for every call that
/// takes a class; the rest ([`ProviderSpec::validate_for_create`], user data) for CreateMachine only,
/// so a machine whose class changed since can still be looked at and deleted.
pub mod schema {
    use serde_json::{Value, json};

    use super::{
        API_VERSION, CLUSTER_TAG, DISK_CATEGORY, DISK_DESCRIPTION, EPHEMERAL_SSD, Grammar,
        IMAGE_ID, INSTANCE_TYPE, KEY_PAIR_NAME, MACHINE_TAG, MAX_EPHEMERAL_SSD_GIB, MAX_SPEC_TAGS,
        MAX_TAG_LEN, MAX_UID_LEN, MAX_USER_DATA_BASE64, NAMESPACE_STAMP, OWNER_TAG, PRIVATE_IP,
        ROLE_TAG, SECURITY_GROUP_ID, V_SWITCH_ID, ZONE_ID,
    };

    /// A UID ([`super::Owner::of`]): ASCII letters, digits, `-`, `_` and `.`; and not starting with
    /// `aliyun` ([`UID_RESERVED`]), which ECS keeps for itself in tag values.
    pub const UID: &str = "^[A-Za-z0-9._-]*$";
    /// The UID prefix ECS reserves.
    pub const UID_RESERVED: &str = "^aliyun";
    /// An ECS instance id ([`super::decode_provider_id`]): `i-` and lower-case letters and digits, 64
    /// characters at most.
    pub const INSTANCE_ID: &str = "i-[a-z0-9]{1,62}";
    /// A data disk's name ([`super::disk_name_matches`]), at most 64 characters.
    pub const DISK_NAME: &str = "^[a-zA-Z][a-zA-Z0-9.\\-_:]+$";
    /// Some character other than white space: a required field that `trim()` leaves non-empty.
    pub const NOT_BLANK: &str = "\\S";
    /// Standard base64 as the driver decodes it: padded, and the last character's unused bits zero.
    pub const BASE64: &str =
        "^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$";
    /// Base64 of ASCII bytes only (so of UTF-8 text, which the driver requires of a key it reads as
    /// text): each group's characters are those an ASCII byte (top bit clear) can produce.
    pub const BASE64_ASCII: &str = "^([A-Za-f][A-HQ-Xg-nw-z0-3][ABEFIJMNQRUVYZcdghklopstwx014589][A-Za-z0-9+/])*([A-Za-f][AQgw]==|[A-Za-f][A-HQ-Xg-nw-z0-3][AEIMQUYcgkosw048]=)?$";

    /// A regular expression matching `text` literally.
    fn literal(text: &str) -> String {
        text.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | ':') {
                    c.to_string()
                } else {
                    format!("\\{c}")
                }
            })
            .collect()
    }

    /// An object with some key containing `part` (`not every key lacks it`).
    fn some_key_contains(part: &str) -> Value {
        json!({"not": {"propertyNames": {"not": {"pattern": literal(part)}}}})
    }

    /// ECS's region-id grammar ([`alicloud::Region::parse`]): two to six words of lower-case letters
    /// and digits joined by single hyphens, the first letters only (at most 50 characters).
    pub const REGION: &str = "[a-z]+(-[a-z0-9]+){1,5}";

    /// The regions a class may name: [`alicloud::endpoint::known_regions`], what a driver calling the
    /// regional endpoints admits (with `BERTH_ALICLOUD_REGIONS` set, the operator's list decides).
    pub fn regions() -> Vec<&'static str> {
        ::alicloud::endpoint::known_regions()
    }

    /// `machine.spec.providerID`: empty, or an instance id, or `<region>.<instance id>`.
    pub fn provider_id_pattern() -> String {
        format!("^(|({REGION}\\.)?{INSTANCE_ID})$")
    }

    fn nullable(kind: &str) -> Value {
        json!({"type": [kind, "null"]})
    }

    /// A required free string: its grammar and bound.
    fn required(g: &Grammar) -> Value {
        json!({"type": "string", "pattern": g.pattern, "maxLength": g.max, "description": format!("Must be {}", g.rule)})
    }

    /// An optional free string (empty or null for none): its grammar and bound.
    fn optional(g: &Grammar) -> Value {
        json!({"type": ["string", "null"], "pattern": format!("^$|{}", g.pattern), "maxLength": g.max, "description": format!("Empty, or {}", g.rule)})
    }

    /// Text ECS takes in a tag or a description: no control characters ([`super::plain_text`]).
    pub const PLAIN_TEXT: &str = "^[^\\x00-\\x1f\\x7f-\\x9f]*$";
    /// What such text may not contain.
    pub const NO_URL: &str = "https?://";

    fn integer(min: i64, max: i64) -> Value {
        json!({"type": ["integer", "null"], "minimum": min, "maximum": max})
    }

    fn one_of_or_unset(values: &[&str]) -> Value {
        let mut all: Vec<Value> = vec![json!(""), Value::Null];
        all.extend(values.iter().map(|v| json!(v)));
        json!({"type": ["string", "null"], "enum": all})
    }

    /// `machineClass.providerSpec`.
    pub fn provider_spec(for_create: bool) -> Value {
        let text = || nullable("string");
        let any_i64 = || integer(i64::MIN, i64::MAX);
        let tags = if for_create {
            json!({
                "type": "object",
                "description": "Must hold a key containing kubernetes.io/cluster/ and one containing kubernetes.io/role/: they scope what the class may see and touch. At most 17 (ECS takes 20 and Berth adds three), each key 1 to 128 characters, not starting with aliyun or acs: and not one of Berth's own, each value at most 128 characters.",
                "maxProperties": MAX_SPEC_TAGS,
                "propertyNames": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_TAG_LEN,
                    "allOf": [
                        {"not": {"pattern": "^aliyun"}},
                        {"not": {"pattern": "^acs:"}},
                        {"not": {"enum": [MACHINE_TAG, OWNER_TAG, NAMESPACE_STAMP]}},
                        {"not": {"pattern": NO_URL}},
                        {"pattern": PLAIN_TEXT}
                    ]
                },
                "additionalProperties": {
                    "type": "string",
                    "maxLength": MAX_TAG_LEN,
                    "pattern": PLAIN_TEXT,
                    "allOf": [
                        {"not": {"pattern": "^aliyun"}},
                        {"not": {"pattern": "^acs:"}},
                        {"not": {"pattern": NO_URL}}
                    ]
                },
                "allOf": [some_key_contains(CLUSTER_TAG), some_key_contains(ROLE_TAG)]
            })
        } else {
            json!({
                "type": "object",
                "description": "Must hold a key containing kubernetes.io/cluster/ and one containing kubernetes.io/role/: they scope what the class may see and touch.",
                "additionalProperties": {"type": "string"},
                "allOf": [some_key_contains(CLUSTER_TAG), some_key_contains(ROLE_TAG)]
            })
        };
        let disk = if for_create {
            json!({
                "type": "object",
                "required": ["name", "category", "size"],
                "properties": {
                    "name": {"type": "string", "pattern": DISK_NAME, "maxLength": 64},
                    "category": required(&DISK_CATEGORY),
                    "description": {
                        "type": ["string", "null"],
                        "maxLength": DISK_DESCRIPTION.max,
                        "pattern": DISK_DESCRIPTION.pattern,
                        "not": {"pattern": NO_URL},
                        "description": format!("Empty, or {}", DISK_DESCRIPTION.rule)
                    },
                    "encrypted": nullable("boolean"),
                    "deleteWithInstance": nullable("boolean"),
                    "size": {"type": "integer", "minimum": 20, "maximum": 32768}
                },
                "if": {"properties": {"category": {"const": EPHEMERAL_SSD}}, "required": ["category"]},
                "then": {"properties": {"size": {"maximum": MAX_EPHEMERAL_SSD_GIB}}}
            })
        } else {
            json!({
                "type": "object",
                "properties": {
                    "name": text(),
                    "category": text(),
                    "description": text(),
                    "encrypted": nullable("boolean"),
                    "deleteWithInstance": nullable("boolean"),
                    "size": any_i64()
                }
            })
        };
        let mut spec = json!({
            "type": "object",
            "description": "MCM's Alicloud provider spec. A field that is a slip for a known one (at most two edits, `instanceTyp`) is refused naming the one meant; other fields Berth does not know are ignored, as MCM's decoder ignores them (`secretRef`, `credentialsSecretRef` and `kind`, which MCM's classes may carry, among them).",
            "required": ["region", "tags"],
            "properties": {
                "apiVersion": text(),
                "imageID": text(),
                "instanceType": text(),
                "region": {
                    "type": "string",
                    "pattern": format!("^{REGION}$"),
                    "maxLength": 50,
                    "examples": regions(),
                    "description": "An ECS region id. A driver calling ECS's own endpoints takes the regions ECS is known to serve (the examples) and those its operator allows (BERTH_ALICLOUD_REGIONS); another well-formed one is 412 there. One pointed at a single endpoint (berth up's emulator) takes any well-formed region."
                },
                "zoneID": text(),
                "securityGroupID": text(),
                "vSwitchID": text(),
                "privateIPAddress": text(),
                "systemDisk": {
                    "type": ["object", "null"],
                    "properties": {"category": text(), "size": any_i64()}
                },
                "dataDisks": {"type": ["array", "null"], "items": disk},
                "instanceChargeType": text(),
                "internetChargeType": text(),
                "internetMaxBandwidthIn": any_i64(),
                "internetMaxBandwidthOut": any_i64(),
                "spotStrategy": text(),
                "IoOptimized": text(),
                "ioOptimized": text(),
                "tags": tags,
                "keyPairName": text()
            },
            // The two spellings are one field: sending both is refused as a duplicate.
            "not": {"required": ["IoOptimized", "ioOptimized"]}
        });
        if for_create {
            let p = &mut spec["properties"];
            for (field, g) in [
                ("imageID", &IMAGE_ID),
                ("zoneID", &ZONE_ID),
                ("instanceType", &INSTANCE_TYPE),
                ("vSwitchID", &V_SWITCH_ID),
                ("keyPairName", &KEY_PAIR_NAME),
            ] {
                p[field] = required(g);
            }
            p["apiVersion"] = optional(&API_VERSION);
            p["securityGroupID"] = optional(&SECURITY_GROUP_ID);
            p["privateIPAddress"] = optional(&PRIVATE_IP);
            p["systemDisk"]["properties"]["category"] = optional(&DISK_CATEGORY);
            p["instanceChargeType"] = one_of_or_unset(&["PostPaid", "PrePaid"]);
            p["internetChargeType"] = one_of_or_unset(&["PayByTraffic", "PayByBandwidth"]);
            p["spotStrategy"] = one_of_or_unset(&["NoSpot", "SpotWithPriceLimit", "SpotAsPriceGo"]);
            p["IoOptimized"] = one_of_or_unset(&["none", "optimized"]);
            p["ioOptimized"] = one_of_or_unset(&["none", "optimized"]);
            p["internetMaxBandwidthIn"] = integer(0, 200);
            p["internetMaxBandwidthOut"] = integer(0, 100);
            p["systemDisk"]["properties"]["size"] = json!({
                "description": "GiB: 0 (or none) for ECS's default, else 20 to 2048",
                "anyOf": [{"type": "null"}, {"const": 0}, {"type": "integer", "minimum": 20, "maximum": 2048}]
            });
            p["dataDisks"]["maxItems"] = json!(16);
            p["dataDisks"]["description"] = json!(
                "At most 16; each name unique within the class (it names the disk <machine>-<name>-data-disk)"
            );
            spec["required"] = json!([
                "region",
                "tags",
                "imageID",
                "zoneID",
                "instanceType",
                "vSwitchID",
                "keyPairName"
            ]);
        }
        spec
    }

    /// `secret`: the access key, plain in `stringData` (the driver also reads it from `data`,
    /// base64-encoded, when `stringData` lacks it, and takes the fallback names `accessKeyID` and
    /// `accessKeySecret`; this document names the one form a request can rely on).
    pub fn secret(for_create: bool) -> Value {
        let text_key = json!({"type": "string", "pattern": BASE64_ASCII});
        let mut data = json!({
            "type": "object",
            "description": "Base64-encoded values, every one checked (as Kubernetes does) even where stringData wins",
            "additionalProperties": {"type": "string", "pattern": BASE64},
            "properties": {"alicloudSecurityToken": text_key, "securityToken": text_key}
        });
        let mut string_data = json!({
            "type": "object",
            "required": ["alicloudAccessKeyID", "alicloudAccessKeySecret"],
            "additionalProperties": {"type": "string"},
            "properties": {
                "alicloudAccessKeyID": {"type": "string", "pattern": NOT_BLANK, "description": "The access key id (under `berth up`, the emulator's, which it prints)"},
                "alicloudAccessKeySecret": {"type": "string", "pattern": NOT_BLANK, "description": "Its secret"},
                "alicloudSecurityToken": {"type": "string", "description": "An STS token, if the key is temporary"}
            }
        });
        if for_create {
            data["properties"]["userData"] = json!({
                "type": "string",
                "pattern": BASE64,
                "maxLength": MAX_USER_DATA_BASE64,
                "description": "The user data, base64-encoded: at most 32 KiB encoded, ECS's limit"
            });
            string_data["properties"]["userData"] = json!({
                "type": "string",
                "description": "The user data, plain: at most 24 KiB of UTF-8 (32 KiB base64-encoded, ECS's limit)"
            });
        }
        json!({
            "type": "object",
            "required": ["stringData"],
            "properties": {"stringData": string_data, "data": data}
        })
    }

    /// `machine`: its name (a DNS-1123 subdomain; 2 to 128 characters to be created, ECS's limit),
    /// UID and providerID.
    pub fn machine(for_create: bool) -> Value {
        let mut name = json!({
            "type": "string",
            "pattern": domain::schema::DNS1123_SUBDOMAIN,
            "maxLength": domain::names::MAX_SUBDOMAIN_LEN
        });
        if for_create {
            name["minLength"] = json!(2);
            name["maxLength"] = json!(super::MAX_CREATE_NAME_LEN);
        }
        json!({
            "required": ["metadata"],
            "properties": {
                "metadata": {
                    "required": ["name"],
                    "properties": {
                        "name": name,
                        "uid": {"type": "string", "pattern": UID, "maxLength": MAX_UID_LEN, "not": {"pattern": UID_RESERVED}}
                    }
                },
                "spec": {"properties": {"providerID": {"type": "string", "pattern": provider_id_pattern()}}}
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The policy of a driver calling the regional endpoints, without an allow-list.
    fn policy() -> RegionPolicy {
        RegionPolicy {
            allowed: BTreeSet::new(),
            known_only: true,
        }
    }

    fn valid() -> serde_json::Value {
        json!({
            "apiVersion": "mcm.gardener.cloud/v1alpha1",
            "imageID": "m-image",
            "instanceType": "ecs.g6.large",
            "region": "cn-shanghai",
            "zoneID": "cn-shanghai-b",
            "securityGroupID": "sg-1",
            "vSwitchID": "vsw-1",
            "systemDisk": {"category": "cloud_efficiency", "size": 50},
            "dataDisks": [
                {"name": "d1", "category": "cloud_efficiency", "size": 100, "description": "ns-datavol-d1"},
                {"name": "d2", "category": "cloud_essd", "size": 40, "deleteWithInstance": false, "encrypted": true},
                {"name": "eph", "category": "DiskEphemeralSSD", "size": 20}
            ],
            "instanceChargeType": "PostPaid",
            "internetChargeType": "PayByTraffic",
            "internetMaxBandwidthIn": 5,
            "internetMaxBandwidthOut": 5,
            "spotStrategy": "NoSpot",
            "IoOptimized": "optimized",
            "keyPairName": "kp",
            "tags": {"kubernetes.io/cluster/shoot--mcm": "1", "kubernetes.io/role/worker/shoot--mcm": "1", "pool": "a"},
            "unknownField": {"ignored": true}
        })
    }

    #[test]
    fn decodes_mcm_field_names_and_validates() {
        let s = ProviderSpec::decode(&valid()).unwrap();
        assert_eq!(s.image_id, "m-image");
        assert_eq!(s.io_optimized, "optimized");
        assert_eq!(s.data_disks[1].delete_with_instance, Some(false));
        s.validate_for_create(&policy()).unwrap();
        assert_eq!(s.cluster_tags().len(), 1);
        assert_eq!(s.list_tags().len(), 2);
        let mut v = valid();
        v.as_object_mut().unwrap().remove("IoOptimized");
        v["ioOptimized"] = json!("none");
        assert_eq!(ProviderSpec::decode(&v).unwrap().io_optimized, "none");
    }

    #[test]
    fn a_misspelt_field_is_named_with_the_one_meant_and_others_are_ignored() {
        let mut v = valid();
        v["instanceTyp"] = v["instanceType"].take();
        v.as_object_mut().unwrap().remove("instanceType");
        v["systemDisk"]["categroy"] = json!("cloud_ssd");
        v["dataDisks"][1]["sizes"] = json!(20);
        let e = ProviderSpec::decode(&v).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument);
        for (field, meant) in [
            ("machineClass.providerSpec.instanceTyp", "instanceType"),
            ("machineClass.providerSpec.systemDisk.categroy", "category"),
            ("machineClass.providerSpec.dataDisks[1].sizes", "size"),
        ] {
            assert!(
                e.message.contains(&format!(
                    "{field}: is not a field of the Alicloud provider spec: did you mean {meant}?"
                )),
                "{field}: {}",
                e.message
            );
        }
        // MCM's fields Berth does not read, and fields far from every known one, are accepted.
        let mut v = valid();
        v["secretRef"] = json!({"name": "cloud", "namespace": "default"});
        v["credentialsSecretRef"] = json!({"name": "cloud"});
        v["kind"] = json!("AlicloudMachineClass");
        v["operatingSystem"] = json!({"operatingSystemName": "gardenlinux"});
        ProviderSpec::decode(&v)
            .unwrap()
            .validate_for_create(&policy())
            .unwrap();
        // A key that is not text a log should carry is shown escaped.
        let mut v = valid();
        v["zoneI\n"] = json!("x");
        let e = ProviderSpec::decode(&v).unwrap_err();
        assert!(
            e.message.contains("providerSpec.zoneI\\n:"),
            "{}",
            e.message
        );
    }

    #[test]
    fn decode_errors_name_the_path() {
        let mut v = valid();
        v["dataDisks"][0]["size"] = json!("big");
        let e = ProviderSpec::decode(&v).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument);
        assert!(
            e.message
                .starts_with("machineClass.providerSpec.dataDisks[0].size:"),
            "{}",
            e.message
        );
        let e = ProviderSpec::decode(&json!("nope")).unwrap_err();
        assert!(e.message.starts_with("machineClass.providerSpec:"));
    }

    #[test]
    fn historical_rules_with_their_messages() {
        let s = ProviderSpec::decode(&json!({"tags": {}})).unwrap();
        let msg = s.validate_for_create(&policy()).unwrap_err().message;
        for want in [
            "machineClass.providerSpec.imageID: ImageID is required",
            "machineClass.providerSpec.region: Region is required",
            "machineClass.providerSpec.zoneID: ZoneID is required",
            "machineClass.providerSpec.instanceType: InstanceType is required",
            "machineClass.providerSpec.vSwitchID: VSwitchID is required",
            "machineClass.providerSpec.keyPairName: KeyPairName is required",
            "machineClass.providerSpec.tags: Tags required for Alicloud machines",
        ] {
            assert!(msg.contains(want), "{want} not in {msg}");
        }
        let mut v = valid();
        v["tags"] = json!({"kubernetes.io/cluster/x": "1"});
        let msg = ProviderSpec::decode(&v)
            .unwrap()
            .validate_scope(&policy())
            .unwrap_err()
            .message;
        assert_eq!(
            msg,
            "machineClass.providerSpec.tags: Tag required of the form kubernetes.io/role/****"
        );
        v["tags"] = json!({"kubernetes.io/role/x": "1"});
        let msg = ProviderSpec::decode(&v)
            .unwrap()
            .validate_scope(&policy())
            .unwrap_err()
            .message;
        assert!(msg.contains("kubernetes.io/cluster/****"), "{msg}");
    }

    #[test]
    fn data_disk_rules() {
        let mut v = valid();
        v["dataDisks"] = json!([
            {"name": "", "category": "c", "size": 20},
            {"name": "1bad", "category": "c", "size": 20},
            {"name": format!("a{}", "b".repeat(64)), "category": "c", "size": 20},
            {"name": "dup", "category": "c", "size": 19},
            {"name": "dup", "category": "", "size": 32769}
        ]);
        let msg = ProviderSpec::decode(&v)
            .unwrap()
            .validate_for_create(&policy())
            .unwrap_err()
            .message;
        for want in [
            "dataDisks[0].name: Data Disk name is required",
            "dataDisks[1].name: Disk name given: 1bad does not match the expected pattern",
            "dataDisks[2].name: Data Disk Name length must be between 1 and 64",
            "dataDisks[3].size: Invalid value: 19: must be between 20 and 32768, inclusive",
            "dataDisks[4].size: Invalid value: 32769",
            "dataDisks[4].category: Data Disk category is required",
            "Data Disk Name 'dup' duplicated 2 times, Name must be unique",
        ] {
            assert!(msg.contains(want), "{want} not in {msg}");
        }
        assert!(disk_name_matches("a1.b-c_d:e"));
        assert!(!disk_name_matches("a"));
        assert!(!disk_name_matches("a b"));
    }

    #[test]
    fn regions_follow_the_grammar_then_the_policy() {
        let with_region = |r: &str| {
            let mut v = valid();
            v["region"] = json!(r);
            ProviderSpec::decode(&v).unwrap()
        };
        assert_eq!(
            with_region("eu-central-1")
                .validate_scope(&policy())
                .unwrap()
                .as_str(),
            "eu-central-1"
        );
        for bad in ["x@127.0.0.1:9/", "../x", "CN-SHANGHAI", "cn-shanghai/"] {
            let msg = with_region(bad)
                .validate_for_create(&policy())
                .unwrap_err()
                .message;
            assert!(
                msg.starts_with("machineClass.providerSpec.region: is not an ECS region id"),
                "{bad:?}: {msg}"
            );
            assert!(!msg.contains("127.0.0.1"), "{msg}");
        }
        let unknown = with_region("xx-nowhere-1");
        let e = unknown.validate_scope(&policy()).unwrap_err();
        // Well-formed: the driver's set-up refuses it (412), as the document's grammar admits it.
        assert_eq!(e.code, Code::FailedPrecondition);
        assert!(
            e.message
                .contains("is not a region this driver knows an ECS endpoint for"),
            "{}",
            e.message
        );
        // With an endpoint override any well-formed region goes; an allow-list narrows either way.
        let lenient = RegionPolicy::default();
        assert!(unknown.validate_scope(&lenient).is_ok());
        let listed = RegionPolicy {
            allowed: [Region::parse("xx-nowhere-1").unwrap()].into(),
            known_only: true,
        };
        assert!(unknown.validate_scope(&listed).is_ok());
        let msg = with_region("cn-shanghai")
            .validate_scope(&listed)
            .unwrap_err()
            .message;
        assert!(msg.contains("the operator's allow-list"), "{msg}");
    }

    #[test]
    fn owners_are_uids_or_none() {
        let mut m = Machine::default();
        assert_eq!(Owner::of(&m).unwrap().tag_value(), "");
        assert_eq!(
            Owner::of(&m).unwrap().to_string(),
            "a machine without a UID"
        );
        m.metadata.uid = "0b7e2c1a-5f7d-4c1e-9a57-6f0f8e1d2c3b".into();
        let owner = Owner::of(&m).unwrap();
        assert_eq!(
            owner.to_string(),
            "machine UID \"0b7e2c1a-5f7d-4c1e-9a57-6f0f8e1d2c3b\""
        );
        for bad in [
            "a b".to_string(),
            "x:y".into(),
            "u".repeat(129),
            "aliyun-x".into(),
        ] {
            m.metadata.uid = bad.clone();
            let e = Owner::of(&m).unwrap_err();
            assert!(e.message.starts_with("machine.metadata.uid:"), "{bad:?}");
        }
    }

    #[test]
    fn enums_and_tag_limits() {
        let mut v = valid();
        v["spotStrategy"] = json!("Cheap");
        v["IoOptimized"] = json!("yes");
        v["tags"][MACHINE_TAG] = json!("x");
        v["tags"][OWNER_TAG] = json!("x");
        v["tags"]["aliyun:x"] = json!("y");
        let msg = ProviderSpec::decode(&v)
            .unwrap()
            .validate_for_create(&policy())
            .unwrap_err()
            .message;
        assert!(
            msg.contains("spotStrategy: Unsupported value: \"Cheap\""),
            "{msg}"
        );
        assert!(msg.contains("IoOptimized: Unsupported value"), "{msg}");
        assert!(
            msg.contains("is set by the driver to the machine's name"),
            "{msg}"
        );
        assert!(
            msg.contains("is set by the driver to the machine's UID"),
            "{msg}"
        );
        assert!(msg.contains("may not start with 'aliyun'"), "{msg}");
    }

    #[test]
    fn run_instances_is_built_as_mcm_builds_it() {
        let s = ProviderSpec::decode(&valid()).unwrap();
        let mut m = Machine::default();
        m.metadata.uid = "u-1".into();
        let owner = Owner::of(&m).unwrap();
        let r = s.run_instances("m-1", &owner, "team-a", Some(b"#!/bin/sh".to_vec()));
        let p = r.to_params("cn-shanghai", "tok");
        let get = |k: &str| p.get(k).map(str::to_owned);
        assert_eq!(get("InstanceName").as_deref(), Some("m-1"));
        assert_eq!(
            get("SystemDisk.Category").as_deref(),
            Some("cloud_efficiency")
        );
        assert_eq!(get("SystemDisk.Size").as_deref(), Some("50"));
        assert_eq!(
            get("DataDisk.1.DiskName").as_deref(),
            Some("m-1-d1-data-disk")
        );
        assert_eq!(
            get("DataDisk.1.DeleteWithInstance").as_deref(),
            Some("true")
        );
        assert_eq!(
            get("DataDisk.2.DeleteWithInstance").as_deref(),
            Some("false")
        );
        assert_eq!(get("DataDisk.2.Encrypted").as_deref(), Some("true"));
        assert_eq!(get("DataDisk.3.DeleteWithInstance"), None);
        assert_eq!(get("IoOptimized").as_deref(), Some("optimized"));
        assert_eq!(get("UserData").as_deref(), Some("IyEvYmluL3No"));
        let tags: Vec<(String, String)> = (1..=5)
            .map(|n| {
                (
                    get(&format!("Tag.{n}.Key")).unwrap(),
                    get(&format!("Tag.{n}.Value")).unwrap(),
                )
            })
            .collect();
        assert!(tags.contains(&(MACHINE_TAG.into(), "m-1".into())));
        assert!(tags.contains(&(OWNER_TAG.into(), "u-1".into())));
        assert!(tags.contains(&("kubernetes.io/cluster/shoot--mcm".into(), "1".into())));
    }

    #[test]
    fn the_examples_placeholders_are_refused_under_the_key_that_holds_them() {
        let s = Secret::from_string_data([
            ("accessKeyID", EXAMPLE_KEY_ID_PLACEHOLDER),
            ("accessKeySecret", EXAMPLE_KEY_SECRET_PLACEHOLDER),
        ]);
        let e = credentials(&s).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument);
        assert!(
            e.message.starts_with(
                "secret.data[accessKeyID] still holds the example's placeholder EMULATOR_ACCESS_KEY_ID, and secret.data[accessKeySecret] still holds the example's placeholder EMULATOR_ACCESS_KEY_SECRET: replace them"
            ),
            "{}",
            e.message
        );
        // A real key merely containing the text is a real key.
        let s = Secret::from_string_data([
            ("alicloudAccessKeyID", "EMULATOR_ACCESS_KEY_ID_2"),
            ("alicloudAccessKeySecret", "x"),
        ]);
        assert!(credentials(&s).is_ok());
    }

    #[test]
    fn secret_keys_with_fallbacks_never_echo_values() {
        let s = Secret::from_string_data([("accessKeyID", "AKID"), ("accessKeySecret", "s3cr3t")]);
        let c = credentials(&s).unwrap();
        assert_eq!(c.access_key_id(), "AKID");
        let s = Secret::from_string_data([("alicloudAccessKeyID", "AKID")]);
        let e = credentials(&s).unwrap_err();
        assert_eq!(
            e.message,
            "secret.data[alicloudAccessKeySecret]: is required (or its fallback accessKeySecret)"
        );
        let s = Secret::from_string_data([("alicloudAccessKeySecret", "s3cr3t")]);
        let e = credentials(&s).unwrap_err();
        assert!(e.message.contains("alicloudAccessKeyID"));
        assert!(!e.message.contains("s3cr3t"));
        let big = "x".repeat(30_000);
        let s = Secret::from_string_data([("userData", big.as_str())]);
        let e = user_data(&s).unwrap_err();
        assert!(
            e.message
                .starts_with("secret.data[userData]: is 30000 bytes")
        );
        assert!(!e.message.contains("xxx"));
    }

    #[test]
    fn identity_helpers() {
        assert_eq!(
            node_name("i-uf69zddmom11ci7est12"),
            "izuf69zddmom11ci7est12z"
        );
        assert_eq!(node_name("i-mockinstanceid"), "izmockinstanceidz");
        assert_eq!(
            provider_id("cn-shanghai", "i-mockinstanceid"),
            "cn-shanghai.i-mockinstanceid"
        );
        assert_eq!(
            decode_provider_id("cn-shanghai.i-1", &policy()).unwrap(),
            (Some(Region::parse("cn-shanghai").unwrap()), "i-1")
        );
        assert_eq!(decode_provider_id("i-1", &policy()).unwrap(), (None, "i-1"));
        for bad in [
            "cn-shanghai.",
            "",
            " cn-shanghai.i-1",
            "cn-shanghai.i-1 ",
            "cn-shanghai.I-1",
            "cn-shanghai.i-",
            "cn-shanghai.x-1",
            "cn-shanghai.i-1*",
            "x@127.0.0.1:9/.i-1",
            "../x.i-1",
            ".i-1",
        ] {
            let e = decode_provider_id(bad, &policy()).unwrap_err();
            assert!(
                e.message
                    .starts_with("machine.spec.providerID: is not of the form"),
                "{bad:?}: {}",
                e.message
            );
            assert!(
                !bad.contains('@') || !e.message.contains('@'),
                "{}",
                e.message
            );
        }
        let e = decode_provider_id("xx-nowhere-1.i-1", &policy()).unwrap_err();
        assert_eq!(e.code, Code::FailedPrecondition);
        assert!(
            e.message.contains(
                "names region \"xx-nowhere-1\", which is not a region this driver knows an ECS endpoint for"
            ),
            "{}",
            e.message
        );
        let mut m = Machine::default();
        m.metadata.name = "m".into();
        m.metadata.namespace = "ns".into();
        let by_name = client_token(&m, 0);
        assert_eq!(by_name.len(), 64);
        assert_eq!(by_name, client_token(&m, 0));
        m.metadata.uid = "u-1".into();
        assert_ne!(by_name, client_token(&m, 0));
    }

    #[test]
    fn a_machines_token_series_is_deterministic_and_starts_with_the_token_berth_always_sent() {
        let mut m = Machine::default();
        m.metadata.uid = "6a0c5d4e-0b7e-4d7c-9a55-2f3c8c1e9b01".into();
        // SHA-256 of "berth/alicloud/RunInstances/v1\nuid:<uid>": the token of every VM made so far.
        let mut h = Sha256::new();
        h.update(b"berth/alicloud/RunInstances/v1\nuid:6a0c5d4e-0b7e-4d7c-9a55-2f3c8c1e9b01");
        assert_eq!(client_token(&m, 0), hex::encode(h.finalize()));
        let series: Vec<String> = (0..50).map(|n| client_token(&m, n)).collect();
        let distinct: BTreeSet<&String> = series.iter().collect();
        assert_eq!(distinct.len(), 50);
        assert!(series.iter().all(|t| t.len() == 64 && t.is_ascii()));
        assert_eq!(series[7], client_token(&m, 7));
    }

    /// Each pattern of [`schema`] against the validator it stands for: a value matches exactly when
    /// the driver accepts it (or, where a pattern says it is narrower, only values it accepts match).
    mod schema_patterns {
        use super::super::schema::*;
        use super::*;
        use base64::Engine as _;

        fn re(pattern: &str) -> regex::Regex {
            regex::Regex::new(pattern).unwrap()
        }

        /// The name's schema against [`machine_name`], for every call and for CreateMachine, on
        /// the boundaries: a part of 63 and 64 characters, 128 and 129 in all, 253 and 254.
        #[test]
        fn machine_names() {
            let part = "a".repeat(63);
            let long_part = format!("{part}a");
            let parts = [part.as_str(); 4].join(".");
            let n253 = parts[..253].to_string();
            let n254 = parts[..254].to_string();
            let n128 = format!("{part}.{}.b", &part[..62]);
            let n129 = format!("{n128}c");
            let short_then_long = format!("ab.{long_part}");
            let cases = [
                "a",
                "ab",
                "m-1.pool",
                "*",
                "A",
                "a..b",
                "a.",
                "",
                &part,
                &long_part,
                &short_then_long,
                &n128,
                &n129,
                &n253,
                &n254,
            ];
            for for_create in [false, true] {
                let schema = super::super::schema::machine(for_create);
                let name = &schema["properties"]["metadata"]["properties"]["name"];
                let pattern = re(name["pattern"].as_str().unwrap());
                let min = name["minLength"].as_u64().unwrap_or(0) as usize;
                let max = name["maxLength"].as_u64().unwrap() as usize;
                for case in cases {
                    let by_schema = pattern.is_match(case) && (min..=max).contains(&case.len());
                    let mut m = Machine::default();
                    m.metadata.name = case.into();
                    let by_driver = machine_name(&m, for_create);
                    assert_eq!(by_schema, by_driver.is_ok(), "{for_create} {case:?}");
                }
            }
            // The message says the rule that failed, never a limit that did not.
            let message = |name: &str, for_create: bool| {
                let mut m = Machine::default();
                m.metadata.name = name.into();
                machine_name(&m, for_create).unwrap_err().message
            };
            for for_create in [false, true] {
                let msg = message(&short_then_long, for_create);
                assert!(
                    msg.contains("part of 64 characters") && msg.contains("at most 63"),
                    "{msg}"
                );
                assert!(!msg.contains("253") && !msg.contains("128"), "{msg}");
            }
            let msg = message(&n129, true);
            assert!(msg.contains("2 to 128 characters"), "{msg}");
            let msg = message(&n254, false);
            assert!(msg.contains("at most 253 characters"), "{msg}");
        }

        #[test]
        fn uids() {
            let (uid, reserved) = (re(UID), re(UID_RESERVED));
            let long = "u".repeat(128);
            let too_long = "u".repeat(129);
            for case in [
                "",
                "0d9a3c1e-7f44",
                "a.b_c-D",
                &long,
                &too_long,
                "a b",
                "x:y",
                "aliyun-x",
                "Aliyun",
                "ü",
                "a/b",
            ] {
                let by_schema =
                    uid.is_match(case) && !reserved.is_match(case) && case.len() <= MAX_UID_LEN;
                let mut m = Machine::default();
                m.metadata.uid = case.into();
                assert_eq!(by_schema, Owner::of(&m).is_ok(), "{case:?}");
            }
        }

        #[test]
        fn disk_names() {
            let name = re(DISK_NAME);
            let long = format!("a{}", "b".repeat(63));
            let too_long = format!("a{}", "b".repeat(64));
            for case in [
                "d1",
                "a1.b-c_d:e",
                "a",
                "1bad",
                "a b",
                "",
                &long,
                &too_long,
                "aé",
                "A:",
            ] {
                let by_schema = name.is_match(case) && case.chars().count() <= 64;
                let accepted = disk_name_matches(case) && case.len() <= 64;
                assert_eq!(by_schema, accepted, "{case:?}");
            }
        }

        #[test]
        fn provider_ids() {
            let pattern = re(&provider_id_pattern());
            for case in [
                "cn-shanghai.i-1",
                "i-1",
                "eu-central-1.i-abc123",
                "xx-nowhere-1.i-1",
                "cn-shanghai.",
                " cn-shanghai.i-1",
                "cn-shanghai.I-1",
                "cn-shanghai.i-",
                "cn-shanghai.x-1",
                "x@127.0.0.1:9/.i-1",
                ".i-1",
                &format!("i-{}", "a".repeat(62)),
                &format!("i-{}", "a".repeat(63)),
            ] {
                // What the pattern admits is decoded, or refused only by the driver's set-up (412).
                let decoded = decode_provider_id(case, &policy());
                assert_eq!(
                    pattern.is_match(case),
                    decoded.is_ok() || decoded.is_err_and(|e| e.code == Code::FailedPrecondition),
                    "{case:?}"
                );
            }
            // Empty: the machine has no VM yet (nothing is decoded).
            assert!(pattern.is_match(""));
        }

        #[test]
        fn regions_are_the_known_ones() {
            let listed = regions();
            assert!(listed.contains(&"cn-shanghai") && listed.contains(&"cn-hangzhou"));
            for r in &listed {
                assert!(policy().admit(r).is_ok(), "{r}");
            }
            assert!(policy().admit("xx-nowhere-1").is_err());
            // The grammar the document states is the parser's.
            let grammar = re(&format!("^{REGION}$"));
            for case in [
                "cn-shanghai",
                "eu-central-1",
                "cn-beijing-finance-1",
                "a-b-c-d-e-f",
                "a-b-c-d-e-f-g",
                "1a-b",
                "a1-b",
                "cn",
                "cn-",
                "-cn",
                "cn--x",
                "CN-X",
                "cn-x.y",
                "cn-x/",
                "",
            ] {
                assert_eq!(
                    grammar.is_match(case),
                    alicloud::Region::parse(case).is_ok(),
                    "{case:?}"
                );
            }
        }

        #[test]
        fn base64_is_what_the_secret_decodes() {
            let (any, ascii) = (re(BASE64), re(BASE64_ASCII));
            let engine = base64::engine::general_purpose::STANDARD;
            // Every encoding of short byte strings: matched exactly when decodable; the ASCII
            // pattern exactly when the bytes are ASCII.
            let samples: Vec<Vec<u8>> = (0u16..=255)
                .map(|b| vec![b as u8])
                .chain((0u16..=255).map(|b| vec![b'a', b as u8]))
                .chain((0u16..=255).map(|b| vec![b as u8, b'z', b as u8]))
                .chain((0u16..=255).map(|b| vec![b'x', b'y', b'z', b as u8, b'w']))
                .chain([b"hello world".to_vec(), Vec::new()])
                .collect();
            for bytes in samples {
                let text = engine.encode(&bytes);
                assert!(any.is_match(&text), "{text}");
                assert_eq!(ascii.is_match(&text), bytes.is_ascii(), "{text} {bytes:?}");
            }
            for bad in ["QQ", "QR==", "QUJ=", "a b=", "====", "Q===", "QUJD\n"] {
                assert!(engine.decode(bad).is_err(), "{bad}");
                assert!(!any.is_match(bad), "{bad}");
                assert!(!ascii.is_match(bad), "{bad}");
            }
        }

        #[test]
        fn tag_rules_count_characters() {
            let mut v = valid();
            v["tags"]["ü".repeat(128)] = json!("ü".repeat(128));
            ProviderSpec::decode(&v)
                .unwrap()
                .validate_for_create(&policy())
                .unwrap();
            v["tags"]["ü".repeat(129)] = json!("x");
            let msg = ProviderSpec::decode(&v)
                .unwrap()
                .validate_for_create(&policy())
                .unwrap_err()
                .message;
            assert!(msg.contains("1 to 128 characters"), "{msg}");
        }

        /// Each free string's pattern against its validator, on values that pass and values that
        /// break the grammar.
        #[test]
        fn free_string_patterns_mirror_their_validators() {
            let cases = [
                "a",
                "ab",
                "A",
                "0",
                "-a",
                "a-",
                "ecs",
                "ecs.",
                "ecs.g6.large",
                "ecs.G6.large",
                "ecs.t5-lc1m1.small",
                "ecs..large",
                "ecsx.g6",
                "cn-shanghai-b",
                "ap-southeast-1a",
                "sg-1",
                "sg-",
                "sg-ABC",
                "sg-abc_1",
                "vsw-demo",
                "vsw-",
                "kp",
                "k",
                "kp:1_a-b",
                "1kp",
                "kp/x",
                "http://x",
                "192.168.0.10",
                "0.0.0.0",
                "255.255.255.255",
                "256.1.1.1",
                "01.2.3.4",
                "1.2.3",
                "1.2.3.4.5",
                "1.2.3.4 ",
                "cloud_essd",
                "DiskEphemeralSSD",
                "cloud-essd",
                "_c",
                "m-demo-image",
                "ubuntu_22_04_x64.vhd",
                ".img",
                "mcm.gardener.cloud/v1alpha1",
                "v1",
                "a b",
                "a\tb",
                "ü",
                "a\u{85}b",
                "text with spaces",
                "\u{7f}",
            ];
            for g in [
                &IMAGE_ID,
                &INSTANCE_TYPE,
                &ZONE_ID,
                &SECURITY_GROUP_ID,
                &V_SWITCH_ID,
                &KEY_PAIR_NAME,
                &PRIVATE_IP,
                &DISK_CATEGORY,
                &API_VERSION,
            ] {
                let pattern = re(g.pattern);
                for case in cases {
                    assert_eq!(
                        pattern.is_match(case),
                        (g.matches)(case),
                        "{} on {case:?}",
                        g.pattern
                    );
                }
            }
            // A description is plain text: the pattern, and no URL (the schema's `not`).
            assert_eq!(DISK_DESCRIPTION.pattern, PLAIN_TEXT);
            let plain = re(PLAIN_TEXT);
            let url = re(NO_URL);
            for case in cases.iter().chain(&["see https://x", "a http://b"]) {
                assert_eq!(
                    plain.is_match(case) && !url.is_match(case),
                    plain_text(case),
                    "{case:?}"
                );
                assert_eq!((DISK_DESCRIPTION.matches)(case), plain_text(case));
            }
        }

        /// The refusal of `field` set to `value`, for CreateMachine.
        fn refusal(field: &str, value: serde_json::Value) -> String {
            let mut v = valid();
            let pointer = format!("/{}", field.replace('.', "/"));
            match v.pointer_mut(&pointer) {
                Some(at) => *at = value,
                None => v[field] = value,
            }
            ProviderSpec::decode(&v)
                .unwrap()
                .validate_for_create(&policy())
                .unwrap_err()
                .message
        }

        /// Every free string of the spec: an over-long value and one that breaks its grammar are
        /// each refused naming the field and the rule, never echoing a long value.
        #[test]
        fn every_free_string_has_a_bound_and_a_grammar() {
            let cases: [(&str, &str, usize, &str); 10] = [
                ("apiVersion", "apiVersion", 253, "v1 alpha"),
                ("imageID", "imageID", 128, "-image"),
                ("instanceType", "instanceType", 64, "g6.large"),
                ("zoneID", "zoneID", 64, "CN_SHANGHAI"),
                ("securityGroupID", "securityGroupID", 64, "group-1"),
                ("vSwitchID", "vSwitchID", 64, "vsw-A"),
                ("keyPairName", "keyPairName", 128, "1kp"),
                ("privateIPAddress", "privateIPAddress", 15, "10.0.0.256"),
                (
                    "systemDisk.category",
                    "systemDisk.category",
                    64,
                    "cloud essd",
                ),
                (
                    "dataDisks.0.category",
                    "dataDisks[0].category",
                    64,
                    "cloud-essd",
                ),
            ];
            for (pointer, field, max, bad) in cases {
                let long = "a".repeat(100_000);
                let msg = refusal(pointer, json!(long));
                assert!(msg.contains(&format!("{SPEC}.{field}: ")), "{field}: {msg}");
                assert!(
                    msg.contains(&format!("the limit is {max}")),
                    "{field}: {msg}"
                );
                assert!(
                    msg.len() < 1_000,
                    "{field}: the value is echoed: {}",
                    msg.len()
                );
                let msg = refusal(pointer, json!(bad));
                assert!(
                    msg.contains(&format!("{SPEC}.{field}: must be ")),
                    "{field}: {msg}"
                );
            }
            let msg = refusal("dataDisks.0.description", json!("d".repeat(257)));
            assert!(
                msg.contains("dataDisks[0].description: is 257 characters long; the limit is 256"),
                "{msg}"
            );
            let msg = refusal("dataDisks.0.description", json!("see http://example.com"));
            assert!(msg.contains("dataDisks[0].description: must be"), "{msg}");
            // The enums never echo a long value either.
            let msg = refusal("instanceChargeType", json!("x".repeat(100_000)));
            assert!(
                msg.contains("instanceChargeType: Unsupported value: a value of 100000 characters"),
                "{msg}"
            );
            // Tags: control characters and URLs, a reserved value prefix, an over-long key not echoed.
            for (key, value, rule) in [
                ("pool", "a\nb", "no control characters"),
                ("pool", "see https://x", "http://"),
                ("pool", "aliyun-x", "may not start with 'aliyun'"),
                ("a\u{1}b", "1", "no control characters"),
            ] {
                let mut v = valid();
                v["tags"][key] = json!(value);
                let msg = ProviderSpec::decode(&v)
                    .unwrap()
                    .validate_for_create(&policy())
                    .unwrap_err()
                    .message;
                assert!(msg.contains(rule), "{key:?}={value:?}: {msg}");
            }
            let mut v = valid();
            v["tags"]["k".repeat(100_000)] = json!("1");
            let msg = ProviderSpec::decode(&v)
                .unwrap()
                .validate_for_create(&policy())
                .unwrap_err()
                .message;
            assert!(msg.contains("tags[<a key of 100000 characters>]"), "{msg}");
            assert!(msg.len() < 1_000, "{}", msg.len());
            // A data disk name over 64 characters is not echoed.
            let msg = refusal("dataDisks.0.name", json!("d".repeat(100_000)));
            assert!(msg.len() < 1_000, "{}", msg.len());
        }

        #[test]
        fn local_ssds_are_at_most_800_gib() {
            let mut v = valid();
            v["dataDisks"] = json!([{"name": "eph", "category": "DiskEphemeralSSD", "size": 800}]);
            ProviderSpec::decode(&v)
                .unwrap()
                .validate_for_create(&policy())
                .unwrap();
            v["dataDisks"][0]["size"] = json!(801);
            let msg = ProviderSpec::decode(&v)
                .unwrap()
                .validate_for_create(&policy())
                .unwrap_err()
                .message;
            assert!(
                msg.contains("dataDisks[0].size: Invalid value: 801: must be between 20 and 800"),
                "{msg}"
            );
        }
    }
}
