//! Describing instances: [`DescribeInstances`] and what it answers, [`Instance`] (with its
//! [`InstanceStatus`] and [`InstanceNetworkInterface`]s).
//!
//! Apart from creating them (`run_instances`) because an instance as ECS reports it and an
//! instance as Berth asks for it share almost no fields: finding a machine's VM reads this file,
//! making one reads the other.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::Tag;
use crate::params::Params;

/// An instance's `Status`, as DescribeInstances reports it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum InstanceStatus {
    /// Being created.
    Pending,
    /// Booting.
    Starting,
    /// Up.
    Running,
    /// Shutting down.
    Stopping,
    /// Stopped.
    Stopped,
    /// A status this client does not know (kept verbatim).
    Other(String),
}

impl InstanceStatus {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            InstanceStatus::Pending => "Pending",
            InstanceStatus::Starting => "Starting",
            InstanceStatus::Running => "Running",
            InstanceStatus::Stopping => "Stopping",
            InstanceStatus::Stopped => "Stopped",
            InstanceStatus::Other(s) => s,
        }
    }

    /// Parses a wire name; unknown names become [`InstanceStatus::Other`].
    pub fn parse(s: &str) -> Self {
        match s {
            "Pending" => InstanceStatus::Pending,
            "Starting" => InstanceStatus::Starting,
            "Running" => InstanceStatus::Running,
            "Stopping" => InstanceStatus::Stopping,
            "Stopped" => InstanceStatus::Stopped,
            other => InstanceStatus::Other(other.to_owned()),
        }
    }

    /// Whether the instance is between stable states (Pending, Starting, Stopping).
    pub fn is_transitional(&self) -> bool {
        matches!(
            self,
            InstanceStatus::Pending | InstanceStatus::Starting | InstanceStatus::Stopping
        )
    }
}

impl fmt::Display for InstanceStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for InstanceStatus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(InstanceStatus::parse(&String::deserialize(d)?))
    }
}

impl Serialize for InstanceStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Filters of DescribeInstances; all that are set must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribeInstances {
    /// `InstanceIds` (sent as a JSON array; [`crate::EcsClient::describe_all_instances`] splits lists
    /// longer than 100 into several calls).
    pub instance_ids: Vec<String>,
    /// `InstanceName`; `*` is a wildcard (fuzzy match).
    pub instance_name: Option<String>,
    /// `Status`.
    pub status: Option<InstanceStatus>,
    /// `Tag.N.Key/Value`; an empty value matches any value.
    pub tags: Vec<Tag>,
    /// `ZoneId`.
    pub zone_id: Option<String>,
    /// `VSwitchId`.
    pub v_switch_id: Option<String>,
    /// `MaxResults`; default 100 (ECS's own default is 10).
    pub max_results: Option<u32>,
    /// `NextToken` of the previous page.
    pub next_token: Option<String>,
}

impl DescribeInstances {
    /// Flattens the filter into action parameters.
    pub fn to_params(&self, region: &str) -> Params {
        let mut p = Params::new();
        p.set("RegionId", region)
            .set_json_list("InstanceIds", &self.instance_ids)
            .set_opt("InstanceName", self.instance_name.as_ref())
            .set_opt("Status", self.status.as_ref())
            .set_opt("ZoneId", self.zone_id.as_ref())
            .set_opt("VSwitchId", self.v_switch_id.as_ref())
            .set("MaxResults", self.max_results.unwrap_or(100).clamp(1, 100))
            .set_opt("NextToken", self.next_token.as_ref())
            .set_tags("Tag", &self.tags);
        p
    }
}

/// A network interface as DescribeInstances lists it inside an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceNetworkInterface {
    /// `NetworkInterfaceId`.
    pub network_interface_id: String,
    /// `PrimaryIpAddress`.
    pub primary_ip_address: Option<String>,
    /// `Type` (`Primary`/`Secondary`).
    pub kind: Option<String>,
}

/// An ECS instance (the fields Berth uses, unwrapped from their `{X:{Y:[..]}}` envelopes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Instance {
    /// `InstanceId`.
    pub instance_id: String,
    /// `InstanceName`.
    pub instance_name: String,
    /// `HostName`.
    pub host_name: Option<String>,
    /// `Status`.
    pub status: InstanceStatus,
    /// `RegionId`.
    pub region_id: Option<String>,
    /// `ZoneId`.
    pub zone_id: Option<String>,
    /// `InstanceType`.
    pub instance_type: Option<String>,
    /// `ImageId`.
    pub image_id: Option<String>,
    /// `CreationTime` as ECS formats it (`yyyy-MM-ddTHH:mmZ`).
    pub creation_time: Option<String>,
    /// `StartTime`.
    pub start_time: Option<String>,
    /// `VpcAttributes.PrivateIpAddress.IpAddress[]`.
    pub private_ip_addresses: Vec<String>,
    /// `PublicIpAddress.IpAddress[]`.
    pub public_ip_addresses: Vec<String>,
    /// `VpcAttributes.VpcId`.
    pub vpc_id: Option<String>,
    /// `VpcAttributes.VSwitchId`.
    pub v_switch_id: Option<String>,
    /// `NetworkInterfaces.NetworkInterface[]`.
    pub network_interfaces: Vec<InstanceNetworkInterface>,
    /// `Tags.Tag[]`.
    pub tags: Vec<Tag>,
    /// `KeyPairName`.
    pub key_pair_name: Option<String>,
    /// `SpotStrategy`.
    pub spot_strategy: Option<String>,
    /// `OperationLocks.LockReason[].LockReason`.
    pub operation_locks: Vec<String>,
}

impl Instance {
    /// The value of tag `key`, if the instance has it.
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags
            .iter()
            .find(|t| t.key == key)
            .map(|t| t.value.as_str())
    }

    /// `CreationTime` as seconds since the Unix epoch, if ECS gave one in either of its formats
    /// (`yyyy-MM-ddTHH:mmZ`, or with seconds). ECS reports minutes, so instances created in the same
    /// minute compare equal.
    pub fn creation_timestamp(&self) -> Option<i64> {
        let text = self.creation_time.as_deref()?.trim();
        ["%Y-%m-%dT%H:%MZ", "%Y-%m-%dT%H:%M:%SZ"]
            .iter()
            .find_map(|f| chrono::NaiveDateTime::parse_from_str(text, f).ok())
            .map(|t| t.and_utc().timestamp())
    }
}
