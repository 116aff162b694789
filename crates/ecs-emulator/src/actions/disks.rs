//! Disks: DescribeDisks, ModifyDiskAttribute, DeleteDisk.

use serde_json::{Value, json};

use super::Params;
use super::params::{boolean, json_list, opt, paginate, required};
use super::tags::tag_filter;
use crate::state::{Disk, State, tags_match};
use crate::wire::EcsError;

pub(super) fn describe_disks(state: &mut State, p: &Params) -> Result<Value, EcsError> {
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
    Ok(page.answer("Disks", "Disk", Disk::to_json))
}

fn disk_not_found() -> EcsError {
    EcsError::new(
        404,
        "InvalidDiskId.NotFound",
        "The specified disk does not exist.",
    )
}

/// ModifyDiskAttribute for one `DiskId`: `DeleteWithInstance`, `DiskName`, `Description`.
pub(super) fn modify_disk_attribute(state: &mut State, p: &Params) -> Result<Value, EcsError> {
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

pub(super) fn delete_disk(state: &mut State, p: &Params) -> Result<Value, EcsError> {
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
