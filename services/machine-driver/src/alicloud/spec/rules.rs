//! The rules a decoded provider spec must pass, with their messages: the historical in-tree ones
//! (MCM's deleted `alicloudmachineclass.go`) plus what ECS itself would refuse later (enums,
//! ranges, tag limits, each free string's bound and grammar), so a bad class is an InvalidArgument
//! naming the field instead of an ECS error minutes later.
//!
//! Apart from the spec's fields and decoding because they are most of its bulk and change for
//! another reason: a field's shape follows MCM's API, a rule follows what ECS accepts. The
//! [`Grammar`]s are shared with [`super::schema`], which states them as patterns.

use std::collections::BTreeMap;

use alicloud::Region;
use domain::Status;

use super::{EPHEMERAL_SSD, MAX_EPHEMERAL_SSD_GIB, MAX_SPEC_TAGS, MAX_TAG_LEN, ProviderSpec, SPEC};
use crate::alicloud::identity::{CLUSTER_TAG, MACHINE_TAG, OWNER_TAG, ROLE_TAG};
use crate::alicloud::region::RegionPolicy;
use crate::provider::{NAMESPACE_STAMP, Violations};

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
pub(super) struct Grammar {
    pub(super) max: usize,
    pub(super) pattern: &'static str,
    pub(super) rule: &'static str,
    pub(super) matches: fn(&str) -> bool,
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
pub(super) fn plain_text(s: &str) -> bool {
    !s.chars().any(char::is_control) && !s.contains("http://") && !s.contains("https://")
}

/// `imageID`: an image id (`m-bp1...`) or a public image's name (`ubuntu_22_04_x64_20G_alibase_20230515.vhd`).
pub(super) const IMAGE_ID: Grammar = Grammar {
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
pub(super) const INSTANCE_TYPE: Grammar = Grammar {
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
pub(super) const ZONE_ID: Grammar = Grammar {
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
pub(super) const SECURITY_GROUP_ID: Grammar = Grammar {
    max: 64,
    pattern: "^sg-[a-z0-9]+$",
    rule: "an ECS security group id: 'sg-' and lower-case letters and digits, at most 64 characters",
    matches: |s| s.strip_prefix("sg-").is_some_and(|r| all_of(r, id_char)),
};
/// `vSwitchID`: `vsw-` and the id.
pub(super) const V_SWITCH_ID: Grammar = Grammar {
    max: 64,
    pattern: "^vsw-[a-z0-9]+$",
    rule: "an ECS vSwitch id: 'vsw-' and lower-case letters and digits, at most 64 characters",
    matches: |s| s.strip_prefix("vsw-").is_some_and(|r| all_of(r, id_char)),
};
/// `keyPairName`: ECS's key pair names, 2 to 128 characters (the Latin ones).
pub(super) const KEY_PAIR_NAME: Grammar = Grammar {
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
pub(super) const PRIVATE_IP: Grammar = Grammar {
    max: 15,
    pattern: "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$",
    rule: "an IPv4 address in dotted form (such as 192.168.0.10)",
    matches: |s| {
        s.parse::<std::net::Ipv4Addr>().is_ok()
            && s.split('.').all(|p| p == "0" || !p.starts_with('0'))
    },
};
/// A disk `category`: `cloud_efficiency`, `cloud_essd`, `DiskEphemeralSSD`, ...
pub(super) const DISK_CATEGORY: Grammar = Grammar {
    max: 64,
    pattern: "^[A-Za-z][A-Za-z0-9_]*$",
    rule: "an ECS disk category such as cloud_essd: at most 64 letters, digits and '_', starting with a letter",
    matches: |s| {
        s.as_bytes()[0].is_ascii_alphabetic()
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    },
};
/// `apiVersion` (informational): `group/version`.
pub(super) const API_VERSION: Grammar = Grammar {
    max: 253,
    pattern: "^[A-Za-z0-9./-]+$",
    rule: "an API version such as mcm.gardener.cloud/v1alpha1: at most 253 letters, digits, '.', '/' and '-'",
    matches: |s| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'/' | b'-'))
    },
};
/// A data disk's `description`: ECS's 256 characters of text.
pub(super) const DISK_DESCRIPTION: Grammar = Grammar {
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
pub(super) fn disk_name_matches(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.len() >= 2
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))
}

impl ProviderSpec {
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
}
