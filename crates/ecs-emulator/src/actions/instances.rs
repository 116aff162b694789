//! Instances: RunInstances (with ClientToken idempotency and its resources: system and data disks, a
//! primary network interface), DescribeInstances, DeleteInstance, StartInstance, StopInstance.

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use super::params::{boolean, json_list, number, opt, paginate, required};
use super::tags::{tag_filter, tags_to_set};
use super::{Ctx, Params};
use crate::state::{Disk, Instance, Nic, State, Status, ecs_time, glob, tags_match};
use crate::wire::EcsError;

/// Parameters that are about the transport, not the action: left out of a ClientToken's
/// fingerprint, so a retry with a fresh nonce and timestamp still matches.
const TRANSPORT_PARAMS: [&str; 11] = [
    "Action",
    "Version",
    "Format",
    "AccessKeyId",
    "SignatureMethod",
    "SignatureVersion",
    "SignatureNonce",
    "Signature",
    "Timestamp",
    "SecurityToken",
    "ClientToken",
];

/// A digest of a RunInstances call's own parameters. SHA-256 rather than std's hasher, whose
/// output may change between Rust releases: fingerprints outlive the process in a state directory.
fn fingerprint(p: &Params) -> u64 {
    let mut h = Sha256::new();
    for (k, v) in p {
        if !TRANSPORT_PARAMS.contains(&k.as_str()) {
            // Length-prefixed, so ("ab","c") and ("a","bc") differ.
            for part in [k, v] {
                h.update((part.len() as u64).to_le_bytes());
                h.update(part.as_bytes());
            }
        }
    }
    let digest = h.finalize();
    u64::from_le_bytes(digest[..8].try_into().expect("32 bytes"))
}

struct DiskSpec {
    category: String,
    size: u32,
    name: String,
    description: String,
    encrypted: bool,
    delete_with_instance: bool,
}

fn data_disks(p: &Params) -> Result<Vec<DiskSpec>, EcsError> {
    let mut out = Vec::new();
    for n in 1..=17 {
        let key = |f: &str| format!("DataDisk.{n}.{f}");
        let present = ["Size", "Category", "DiskName", "SnapshotId", "Description"]
            .iter()
            .any(|f| p.contains_key(&key(f)));
        if !present {
            continue;
        }
        if n == 17 {
            return Err(EcsError::invalid("DataDisk", "at most 16 data disks"));
        }
        let category = opt(p, &key("Category"))
            .unwrap_or("cloud_efficiency")
            .to_owned();
        let size: u32 = number(p, &key("Size"))?.unwrap_or(40);
        let range = if category == "DiskEphemeralSSD" {
            5..=800
        } else {
            20..=32768
        };
        if !range.contains(&size) {
            return Err(EcsError::new(
                400,
                "InvalidDataDiskSize.ValueNotSupported",
                format!("The specified DataDisk.{n}.Size {size} is out of range."),
            ));
        }
        out.push(DiskSpec {
            delete_with_instance: boolean(p, &key("DeleteWithInstance"))?.unwrap_or(true),
            encrypted: boolean(p, &key("Encrypted"))?.unwrap_or(false),
            name: opt(p, &key("DiskName")).unwrap_or("").to_owned(),
            description: opt(p, &key("Description")).unwrap_or("").to_owned(),
            category,
            size,
        });
    }
    Ok(out)
}

pub(super) fn run_instances(
    state: &mut State,
    ctx: &Ctx<'_>,
    p: &Params,
) -> Result<Value, EcsError> {
    let region = required(p, "RegionId")?.to_owned();
    let token = opt(p, "ClientToken");
    if let Some(t) = token {
        if t.len() > 64 || !t.is_ascii() {
            return Err(EcsError::invalid(
                "ClientToken",
                "at most 64 ASCII characters",
            ));
        }
        if let Some(used) = state.client_token(t, ctx.now_ms) {
            if used.fingerprint != fingerprint(p) {
                return Err(EcsError::new(
                    400,
                    "IdempotentParameterMismatch",
                    "The specified parameters are different from before.",
                ));
            }
            return Ok(run_answer(&used.instance_ids));
        }
    }
    let image_id = required(p, "ImageId")?.to_owned();
    let instance_type = required(p, "InstanceType")?.to_owned();
    let amount: u32 = number(p, "Amount")?.unwrap_or(1);
    if !(1..=100).contains(&amount) {
        return Err(EcsError::invalid("Amount", "must be between 1 and 100"));
    }
    let zone = opt(p, "ZoneId")
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{region}-a"));
    let name = opt(p, "InstanceName");
    if let Some(n) = name
        && !(2..=128).contains(&n.chars().count())
    {
        return Err(EcsError::new(
            400,
            "InvalidInstanceName.Malformed",
            "The specified parameter \"InstanceName\" is not valid.",
        ));
    }
    let user_data_bytes = match opt(p, "UserData") {
        None => 0,
        Some(u) if u.len() > 32 * 1024 => {
            return Err(EcsError::new(
                400,
                "InvalidUserData.SizeExceeded",
                "The specified parameter \"UserData\" exceeds the size limit.",
            ));
        }
        Some(u) => base64::engine::general_purpose::STANDARD
            .decode(u)
            .map_err(|_| {
                EcsError::new(
                    400,
                    "InvalidUserData.NotBase64",
                    "The specified parameter \"UserData\" is not base64-encoded.",
                )
            })?
            .len(),
    };
    let tags = tags_to_set(p)?;
    let disks = data_disks(p)?;
    let sys_size: u32 = number(p, "SystemDisk.Size")?.unwrap_or(40);
    if !(20..=2048).contains(&sys_size) {
        return Err(EcsError::new(
            400,
            "InvalidSystemDiskSize.ValueNotSupported",
            "The specified parameter \"SystemDisk.Size\" is out of range.",
        ));
    }
    let bandwidth_in: u32 = number(p, "InternetMaxBandwidthIn")?.unwrap_or(0);
    let bandwidth_out: u32 = number(p, "InternetMaxBandwidthOut")?.unwrap_or(0);
    let io_optimized = opt(p, "IoOptimized").is_none_or(|v| v != "none");
    let deletion_protection = boolean(p, "DeletionProtection")?.unwrap_or(false);
    if ctx.faults.no_stock_zones.contains(&zone) {
        return Err(EcsError::new(
            403,
            "OperationDenied.NoStock",
            "The requested resource is sold out in the specified zone; try other types of resources or other regions and zones.",
        ));
    }
    if boolean(p, "DryRun")?.unwrap_or(false) {
        return Err(EcsError::new(
            400,
            "DryRunOperation",
            "Request validation has been passed with DryRun flag set.",
        ));
    }

    let mut ids = Vec::new();
    for _ in 0..amount {
        let id = state.new_id("i");
        let nic_id = state.new_id("eni");
        let slot = state.address_slot();
        let (ip, mac) = (State::ip_of(slot), State::mac_of(slot));
        let now_text = ecs_time();
        let vswitch = opt(p, "VSwitchId").unwrap_or("vsw-emulator").to_owned();
        let instance = Instance {
            host_name: opt(p, "HostName")
                .map(str::to_owned)
                .unwrap_or_else(|| format!("iZ{}Z", &id[2..])),
            name: name.unwrap_or(&id).to_owned(),
            description: opt(p, "Description").unwrap_or("").to_owned(),
            region: region.clone(),
            zone: zone.clone(),
            instance_type: instance_type.clone(),
            image_id: image_id.clone(),
            vpc_id: "vpc-emulator".into(),
            vswitch_id: vswitch.clone(),
            security_group_id: opt(p, "SecurityGroupId")
                .unwrap_or("sg-emulator")
                .to_owned(),
            private_ip: opt(p, "PrivateIpAddress")
                .filter(|_| amount == 1)
                .map(str::to_owned)
                .unwrap_or_else(|| ip.clone()),
            key_pair_name: opt(p, "KeyPairName").unwrap_or("").to_owned(),
            instance_charge_type: opt(p, "InstanceChargeType")
                .unwrap_or("PostPaid")
                .to_owned(),
            internet_charge_type: opt(p, "InternetChargeType")
                .unwrap_or("PayByTraffic")
                .to_owned(),
            bandwidth_in,
            bandwidth_out,
            spot_strategy: opt(p, "SpotStrategy").unwrap_or("NoSpot").to_owned(),
            io_optimized,
            deletion_protection,
            tags: tags.clone(),
            creation_time: now_text.clone(),
            start_time: String::new(),
            status: Status::Pending,
            since: ctx.now,
            pinned: false,
            nic_id: nic_id.clone(),
            user_data_bytes,
            id: id.clone(),
        };
        // The system disk, then the data disks, all tagged like the instance (as ECS propagates
        // RunInstances tags), so leftovers can be found by tag.
        let sys_id = state.new_id("d");
        state.disks.insert(
            sys_id.clone(),
            Disk {
                id: sys_id,
                name: opt(p, "SystemDisk.DiskName").unwrap_or("").to_owned(),
                description: String::new(),
                instance_id: id.clone(),
                kind: "system".into(),
                category: opt(p, "SystemDisk.Category")
                    .unwrap_or("cloud_efficiency")
                    .to_owned(),
                size: sys_size,
                delete_with_instance: true,
                encrypted: false,
                region: region.clone(),
                zone: zone.clone(),
                device: "/dev/xvda".into(),
                tags: tags.clone(),
                creation_time: now_text.clone(),
            },
        );
        for (i, spec) in disks.iter().enumerate() {
            let disk_id = state.new_id("d");
            state.disks.insert(
                disk_id.clone(),
                Disk {
                    id: disk_id,
                    name: spec.name.clone(),
                    description: spec.description.clone(),
                    instance_id: id.clone(),
                    kind: "data".into(),
                    category: spec.category.clone(),
                    size: spec.size,
                    delete_with_instance: spec.delete_with_instance,
                    encrypted: spec.encrypted,
                    region: region.clone(),
                    zone: zone.clone(),
                    device: format!("/dev/xvd{}", (b'b' + i as u8) as char),
                    tags: tags.clone(),
                    creation_time: now_text.clone(),
                },
            );
        }
        state.nics.insert(
            nic_id.clone(),
            Nic {
                id: nic_id,
                instance_id: id.clone(),
                kind: "Primary".into(),
                private_ip: instance.private_ip.clone(),
                mac,
                vpc_id: "vpc-emulator".into(),
                vswitch_id: vswitch,
                zone: zone.clone(),
                tags: tags.clone(),
                creation_time: now_text,
            },
        );
        state.instances.insert(id.clone(), instance);
        ids.push(id);
    }
    if let Some(t) = token {
        state.remember_client_token(t, fingerprint(p), ids.clone(), ctx.now_ms);
    }
    Ok(run_answer(&ids))
}

fn run_answer(ids: &[String]) -> Value {
    json!({"InstanceIdSets": {"InstanceIdSet": ids}, "TradePrice": 0.0})
}

pub(super) fn describe_instances(
    state: &mut State,
    ctx: &Ctx<'_>,
    p: &Params,
) -> Result<Value, EcsError> {
    let region = required(p, "RegionId")?;
    let ids = json_list(p, "InstanceIds", 100)?;
    let name = opt(p, "InstanceName");
    let status = match opt(p, "Status") {
        Some(s) => Some(Status::parse(s).ok_or_else(|| EcsError::invalid("Status", s))?),
        None => None,
    };
    let zone = opt(p, "ZoneId");
    let vswitch = opt(p, "VSwitchId");
    let tags = tag_filter(p);
    for i in state.instances.values_mut() {
        i.advance(ctx.now, ctx.lifecycle);
    }
    let page = paginate(&state.instances, p, "i-", 100, |i: &Instance| {
        i.region == region
            && ids.as_ref().is_none_or(|s| s.contains(&i.id))
            && name.is_none_or(|n| glob(n, &i.name))
            && status.is_none_or(|s| s == i.status)
            && zone.is_none_or(|z| z == i.zone)
            && vswitch.is_none_or(|v| v == i.vswitch_id)
            && tags_match(&i.tags, &tags)
    })?;
    Ok(page.answer("Instances", "Instance", Instance::to_json))
}

fn instance_mut<'s>(
    state: &'s mut State,
    ctx: &Ctx<'_>,
    p: &Params,
) -> Result<&'s mut Instance, EcsError> {
    let id = required(p, "InstanceId")?;
    let i = state
        .instances
        .get_mut(id)
        .ok_or_else(EcsError::instance_not_found)?;
    i.advance(ctx.now, ctx.lifecycle);
    Ok(i)
}

pub(super) fn delete_instance(
    state: &mut State,
    ctx: &Ctx<'_>,
    p: &Params,
) -> Result<Value, EcsError> {
    let force = boolean(p, "Force")?.unwrap_or(false);
    let i = instance_mut(state, ctx, p)?;
    match (i.status, force) {
        (Status::Pending, _) => {
            return Err(EcsError::incorrect_status(
                "IncorrectInstanceStatus.Initializing",
            ));
        }
        (Status::Stopped, _) | (Status::Running, true) => {}
        _ => return Err(EcsError::incorrect_status("IncorrectInstanceStatus")),
    }
    if i.deletion_protection {
        return Err(EcsError::new(
            403,
            "InvalidOperation.DeletionProtection",
            "The instance is protected from release.",
        ));
    }
    let id = i.id.clone();
    state.instances.remove(&id);
    state.released(&id, ctx.now_ms);
    let leak = ctx.faults.leak_on_delete;
    state.disks.retain(|_, d| {
        if d.instance_id != id {
            return true;
        }
        if d.delete_with_instance && !leak {
            return false;
        }
        d.instance_id.clear();
        true
    });
    state.nics.retain(|_, n| {
        if n.instance_id != id {
            return true;
        }
        if !leak {
            return false;
        }
        // A detached interface cannot stay primary.
        n.instance_id.clear();
        n.kind = "Secondary".into();
        true
    });
    Ok(json!({}))
}

pub(super) fn start_instance(
    state: &mut State,
    ctx: &Ctx<'_>,
    p: &Params,
) -> Result<Value, EcsError> {
    transition(state, ctx, p, Status::Stopped, Status::Starting)
}

pub(super) fn stop_instance(
    state: &mut State,
    ctx: &Ctx<'_>,
    p: &Params,
) -> Result<Value, EcsError> {
    transition(state, ctx, p, Status::Running, Status::Stopping)
}

/// StartInstance and StopInstance: an instance that is `from` starts moving through `to`; in any
/// other status it is refused, as ECS refuses it.
fn transition(
    state: &mut State,
    ctx: &Ctx<'_>,
    p: &Params,
    from: Status,
    to: Status,
) -> Result<Value, EcsError> {
    let now = ctx.now;
    let i = instance_mut(state, ctx, p)?;
    if i.status != from {
        return Err(EcsError::incorrect_status("IncorrectInstanceStatus"));
    }
    i.set_status(to, now);
    i.advance(now, ctx.lifecycle);
    Ok(json!({}))
}
