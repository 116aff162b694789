//! The wire shapes, private: they exist only to be unwrapped into the types of [`crate::model`].
//!
//! Apart because they are ECS's JSON envelopes (`Instances.Instance[]`, `Tags.Tag[]`, ...), not
//! anything a caller sees: the public types stay readable without them, and these change only when
//! ECS's answers do.

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
