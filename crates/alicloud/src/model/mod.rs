//! Typed requests and responses for the ECS actions Berth uses.
//!
//! Requests know how to flatten themselves into [`Params`]; responses are decoded from the real
//! JSON shapes (`Instances.Instance[]`, `Tags.Tag[]`, ...) and exposed without the wrapper objects.
//!
//! This file holds what every family shares, [`Tag`] (and how tags flatten) and [`Page`]; the
//! rest is a file per family of actions: `run_instances` (create), `instances` (describe),
//! `disks`, `network_interfaces`, and `wire`, the private JSON envelopes.

use serde::{Deserialize, Serialize};

use crate::params::Params;

mod disks;
mod instances;
mod network_interfaces;
mod run_instances;
pub(crate) mod wire;

pub use disks::{DescribeDisks, Disk};
pub use instances::{DescribeInstances, Instance, InstanceNetworkInterface, InstanceStatus};
pub use network_interfaces::{DescribeNetworkInterfaces, NetworkInterface};
pub use run_instances::{DataDisk, RunInstances, RunInstancesResponse, SystemDisk};

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
