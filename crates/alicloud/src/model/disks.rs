//! Disks: the [`DescribeDisks`] filter and the [`Disk`] it answers with.
//!
//! Apart from instances because Berth reads disks only to clean up after an instance (what it
//! left behind, whether it goes with the instance), a family of its own in ECS's API.

use serde::Serialize;

use super::Tag;
use crate::params::Params;

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
