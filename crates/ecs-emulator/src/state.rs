//! The emulated account: instances, disks and network interfaces in ordered maps, plus client
//! tokens and the instance lifecycle.
//!
//! Resource ids start with the time they were made (microseconds, fixed-width base 36, one more than
//! the last id's when two fall in the same microsecond), then random characters: so the maps' key
//! order is creation order, and a `NextToken` (the last id of a page) resumes a scan in O(log n) even
//! while resources are added or removed between pages. Under `berth up` every namespace's machines
//! share this one account, and an id counting up would tell a tenant how many machines the others
//! made between two of its own; a clock tells only when (which `CreationTime` says anyway).
//! Addresses come from a keyed permutation of a private counter: unique while fewer than 2^24 are
//! made, and in no telling order.
//!
//! Everything here (de)serialises, so `persist` can keep the account across restarts. A status's
//! start ([`Instance::since`]) is a monotonic instant in memory and a wall-clock time on disk.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

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

/// How long a ClientToken is remembered after the RunInstances that used it: a retry of a create
/// (a lost answer, a restarted controller) comes within minutes, and ECS itself forgets a token
/// after a while, so its clients may not rely on one for longer either.
pub(crate) const CLIENT_TOKEN_RETENTION: Duration = Duration::from_secs(4 * 60 * 60);

/// How long a ClientToken is remembered once every instance it made has been released: long
/// enough that a late retry of the create is still answered with the released instance rather than
/// a new one, short enough that create/delete traffic does not pile tokens up.
pub(crate) const RELEASED_TOKEN_RETENTION: Duration = Duration::from_secs(5 * 60);

/// How many ClientTokens are remembered at most; beyond it the oldest are forgotten first.
pub(crate) const MAX_CLIENT_TOKENS: usize = 10_000;

/// What a ClientToken was first used with, and until when it is remembered.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TokenUse {
    pub(crate) fingerprint: u64,
    pub(crate) instance_ids: Vec<String>,
    /// When the token was used, in Unix milliseconds (a state file from before this field counts
    /// its tokens as used when it is loaded).
    #[serde(default = "wall_clock::unix_ms_now")]
    pub(crate) used_ms: u64,
    /// When the last of its instances was released, in Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) released_ms: Option<u64>,
}

impl TokenUse {
    /// When the token is forgotten, in Unix milliseconds.
    fn expires_ms(&self) -> u64 {
        let used = self
            .used_ms
            .saturating_add(CLIENT_TOKEN_RETENTION.as_millis() as u64);
        match self.released_ms {
            Some(r) => used.min(r.saturating_add(RELEASED_TOKEN_RETENTION.as_millis() as u64)),
            None => used,
        }
    }
}

/// The whole emulated account.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct State {
    pub(crate) instances: BTreeMap<String, Instance>,
    pub(crate) disks: BTreeMap<String, Disk>,
    pub(crate) nics: BTreeMap<String, Nic>,
    pub(crate) client_tokens: HashMap<String, TokenUse>,
    /// How many addresses were given out: never shown, only permuted ([`State::address_slot`]).
    sequence: u64,
    /// The time part of the last id given out ([`State::new_id`]), so ids stay in creation order
    /// when the clock stands still or steps back.
    last_id_us: u64,
    /// The permutation's key, random per account (0 in a state file written before there was one;
    /// [`State::address_slot`] replaces it then).
    address_key: u64,
}

/// Now, in Unix milliseconds (the clock ClientTokens are kept by: they outlive the process).
pub(crate) fn unix_ms_now() -> u64 {
    wall_clock::unix_ms_now()
}

/// [`Instance::since`] on disk: the wall-clock time (Unix milliseconds) that instant stands for, so
/// an instance Pending for 0.5 s when the emulator stopped is Pending for 0.5 s after it starts
/// again, and one whose delays ran out meanwhile has moved on.
mod wall_clock {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use serde::{Deserialize, Deserializer, Serializer};
    use tokio::time::Instant;

    pub(crate) fn unix_ms_now() -> u64 {
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

/// SplitMix64's finaliser: the Feistel rounds' mixing function.
fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl State {
    /// A fresh id: `prefix-` + 10 base-36 digits of the time it was made (Unix microseconds, at
    /// least one more than the last id's) + 10 random characters (real ids are 20 lower-case
    /// alphanumerics after the prefix, too).
    pub(crate) fn new_id(&mut self, prefix: &str) -> String {
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        self.last_id_us = now_us.max(self.last_id_us + 1);
        let mut n = self.last_id_us;
        let mut time = [b'0'; 10];
        for slot in time.iter_mut().rev() {
            *slot = ALNUM[(n % 36) as usize];
            n /= 36;
        }
        let mut rng = rand::rng();
        let tail: String = (0..10)
            .map(|_| ALNUM[rng.random_range(0..ALNUM.len())] as char)
            .collect();
        format!(
            "{prefix}-{}{tail}",
            std::str::from_utf8(&time).expect("ascii")
        )
    }

    /// The next network interface's 24 bits of address: a private counter through a keyed
    /// four-round Feistel permutation of 24 bits, so addresses are unique (until 2^24) and say
    /// nothing of how many came before.
    pub(crate) fn address_slot(&mut self) -> u32 {
        if self.address_key == 0 {
            self.address_key = rand::rng().random::<u64>() | 1;
        }
        self.sequence += 1;
        let n = (self.sequence & 0xff_ffff) as u32;
        let (mut left, mut right) = (n >> 12, n & 0xfff);
        for round in 0..4u64 {
            let mixed =
                splitmix64(u64::from(right) ^ self.address_key.rotate_left(16 * round as u32));
            (left, right) = (right, left ^ (mixed as u32 & 0xfff));
        }
        (left << 12) | right
    }

    /// A private address in 10.0.0.0/8 for `slot`.
    pub(crate) fn ip_of(slot: u32) -> String {
        format!(
            "10.{}.{}.{}",
            (slot >> 16) & 0xff,
            (slot >> 8) & 0xff,
            (slot & 0xff).max(2)
        )
    }

    /// A MAC in Alibaba Cloud's prefix for `slot`.
    pub(crate) fn mac_of(slot: u32) -> String {
        format!(
            "00:16:3e:{:02x}:{:02x}:{:02x}",
            (slot >> 16) & 0xff,
            (slot >> 8) & 0xff,
            slot & 0xff
        )
    }

    pub(crate) fn clear(&mut self) {
        *self = State::default();
    }

    /// What `token` was used with, unless it has been forgotten by `now_ms` (Unix milliseconds).
    pub(crate) fn client_token(&self, token: &str, now_ms: u64) -> Option<&TokenUse> {
        self.client_tokens
            .get(token)
            .filter(|used| used.expires_ms() > now_ms)
    }

    /// Remembers that `token` made `instance_ids`, forgetting expired tokens and, beyond
    /// [`MAX_CLIENT_TOKENS`], the oldest.
    pub(crate) fn remember_client_token(
        &mut self,
        token: &str,
        fingerprint: u64,
        instance_ids: Vec<String>,
        now_ms: u64,
    ) {
        self.client_tokens
            .retain(|_, used| used.expires_ms() > now_ms);
        while self.client_tokens.len() >= MAX_CLIENT_TOKENS {
            let oldest = self
                .client_tokens
                .iter()
                .min_by_key(|(_, used)| used.used_ms)
                .map(|(t, _)| t.clone())
                .expect("not empty");
            self.client_tokens.remove(&oldest);
        }
        self.client_tokens.insert(
            token.to_owned(),
            TokenUse {
                fingerprint,
                instance_ids,
                used_ms: now_ms,
                released_ms: None,
            },
        );
    }

    /// Notes that instance `id` was released at `now_ms`: a token all of whose instances are gone
    /// is forgotten [`RELEASED_TOKEN_RETENTION`] later.
    pub(crate) fn released(&mut self, id: &str, now_ms: u64) {
        let instances = &self.instances;
        for used in self.client_tokens.values_mut() {
            if used.released_ms.is_none()
                && used.instance_ids.iter().any(|i| i == id)
                && used.instance_ids.iter().all(|i| !instances.contains_key(i))
            {
                used.released_ms = Some(now_ms);
            }
        }
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
    fn ids_sort_in_creation_order_and_tell_the_time_not_a_count() {
        // Issue 30: a tenant sharing the account must not read from its own machines' ids or
        // addresses how many the others made in between.
        let mut s = State::default();
        let ids: Vec<String> = (0..2000).map(|_| s.new_id("i")).collect();
        assert!(ids.iter().all(|id| id.len() == 22 && id.starts_with("i-")));
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(ids, sorted, "unique, in creation order");
        // Made apart in time, with others made between, two ids differ by the time passed, not
        // by how many came between.
        let time_of = |id: &str| u64::from_str_radix(&id[2..12], 36).unwrap();
        let first = s.new_id("i");
        std::thread::sleep(std::time::Duration::from_millis(30));
        let second = s.new_id("i");
        let apart = time_of(&second) - time_of(&first);
        assert!((30_000..5_000_000).contains(&apart), "{apart}");
        assert!(time_of(&first).abs_diff(unix_ms_now() * 1000) < 60_000_000);
        let slots: Vec<u32> = (0..100_000).map(|_| s.address_slot()).collect();
        let distinct: std::collections::BTreeSet<_> = slots.iter().collect();
        assert_eq!(distinct.len(), slots.len());
        assert!(slots.iter().all(|slot| *slot < 1 << 24));
        // Successive addresses are not near each other: a counter's would differ by 1.
        let near = slots
            .windows(2)
            .filter(|w| w[0].abs_diff(w[1]) < 256)
            .count();
        assert!(
            near < 10,
            "{near} successive addresses within 256 of each other"
        );
        // Another account has another key.
        let mut other = State::default();
        let theirs: Vec<u32> = (0..8).map(|_| other.address_slot()).collect();
        let mut again = State::default();
        assert_ne!(
            theirs,
            (0..8).map(|_| again.address_slot()).collect::<Vec<_>>()
        );
    }

    const HOUR_MS: u64 = 60 * 60 * 1000;

    #[test]
    fn client_tokens_are_forgotten_after_their_retention() {
        let t0 = 1_700_000_000_000;
        let mut s = State::default();
        s.remember_client_token("t", 7, vec!["i-1".into()], t0);
        assert_eq!(
            s.client_token("t", t0 + 4 * HOUR_MS - 1)
                .unwrap()
                .fingerprint,
            7
        );
        assert!(s.client_token("t", t0 + 4 * HOUR_MS).is_none());
        // An expired token is dropped from memory by the next one remembered.
        s.remember_client_token("u", 8, vec!["i-2".into()], t0 + 4 * HOUR_MS);
        assert_eq!(s.client_tokens.len(), 1);
    }

    #[test]
    fn a_token_whose_instances_were_released_is_forgotten_sooner() {
        let t0 = 1_700_000_000_000;
        let mut s = State::default();
        let id = s.new_id("i");
        let other = crate::actions::tests_support::instance(&mut s, Instant::now()).id;
        s.remember_client_token("gone", 1, vec![id.clone()], t0);
        s.remember_client_token("kept", 2, vec![other.clone()], t0);
        s.released(&id, t0 + 1000);
        let retention = RELEASED_TOKEN_RETENTION.as_millis() as u64;
        assert!(s.client_token("gone", t0 + 1000 + retention - 1).is_some());
        assert!(s.client_token("gone", t0 + 1000 + retention).is_none());
        assert!(s.client_token("kept", t0 + 1000 + retention).is_some());
    }

    #[test]
    fn client_tokens_stay_bounded_and_the_oldest_go_first() {
        let t0 = 1_700_000_000_000;
        let mut s = State::default();
        for n in 0..(MAX_CLIENT_TOKENS as u64 + 500) {
            s.remember_client_token(&format!("t{n}"), n, vec![format!("i-{n}")], t0 + n);
            assert!(s.client_tokens.len() <= MAX_CLIENT_TOKENS);
        }
        let now = t0 + MAX_CLIENT_TOKENS as u64 + 500;
        assert!(s.client_token("t0", now).is_none());
        assert!(s.client_token("t499", now).is_none());
        assert!(s.client_token("t500", now).is_some());
        assert!(
            s.client_token(&format!("t{}", MAX_CLIENT_TOKENS + 499), now)
                .is_some()
        );
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
