//! Who and what a machine is on ECS: its name (the instance name and lookup key), its owner (the
//! UID recorded on the instance), the tag keys that scope and stamp instances, its providerID and
//! node name, and the ClientToken series its creates send.
//!
//! Apart from the provider spec because none of it comes from the class: it is derived from the
//! machine (its name, UID and providerID) and stamped on what the driver makes, so every call
//! (create, find, delete, list) reads it the same way, whatever the class says now.

use alicloud::{Instance, Region};
use domain::machine::Machine;
use domain::{Code, Status, names};
use sha2::{Digest as _, Sha256};

use super::region::RegionPolicy;
use crate::provider::CheckedFor;

/// Tag keys containing this identify the cluster (`kubernetes.io/cluster/<name>`).
pub const CLUSTER_TAG: &str = "kubernetes.io/cluster/";
/// Tag keys containing this identify the role (`kubernetes.io/role/<role>/...`).
pub const ROLE_TAG: &str = "kubernetes.io/role/";
/// The tag Berth adds to every instance (and, through ECS, its disks and NICs): the machine's name.
/// Leftover disks and network interfaces are found by it after the instance is gone.
pub const MACHINE_TAG: &str = "berth.io/machine";
/// The tag Berth adds to every instance: the UID of the machine it was created for (empty for a
/// machine without one). It decides who a machine name's VM belongs to when creates race.
pub const OWNER_TAG: &str = "berth.io/machine-uid";
/// The longest machine UID accepted: an ECS tag value's limit (Kubernetes UIDs have 36 characters).
pub(super) const MAX_UID_LEN: usize = 128;

/// What every call checks first, before any ECS call: the machine's name ([`machine_name`]) and
/// owner ([`Owner::of`]).
pub fn name_and_owner(
    machine: &Machine,
    checked_for: CheckedFor,
) -> Result<(String, Owner), Status> {
    Ok((machine_name(machine, checked_for)?, Owner::of(machine)?))
}

/// The longest name CreateMachine takes: an ECS instance name is 2 to 128 characters.
pub(super) const MAX_CREATE_NAME_LEN: usize = 128;

/// The machine's name, which is the ECS `InstanceName` and the lookup key: a DNS-1123 subdomain
/// (so never an ECS wildcard `*`) of dot-separated parts of at most 63 characters, at most 253
/// characters, and for CreateMachine 2 to 128 characters as ECS requires. The message states the
/// rule that failed: the 128 for CreateMachine, else the subdomain's (a part's 63, the 253).
pub fn machine_name(machine: &Machine, checked_for: CheckedFor) -> Result<String, Status> {
    let name = machine.metadata.name.as_str();
    let field = "machine.metadata.name";
    let ecs_length = || {
        Status::invalid(
            field,
            format!(
                "{:?} is {} characters long; ECS instance names are 2 to {MAX_CREATE_NAME_LEN} characters",
                name.chars().take(80).collect::<String>(),
                name.len()
            ),
        )
    };
    if checked_for == CheckedFor::Create && name.len() > MAX_CREATE_NAME_LEN {
        return Err(ecs_length());
    }
    names::validate_dns1123_subdomain(field, name, names::MAX_SUBDOMAIN_LEN)?;
    if checked_for == CheckedFor::Create && name.len() < 2 {
        return Err(ecs_length());
    }
    Ok(name.to_owned())
}

/// `<region>.<instanceId>`, the Alibaba cloud-controller-manager's provider id.
pub fn provider_id(region: &str, instance_id: &str) -> String {
    format!("{region}.{instance_id}")
}

/// Whether `id` looks like an ECS instance id: `i-` and lower-case letters and digits.
fn is_instance_id(id: &str) -> bool {
    id.len() <= 64
        && id.strip_prefix("i-").is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

/// Splits a provider id into (region, instance id) as MCM does (the id follows the last `.`), and
/// checks both parts: the region is a [`Region`] the policy admits (it picks the endpoint the
/// instance is looked up at), the id an ECS instance id. A bare instance id means the class's
/// region. Errors name the field, never repeat the value.
pub fn decode_provider_id<'p>(
    provider_id: &'p str,
    regions: &RegionPolicy,
) -> Result<(Option<Region>, &'p str), Status> {
    const FIELD: &str = "machine.spec.providerID";
    let malformed = || {
        Status::invalid(
            FIELD,
            "is not of the form <region>.<instanceId> (an ECS region id, a dot, and an instance id such as i-bp67acfmxazb4p)",
        )
    };
    let (region, id) = match provider_id.rsplit_once('.') {
        Some((region, id)) => (Some(region), id),
        None => (None, provider_id),
    };
    if !is_instance_id(id) {
        return Err(malformed());
    }
    let region = match region {
        None => None,
        Some(r) => Some(regions.admit(r).map_err(|rule| match Region::parse(r) {
            // A well-formed region the policy refuses: say so (the value is safe to name).
            Ok(_) if rule.is_the_operators() => Status::new(
                Code::FailedPrecondition,
                format!("{FIELD}: names region {r:?}, which {rule}"),
            ),
            Ok(_) => Status::invalid(FIELD, format!("names region {r:?}, which {rule}")),
            Err(_) => malformed(),
        })?),
    };
    Ok((region, id))
}

/// Who a VM is made for: the machine's UID, or a machine without one. Recorded on the instance as
/// [`OWNER_TAG`] (the UID, or an empty value), so every driver replica can tell whose a VM is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner(String);

impl Owner {
    /// The owner a request speaks for. A UID is at most 128 characters (an ECS tag value) of ASCII
    /// letters, digits, `-`, `_` and `.`, as Kubernetes UIDs (UUIDs) are.
    pub fn of(machine: &Machine) -> Result<Owner, Status> {
        let uid = machine.metadata.uid.as_str();
        let ok = uid.len() <= MAX_UID_LEN
            && uid
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && !uid.starts_with("aliyun");
        if !ok {
            return Err(Status::invalid(
                "machine.metadata.uid",
                format!(
                    "must be at most {MAX_UID_LEN} ASCII letters, digits, '-', '_' or '.' (a Kubernetes UID)"
                ),
            ));
        }
        Ok(Owner(uid.to_owned()))
    }

    /// Whom an instance was made for; `None` for an instance without the owner tag (made outside
    /// Berth, or before Berth recorded owners).
    pub fn of_instance(instance: &Instance) -> Option<Owner> {
        instance.tag(OWNER_TAG).map(|v| Owner(v.to_owned()))
    }

    /// The value of [`OWNER_TAG`].
    pub fn tag_value(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            f.write_str("a machine without a UID")
        } else {
            write!(f, "machine UID {:?}", self.0)
        }
    }
}

/// The node name of an instance: its default ECS host name, lower-cased (`i-abc` → `izabcz`).
pub fn node_name(instance_id: &str) -> String {
    format!("{}z", instance_id.replacen('-', "z", 1))
}

/// Token `n` of a machine's RunInstances `ClientToken` series: a SHA-256 (64 hex characters, ECS's
/// limit) of its UID, or of namespace/name when it has none, and `n`. Every attempt of CreateMachine
/// for the machine walks the series from 0, so its retries send the same tokens in the same order
/// and ECS never makes a second VM for one token. The walk moves past token `n` only when ECS
/// answers it with an instance that no longer exists: the machine's VM was released and the
/// machine (the same UID, as the examples reuse one) is being created again. Token 0 is the token
/// Berth has always sent, so VMs made before the series existed are still found by it.
pub fn client_token(machine: &Machine, n: u32) -> String {
    TokenSeries::of(machine).token(n)
}

/// A machine's [`client_token`] series, its key taken from the machine once: what a CreateMachine
/// walks, token by token, without going back to the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSeries {
    key: String,
}

impl TokenSeries {
    /// The series of `machine`: keyed by its UID, or by namespace/name when it has none.
    pub fn of(machine: &Machine) -> Self {
        let m = &machine.metadata;
        let key = if m.uid.is_empty() {
            format!("name:{}/{}", m.namespace, m.name)
        } else {
            format!("uid:{}", m.uid)
        };
        TokenSeries { key }
    }

    /// Token `n` ([`client_token`]).
    pub fn token(&self, n: u32) -> String {
        let mut h = Sha256::new();
        h.update(b"berth/alicloud/RunInstances/v1\n");
        h.update(self.key.as_bytes());
        if n > 0 {
            h.update(format!("\n#{n}").as_bytes());
        }
        hex::encode(h.finalize())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The policy of a driver calling the regional endpoints, without an allow-list.
    fn policy() -> RegionPolicy {
        RegionPolicy {
            allowed: BTreeSet::new(),
            known_only: true,
        }
    }

    #[test]
    fn owners_are_uids_or_none() {
        let mut m = Machine::default();
        assert_eq!(Owner::of(&m).unwrap().tag_value(), "");
        assert_eq!(
            Owner::of(&m).unwrap().to_string(),
            "a machine without a UID"
        );
        m.metadata.uid = "0b7e2c1a-5f7d-4c1e-9a57-6f0f8e1d2c3b".into();
        let owner = Owner::of(&m).unwrap();
        assert_eq!(
            owner.to_string(),
            "machine UID \"0b7e2c1a-5f7d-4c1e-9a57-6f0f8e1d2c3b\""
        );
        for bad in [
            "a b".to_string(),
            "x:y".into(),
            "u".repeat(129),
            "aliyun-x".into(),
        ] {
            m.metadata.uid = bad.clone();
            let e = Owner::of(&m).unwrap_err();
            assert!(e.message.starts_with("machine.metadata.uid:"), "{bad:?}");
        }
    }

    #[test]
    fn identity_helpers() {
        assert_eq!(
            node_name("i-uf69zddmom11ci7est12"),
            "izuf69zddmom11ci7est12z"
        );
        assert_eq!(node_name("i-mockinstanceid"), "izmockinstanceidz");
        assert_eq!(
            provider_id("cn-shanghai", "i-mockinstanceid"),
            "cn-shanghai.i-mockinstanceid"
        );
        assert_eq!(
            decode_provider_id("cn-shanghai.i-1", &policy()).unwrap(),
            (Some(Region::parse("cn-shanghai").unwrap()), "i-1")
        );
        assert_eq!(decode_provider_id("i-1", &policy()).unwrap(), (None, "i-1"));
        for bad in [
            "cn-shanghai.",
            "",
            " cn-shanghai.i-1",
            "cn-shanghai.i-1 ",
            "cn-shanghai.I-1",
            "cn-shanghai.i-",
            "cn-shanghai.x-1",
            "cn-shanghai.i-1*",
            "x@127.0.0.1:9/.i-1",
            "../x.i-1",
            ".i-1",
        ] {
            let e = decode_provider_id(bad, &policy()).unwrap_err();
            assert!(
                e.message
                    .starts_with("machine.spec.providerID: is not of the form"),
                "{bad:?}: {}",
                e.message
            );
            assert!(
                !bad.contains('@') || !e.message.contains('@'),
                "{}",
                e.message
            );
        }
        let e = decode_provider_id("xx-nowhere-1.i-1", &policy()).unwrap_err();
        assert_eq!(e.code, Code::FailedPrecondition);
        assert!(
            e.message.contains(
                "names region \"xx-nowhere-1\", which is not a region this driver knows an ECS endpoint for"
            ),
            "{}",
            e.message
        );
        let mut m = Machine::default();
        m.metadata.name = "m".into();
        m.metadata.namespace = "ns".into();
        let by_name = client_token(&m, 0);
        assert_eq!(by_name.len(), 64);
        assert_eq!(by_name, client_token(&m, 0));
        m.metadata.uid = "u-1".into();
        assert_ne!(by_name, client_token(&m, 0));
    }

    #[test]
    fn a_machines_token_series_is_deterministic_and_starts_with_the_token_berth_always_sent() {
        let mut m = Machine::default();
        m.metadata.uid = "6a0c5d4e-0b7e-4d7c-9a55-2f3c8c1e9b01".into();
        // SHA-256 of "berth/alicloud/RunInstances/v1\nuid:<uid>": the token of every VM made so far.
        let mut h = Sha256::new();
        h.update(b"berth/alicloud/RunInstances/v1\nuid:6a0c5d4e-0b7e-4d7c-9a55-2f3c8c1e9b01");
        assert_eq!(client_token(&m, 0), hex::encode(h.finalize()));
        let series: Vec<String> = (0..50).map(|n| client_token(&m, n)).collect();
        let distinct: BTreeSet<&String> = series.iter().collect();
        assert_eq!(distinct.len(), 50);
        assert!(series.iter().all(|t| t.len() == 64 && t.is_ascii()));
        assert_eq!(series[7], client_token(&m, 7));
    }
}
