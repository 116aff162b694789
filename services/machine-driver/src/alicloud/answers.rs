//! What the driver answers about an instance: its addresses and conditions, the providerID and
//! node name it is known by, and MCM's refusals for a machine with no instance or too many.
//!
//! Apart because these shapes are MCM's contract, shared by every call that answers with an
//! instance (create, initialize, status, list), and none of them calls ECS.

use alicloud::{Instance, InstanceStatus};
use domain::machine::{Condition, NodeAddress};
use domain::{Code, Status};

use super::identity::{self, OWNER_TAG};
use super::lookup::Found;
use crate::provider::{Listed, NAMESPACE_STAMP, stamped_namespace};

/// A machine's addresses: private IPs, public IPs and the host name the node registers with.
pub(super) fn addresses(i: &Instance) -> Vec<NodeAddress> {
    let mut out = Vec::new();
    let private: Vec<&String> = if i.private_ip_addresses.is_empty() {
        i.network_interfaces
            .iter()
            .filter_map(|n| n.primary_ip_address.as_ref())
            .collect()
    } else {
        i.private_ip_addresses.iter().collect()
    };
    for ip in private {
        out.push(NodeAddress {
            kind: "InternalIP".into(),
            address: ip.clone(),
        });
    }
    for ip in &i.public_ip_addresses {
        out.push(NodeAddress {
            kind: "ExternalIP".into(),
            address: ip.clone(),
        });
    }
    out.push(NodeAddress {
        kind: "Hostname".into(),
        address: i
            .host_name
            .as_deref()
            .map(str::to_lowercase)
            .unwrap_or_else(|| identity::node_name(&i.instance_id)),
    });
    out
}

/// MCM's OutOfRange for several instances backing one machine.
pub(super) fn multiple(ids: &[String]) -> Status {
    Status::new(
        Code::OutOfRange,
        format!(
            "multiple VM instances found backing this machine object. IDs for all backing VMs - [{}]",
            ids.join(" ")
        ),
    )
}

/// DeleteMachine's state when no instance backs the machine.
pub(super) fn nothing_released(name: &str) -> String {
    format!("no ECS instance backs machine {name}; nothing to release")
}

/// MCM's NotFound for a machine no instance backs.
pub(super) fn missing(name: &str) -> Status {
    Status::not_found(format!(
        "VM instance not found backing this machine object {name:?}"
    ))
}

/// Exactly one instance, or MCM's NotFound / OutOfRange.
pub(super) fn exactly_one(found: Vec<Found>, name: &str) -> Result<Found, Status> {
    let mut found = found.into_iter();
    match (found.next(), found.next()) {
        (None, _) => Err(missing(name)),
        (Some(one), None) => Ok(one),
        (Some(a), Some(b)) => {
            let ids: Vec<String> = [a, b]
                .into_iter()
                .chain(found)
                .map(|f| f.instance.instance_id)
                .collect();
            Err(multiple(&ids))
        }
    }
}

/// An instance as ListMachines and the machine quota see it.
pub(super) fn listed(i: Instance) -> Listed {
    Listed {
        namespace: stamped_namespace(i.tag(NAMESPACE_STAMP)).to_owned(),
        uid: i.tag(OWNER_TAG).unwrap_or_default().to_owned(),
        name: i.instance_name,
    }
}

/// The providerID of an instance found for a machine: in the region it was found in.
pub(super) fn provider_id_of(f: &Found) -> String {
    identity::provider_id(f.client.region(), &f.instance.instance_id)
}

/// The condition GetMachineStatus reports: the ECS status, True once Running.
pub(super) fn instance_condition(i: &Instance) -> Condition {
    let status = match i.status {
        InstanceStatus::Running => "True",
        InstanceStatus::Stopped | InstanceStatus::Stopping => "False",
        _ => "Unknown",
    };
    Condition {
        kind: "InstanceStatus".into(),
        status: status.into(),
        reason: i.status.as_str().to_owned(),
        message: format!("ECS instance {} is {}", i.instance_id, i.status),
        last_transition_time: None,
    }
}

/// Whether the instance is initialised ([`crate::provider::INITIALIZED_CONDITION`]): only a
/// Running instance is. Stopped (or Stopping) needs InitializeMachine to start it; Pending and
/// Starting are on their way. MCM, told Uninitialized, calls InitializeMachine, which starts what
/// is stopped and answers OK once the instance runs.
pub(super) fn initialized_condition(i: &Instance, machine: &str) -> Condition {
    let id = &i.instance_id;
    let status = &i.status;
    let (initialized, message) = match status {
        InstanceStatus::Running => ("True", format!("ECS instance {id} is Running")),
        InstanceStatus::Stopped => (
            "False",
            format!(
                "ECS instance {id} backing machine {machine:?} exists but is not initialised: it is Stopped; InitializeMachine starts it"
            ),
        ),
        InstanceStatus::Stopping => (
            "False",
            format!(
                "ECS instance {id} backing machine {machine:?} exists but is not initialised: it is Stopping; InitializeMachine starts it once it has stopped"
            ),
        ),
        _ => (
            "False",
            format!(
                "ECS instance {id} backing machine {machine:?} exists but is not initialised: it is {status}, and counts as initialised once it is Running"
            ),
        ),
    };
    Condition {
        kind: crate::provider::INITIALIZED_CONDITION.into(),
        status: initialized.into(),
        reason: status.as_str().to_owned(),
        message,
        last_transition_time: None,
    }
}
