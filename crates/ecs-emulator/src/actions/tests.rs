//! The actions driven through [`dispatch`], as a caller would.

use super::*;
use crate::state::Status;

fn params(pairs: &[(&str, &str)]) -> Params {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

struct Env {
    state: State,
    life: Lifecycle,
    faults: Faults,
    now: Instant,
}

impl Env {
    fn new() -> Self {
        Env {
            state: State::default(),
            life: Lifecycle::instant(),
            faults: Faults::default(),
            now: Instant::now(),
        }
    }
    fn call(&mut self, action: &str, p: &[(&str, &str)]) -> Result<Value, EcsError> {
        let ctx = Ctx {
            now: self.now,
            now_ms: crate::state::unix_ms_now(),
            lifecycle: &self.life,
            faults: &self.faults,
        };
        dispatch(&mut self.state, &ctx, action, &params(p))
    }
    fn run(&mut self, extra: &[(&str, &str)]) -> String {
        let mut p = vec![
            ("RegionId", "cn-shanghai"),
            ("ImageId", "img"),
            ("InstanceType", "ecs.t"),
        ];
        p.extend_from_slice(extra);
        let a = self.call("RunInstances", &p).unwrap();
        a["InstanceIdSets"]["InstanceIdSet"][0]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

#[test]
fn client_token_is_idempotent_and_detects_mismatch() {
    let mut e = Env::new();
    let a = e.run(&[("ClientToken", "t1"), ("InstanceName", "m1")]);
    let b = e.run(&[("ClientToken", "t1"), ("InstanceName", "m1")]);
    assert_eq!(a, b);
    assert_eq!(e.state.instances.len(), 1);
    let err = e
        .call(
            "RunInstances",
            &[
                ("RegionId", "cn-shanghai"),
                ("ImageId", "img"),
                ("InstanceType", "ecs.t"),
                ("ClientToken", "t1"),
                ("InstanceName", "m2"),
            ],
        )
        .unwrap_err();
    assert_eq!(err.code, "IdempotentParameterMismatch");
}

#[test]
fn run_creates_tagged_disks_and_nic() {
    let mut e = Env::new();
    let id = e.run(&[
        ("Tag.1.Key", "kubernetes.io/cluster/c"),
        ("Tag.1.Value", "1"),
        ("DataDisk.1.Size", "100"),
        ("DataDisk.1.DeleteWithInstance", "false"),
        ("SystemDisk.Size", "50"),
    ]);
    let disks: Vec<_> = e
        .state
        .disks
        .values()
        .filter(|d| d.instance_id == id)
        .collect();
    assert_eq!(disks.len(), 2);
    assert!(
        disks
            .iter()
            .all(|d| d.tags[0].0 == "kubernetes.io/cluster/c")
    );
    assert_eq!(e.state.nics.len(), 1);
    // Running (instant lifecycle) → Force needed.
    let err = e
        .call("DeleteInstance", &[("InstanceId", &id)])
        .unwrap_err();
    assert_eq!(err.code, "IncorrectInstanceStatus");
    e.call("DeleteInstance", &[("InstanceId", &id), ("Force", "true")])
        .unwrap();
    // The data disk with DeleteWithInstance=false stays, detached; system disk and NIC go.
    assert_eq!(e.state.disks.len(), 1);
    assert_eq!(e.state.disks.values().next().unwrap().status(), "Available");
    assert!(e.state.nics.is_empty());
    let err = e
        .call("DeleteInstance", &[("InstanceId", &id), ("Force", "true")])
        .unwrap_err();
    assert_eq!(err.code, "InvalidInstanceId.NotFound");
}

#[test]
fn a_disk_modified_to_go_with_its_instance_goes() {
    let mut e = Env::new();
    let id = e.run(&[
        ("DataDisk.1.Size", "100"),
        ("DataDisk.1.DeleteWithInstance", "false"),
    ]);
    let kept = e
        .state
        .disks
        .values()
        .find(|d| !d.delete_with_instance)
        .unwrap()
        .id
        .clone();
    e.call(
        "ModifyDiskAttribute",
        &[
            ("RegionId", "cn-shanghai"),
            ("DiskId", &kept),
            ("DeleteWithInstance", "true"),
            ("DiskName", "renamed"),
        ],
    )
    .unwrap();
    assert_eq!(e.state.disks[&kept].name, "renamed");
    e.call("DeleteInstance", &[("InstanceId", &id), ("Force", "true")])
        .unwrap();
    assert!(e.state.disks.is_empty());
    let err = e
        .call(
            "ModifyDiskAttribute",
            &[("DiskId", &kept), ("DeleteWithInstance", "true")],
        )
        .unwrap_err();
    assert_eq!(err.code, "InvalidDiskId.NotFound");
    let err = e
        .call(
            "ModifyDiskAttribute",
            &[("DiskId", "d-x"), ("DeleteWithInstance", "x")],
        )
        .unwrap_err();
    assert!(err.code.starts_with("InvalidParameter"), "{}", err.code);
}

#[test]
fn leak_fault_leaves_disks_and_nic_behind() {
    let mut e = Env::new();
    e.faults.leak_on_delete = true;
    let id = e.run(&[("Tag.1.Key", "k")]);
    e.call("DeleteInstance", &[("InstanceId", &id), ("Force", "true")])
        .unwrap();
    let a = e
        .call(
            "DescribeNetworkInterfaces",
            &[("RegionId", "cn-shanghai"), ("Tag.1.Key", "k")],
        )
        .unwrap();
    let nic = &a["NetworkInterfaceSets"]["NetworkInterfaceSet"][0];
    assert_eq!(nic["Status"], "Available");
    let nic_id = nic["NetworkInterfaceId"].as_str().unwrap().to_owned();
    e.call("DeleteNetworkInterface", &[("NetworkInterfaceId", &nic_id)])
        .unwrap();
    let d = e
        .call(
            "DescribeDisks",
            &[("RegionId", "cn-shanghai"), ("Status", "Available")],
        )
        .unwrap();
    let disk_id = d["Disks"]["Disk"][0]["DiskId"].as_str().unwrap().to_owned();
    e.call("DeleteDisk", &[("DiskId", &disk_id)]).unwrap();
    assert!(e.state.disks.is_empty() && e.state.nics.is_empty());
}

#[test]
fn no_stock_zone_refuses() {
    let mut e = Env::new();
    e.faults.no_stock_zones.insert("cn-shanghai-b".into());
    let err = e
        .call(
            "RunInstances",
            &[
                ("RegionId", "cn-shanghai"),
                ("ImageId", "img"),
                ("InstanceType", "t"),
                ("ZoneId", "cn-shanghai-b"),
            ],
        )
        .unwrap_err();
    assert_eq!(err.code, "OperationDenied.NoStock");
    assert!(e.state.instances.is_empty());
}

#[test]
fn paging_filters_and_tokens() {
    let mut e = Env::new();
    for n in 0..25 {
        let tag = if n % 2 == 0 { "even" } else { "odd" };
        e.run(&[
            ("InstanceName", &format!("m-{n}")),
            ("Tag.1.Key", "parity"),
            ("Tag.1.Value", tag),
        ]);
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let mut p = vec![
            ("RegionId", "cn-shanghai"),
            ("MaxResults", "5"),
            ("Tag.1.Key", "parity"),
            ("Tag.1.Value", "even"),
        ];
        if !token.is_empty() {
            p.push(("NextToken", &token));
        }
        let a = e.call("DescribeInstances", &p).unwrap();
        assert_eq!(a["TotalCount"], 13);
        for i in a["Instances"]["Instance"].as_array().unwrap() {
            seen.push(i["InstanceName"].as_str().unwrap().to_owned());
        }
        token = a["NextToken"].as_str().unwrap().to_owned();
        if token.is_empty() {
            break;
        }
    }
    // Every even one once, in no order in particular (ids are random, as ECS promises no order).
    seen.sort_by_key(|name| name[2..].parse::<u32>().unwrap());
    let evens: Vec<String> = (0..25).step_by(2).map(|n| format!("m-{n}")).collect();
    assert_eq!(seen, evens);
    let a = e
        .call(
            "DescribeInstances",
            &[("RegionId", "cn-shanghai"), ("InstanceName", "m-1*")],
        )
        .unwrap();
    assert_eq!(a["TotalCount"], 11); // m-1, m-10..m-19
    let err = e
        .call(
            "DescribeInstances",
            &[("RegionId", "cn-shanghai"), ("MaxResults", "101")],
        )
        .unwrap_err();
    assert!(err.code.starts_with("InvalidParameter"));
    let err = e
        .call(
            "DescribeInstances",
            &[("RegionId", "cn-shanghai"), ("NextToken", "garbage")],
        )
        .unwrap_err();
    assert_eq!(err.code, "InvalidParameter.NextToken");
}

#[test]
fn instance_ids_filter_is_a_json_array() {
    let mut e = Env::new();
    let a = e.run(&[]);
    e.run(&[]);
    let ids = format!("[\"{a}\"]");
    let r = e
        .call(
            "DescribeInstances",
            &[("RegionId", "cn-shanghai"), ("InstanceIds", &ids)],
        )
        .unwrap();
    assert_eq!(r["Instances"]["Instance"].as_array().unwrap().len(), 1);
    let err = e
        .call(
            "DescribeInstances",
            &[("RegionId", "cn-shanghai"), ("InstanceIds", "i-1,i-2")],
        )
        .unwrap_err();
    assert_eq!(err.code, "InvalidInstanceIds.Malformed");
}

#[test]
fn stop_then_start_walks_the_lifecycle() {
    let mut e = Env::new();
    let id = e.run(&[]);
    e.call("StopInstance", &[("InstanceId", &id)]).unwrap();
    assert_eq!(e.state.instances[&id].status, Status::Stopped);
    e.call("StartInstance", &[("InstanceId", &id)]).unwrap();
    assert_eq!(e.state.instances[&id].status, Status::Running);
    assert_eq!(
        e.call("StartInstance", &[("InstanceId", &id)])
            .unwrap_err()
            .code,
        "IncorrectInstanceStatus"
    );
    e.call("StopInstance", &[("InstanceId", &id)]).unwrap();
    // A Stopped instance may be released without Force.
    e.call("DeleteInstance", &[("InstanceId", &id)]).unwrap();
    assert!(e.state.instances.is_empty());
}

#[test]
fn seeding_ten_thousand_is_fast_and_pages_in_order() {
    let mut state = State::default();
    let started = std::time::Instant::now();
    let ids = seed(
        &mut state,
        Instant::now(),
        "cn-shanghai",
        &Seed {
            count: 10_000,
            tags: [("kubernetes.io/cluster/big".to_string(), "1".to_string())].into(),
            ..Seed::default()
        },
    )
    .unwrap();
    assert_eq!(ids.len(), 10_000);
    let life = Lifecycle::instant();
    let faults = Faults::default();
    let ctx = Ctx {
        now: Instant::now(),
        now_ms: crate::state::unix_ms_now(),
        lifecycle: &life,
        faults: &faults,
    };
    let mut token = String::new();
    let mut n = 0;
    let mut pages = 0;
    loop {
        let mut p = params(&[
            ("RegionId", "cn-shanghai"),
            ("MaxResults", "100"),
            ("Tag.1.Key", "kubernetes.io/cluster/big"),
        ]);
        if !token.is_empty() {
            p.insert("NextToken".into(), token.clone());
        }
        let a = dispatch(&mut state, &ctx, "DescribeInstances", &p).unwrap();
        n += a["Instances"]["Instance"].as_array().unwrap().len();
        pages += 1;
        token = a["NextToken"].as_str().unwrap().to_owned();
        if token.is_empty() {
            break;
        }
    }
    assert_eq!((n, pages), (10_000, 100));
    // Generous bound for an unoptimised build on a loaded machine; O(n²) would be far slower.
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

/// Issue 32, point 9: a region ECS does not have is refused as ECS refuses it, and makes nothing.
#[test]
fn an_unknown_region_is_refused_and_makes_nothing() {
    let mut e = Env::new();
    let err = e
        .call(
            "RunInstances",
            &[
                ("RegionId", "cn-shanghia"),
                ("ImageId", "img"),
                ("InstanceType", "ecs.t"),
            ],
        )
        .unwrap_err();
    assert_eq!(
        (err.status.as_u16(), err.code.as_str()),
        (404, "InvalidRegionId.NotFound")
    );
    assert!(e.state.instances.is_empty());
    let err = e
        .call("DescribeInstances", &[("RegionId", "mars-1")])
        .unwrap_err();
    assert_eq!(err.code, "InvalidRegionId.NotFound");
    e.call("DescribeInstances", &[("RegionId", "eu-central-1")])
        .unwrap();
    let regions = e.call("DescribeRegions", &[]).unwrap();
    assert!(
        regions["Regions"]["Region"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["RegionId"] == "cn-shanghai")
    );
}
