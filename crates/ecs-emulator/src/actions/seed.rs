//! Seeding: many instances at once, straight into the state, for list tests and benchmarks.

use std::collections::BTreeMap;

use tokio::time::Instant;

use super::instances::run_instances;
use super::{Ctx, Params};
use crate::config::{Faults, Lifecycle};
use crate::state::{State, Status};

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

/// Why a seed made nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SeedError {
    /// `status` is not an ECS instance status.
    #[error("unknown status {0:?}")]
    UnknownStatus(String),
    /// RunInstances refused the seed's parameters (a bad region or zone, a tag ECS refuses); ECS's
    /// own message.
    #[error("{0}")]
    Refused(String),
    /// More instances than one emulator holds: a bound, so one request cannot eat the memory (and,
    /// under `berth up`, the CPU) of every service in the process.
    #[error(
        "count: at most {MAX_INSTANCES} instances in all; {have} exist and {asked} were asked for"
    )]
    TooMany {
        /// Instances already there.
        have: usize,
        /// The seed's `count`.
        asked: usize,
    },
}

/// The most instances the emulator holds, seeded or run (large-list tests use tens of thousands).
pub(crate) const MAX_INSTANCES: usize = 200_000;

/// Creates `seed.count` instances directly (no RunInstances validation), for large-list tests.
pub(crate) fn seed(
    state: &mut State,
    now: Instant,
    default_region: &str,
    seed: &Seed,
) -> Result<Vec<String>, SeedError> {
    if state.instances.len().saturating_add(seed.count) > MAX_INSTANCES {
        return Err(SeedError::TooMany {
            have: state.instances.len(),
            asked: seed.count,
        });
    }
    let status = match &seed.status {
        Some(s) => Status::parse(s).ok_or_else(|| SeedError::UnknownStatus(s.clone()))?,
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
        now_ms: crate::state::unix_ms_now(),
        lifecycle: &life,
        faults: &faults,
    };
    let mut ids = Vec::with_capacity(seed.count);
    for n in 0..seed.count {
        params.insert("InstanceName".into(), format!("{}{n}", seed.name_prefix));
        let answer =
            run_instances(state, &ctx, &params).map_err(|e| SeedError::Refused(e.message))?;
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
