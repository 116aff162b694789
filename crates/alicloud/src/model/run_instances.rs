//! Creating an instance: [`RunInstances`] (with its [`SystemDisk`] and [`DataDisk`]s), how it
//! flattens into parameters, and [`RunInstancesResponse`].
//!
//! Apart because it is the one request that carries secrets (user data, kept out of `Debug`) and
//! the idempotency token, and the largest flattening: what a create sends is read here alone.

use std::fmt;

use base64::Engine as _;

use super::Tag;
use crate::params::Params;

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
