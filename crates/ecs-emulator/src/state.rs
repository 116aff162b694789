//! The emulated account: instances, disks and network interfaces in ordered maps, plus client
//! tokens and the instance lifecycle.
//!
//! Resource ids start with a fixed-width base-36 sequence number, so the maps' key order is creation
//! order and a `NextToken` (the last id of a page) resumes a scan in O(log n) even while resources
//! are added or removed between pages.
//!
//! Everything here (de)serialises, so `persist` can keep the account across restarts. A status's
//! start ([`Instance::since`]) is a monotonic instant in memory and a wall-clock time on disk.

use std::collections::{BTreeMap, HashMap};

use rand::Rng as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::config::Lifecycle;

/// An instance's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Status {
    Pending,
    Starting,
    Running,
    Stopping,
    Stopped,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "Pending",
            Status::Starting => "Starting",
            Status::Running => "Running",
            Status::Stopping => "Stopping",
            Status::Stopped => "Stopped",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "Pending" => Status::Pending,
            "Starting" => Status::Starting,
            "Running" => Status::Running,
            "Stopping" => Status::Stopping,
            "Stopped" => Status::Stopped,
            _ => return None,
        })
    }
}

pub(crate) type Tags = Vec<(String, String)>;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Instance {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) host_name: String,
    pub(crate) description: String,
    pub(crate) region: String,
    pub(crate) zone: String,
    pub(crate) instance_type: String,
    pub(crate) image_id: String,
    pub(crate) vpc_id: String,
    pub(crate) vswitch_id: String,
    pub(crate) security_group_id: String,
    pub(crate) private_ip: String,
    pub(crate) key_pair_name: String,
    pub(crate) instance_charge_type: String,
    pub(crate) internet_charge_type: String,
    pub(crate) bandwidth_in: u32,
    pub(crate) bandwidth_out: u32,
    pub(crate) spot_strategy: String,
    pub(crate) io_optimized: bool,
    pub(crate) deletion_protection: bool,
    pub(crate) tags: Tags,
    pub(crate) creation_time: String,
    pub(crate) start_time: String,
    pub(crate) status: Status,
    /// When the current status was entered (for the lifecycle).
    #[serde(with = "wall_clock")]
    pub(crate) since: Instant,
    /// A pinned status never advances (admin fault: "keep it Pending").
    pub(crate) pinned: bool,
    pub(crate) nic_id: String,
    pub(crate) user_data_bytes: usize,
}

impl Instance {
    /// Moves through the lifecycle as far as the elapsed time allows.
    pub(crate) fn advance(&mut self, now: Instant, life: &Lifecycle) {
        if self.pinned {
            return;
        }
        loop {
            let (delay, next) = match self.status {
                Status::Pending => (life.pending(), Status::Starting),
                Status::Starting => (life.starting(), Status::Running),
                Status::Stopping => (life.stopping(), Status::Stopped),
                Status::Running | Status::Stopped => return,
            };
            let at = self.since + delay;
            if now < at {
                return;
            }
            self.status = next;
            self.since = at;
            if next == Status::Running {
                self.start_time = ecs_time();
            }
        }
    }

    pub(crate) fn set_status(&mut self, status: Status, now: Instant) {
        self.status = status;
        self.since = now;
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({
            "InstanceId": self.id,
            "InstanceName": self.name,
            "HostName": self.host_name,
            "Description": self.description,
            "Status": self.status.as_str(),
            "RegionId": self.region,
            "ZoneId": self.zone,
            "InstanceType": self.instance_type,
            "ImageId": self.image_id,
            "CreationTime": self.creation_time,
            "StartTime": self.start_time,
            "InstanceChargeType": self.instance_charge_type,
            "InternetChargeType": self.internet_charge_type,
            "InternetMaxBandwidthIn": self.bandwidth_in,
            "InternetMaxBandwidthOut": self.bandwidth_out,
            "SpotStrategy": self.spot_strategy,
            "IoOptimized": self.io_optimized,
            "DeletionProtection": self.deletion_protection,
            "KeyPairName": self.key_pair_name,
            "OSType": "linux",
            "InstanceNetworkType": "vpc",
            "VpcAttributes": {
                "VpcId": self.vpc_id,
                "VSwitchId": self.vswitch_id,
                "NatIpAddress": "",
                "PrivateIpAddress": {"IpAddress": [self.private_ip]},
            },
            "NetworkInterfaces": {"NetworkInterface": [{
                "NetworkInterfaceId": self.nic_id,
                "PrimaryIpAddress": self.private_ip,
                "Type": "Primary",
            }]},
            "SecurityGroupIds": {"SecurityGroupId": [self.security_group_id]},
            "PublicIpAddress": {"IpAddress": []},
            "InnerIpAddress": {"IpAddress": []},
            "EipAddress": {"AllocationId": "", "IpAddress": "", "InternetChargeType": ""},
            "OperationLocks": {"LockReason": []},
            "Tags": tags_json(&self.tags),
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Disk {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) instance_id: String,
    pub(crate) kind: String,
    pub(crate) category: String,
    pub(crate) size: u32,
    pub(crate) delete_with_instance: bool,
    pub(crate) encrypted: bool,
    pub(crate) region: String,
    pub(crate) zone: String,
    pub(crate) device: String,
    pub(crate) tags: Tags,
    pub(crate) creation_time: String,
}

impl Disk {
    pub(crate) fn status(&self) -> &'static str {
        if self.instance_id.is_empty() {
            "Available"
        } else {
            "In_use"
        }
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({
            "DiskId": self.id,
            "DiskName": self.name,
            "Description": self.description,
            "Status": self.status(),
            "Type": self.kind,
            "Category": self.category,
            "Size": self.size,
            "InstanceId": self.instance_id,
            "Device": if self.instance_id.is_empty() { "" } else { self.device.as_str() },
            "DeleteWithInstance": self.delete_with_instance,
            "Encrypted": self.encrypted,
            "RegionId": self.region,
            "ZoneId": self.zone,
            "Portable": self.kind == "data",
            "CreationTime": self.creation_time,
            "Tags": tags_json(&self.tags),
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Nic {
    pub(crate) id: String,
    pub(crate) instance_id: String,
    pub(crate) kind: String,
    pub(crate) private_ip: String,
    pub(crate) mac: String,
    pub(crate) vpc_id: String,
    pub(crate) vswitch_id: String,
    pub(crate) zone: String,
    pub(crate) tags: Tags,
    pub(crate) creation_time: String,
}

impl Nic {
    pub(crate) fn status(&self) -> &'static str {
        if self.instance_id.is_empty() {
            "Available"
        } else {
            "InUse"
        }
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({
            "NetworkInterfaceId": self.id,
            "NetworkInterfaceName": "",
            "Status": self.status(),
            "Type": self.kind,
            "InstanceId": self.instance_id,
            "PrivateIpAddress": self.private_ip,
            "MacAddress": self.mac,
            "VpcId": self.vpc_id,
            "VSwitchId": self.vswitch_id,
            "ZoneId": self.zone,
            "CreationTime": self.creation_time,
            "PrivateIpSets": {"PrivateIpSet": [{"PrivateIpAddress": self.private_ip, "Primary": true}]},
            "Tags": tags_json(&self.tags),
        })
    }
}

pub(crate) fn tags_json(tags: &Tags) -> Value {
    json!({"Tag": tags.iter().map(|(k, v)| json!({"TagKey": k, "TagValue": v})).collect::<Vec<_>>()})
}

/// ECS's time format for `CreationTime`/`StartTime` (minute precision, UTC).
pub(crate) fn ecs_time() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%MZ").to_string()
}

/// What a ClientToken was first used with.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TokenUse {
    pub(crate) fingerprint: u64,
    pub(crate) instance_ids: Vec<String>,
}

/// The whole emulated account.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct State {
    pub(crate) instances: BTreeMap<String, Instance>,
    pub(crate) disks: BTreeMap<String, Disk>,
    pub(crate) nics: BTreeMap<String, Nic>,
    pub(crate) client_tokens: HashMap<String, TokenUse>,
    sequence: u64,
}

/// [`Instance::since`] on disk: the wall-clock time (Unix milliseconds) that instant stands for, so
/// an instance Pending for 0.5 s when the emulator stopped is Pending for 0.5 s after it starts
/// again, and one whose delays ran out meanwhile has moved on.
mod wall_clock {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use serde::{Deserialize, Deserializer, Serializer};
    use tokio::time::Instant;

    fn unix_ms_now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }

    pub(super) fn serialize<S: Serializer>(since: &Instant, s: S) -> Result<S::Ok, S::Error> {
        let ago = Instant::now().saturating_duration_since(*since).as_millis() as u64;
        s.serialize_u64(unix_ms_now().saturating_sub(ago))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Instant, D::Error> {
        let at = u64::deserialize(d)?;
        // A time in the future (a clock set back) counts as now.
        let ago = Duration::from_millis(unix_ms_now().saturating_sub(at));
        let now = Instant::now();
        Ok(now.checked_sub(ago).unwrap_or(now))
    }
}

const ALNUM: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";

impl State {
    /// A fresh id: `prefix-` + 8 base-36 sequence digits + 12 random characters (real ids are
    /// 20 lower-case alphanumerics after the prefix, too).
    pub(crate) fn new_id(&mut self, prefix: &str) -> String {
        self.sequence += 1;
        let mut n = self.sequence;
        let mut seq = [b'0'; 8];
        for slot in seq.iter_mut().rev() {
            *slot = ALNUM[(n % 36) as usize];
            n /= 36;
        }
        let mut rng = rand::rng();
        let tail: String = (0..12)
            .map(|_| ALNUM[rng.random_range(0..ALNUM.len())] as char)
            .collect();
        format!(
            "{prefix}-{}{tail}",
            std::str::from_utf8(&seq).expect("ascii")
        )
    }

    /// A private address in 10.0.0.0/8 derived from the sequence, unique per account.
    pub(crate) fn next_ip(&self) -> String {
        let n = self.sequence;
        format!(
            "10.{}.{}.{}",
            (n >> 16) & 0xff,
            (n >> 8) & 0xff,
            (n & 0xff).max(2)
        )
    }

    pub(crate) fn mac(&self) -> String {
        let n = self.sequence;
        format!(
            "00:16:3e:{:02x}:{:02x}:{:02x}",
            (n >> 16) & 0xff,
            (n >> 8) & 0xff,
            n & 0xff
        )
    }

    pub(crate) fn clear(&mut self) {
        *self = State::default();
    }
}

/// `*` matches any run of characters; everything else literally (ECS's fuzzy `InstanceName`).
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    if !pattern.contains('*') {
        return pattern == text;
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// Whether `tags` has every `(key, value)` of `filter` (an empty value matches any value).
pub(crate) fn tags_match(tags: &Tags, filter: &[(String, Option<String>)]) -> bool {
    filter.iter().all(|(k, v)| {
        tags.iter()
            .any(|(tk, tv)| tk == k && v.as_ref().is_none_or(|v| v == tv))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sort_in_creation_order() {
        let mut s = State::default();
        let ids: Vec<String> = (0..2000).map(|_| s.new_id("i")).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
        assert_eq!(ids[0].len(), 22);
    }

    #[test]
    fn glob_matches_like_ecs_fuzzy_names() {
        assert!(glob("m-1", "m-1"));
        assert!(!glob("m-1", "m-10"));
        assert!(glob("m-*", "m-10"));
        assert!(glob("*-10", "m-10"));
        assert!(glob("m*1*0", "m-1-0"));
        assert!(!glob("m*x", "m-10"));
        assert!(glob("*", ""));
        assert!(!glob("ab*ba", "aba"));
    }

    #[test]
    fn lifecycle_advances_through_states_and_pins_hold() {
        let life = Lifecycle {
            pending_ms: 10,
            starting_ms: 10,
            stopping_ms: 10,
        };
        let t0 = Instant::now();
        let mut s = State::default();
        let mut i = crate::actions::tests_support::instance(&mut s, t0);
        i.advance(t0 + std::time::Duration::from_millis(5), &life);
        assert_eq!(i.status, Status::Pending);
        i.advance(t0 + std::time::Duration::from_millis(15), &life);
        assert_eq!(i.status, Status::Starting);
        i.advance(t0 + std::time::Duration::from_millis(25), &life);
        assert_eq!(i.status, Status::Running);
        i.set_status(Status::Pending, t0);
        i.pinned = true;
        i.advance(t0 + std::time::Duration::from_secs(60), &life);
        assert_eq!(i.status, Status::Pending);
    }
}
