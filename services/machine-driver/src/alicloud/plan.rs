//! A request decoded and checked once, before any ECS call: [`Prepared`] (the class and secret
//! every call that takes a class needs), [`CreatePlan`] (all CreateMachine's ECS calls need), and
//! the [`Reach`] their lookups share.
//!
//! Apart so that the request is read in one place, in the order its refusals are answered: a
//! CreateMachine used to go back to the spec for each piece where it was needed (name and owner,
//! user data, the RunInstances request, providerID, ClientToken); it now acts on one typed plan
//! and never looks at the request again.

use alicloud::{Credentials, Ecs, EcsClient, Region, RunInstances, Tag};
use domain::machine::{MachineClass, MachineRequest, Secret};
use domain::{Code, Status};

use super::identity::{self, Owner, TokenSeries};
use super::region::RegionPolicy;
use super::secret;
use super::spec::ProviderSpec;
use crate::provider::{CheckedFor, request_namespace};

/// A request's checked spec, region and credentials, and the cluster tags that scope its lookups.
pub(super) struct Prepared {
    pub(super) spec: ProviderSpec,
    pub(super) region: Region,
    pub(super) credentials: Credentials,
    /// [`ProviderSpec::cluster_tags`].
    pub(super) scope: Vec<Tag>,
}

impl Prepared {
    /// The spec, region and credentials of a request, checked (all of them for a create).
    pub(super) fn new(
        class: &MachineClass,
        secret: &Secret,
        regions: &RegionPolicy,
        checked_for: CheckedFor,
    ) -> Result<Prepared, Status> {
        let spec = ProviderSpec::decode(&class.provider_spec)?;
        let region = if checked_for == CheckedFor::Create {
            spec.validate_for_create(regions)
        } else {
            spec.validate_scope(regions)
        };
        let credentials = secret::credentials(secret);
        // A malformed request (400) is told so before what this driver's set-up refuses (412):
        // the answer to a request depends on where it was sent only once it is well formed.
        let (region, credentials) = match (region, credentials) {
            (Err(refused), Err(malformed))
                if refused.code != Code::InvalidArgument
                    && malformed.code == Code::InvalidArgument =>
            {
                return Err(malformed);
            }
            (region, credentials) => (region?, credentials?),
        };
        let scope = spec.cluster_tags();
        Ok(Prepared {
            spec,
            region,
            credentials,
            scope,
        })
    }

    /// A client for the class's region.
    pub(super) fn home(&self, ecs: &Ecs) -> EcsClient {
        ecs.client(&self.region, self.credentials.clone())
    }

    /// What the lookups for a machine in `namespace` may reach.
    pub(super) fn reach<'a>(&'a self, namespace: &'a str) -> Reach<'a> {
        Reach {
            region: &self.region,
            credentials: &self.credentials,
            scope: &self.scope,
            namespace,
        }
    }
}

/// Where one request's lookups go and what they may see: the class's region with the request's
/// credentials, instances carrying the cluster tags, and of those only the machine's namespace's.
#[derive(Clone, Copy)]
pub(super) struct Reach<'a> {
    pub(super) region: &'a Region,
    pub(super) credentials: &'a Credentials,
    pub(super) scope: &'a [Tag],
    pub(super) namespace: &'a str,
}

impl Reach<'_> {
    /// A client for the class's region.
    pub(super) fn home(&self, ecs: &Ecs) -> EcsClient {
        ecs.client(self.region, self.credentials.clone())
    }

    /// A client for `region` (a providerID's), with the request's credentials.
    pub(super) fn client(&self, ecs: &Ecs, region: &Region) -> EcsClient {
        ecs.client(region, self.credentials.clone())
    }
}

/// The instance a `machine.spec.providerID` names, decoded and checked against the region policy.
pub(super) struct Pinned {
    /// Its region, when the providerID names one (else the class's).
    pub(super) region: Option<Region>,
    pub(super) instance_id: String,
}

impl Pinned {
    /// `None` for an empty providerID (the machine has no VM yet); a malformed one, or one naming a
    /// region the policy refuses, is refused ([`identity::decode_provider_id`]).
    pub(super) fn decode(
        provider_id: &str,
        regions: &RegionPolicy,
    ) -> Result<Option<Pinned>, Status> {
        if provider_id.is_empty() {
            return Ok(None);
        }
        let (region, id) = identity::decode_provider_id(provider_id, regions)?;
        Ok(Some(Pinned {
            region,
            instance_id: id.to_owned(),
        }))
    }
}

/// A CreateMachine request, decoded and checked: everything its ECS calls need.
pub(super) struct CreatePlan {
    /// The machine's name: the instance name, and the key of the lookup by name.
    pub(super) name: String,
    /// Whom the VM is made for ([`identity::OWNER_TAG`]).
    pub(super) owner: Owner,
    /// The machine's namespace, stamped on the VM; only its instances are the machine's.
    pub(super) namespace: String,
    /// The class's region, where a new VM is made.
    pub(super) region: Region,
    pub(super) credentials: Credentials,
    /// The cluster tags every lookup is scoped to.
    pub(super) scope: Vec<Tag>,
    /// The instance `spec.providerID` names, adopted when it is there.
    pub(super) pinned: Option<Pinned>,
    /// RunInstances as the spec, name, owner, namespace and user data make it; the ClientToken is
    /// the walk's ([`CreatePlan::tokens`]).
    pub(super) run: RunInstances,
    /// The machine's ClientToken series.
    pub(super) tokens: TokenSeries,
}

impl CreatePlan {
    /// The plan for `req`, or the first refusal in the order CreateMachine answers them: the name
    /// and owner, then a malformed class, secret or user data (400) before what this driver's
    /// set-up refuses (412), then the providerID.
    pub(super) fn new(req: &MachineRequest, regions: &RegionPolicy) -> Result<Self, Status> {
        let plan = Self::decode(req, regions)?;
        Ok(CreatePlan {
            pinned: Pinned::decode(&req.machine.spec.provider_id, regions)?,
            ..plan
        })
    }

    /// The checks of [`CreatePlan::new`] but the providerID's, which CreateMachine makes once these
    /// pass and the check before the machine quota never made: what `check_create` answers.
    pub(super) fn check(req: &MachineRequest, regions: &RegionPolicy) -> Result<(), Status> {
        Self::decode(req, regions).map(|_| ())
    }

    /// The plan without its providerID ([`CreatePlan::check`]).
    fn decode(req: &MachineRequest, regions: &RegionPolicy) -> Result<Self, Status> {
        let (name, owner) = identity::name_and_owner(&req.machine, CheckedFor::Create)?;
        let user_data = secret::user_data(&req.secret);
        let p = match Prepared::new(&req.machine_class, &req.secret, regions, CheckedFor::Create) {
            // The user data's shape (400) before what the set-up refuses (412).
            Err(refused) if refused.code != Code::InvalidArgument => {
                user_data?;
                return Err(refused);
            }
            p => p?,
        };
        let user_data = user_data?;
        let namespace = request_namespace(req).to_owned();
        let run = p.spec.run_instances(&name, &owner, &namespace, user_data);
        Ok(CreatePlan {
            name,
            owner,
            namespace,
            region: p.region,
            credentials: p.credentials,
            scope: p.scope,
            pinned: None,
            run,
            tokens: TokenSeries::of(&req.machine),
        })
    }
}
