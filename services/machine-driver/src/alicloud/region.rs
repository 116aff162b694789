//! Which regions the driver may call ([`RegionPolicy`]) and why one is refused ([`RegionRefusal`]).
//!
//! Apart because two caller values pick where the driver connects, `providerSpec.region` and the
//! region part of `machine.spec.providerID`: both become a [`Region`] (ECS's region-id grammar) and
//! must pass this one policy before any client is made, so neither can point a request at another
//! host. The policy is the operator's setting, not the request's.

use std::collections::BTreeSet;

use alicloud::Region;

/// Which regions the driver may call: ECS's grammar always; then the operator's allow-list when
/// there is one (`BERTH_ALICLOUD_REGIONS`), else, when calls go to the regional endpoints, the
/// regions ECS is known to serve. With an endpoint override (an emulator) any well-formed region
/// goes, since the region then picks no host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegionPolicy {
    /// The operator's allow-list; empty means none.
    pub allowed: BTreeSet<Region>,
    /// Whether a region must be one ECS is known to serve (no endpoint override).
    pub known_only: bool,
}

/// The rule a region broke ([`RegionPolicy::admit`]); its text completes a sentence that starts
/// with the field, and never holds the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegionRefusal {
    /// Not a region id at all.
    #[error(transparent)]
    Malformed(#[from] ::alicloud::RegionError),
    /// Not on the operator's allow-list; `known`: a region ECS serves.
    #[error("is not a region this driver is allowed to use (the operator's allow-list)")]
    NotAllowed {
        /// Whether ECS is known to serve it.
        known: bool,
    },
    /// Not a region ECS is known to serve, and no allow-list names it.
    #[error(
        "is not a region this driver knows an ECS endpoint for (an operator can allow it with the driver's region allow-list, BERTH_ALICLOUD_REGIONS)"
    )]
    NotKnown,
}

impl RegionRefusal {
    /// Whether only this driver's set-up refuses the region (a precondition of where the request
    /// was sent, 412): every well-formed region is, since what a driver admits depends on its
    /// settings (an allow-list, an endpoint override such as `berth up`'s emulator, which takes any).
    /// Only a malformed one is the request's own mistake (400), as the document's grammar says.
    pub fn is_the_operators(&self) -> bool {
        !matches!(self, RegionRefusal::Malformed(_))
    }
}

impl RegionPolicy {
    /// Parses `value` and checks it against the policy; the error is the rule that failed, without
    /// the value.
    pub fn admit(&self, value: &str) -> Result<Region, RegionRefusal> {
        let region = Region::parse(value)?;
        if !self.allowed.is_empty() {
            if !self.allowed.contains(&region) {
                return Err(RegionRefusal::NotAllowed {
                    known: region.is_known(),
                });
            }
        } else if self.known_only && !region.is_known() {
            return Err(RegionRefusal::NotKnown);
        }
        Ok(region)
    }

    /// The regions the machine quota counts in: the operator's allow-list, else every region ECS
    /// is known to serve, with the request's own region always among them.
    pub fn quota_regions(&self, own: &Region) -> BTreeSet<Region> {
        let mut regions: BTreeSet<Region> = if self.allowed.is_empty() {
            alicloud::endpoint::known_regions()
                .into_iter()
                .filter_map(|r| Region::parse(r).ok())
                .collect()
        } else {
            self.allowed.clone()
        };
        regions.insert(own.clone());
        regions
    }
}
