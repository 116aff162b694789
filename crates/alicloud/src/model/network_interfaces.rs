//! Elastic network interfaces: the [`DescribeNetworkInterfaces`] filter and the
//! [`NetworkInterface`] it answers with.
//!
//! Apart from instances because Berth reads interfaces only to clean up after an instance (the
//! ones it leaves behind), a family of its own in ECS's API, with its own list syntax (`Name.N`).

use serde::Serialize;

use super::Tag;
use crate::params::Params;

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
