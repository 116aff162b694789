//! The ECS actions: parameter validation as ECS does it, state changes, and the real JSON shapes.
//!
//! # Layout
//! - this module: the action table ([`ACTIONS`], which of them mutate), [`Ctx`] and [`dispatch`].
//! - `params`: reading parameters as ECS does (missing, malformed, JSON id lists) and paging.
//! - `tags`: `Tag.N.*` as a filter and as tags to set.
//! - `instances`: RunInstances (with ClientToken idempotency), Describe/Delete/Start/StopInstance.
//! - `disks`: DescribeDisks, ModifyDiskAttribute, DeleteDisk.
//! - `network`: DescribeNetworkInterfaces, DeleteNetworkInterface.
//! - `regions`: DescribeRegions.
//! - `seed`: [`Seed`], many instances at once for list tests and benchmarks.

use std::collections::BTreeMap;

use serde_json::Value;
use tokio::time::Instant;

use crate::config::{Faults, Lifecycle};
use crate::state::State;
use crate::wire::EcsError;

mod disks;
mod instances;
mod network;
mod params;
mod regions;
mod seed;
mod tags;
#[cfg(test)]
mod tests;

use disks::{delete_disk, describe_disks, modify_disk_attribute};
use instances::{
    delete_instance, describe_instances, run_instances, start_instance, stop_instance,
};
use network::{delete_nic, describe_nics};
use regions::describe_regions;
pub(crate) use seed::seed;
pub use seed::{Seed, SeedError};

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

pub(crate) type Params = BTreeMap<String, String>;

/// What an action needs besides its parameters.
pub(crate) struct Ctx<'a> {
    pub(crate) now: Instant,
    /// The wall clock, in Unix milliseconds, for what outlives the process (ClientTokens).
    pub(crate) now_ms: u64,
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
    // Every action but DescribeRegions acts in a region; an action it does not have is refused
    // as such first.
    if action != "DescribeRegions" && ACTIONS.contains(&action) {
        regions::check_region(p.get("RegionId").map(String::as_str))?;
    }
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

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;
    use crate::state::Instance;

    /// A Pending instance created through RunInstances at `now`.
    pub(crate) fn instance(state: &mut State, now: Instant) -> Instance {
        let faults = Faults::default();
        let life = Lifecycle::default();
        let ctx = Ctx {
            now,
            now_ms: crate::state::unix_ms_now(),
            lifecycle: &life,
            faults: &faults,
        };
        let mut p = Params::new();
        for (k, v) in [
            ("RegionId", "cn-shanghai"),
            ("ImageId", "img"),
            ("InstanceType", "t"),
        ] {
            p.insert(k.into(), v.into());
        }
        let a = run_instances(state, &ctx, &p).unwrap();
        let id = a["InstanceIdSets"]["InstanceIdSet"][0].as_str().unwrap();
        state.instances[id].clone()
    }
}
