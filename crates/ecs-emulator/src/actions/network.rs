//! Network interfaces: DescribeNetworkInterfaces, DeleteNetworkInterface.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::Params;
use super::params::{opt, paginate, required};
use super::tags::tag_filter;
use crate::state::{Nic, State, tags_match};
use crate::wire::EcsError;

pub(super) fn describe_nics(state: &mut State, p: &Params) -> Result<Value, EcsError> {
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
    Ok(page.answer("NetworkInterfaceSets", "NetworkInterfaceSet", Nic::to_json))
}

pub(super) fn delete_nic(state: &mut State, p: &Params) -> Result<Value, EcsError> {
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
