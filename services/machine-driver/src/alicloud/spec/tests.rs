//! The provider spec's tests: decoding, the field rules with their messages, the region policy as
//! the spec meets it, and the RunInstances request the spec becomes.
//!
//! Apart from the spec because they outweigh it: the file holds the code, this one its proof.

use std::collections::BTreeSet;

use alicloud::Region;
use domain::Code;
use domain::machine::Machine;
use serde_json::json;

use super::rules::disk_name_matches;
use super::*;
use crate::alicloud::region::RegionPolicy;

/// The policy of a driver calling the regional endpoints, without an allow-list.
fn policy() -> RegionPolicy {
    RegionPolicy {
        allowed: BTreeSet::new(),
        known_only: true,
    }
}

fn valid() -> serde_json::Value {
    json!({
        "apiVersion": "mcm.gardener.cloud/v1alpha1",
        "imageID": "m-image",
        "instanceType": "ecs.g6.large",
        "region": "cn-shanghai",
        "zoneID": "cn-shanghai-b",
        "securityGroupID": "sg-1",
        "vSwitchID": "vsw-1",
        "systemDisk": {"category": "cloud_efficiency", "size": 50},
        "dataDisks": [
            {"name": "d1", "category": "cloud_efficiency", "size": 100, "description": "ns-datavol-d1"},
            {"name": "d2", "category": "cloud_essd", "size": 40, "deleteWithInstance": false, "encrypted": true},
            {"name": "eph", "category": "DiskEphemeralSSD", "size": 20}
        ],
        "instanceChargeType": "PostPaid",
        "internetChargeType": "PayByTraffic",
        "internetMaxBandwidthIn": 5,
        "internetMaxBandwidthOut": 5,
        "spotStrategy": "NoSpot",
        "IoOptimized": "optimized",
        "keyPairName": "kp",
        "tags": {"kubernetes.io/cluster/shoot--mcm": "1", "kubernetes.io/role/worker/shoot--mcm": "1", "pool": "a"},
        "unknownField": {"ignored": true}
    })
}

#[test]
fn decodes_mcm_field_names_and_validates() {
    let s = ProviderSpec::decode(&valid()).unwrap();
    assert_eq!(s.image_id, "m-image");
    assert_eq!(s.io_optimized, "optimized");
    assert_eq!(s.data_disks[1].delete_with_instance, Some(false));
    s.validate_for_create(&policy()).unwrap();
    assert_eq!(s.cluster_tags().len(), 1);
    assert_eq!(s.list_tags().len(), 2);
    let mut v = valid();
    v.as_object_mut().unwrap().remove("IoOptimized");
    v["ioOptimized"] = json!("none");
    assert_eq!(ProviderSpec::decode(&v).unwrap().io_optimized, "none");
}

#[test]
fn a_misspelt_field_is_named_with_the_one_meant_and_others_are_ignored() {
    let mut v = valid();
    v["instanceTyp"] = v["instanceType"].take();
    v.as_object_mut().unwrap().remove("instanceType");
    v["systemDisk"]["categroy"] = json!("cloud_ssd");
    v["dataDisks"][1]["sizes"] = json!(20);
    let e = ProviderSpec::decode(&v).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    for (field, meant) in [
        ("machineClass.providerSpec.instanceTyp", "instanceType"),
        ("machineClass.providerSpec.systemDisk.categroy", "category"),
        ("machineClass.providerSpec.dataDisks[1].sizes", "size"),
    ] {
        assert!(
            e.message.contains(&format!(
                "{field}: is not a field of the Alicloud provider spec: did you mean {meant}?"
            )),
            "{field}: {}",
            e.message
        );
    }
    // MCM's fields Berth does not read, and fields far from every known one, are accepted.
    let mut v = valid();
    v["secretRef"] = json!({"name": "cloud", "namespace": "default"});
    v["credentialsSecretRef"] = json!({"name": "cloud"});
    v["kind"] = json!("AlicloudMachineClass");
    v["operatingSystem"] = json!({"operatingSystemName": "gardenlinux"});
    ProviderSpec::decode(&v)
        .unwrap()
        .validate_for_create(&policy())
        .unwrap();
    // A key that is not text a log should carry is shown escaped.
    let mut v = valid();
    v["zoneI\n"] = json!("x");
    let e = ProviderSpec::decode(&v).unwrap_err();
    assert!(
        e.message.contains("providerSpec.zoneI\\n:"),
        "{}",
        e.message
    );
}

#[test]
fn decode_errors_name_the_path() {
    let mut v = valid();
    v["dataDisks"][0]["size"] = json!("big");
    let e = ProviderSpec::decode(&v).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(
        e.message
            .starts_with("machineClass.providerSpec.dataDisks[0].size:"),
        "{}",
        e.message
    );
    let e = ProviderSpec::decode(&json!("nope")).unwrap_err();
    assert!(e.message.starts_with("machineClass.providerSpec:"));
}

#[test]
fn historical_rules_with_their_messages() {
    let s = ProviderSpec::decode(&json!({"tags": {}})).unwrap();
    let msg = s.validate_for_create(&policy()).unwrap_err().message;
    for want in [
        "machineClass.providerSpec.imageID: ImageID is required",
        "machineClass.providerSpec.region: Region is required",
        "machineClass.providerSpec.zoneID: ZoneID is required",
        "machineClass.providerSpec.instanceType: InstanceType is required",
        "machineClass.providerSpec.vSwitchID: VSwitchID is required",
        "machineClass.providerSpec.keyPairName: KeyPairName is required",
        "machineClass.providerSpec.tags: Tags required for Alicloud machines",
    ] {
        assert!(msg.contains(want), "{want} not in {msg}");
    }
    let mut v = valid();
    v["tags"] = json!({"kubernetes.io/cluster/x": "1"});
    let msg = ProviderSpec::decode(&v)
        .unwrap()
        .validate_scope(&policy())
        .unwrap_err()
        .message;
    assert_eq!(
        msg,
        "machineClass.providerSpec.tags: Tag required of the form kubernetes.io/role/****"
    );
    v["tags"] = json!({"kubernetes.io/role/x": "1"});
    let msg = ProviderSpec::decode(&v)
        .unwrap()
        .validate_scope(&policy())
        .unwrap_err()
        .message;
    assert!(msg.contains("kubernetes.io/cluster/****"), "{msg}");
}

#[test]
fn data_disk_rules() {
    let mut v = valid();
    v["dataDisks"] = json!([
        {"name": "", "category": "c", "size": 20},
        {"name": "1bad", "category": "c", "size": 20},
        {"name": format!("a{}", "b".repeat(64)), "category": "c", "size": 20},
        {"name": "dup", "category": "c", "size": 19},
        {"name": "dup", "category": "", "size": 32769}
    ]);
    let msg = ProviderSpec::decode(&v)
        .unwrap()
        .validate_for_create(&policy())
        .unwrap_err()
        .message;
    for want in [
        "dataDisks[0].name: Data Disk name is required",
        "dataDisks[1].name: Disk name given: 1bad does not match the expected pattern",
        "dataDisks[2].name: Data Disk Name length must be between 1 and 64",
        "dataDisks[3].size: Invalid value: 19: must be between 20 and 32768, inclusive",
        "dataDisks[4].size: Invalid value: 32769",
        "dataDisks[4].category: Data Disk category is required",
        "Data Disk Name 'dup' duplicated 2 times, Name must be unique",
    ] {
        assert!(msg.contains(want), "{want} not in {msg}");
    }
    assert!(disk_name_matches("a1.b-c_d:e"));
    assert!(!disk_name_matches("a"));
    assert!(!disk_name_matches("a b"));
}

#[test]
fn regions_follow_the_grammar_then_the_policy() {
    let with_region = |r: &str| {
        let mut v = valid();
        v["region"] = json!(r);
        ProviderSpec::decode(&v).unwrap()
    };
    assert_eq!(
        with_region("eu-central-1")
            .validate_scope(&policy())
            .unwrap()
            .as_str(),
        "eu-central-1"
    );
    for bad in ["x@127.0.0.1:9/", "../x", "CN-SHANGHAI", "cn-shanghai/"] {
        let msg = with_region(bad)
            .validate_for_create(&policy())
            .unwrap_err()
            .message;
        assert!(
            msg.starts_with("machineClass.providerSpec.region: is not an ECS region id"),
            "{bad:?}: {msg}"
        );
        assert!(!msg.contains("127.0.0.1"), "{msg}");
    }
    let unknown = with_region("xx-nowhere-1");
    let e = unknown.validate_scope(&policy()).unwrap_err();
    // Well-formed: the driver's set-up refuses it (412), as the document's grammar admits it.
    assert_eq!(e.code, Code::FailedPrecondition);
    assert!(
        e.message
            .contains("is not a region this driver knows an ECS endpoint for"),
        "{}",
        e.message
    );
    // With an endpoint override any well-formed region goes; an allow-list narrows either way.
    let lenient = RegionPolicy::default();
    assert!(unknown.validate_scope(&lenient).is_ok());
    let listed = RegionPolicy {
        allowed: [Region::parse("xx-nowhere-1").unwrap()].into(),
        known_only: true,
    };
    assert!(unknown.validate_scope(&listed).is_ok());
    let msg = with_region("cn-shanghai")
        .validate_scope(&listed)
        .unwrap_err()
        .message;
    assert!(msg.contains("the operator's allow-list"), "{msg}");
}

#[test]
fn enums_and_tag_limits() {
    let mut v = valid();
    v["spotStrategy"] = json!("Cheap");
    v["IoOptimized"] = json!("yes");
    v["tags"][MACHINE_TAG] = json!("x");
    v["tags"][OWNER_TAG] = json!("x");
    v["tags"]["aliyun:x"] = json!("y");
    let msg = ProviderSpec::decode(&v)
        .unwrap()
        .validate_for_create(&policy())
        .unwrap_err()
        .message;
    assert!(
        msg.contains("spotStrategy: Unsupported value: \"Cheap\""),
        "{msg}"
    );
    assert!(msg.contains("IoOptimized: Unsupported value"), "{msg}");
    assert!(
        msg.contains("is set by the driver to the machine's name"),
        "{msg}"
    );
    assert!(
        msg.contains("is set by the driver to the machine's UID"),
        "{msg}"
    );
    assert!(msg.contains("may not start with 'aliyun'"), "{msg}");
}

#[test]
fn run_instances_is_built_as_mcm_builds_it() {
    let s = ProviderSpec::decode(&valid()).unwrap();
    let mut m = Machine::default();
    m.metadata.uid = "u-1".into();
    let owner = Owner::of(&m).unwrap();
    let r = s.run_instances("m-1", &owner, "team-a", Some(b"#!/bin/sh".to_vec()));
    let p = r.to_params("cn-shanghai", "tok");
    let get = |k: &str| p.get(k).map(str::to_owned);
    assert_eq!(get("InstanceName").as_deref(), Some("m-1"));
    assert_eq!(
        get("SystemDisk.Category").as_deref(),
        Some("cloud_efficiency")
    );
    assert_eq!(get("SystemDisk.Size").as_deref(), Some("50"));
    assert_eq!(
        get("DataDisk.1.DiskName").as_deref(),
        Some("m-1-d1-data-disk")
    );
    assert_eq!(
        get("DataDisk.1.DeleteWithInstance").as_deref(),
        Some("true")
    );
    assert_eq!(
        get("DataDisk.2.DeleteWithInstance").as_deref(),
        Some("false")
    );
    assert_eq!(get("DataDisk.2.Encrypted").as_deref(), Some("true"));
    assert_eq!(get("DataDisk.3.DeleteWithInstance"), None);
    assert_eq!(get("IoOptimized").as_deref(), Some("optimized"));
    assert_eq!(get("UserData").as_deref(), Some("IyEvYmluL3No"));
    let tags: Vec<(String, String)> = (1..=5)
        .map(|n| {
            (
                get(&format!("Tag.{n}.Key")).unwrap(),
                get(&format!("Tag.{n}.Value")).unwrap(),
            )
        })
        .collect();
    assert!(tags.contains(&(MACHINE_TAG.into(), "m-1".into())));
    assert!(tags.contains(&(OWNER_TAG.into(), "u-1".into())));
    assert!(tags.contains(&("kubernetes.io/cluster/shoot--mcm".into(), "1".into())));
}

/// Each pattern of [`schema`] against the validator it stands for: a value matches exactly when
/// the driver accepts it (or, where a pattern says it is narrower, only values it accepts match).
mod schema_patterns;
