//! The ECS actions: parameter validation as ECS does it, state changes, and the real JSON shapes.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use tokio::time::Instant;

use crate::config::{Faults, Lifecycle};
use crate::state::{Disk, Instance, Nic, State, Status, Tags, ecs_time, glob, tags_match};
use crate::wire::EcsError;

/// The actions the emulator implements.
pub const ACTIONS: [&str; 11] = [
    "RunInstances",
    "DescribeInstances",
    "DeleteInstance",
    "StartInstance",
    "StopInstance",
    "DescribeDisks",
    "ModifyDiskAttribute",
    "DeleteDisk",
    "DescribeNetworkInterfaces",
    "DeleteNetworkInterface",
    "DescribeRegions",
];

/// The actions that change the account: after one succeeds, a persistent emulator writes its state
/// before answering.
const MUTATING: [&str; 7] = [
    "RunInstances",
    "DeleteInstance",
    "StartInstance",
    "StopInstance",
    "ModifyDiskAttribute",
    "DeleteDisk",
    "DeleteNetworkInterface",
];

/// Whether `action` changes the account (see [`MUTATING`]).
pub(crate) fn mutates(action: &str) -> bool {
    MUTATING.contains(&action)
}

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

pub(crate) type Params = BTreeMap<String, String>;

/// What an action needs besides its parameters.
pub(crate) struct Ctx<'a> {
    pub(crate) now: Instant,
    pub(crate) lifecycle: &'a Lifecycle,
    pub(crate) faults: &'a Faults,
}

/// Runs `action`; the answer lacks `RequestId`, which the caller adds.
pub(crate) fn dispatch(
    state: &mut State,
    ctx: &Ctx<'_>,
    action: &str,
    p: &Params,
) -> Result<Value, EcsError> {
    match action {
        "RunInstances" => run_instances(state, ctx, p),
        "DescribeInstances" => describe_instances(state, ctx, p),
        "DeleteInstance" => delete_instance(state, ctx, p),
        "StartInstance" => start_instance(state, ctx, p),
        "StopInstance" => stop_instance(state, ctx, p),
        "DescribeDisks" => describe_disks(state, p),
        "ModifyDiskAttribute" => modify_disk_attribute(state, p),
        "DeleteDisk" => delete_disk(state, p),
        "DescribeNetworkInterfaces" => describe_nics(state, p),
        "DeleteNetworkInterface" => delete_nic(state, p),
        "DescribeRegions" => Ok(describe_regions()),
        _ => Err(EcsError::new(
            404,
            "InvalidAction.NotFound",
            "Specified api is not found, please check your url and method.",
        )),
    }
}

fn required<'p>(p: &'p Params, name: &str) -> Result<&'p str, EcsError> {
    p.get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| EcsError::missing(name))
}

fn opt<'p>(p: &'p Params, name: &str) -> Option<&'p str> {
    p.get(name).map(String::as_str).filter(|v| !v.is_empty())
}

fn number<T: std::str::FromStr>(p: &Params, name: &str) -> Result<Option<T>, EcsError> {
    opt(p, name)
        .map(|v| {
            v.parse()
                .map_err(|_| EcsError::invalid(name, "not a number"))
        })
        .transpose()
}

fn boolean(p: &Params, name: &str) -> Result<Option<bool>, EcsError> {
    opt(p, name)
        .map(|v| match v.to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(EcsError::invalid(name, "must be true or false")),
        })
        .transpose()
}

/// `Tag.N.Key` / `Tag.N.Value` for N in 1..=20, as filters (no value = any value).
fn tag_filter(p: &Params) -> Vec<(String, Option<String>)> {
    (1..=20)
        .filter_map(|n| {
            let key = opt(p, &format!("Tag.{n}.Key"))?;
            Some((
                key.to_owned(),
                opt(p, &format!("Tag.{n}.Value")).map(str::to_owned),
            ))
        })
        .collect()
}

fn tags_to_set(p: &Params) -> Result<Tags, EcsError> {
    let mut tags = Tags::new();
    for n in 1..=21 {
        let Some(key) = opt(p, &format!("Tag.{n}.Key")) else {
            continue;
        };
        if n == 21 {
            return Err(EcsError::invalid("Tag", "at most 20 tags"));
        }
        if key.starts_with("aliyun") || key.starts_with("acs:") || key.len() > 128 {
            return Err(EcsError::new(
                400,
                "InvalidTagKey.Malformed",
                "The specified Tag.n.Key is not valid.",
            ));
        }
        let value = opt(p, &format!("Tag.{n}.Value")).unwrap_or("");
        tags.retain(|(k, _)| k != key);
        tags.push((key.to_owned(), value.to_owned()));
    }
    Ok(tags)
}

fn json_list(p: &Params, name: &str, max: usize) -> Result<Option<BTreeSet<String>>, EcsError> {
    let Some(raw) = opt(p, name) else {
        return Ok(None);
    };
    let ids: Vec<String> = serde_json::from_str(raw).map_err(|_| {
        EcsError::new(
            400,
            &format!("Invalid{name}.Malformed"),
            format!("The specified parameter \"{name}\" is not a JSON array of strings."),
        )
    })?;
    if ids.len() > max {
        return Err(EcsError::invalid(name, format!("at most {max} ids")));
    }
    Ok(Some(ids.into_iter().collect()))
}

/// One page of matches: the token scan (`MaxResults`/`NextToken`) or the legacy
/// `PageNumber`/`PageSize`.
struct Paged<'a, T> {
    items: Vec<&'a T>,
    next_token: String,
    total: usize,
    page_number: usize,
    page_size: usize,
}

fn paginate<'a, T>(
    map: &'a BTreeMap<String, T>,
    p: &Params,
    prefix: &str,
    max_allowed: usize,
    matches: impl Fn(&T) -> bool,
) -> Result<Paged<'a, T>, EcsError> {
    let total = map.values().filter(|v| matches(v)).count();
    let legacy = !p.contains_key("MaxResults")
        && !p.contains_key("NextToken")
        && (p.contains_key("PageNumber") || p.contains_key("PageSize"));
    if legacy {
        let size: usize = number(p, "PageSize")?.unwrap_or(10);
        let page: usize = number(p, "PageNumber")?.unwrap_or(1);
        if !(1..=100).contains(&size) || page == 0 {
            return Err(EcsError::invalid(
                "PageSize",
                "PageSize 1..=100, PageNumber ≥ 1",
            ));
        }
        let items = map
            .values()
            .filter(|v| matches(v))
            .skip((page - 1) * size)
            .take(size)
            .collect();
        return Ok(Paged {
            items,
            next_token: String::new(),
            total,
            page_number: page,
            page_size: size,
        });
    }
    let max: usize = number(p, "MaxResults")?.unwrap_or(10);
    if max == 0 || max > max_allowed {
        return Err(EcsError::invalid(
            "MaxResults",
            format!("must be between 1 and {max_allowed}"),
        ));
    }
    let start = match opt(p, "NextToken") {
        None => Bound::Unbounded,
        Some(t) if t.starts_with(prefix) => Bound::Excluded(t.to_owned()),
        Some(_) => {
            return Err(EcsError::new(
                400,
                "InvalidParameter.NextToken",
                "The specified parameter \"NextToken\" is not valid.",
            ));
        }
    };
    let mut items: Vec<&T> = Vec::with_capacity(max + 1);
    let mut last_key = String::new();
    let mut more = false;
    for (k, v) in map.range((start, Bound::Unbounded)) {
        if !matches(v) {
            continue;
        }
        if items.len() == max {
            more = true;
            break;
        }
        items.push(v);
        last_key.clone_from(k);
    }
    Ok(Paged {
        items,
        next_token: if more { last_key } else { String::new() },
        total,
        page_number: 1,
        page_size: max,
    })
}

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

fn run_instances(state: &mut State, ctx: &Ctx<'_>, p: &Params) -> Result<Value, EcsError> {
    let region = required(p, "RegionId")?.to_owned();
    let token = opt(p, "ClientToken");
    if let Some(t) = token {
        if t.len() > 64 || !t.is_ascii() {
            return Err(EcsError::invalid(
                "ClientToken",
                "at most 64 ASCII characters",
            ));
        }
        if let Some(used) = state.client_tokens.get(t) {
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
        let ip = state.next_ip();
        let mac = state.mac();
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
        state.client_tokens.insert(
            t.to_owned(),
            crate::state::TokenUse {
                fingerprint: fingerprint(p),
                instance_ids: ids.clone(),
            },
        );
    }
    Ok(run_answer(&ids))
}

fn run_answer(ids: &[String]) -> Value {
    json!({"InstanceIdSets": {"InstanceIdSet": ids}, "TradePrice": 0.0})
}

fn describe_instances(state: &mut State, ctx: &Ctx<'_>, p: &Params) -> Result<Value, EcsError> {
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
    Ok(json!({
        "TotalCount": page.total,
        "PageNumber": page.page_number,
        "PageSize": page.page_size,
        "NextToken": page.next_token,
        "Instances": {"Instance": page.items.iter().map(|i| i.to_json()).collect::<Vec<_>>()},
    }))
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

fn delete_instance(state: &mut State, ctx: &Ctx<'_>, p: &Params) -> Result<Value, EcsError> {
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

fn start_instance(state: &mut State, ctx: &Ctx<'_>, p: &Params) -> Result<Value, EcsError> {
    let now = ctx.now;
    let i = instance_mut(state, ctx, p)?;
    if i.status != Status::Stopped {
        return Err(EcsError::incorrect_status("IncorrectInstanceStatus"));
    }
    i.set_status(Status::Starting, now);
    i.advance(now, ctx.lifecycle);
    Ok(json!({}))
}

fn stop_instance(state: &mut State, ctx: &Ctx<'_>, p: &Params) -> Result<Value, EcsError> {
    let now = ctx.now;
    let i = instance_mut(state, ctx, p)?;
    if i.status != Status::Running {
        return Err(EcsError::incorrect_status("IncorrectInstanceStatus"));
    }
    i.set_status(Status::Stopping, now);
    i.advance(now, ctx.lifecycle);
    Ok(json!({}))
}

fn describe_disks(state: &mut State, p: &Params) -> Result<Value, EcsError> {
    let region = required(p, "RegionId")?;
    let ids = json_list(p, "DiskIds", 100)?;
    let instance = opt(p, "InstanceId");
    let status = opt(p, "Status").filter(|s| *s != "All");
    let kind = opt(p, "DiskType").filter(|s| *s != "all");
    let tags = tag_filter(p);
    let page = paginate(&state.disks, p, "d-", 500, |d: &Disk| {
        d.region == region
            && ids.as_ref().is_none_or(|s| s.contains(&d.id))
            && instance.is_none_or(|i| i == d.instance_id)
            && status.is_none_or(|s| s == d.status())
            && kind.is_none_or(|k| k == d.kind)
            && tags_match(&d.tags, &tags)
    })?;
    Ok(json!({
        "TotalCount": page.total,
        "PageNumber": page.page_number,
        "PageSize": page.page_size,
        "NextToken": page.next_token,
        "Disks": {"Disk": page.items.iter().map(|d| d.to_json()).collect::<Vec<_>>()},
    }))
}

fn disk_not_found() -> EcsError {
    EcsError::new(
        404,
        "InvalidDiskId.NotFound",
        "The specified disk does not exist.",
    )
}

/// ModifyDiskAttribute for one `DiskId`: `DeleteWithInstance`, `DiskName`, `Description`.
fn modify_disk_attribute(state: &mut State, p: &Params) -> Result<Value, EcsError> {
    let id = required(p, "DiskId")?;
    let delete_with_instance = boolean(p, "DeleteWithInstance")?;
    let d = state.disks.get_mut(id).ok_or_else(disk_not_found)?;
    if let Some(value) = delete_with_instance {
        // As on ECS: a local (ephemeral) disk always goes with its instance.
        if d.category == "DiskEphemeralSSD" && !value {
            return Err(EcsError::new(
                403,
                "InvalidDiskCategory.NotSupported",
                "The specified disk category does not support this operation.",
            ));
        }
        d.delete_with_instance = value;
    }
    if let Some(name) = opt(p, "DiskName") {
        d.name = name.to_owned();
    }
    if let Some(description) = opt(p, "Description") {
        d.description = description.to_owned();
    }
    Ok(json!({}))
}

fn delete_disk(state: &mut State, p: &Params) -> Result<Value, EcsError> {
    let id = required(p, "DiskId")?;
    let d = state.disks.get(id).ok_or_else(disk_not_found)?;
    if !d.instance_id.is_empty() {
        return Err(EcsError::new(
            403,
            "IncorrectDiskStatus",
            "The current disk status does not support this operation.",
        ));
    }
    state.disks.remove(id);
    Ok(json!({}))
}

fn describe_nics(state: &mut State, p: &Params) -> Result<Value, EcsError> {
    required(p, "RegionId")?;
    let ids: Option<BTreeSet<String>> = {
        let v: Vec<String> = (1..=100)
            .filter_map(|n| opt(p, &format!("NetworkInterfaceId.{n}")).map(str::to_owned))
            .collect();
        (!v.is_empty()).then(|| v.into_iter().collect())
    };
    let instance = opt(p, "InstanceId");
    let status = opt(p, "Status");
    let kind = opt(p, "Type");
    let tags = tag_filter(p);
    let page = paginate(&state.nics, p, "eni-", 500, |n: &Nic| {
        ids.as_ref().is_none_or(|s| s.contains(&n.id))
            && instance.is_none_or(|i| i == n.instance_id)
            && status.is_none_or(|s| s == n.status())
            && kind.is_none_or(|k| k == n.kind)
            && tags_match(&n.tags, &tags)
    })?;
    Ok(json!({
        "TotalCount": page.total,
        "PageNumber": page.page_number,
        "PageSize": page.page_size,
        "NextToken": page.next_token,
        "NetworkInterfaceSets": {
            "NetworkInterfaceSet": page.items.iter().map(|n| n.to_json()).collect::<Vec<_>>()
        },
    }))
}

fn delete_nic(state: &mut State, p: &Params) -> Result<Value, EcsError> {
    let id = required(p, "NetworkInterfaceId")?;
    let n = state.nics.get(id).ok_or_else(|| {
        EcsError::new(
            404,
            "InvalidEniId.NotFound",
            "The specified network interface does not exist.",
        )
    })?;
    if !n.instance_id.is_empty() {
        return Err(EcsError::new(
            403,
            "InvalidOperation.InvalidEniState",
            "The current status of the network interface does not support this operation.",
        ));
    }
    state.nics.remove(id);
    Ok(json!({}))
}

fn describe_regions() -> Value {
    let regions = ["cn-hangzhou", "cn-shanghai", "cn-beijing", "eu-central-1"];
    json!({"Regions": {"Region": regions.iter().map(|r| json!({
        "RegionId": r,
        "RegionEndpoint": format!("ecs.{r}.aliyuncs.com"),
        "LocalName": r,
    })).collect::<Vec<_>>()}})
}

/// What `/_emulator/seed` creates.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Seed {
    /// How many instances.
    pub count: usize,
    /// Their region (default: the emulator's default region).
    pub region_id: Option<String>,
    /// Their zone (default `<region>-a`).
    pub zone_id: Option<String>,
    /// Names are `<namePrefix><n>`.
    pub name_prefix: String,
    /// Tags on every instance.
    pub tags: BTreeMap<String, String>,
    /// Status they start in (default Running).
    pub status: Option<String>,
    /// Also create each instance's system disk and primary network interface.
    pub with_resources: bool,
}

impl Default for Seed {
    fn default() -> Self {
        Seed {
            count: 0,
            region_id: None,
            zone_id: None,
            name_prefix: "seed-".into(),
            tags: BTreeMap::new(),
            status: None,
            with_resources: false,
        }
    }
}

/// Creates `seed.count` instances directly (no RunInstances validation), for large-list tests.
pub(crate) fn seed(
    state: &mut State,
    now: Instant,
    default_region: &str,
    seed: &Seed,
) -> Result<Vec<String>, String> {
    let status = match &seed.status {
        Some(s) => Status::parse(s).ok_or_else(|| format!("unknown status {s:?}"))?,
        None => Status::Running,
    };
    let region = seed
        .region_id
        .clone()
        .unwrap_or_else(|| default_region.to_owned());
    let mut params = Params::new();
    params.insert("RegionId".into(), region);
    params.insert("ImageId".into(), "m-emulator-seed".into());
    params.insert("InstanceType".into(), "ecs.g6.large".into());
    if let Some(z) = &seed.zone_id {
        params.insert("ZoneId".into(), z.clone());
    }
    for (n, (k, v)) in seed.tags.iter().enumerate() {
        params.insert(format!("Tag.{}.Key", n + 1), k.clone());
        params.insert(format!("Tag.{}.Value", n + 1), v.clone());
    }
    let faults = Faults::default();
    let life = Lifecycle::instant();
    let ctx = Ctx {
        now,
        lifecycle: &life,
        faults: &faults,
    };
    let mut ids = Vec::with_capacity(seed.count);
    for n in 0..seed.count {
        params.insert("InstanceName".into(), format!("{}{n}", seed.name_prefix));
        let answer = run_instances(state, &ctx, &params).map_err(|e| e.message)?;
        let id = answer["InstanceIdSets"]["InstanceIdSet"][0]
            .as_str()
            .expect("one id")
            .to_owned();
        let i = state.instances.get_mut(&id).expect("just created");
        i.set_status(status, now);
        if status == Status::Running {
            i.start_time = i.creation_time.clone();
        }
        if !seed.with_resources {
            let nic = i.nic_id.clone();
            state.nics.remove(&nic);
            state.disks.retain(|_, d| d.instance_id != id);
        }
        ids.push(id);
    }
    Ok(ids)
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// A Pending instance created through RunInstances at `now`.
    pub(crate) fn instance(state: &mut State, now: Instant) -> Instance {
        let faults = Faults::default();
        let life = Lifecycle::default();
        let ctx = Ctx {
            now,
            lifecycle: &life,
            faults: &faults,
        };
        let mut p = Params::new();
        for (k, v) in [("RegionId", "r"), ("ImageId", "img"), ("InstanceType", "t")] {
            p.insert(k.into(), v.into());
        }
        let a = run_instances(state, &ctx, &p).unwrap();
        let id = a["InstanceIdSets"]["InstanceIdSet"][0].as_str().unwrap();
        state.instances[id].clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(seen.len(), 13);
        assert_eq!(seen[0], "m-0");
        assert_eq!(seen[12], "m-24");
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
}
