//! Typed requests and responses for the ECS actions Berth uses.
//!
//! Requests know how to flatten themselves into [`Params`]; responses are decoded from the real
//! JSON shapes (`Instances.Instance[]`, `Tags.Tag[]`, ...) and exposed without the wrapper objects.

use std::fmt;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::params::Params;

/// A resource tag.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Tag {
    /// The tag key, e.g. `kubernetes.io/cluster/shoot--a`.
    pub key: String,
    /// The tag value; in a filter, empty means "any value".
    pub value: String,
}

impl Tag {
    /// A tag.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Tag {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// How tags flatten, kept beside [`Tag`] so that [`crate::params`] needs no model type.
impl Params {
    /// `Tag.N.Key` / `Tag.N.Value`, 1-based. A tag with an empty value sends only its key, which in a
    /// Describe* filter means "any value".
    pub fn set_tags(&mut self, prefix: &str, tags: &[Tag]) -> &mut Self {
        for (i, tag) in tags.iter().enumerate() {
            let n = i + 1;
            self.set(format!("{prefix}.{n}.Key"), &tag.key);
            self.set(format!("{prefix}.{n}.Value"), &tag.value);
        }
        self
    }
}

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

/// `SystemDisk.*` of RunInstances.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SystemDisk {
    /// `SystemDisk.Category`, e.g. `cloud_efficiency`, `cloud_essd`.
    pub category: Option<String>,
    /// `SystemDisk.Size` in GiB.
    pub size_gib: Option<u32>,
    /// `SystemDisk.DiskName`.
    pub disk_name: Option<String>,
    /// `SystemDisk.Description`.
    pub description: Option<String>,
}

/// One `DataDisk.N.*` of RunInstances.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataDisk {
    /// `DataDisk.N.Category`.
    pub category: Option<String>,
    /// `DataDisk.N.Size` in GiB.
    pub size_gib: Option<u32>,
    /// `DataDisk.N.DiskName` (MCM uses `<machine>-<name>-data-disk`).
    pub disk_name: Option<String>,
    /// `DataDisk.N.Description`.
    pub description: Option<String>,
    /// `DataDisk.N.Encrypted` (`"true"`/`"false"`).
    pub encrypted: Option<bool>,
    /// `DataDisk.N.DeleteWithInstance`; `None` sends nothing (required for `DiskEphemeralSSD`).
    pub delete_with_instance: Option<bool>,
    /// `DataDisk.N.SnapshotId`.
    pub snapshot_id: Option<String>,
}

/// RunInstances: create one instance.
///
/// The region is the client's. Fields left `None` are not sent, so ECS applies its defaults.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RunInstances {
    /// `ImageId` (required).
    pub image_id: String,
    /// `InstanceType` (required).
    pub instance_type: String,
    /// `ZoneId`.
    pub zone_id: Option<String>,
    /// `SecurityGroupId`.
    pub security_group_id: Option<String>,
    /// `VSwitchId`.
    pub v_switch_id: Option<String>,
    /// `PrivateIpAddress`.
    pub private_ip_address: Option<String>,
    /// `InstanceName` (the machine name, which links machine and VM).
    pub instance_name: Option<String>,
    /// `HostName`; leave unset to get the default `iZ<id>Z` host name MCM relies on.
    pub host_name: Option<String>,
    /// `Description`.
    pub description: Option<String>,
    /// `InstanceChargeType` (`PostPaid`/`PrePaid`).
    pub instance_charge_type: Option<String>,
    /// `InternetChargeType` (`PayByTraffic`/`PayByBandwidth`).
    pub internet_charge_type: Option<String>,
    /// `InternetMaxBandwidthIn` (Mbit/s).
    pub internet_max_bandwidth_in: Option<u32>,
    /// `InternetMaxBandwidthOut` (Mbit/s).
    pub internet_max_bandwidth_out: Option<u32>,
    /// `SpotStrategy` (`NoSpot`/`SpotWithPriceLimit`/`SpotAsPriceGo`).
    pub spot_strategy: Option<String>,
    /// `SpotPriceLimit` (with `SpotWithPriceLimit`), sent as a decimal string.
    pub spot_price_limit: Option<String>,
    /// `SpotInterruptionBehavior` (`Terminate`/`Stop`).
    pub spot_interruption_behavior: Option<String>,
    /// `IoOptimized` (`none`/`optimized`).
    pub io_optimized: Option<String>,
    /// `KeyPairName`.
    pub key_pair_name: Option<String>,
    /// `SystemDisk.*`.
    pub system_disk: Option<SystemDisk>,
    /// `DataDisk.N.*`.
    pub data_disks: Vec<DataDisk>,
    /// `Tag.N.*` (applied to the instance and, by ECS, to its disks and NICs).
    pub tags: Vec<Tag>,
    /// Raw user data; the client base64-encodes it into `UserData`.
    pub user_data: Option<Vec<u8>>,
    /// `ClientToken` (≤ 64 ASCII): the same token with the same parameters returns the first call's
    /// instance instead of creating another. When `None`, the client generates one per logical call,
    /// so its own retries are still safe; callers should derive it from something stable (a machine
    /// UID) so that *their* retries are safe too.
    pub client_token: Option<String>,
    /// `DeletionProtection`.
    pub deletion_protection: Option<bool>,
    /// `ResourceGroupId`.
    pub resource_group_id: Option<String>,
    /// `DryRun`: validate only.
    pub dry_run: bool,
}

impl fmt::Debug for RunInstances {
    // Hand-written so user data (often carrying bootstrap tokens) is never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunInstances")
            .field("image_id", &self.image_id)
            .field("instance_type", &self.instance_type)
            .field("zone_id", &self.zone_id)
            .field("v_switch_id", &self.v_switch_id)
            .field("instance_name", &self.instance_name)
            .field("tags", &self.tags)
            .field("data_disks", &self.data_disks.len())
            .field(
                "user_data",
                &self
                    .user_data
                    .as_ref()
                    .map(|d| format!("[{} bytes]", d.len())),
            )
            .field("client_token", &self.client_token)
            .finish_non_exhaustive()
    }
}

impl RunInstances {
    /// Flattens the request into action parameters.
    pub fn to_params(&self, region: &str, client_token: &str) -> Params {
        let mut p = Params::new();
        p.set("RegionId", region)
            .set("ImageId", &self.image_id)
            .set("InstanceType", &self.instance_type)
            .set("Amount", 1)
            .set("ClientToken", client_token)
            .set_opt("ZoneId", self.zone_id.as_ref())
            .set_opt("SecurityGroupId", self.security_group_id.as_ref())
            .set_opt("VSwitchId", self.v_switch_id.as_ref())
            .set_opt("PrivateIpAddress", self.private_ip_address.as_ref())
            .set_opt("InstanceName", self.instance_name.as_ref())
            .set_opt("HostName", self.host_name.as_ref())
            .set_opt("Description", self.description.as_ref())
            .set_opt("InstanceChargeType", self.instance_charge_type.as_ref())
            .set_opt("InternetChargeType", self.internet_charge_type.as_ref())
            .set_opt("InternetMaxBandwidthIn", self.internet_max_bandwidth_in)
            .set_opt("InternetMaxBandwidthOut", self.internet_max_bandwidth_out)
            .set_opt("SpotStrategy", self.spot_strategy.as_ref())
            .set_opt("SpotPriceLimit", self.spot_price_limit.as_ref())
            .set_opt(
                "SpotInterruptionBehavior",
                self.spot_interruption_behavior.as_ref(),
            )
            .set_opt("IoOptimized", self.io_optimized.as_ref())
            .set_opt("KeyPairName", self.key_pair_name.as_ref())
            .set_opt("DeletionProtection", self.deletion_protection)
            .set_opt("ResourceGroupId", self.resource_group_id.as_ref())
            .set_tags("Tag", &self.tags);
        if self.dry_run {
            p.set("DryRun", true);
        }
        if let Some(d) = &self.system_disk {
            p.set_opt("SystemDisk.Category", d.category.as_ref())
                .set_opt("SystemDisk.Size", d.size_gib)
                .set_opt("SystemDisk.DiskName", d.disk_name.as_ref())
                .set_opt("SystemDisk.Description", d.description.as_ref());
        }
        for (i, d) in self.data_disks.iter().enumerate() {
            let n = i + 1;
            p.set_opt(&format!("DataDisk.{n}.Category"), d.category.as_ref())
                .set_opt(&format!("DataDisk.{n}.Size"), d.size_gib)
                .set_opt(&format!("DataDisk.{n}.DiskName"), d.disk_name.as_ref())
                .set_opt(&format!("DataDisk.{n}.Description"), d.description.as_ref())
                .set_opt(&format!("DataDisk.{n}.Encrypted"), d.encrypted)
                .set_opt(
                    &format!("DataDisk.{n}.DeleteWithInstance"),
                    d.delete_with_instance,
                )
                .set_opt(&format!("DataDisk.{n}.SnapshotId"), d.snapshot_id.as_ref());
        }
        if let Some(data) = &self.user_data {
            p.set(
                "UserData",
                base64::engine::general_purpose::STANDARD.encode(data),
            );
        }
        p
    }
}

/// What RunInstances answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInstancesResponse {
    /// ECS's request id.
    pub request_id: String,
    /// The created instance ids (one for Berth's calls; empty for a dry run).
    pub instance_ids: Vec<String>,
    /// `OrderId`, for subscription instances.
    pub order_id: Option<String>,
    /// The `ClientToken` that was sent (given or generated), for logs and later retries.
    pub client_token: String,
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

/// One page of a Describe* answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// The items on this page.
    pub items: Vec<T>,
    /// The token for the next page; `None` on the last page.
    pub next_token: Option<String>,
    /// ECS's request id.
    pub request_id: String,
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

/// Filters of DescribeDisks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribeDisks {
    /// `DiskIds` (JSON array, ≤ 100).
    pub disk_ids: Vec<String>,
    /// `InstanceId`.
    pub instance_id: Option<String>,
    /// `Status` (`In_use`, `Available`, ...).
    pub status: Option<String>,
    /// `DiskType` (`system`, `data`, `all`).
    pub disk_type: Option<String>,
    /// `Tag.N.Key/Value`.
    pub tags: Vec<Tag>,
    /// `MaxResults` (default 100).
    pub max_results: Option<u32>,
    /// `NextToken`.
    pub next_token: Option<String>,
}

impl DescribeDisks {
    /// Flattens the filter into action parameters.
    pub fn to_params(&self, region: &str) -> Params {
        let mut p = Params::new();
        p.set("RegionId", region)
            .set_json_list("DiskIds", &self.disk_ids)
            .set_opt("InstanceId", self.instance_id.as_ref())
            .set_opt("Status", self.status.as_ref())
            .set_opt("DiskType", self.disk_type.as_ref())
            .set("MaxResults", self.max_results.unwrap_or(100).clamp(1, 500))
            .set_opt("NextToken", self.next_token.as_ref())
            .set_tags("Tag", &self.tags);
        p
    }
}

/// A block storage disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Disk {
    /// `DiskId`.
    pub disk_id: String,
    /// `DiskName`.
    pub disk_name: Option<String>,
    /// `Status` (`In_use`, `Available`, `Attaching`, ...).
    pub status: String,
    /// `Type` (`system`/`data`).
    pub kind: Option<String>,
    /// `Category`.
    pub category: Option<String>,
    /// `Size` in GiB.
    pub size_gib: Option<u64>,
    /// `InstanceId` it is attached to (empty when detached).
    pub instance_id: Option<String>,
    /// `DeleteWithInstance`.
    pub delete_with_instance: Option<bool>,
    /// `Tags.Tag[]`.
    pub tags: Vec<Tag>,
}

/// Filters of DescribeNetworkInterfaces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribeNetworkInterfaces {
    /// `NetworkInterfaceId.N`.
    pub network_interface_ids: Vec<String>,
    /// `InstanceId`.
    pub instance_id: Option<String>,
    /// `Status` (`Available`, `InUse`, ...).
    pub status: Option<String>,
    /// `Type` (`Primary`/`Secondary`).
    pub kind: Option<String>,
    /// `Tag.N.Key/Value`.
    pub tags: Vec<Tag>,
    /// `MaxResults` (default 100).
    pub max_results: Option<u32>,
    /// `NextToken`.
    pub next_token: Option<String>,
}

impl DescribeNetworkInterfaces {
    /// Flattens the filter into action parameters.
    pub fn to_params(&self, region: &str) -> Params {
        let mut p = Params::new();
        p.set("RegionId", region)
            .set_repeat_list("NetworkInterfaceId", &self.network_interface_ids)
            .set_opt("InstanceId", self.instance_id.as_ref())
            .set_opt("Status", self.status.as_ref())
            .set_opt("Type", self.kind.as_ref())
            .set("MaxResults", self.max_results.unwrap_or(100).clamp(1, 500))
            .set_opt("NextToken", self.next_token.as_ref())
            .set_tags("Tag", &self.tags);
        p
    }
}

/// An elastic network interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetworkInterface {
    /// `NetworkInterfaceId`.
    pub network_interface_id: String,
    /// `NetworkInterfaceName`.
    pub network_interface_name: Option<String>,
    /// `Status` (`Available`, `InUse`, ...).
    pub status: String,
    /// `Type` (`Primary`/`Secondary`).
    pub kind: Option<String>,
    /// `InstanceId` it is attached to.
    pub instance_id: Option<String>,
    /// `PrivateIpAddress`.
    pub private_ip_address: Option<String>,
    /// `Tags.Tag[]`.
    pub tags: Vec<Tag>,
}

/// The wire shapes, private: they exist only to be unwrapped into the types above.
pub(crate) mod wire {
    use serde::Deserialize;

    use super::*;

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "PascalCase", default)]
    pub(crate) struct TagSet {
        pub(crate) tag: Vec<WireTag>,
    }

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "PascalCase", default)]
    pub(crate) struct WireTag {
        pub(crate) tag_key: String,
        pub(crate) tag_value: String,
    }

    impl TagSet {
        pub(crate) fn into_tags(self) -> Vec<Tag> {
            self.tag
                .into_iter()
                .map(|t| Tag::new(t.tag_key, t.tag_value))
                .collect()
        }
    }

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "PascalCase", default)]
    pub(crate) struct IpSet {
        pub(crate) ip_address: Vec<String>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub(crate) struct RunInstancesBody {
        #[serde(default)]
        pub(crate) request_id: String,
        #[serde(default)]
        pub(crate) order_id: Option<String>,
        #[serde(default)]
        pub(crate) instance_id_sets: InstanceIdSets,
    }

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "PascalCase", default)]
    pub(crate) struct InstanceIdSets {
        pub(crate) instance_id_set: Vec<String>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub(crate) struct DescribeInstancesBody {
        #[serde(default)]
        pub(crate) request_id: String,
        #[serde(default)]
        pub(crate) next_token: Option<String>,
        #[serde(default)]
        pub(crate) instances: InstanceSet,
    }

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "PascalCase", default)]
    pub(crate) struct InstanceSet {
        pub(crate) instance: Vec<WireInstance>,
    }

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "PascalCase", default)]
    pub(crate) struct VpcAttributes {
        pub(crate) vpc_id: Option<String>,
        #[serde(rename = "VSwitchId")]
        pub(crate) v_switch_id: Option<String>,
        pub(crate) private_ip_address: IpSet,
    }

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "PascalCase", default)]
    pub(crate) struct NicSet {
        pub(crate) network_interface: Vec<WireInstanceNic>,
    }

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "PascalCase", default)]
    pub(crate) struct WireInstanceNic {
        pub(crate) network_interface_id: String,
        pub(crate) primary_ip_address: Option<String>,
        #[serde(rename = "Type")]
        pub(crate) kind: Option<String>,
    }

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "PascalCase", default)]
    pub(crate) struct LockSet {
        pub(crate) lock_reason: Vec<LockReason>,
    }

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "PascalCase", default)]
    pub(crate) struct LockReason {
        pub(crate) lock_reason: String,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub(crate) struct WireInstance {
        pub(crate) instance_id: String,
        #[serde(default)]
        pub(crate) instance_name: String,
        #[serde(default)]
        pub(crate) host_name: Option<String>,
        pub(crate) status: InstanceStatus,
        #[serde(default)]
        pub(crate) region_id: Option<String>,
        #[serde(default)]
        pub(crate) zone_id: Option<String>,
        #[serde(default)]
        pub(crate) instance_type: Option<String>,
        #[serde(default)]
        pub(crate) image_id: Option<String>,
        #[serde(default)]
        pub(crate) creation_time: Option<String>,
        #[serde(default)]
        pub(crate) start_time: Option<String>,
        #[serde(default)]
        pub(crate) vpc_attributes: VpcAttributes,
        #[serde(default)]
        pub(crate) public_ip_address: IpSet,
        #[serde(default)]
        pub(crate) network_interfaces: NicSet,
        #[serde(default)]
        pub(crate) tags: TagSet,
        #[serde(default)]
        pub(crate) key_pair_name: Option<String>,
        #[serde(default)]
        pub(crate) spot_strategy: Option<String>,
        #[serde(default)]
        pub(crate) operation_locks: LockSet,
    }

    impl From<WireInstance> for Instance {
        fn from(w: WireInstance) -> Self {
            Instance {
                instance_id: w.instance_id,
                instance_name: w.instance_name,
                host_name: w.host_name.filter(|s| !s.is_empty()),
                status: w.status,
                region_id: w.region_id,
                zone_id: w.zone_id,
                instance_type: w.instance_type,
                image_id: w.image_id,
                creation_time: w.creation_time,
                start_time: w.start_time,
                private_ip_addresses: w.vpc_attributes.private_ip_address.ip_address,
                public_ip_addresses: w.public_ip_address.ip_address,
                vpc_id: w.vpc_attributes.vpc_id.filter(|s| !s.is_empty()),
                v_switch_id: w.vpc_attributes.v_switch_id.filter(|s| !s.is_empty()),
                network_interfaces: w
                    .network_interfaces
                    .network_interface
                    .into_iter()
                    .map(|n| InstanceNetworkInterface {
                        network_interface_id: n.network_interface_id,
                        primary_ip_address: n.primary_ip_address,
                        kind: n.kind,
                    })
                    .collect(),
                tags: w.tags.into_tags(),
                key_pair_name: w.key_pair_name.filter(|s| !s.is_empty()),
                spot_strategy: w.spot_strategy,
                operation_locks: w
                    .operation_locks
                    .lock_reason
                    .into_iter()
                    .map(|l| l.lock_reason)
                    .collect(),
            }
        }
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub(crate) struct DescribeDisksBody {
        #[serde(default)]
        pub(crate) request_id: String,
        #[serde(default)]
        pub(crate) next_token: Option<String>,
        #[serde(default)]
        pub(crate) disks: DiskSet,
    }

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "PascalCase", default)]
    pub(crate) struct DiskSet {
        pub(crate) disk: Vec<WireDisk>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub(crate) struct WireDisk {
        pub(crate) disk_id: String,
        #[serde(default)]
        pub(crate) disk_name: Option<String>,
        #[serde(default)]
        pub(crate) status: String,
        #[serde(default, rename = "Type")]
        pub(crate) kind: Option<String>,
        #[serde(default)]
        pub(crate) category: Option<String>,
        #[serde(default)]
        pub(crate) size: Option<u64>,
        #[serde(default)]
        pub(crate) instance_id: Option<String>,
        #[serde(default)]
        pub(crate) delete_with_instance: Option<bool>,
        #[serde(default)]
        pub(crate) tags: TagSet,
    }

    impl From<WireDisk> for Disk {
        fn from(w: WireDisk) -> Self {
            Disk {
                disk_id: w.disk_id,
                disk_name: w.disk_name.filter(|s| !s.is_empty()),
                status: w.status,
                kind: w.kind,
                category: w.category,
                size_gib: w.size,
                instance_id: w.instance_id.filter(|s| !s.is_empty()),
                delete_with_instance: w.delete_with_instance,
                tags: w.tags.into_tags(),
            }
        }
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub(crate) struct DescribeNicsBody {
        #[serde(default)]
        pub(crate) request_id: String,
        #[serde(default)]
        pub(crate) next_token: Option<String>,
        #[serde(default)]
        pub(crate) network_interface_sets: NicSets,
    }

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "PascalCase", default)]
    pub(crate) struct NicSets {
        pub(crate) network_interface_set: Vec<WireNic>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    pub(crate) struct WireNic {
        pub(crate) network_interface_id: String,
        #[serde(default)]
        pub(crate) network_interface_name: Option<String>,
        #[serde(default)]
        pub(crate) status: String,
        #[serde(default, rename = "Type")]
        pub(crate) kind: Option<String>,
        #[serde(default)]
        pub(crate) instance_id: Option<String>,
        #[serde(default)]
        pub(crate) private_ip_address: Option<String>,
        #[serde(default)]
        pub(crate) tags: TagSet,
    }

    impl From<WireNic> for NetworkInterface {
        fn from(w: WireNic) -> Self {
            NetworkInterface {
                network_interface_id: w.network_interface_id,
                network_interface_name: w.network_interface_name.filter(|s| !s.is_empty()),
                status: w.status,
                kind: w.kind,
                instance_id: w.instance_id.filter(|s| !s.is_empty()),
                private_ip_address: w.private_ip_address.filter(|s| !s.is_empty()),
                tags: w.tags.into_tags(),
            }
        }
    }

    /// Empty `NextToken` means "last page".
    pub(crate) fn token(t: Option<String>) -> Option<String> {
        t.filter(|t| !t.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_instances_flattens_like_the_go_provider() {
        let req = RunInstances {
            image_id: "m-img".into(),
            instance_type: "ecs.g6.large".into(),
            zone_id: Some("cn-shanghai-b".into()),
            v_switch_id: Some("vsw-1".into()),
            instance_name: Some("machine-1".into()),
            io_optimized: Some("optimized".into()),
            internet_max_bandwidth_out: Some(5),
            system_disk: Some(SystemDisk {
                category: Some("cloud_efficiency".into()),
                size_gib: Some(50),
                ..Default::default()
            }),
            data_disks: vec![
                DataDisk {
                    category: Some("cloud_ssd".into()),
                    size_gib: Some(100),
                    disk_name: Some("machine-1-d1-data-disk".into()),
                    encrypted: Some(false),
                    delete_with_instance: Some(true),
                    ..Default::default()
                },
                DataDisk {
                    category: Some("DiskEphemeralSSD".into()),
                    size_gib: Some(20),
                    ..Default::default()
                },
            ],
            tags: vec![Tag::new("kubernetes.io/cluster/c", "1")],
            user_data: Some(b"#!/bin/sh\necho hi".to_vec()),
            ..Default::default()
        };
        let p = req.to_params("cn-shanghai", "tok-1");
        let m = p.as_map();
        assert_eq!(m["RegionId"], "cn-shanghai");
        assert_eq!(m["ClientToken"], "tok-1");
        assert_eq!(m["IoOptimized"], "optimized");
        assert_eq!(m["SystemDisk.Category"], "cloud_efficiency");
        assert_eq!(m["SystemDisk.Size"], "50");
        assert_eq!(m["DataDisk.1.Encrypted"], "false");
        assert_eq!(m["DataDisk.1.DeleteWithInstance"], "true");
        assert_eq!(m["DataDisk.1.DiskName"], "machine-1-d1-data-disk");
        assert!(!m.contains_key("DataDisk.2.DeleteWithInstance"));
        assert_eq!(m["DataDisk.2.Size"], "20");
        assert_eq!(m["Tag.1.Key"], "kubernetes.io/cluster/c");
        assert_eq!(m["UserData"], "IyEvYmluL3NoCmVjaG8gaGk=");
        assert!(!m.contains_key("SecurityGroupId"));
        assert!(!m.contains_key("DryRun"));
        // User data never shows in Debug.
        assert!(!format!("{req:?}").contains("echo hi"));
    }

    #[test]
    fn creation_time_reads_both_ecs_formats() {
        let body = serde_json::json!({"Instances": {"Instance": [
            {"InstanceId": "i-1", "Status": "Running", "CreationTime": "2024-05-01T10:07Z"},
            {"InstanceId": "i-2", "Status": "Running", "CreationTime": "2024-05-01T10:07:30Z"},
            {"InstanceId": "i-3", "Status": "Running", "CreationTime": "yesterday"},
            {"InstanceId": "i-4", "Status": "Running"}
        ]}});
        let b: wire::DescribeInstancesBody = serde_json::from_value(body).unwrap();
        let v: Vec<Instance> = b.instances.instance.into_iter().map(Into::into).collect();
        assert_eq!(v[0].creation_timestamp(), Some(1_714_558_020));
        assert_eq!(v[1].creation_timestamp(), Some(1_714_558_050));
        assert_eq!(v[2].creation_timestamp(), None);
        assert_eq!(v[3].creation_timestamp(), None);
    }

    #[test]
    fn describe_instances_defaults_to_100_per_page() {
        let f = DescribeInstances {
            instance_ids: vec!["i-1".into()],
            status: Some(InstanceStatus::Running),
            tags: vec![Tag::new("k", "")],
            ..Default::default()
        };
        let p = f.to_params("r");
        assert_eq!(p.get("MaxResults"), Some("100"));
        assert_eq!(p.get("InstanceIds"), Some(r#"["i-1"]"#));
        assert_eq!(p.get("Status"), Some("Running"));
        assert_eq!(p.get("Tag.1.Key"), Some("k"));
        assert_eq!(p.get("Tag.1.Value"), None);
    }

    #[test]
    fn instances_decode_from_the_real_shape() {
        let body = serde_json::json!({
            "RequestId": "r-1", "NextToken": "",
            "Instances": {"Instance": [{
                "InstanceId": "i-abc", "InstanceName": "m1", "HostName": "iZabcZ",
                "Status": "Running", "RegionId": "cn-shanghai", "ZoneId": "cn-shanghai-b",
                "VpcAttributes": {"VpcId": "vpc-1", "VSwitchId": "vsw-1",
                    "PrivateIpAddress": {"IpAddress": ["10.0.0.5"]}},
                "NetworkInterfaces": {"NetworkInterface": [{"NetworkInterfaceId": "eni-1",
                    "PrimaryIpAddress": "10.0.0.5", "Type": "Primary"}]},
                "Tags": {"Tag": [{"TagKey": "k", "TagValue": "v"}]},
                "OperationLocks": {"LockReason": []},
                "Unknown": 1
            }, {"InstanceId": "i-def", "Status": "Rebooting"}]}
        });
        let b: wire::DescribeInstancesBody = serde_json::from_value(body).unwrap();
        assert_eq!(wire::token(b.next_token), None);
        let v: Vec<Instance> = b.instances.instance.into_iter().map(Into::into).collect();
        assert_eq!(v[0].private_ip_addresses, ["10.0.0.5"]);
        assert_eq!(v[0].tag("k"), Some("v"));
        assert_eq!(v[0].network_interfaces[0].kind.as_deref(), Some("Primary"));
        assert_eq!(v[1].status, InstanceStatus::Other("Rebooting".into()));
        assert!(v[1].tags.is_empty());
    }

    #[test]
    fn flattening_follows_the_sdk() {
        let mut p = Params::new();
        p.set("Empty", "")
            .set_opt("Size", Some(50))
            .set_opt::<String>("Missing", None)
            .set_tags("Tag", &[Tag::new("a", "1"), Tag::new("b", "")])
            .set_json_list("InstanceIds", &["i-1".into(), "i-2".into()])
            .set_repeat_list("NetworkInterfaceId", &["eni-1".into()]);
        let keys: Vec<_> = p.as_map().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "InstanceIds",
                "NetworkInterfaceId.1",
                "Size",
                "Tag.1.Key",
                "Tag.1.Value",
                "Tag.2.Key"
            ]
        );
        assert_eq!(p.get("InstanceIds"), Some(r#"["i-1","i-2"]"#));
        assert_eq!(p.get("Size"), Some("50"));
    }
}
