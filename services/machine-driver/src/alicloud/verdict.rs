//! Who keeps a machine name when creates race ([`decide`]), and which instances a request may take
//! as its machine's ([`belongs_to`], [`in_namespace`]).
//!
//! Apart because it is a pure function of one DescribeInstances answer: every driver replica must
//! reach the same verdict from the same listing, so it is kept free of ECS calls and tested alone.

use alicloud::Instance;
use domain::{Code, Status};

use super::identity::Owner;
use crate::provider::{NAMESPACE_STAMP, stamped_namespace};

/// Who keeps a machine name, decided from one DescribeInstances answer ([`decide`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Instances of this owner that lost and must be released.
    pub release: Vec<String>,
    /// What is left for the caller.
    pub outcome: Outcome,
}

/// The caller's side of a [`Verdict`]; indexes point into the instances [`decide`] was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// No instance carries the name.
    Free,
    /// The name's VM is the caller's (made for its UID, or for no recorded owner).
    Adopt(usize),
    /// The name's VM was made for another owner, or is another namespace's.
    Taken(usize),
    /// Several instances without a recorded owner carry the name; none can be picked.
    Ambiguous(Vec<String>),
}

/// The order that decides who keeps a name: the earliest `CreationTime` (instances without one
/// last), then the smallest instance id. Every replica computes it from the same listing alike.
fn rank(i: &Instance) -> (bool, i64, &str) {
    let created = i.creation_timestamp();
    (
        created.is_none(),
        created.unwrap_or_default(),
        i.instance_id.as_str(),
    )
}

/// Decides, for a caller speaking for `me`, what the instances carrying one machine name (in one
/// cluster) mean. The first in [`rank`] order keeps the name. The caller's other instances lost:
/// they are to be released (a replica that made them crashed, or lost a race). Instances of other
/// owners are never the caller's to release; their creators release them the same way.
///
/// Instances without an owner tag (made before Berth recorded owners, or outside it) are adopted as
/// before, as long as only one of them carries the name. An instance stamped with another namespace
/// than the caller's (`namespace`; [`NAMESPACE_STAMP`]) is never the caller's, whatever its owner tag
/// says: a tenant that sends another tenant's UID neither adopts nor releases that tenant's VM.
pub fn decide(seen: &[Instance], me: &Owner, namespace: &str) -> Verdict {
    // Another namespace's instances are not there for this caller: ECS names need not be unique,
    // so a name one namespace uses is free in another, and a 409 would tell the caller the other
    // namespace has a machine of that name (a break-it finding).
    let Some(winner) = (0..seen.len())
        .filter(|n| in_namespace(&seen[*n], namespace))
        .min_by(|a, b| rank(&seen[*a]).cmp(&rank(&seen[*b])))
    else {
        return Verdict {
            release: Vec::new(),
            outcome: Outcome::Free,
        };
    };
    let release: Vec<String> = seen
        .iter()
        .enumerate()
        .filter(|(n, i)| {
            *n != winner && in_namespace(i, namespace) && Owner::of_instance(i).as_ref() == Some(me)
        })
        .map(|(_, i)| i.instance_id.clone())
        .collect();
    let outcome = match Owner::of_instance(&seen[winner]) {
        Some(owner) if &owner == me => Outcome::Adopt(winner),
        Some(_) => Outcome::Taken(winner),
        None => {
            let unowned: Vec<String> = seen
                .iter()
                .filter(|i| Owner::of_instance(i).is_none() && in_namespace(i, namespace))
                .map(|i| i.instance_id.clone())
                .collect();
            if unowned.len() == 1 {
                Outcome::Adopt(winner)
            } else {
                Outcome::Ambiguous(unowned)
            }
        }
    };
    Verdict { release, outcome }
}

/// Whether a by-name lookup for `owner` in `namespace` may take this instance as the machine's:
/// stamped with the same namespace, and made for the same owner or with no recorded owner.
pub(super) fn belongs_to(i: &Instance, owner: &Owner, namespace: &str) -> bool {
    in_namespace(i, namespace) && Owner::of_instance(i).is_none_or(|o| &o == owner)
}

/// Whether the instance is stamped with `namespace` (no stamp: `default`).
pub(super) fn in_namespace(i: &Instance, namespace: &str) -> bool {
    stamped_namespace(i.tag(NAMESPACE_STAMP)) == namespace
}

/// The machine's AlreadyExists: the name's VM is another machine's. It says only that the name is
/// taken: never the other VM's id, owner, cluster or namespace, which may be another tenant's.
pub(super) fn taken(name: &str) -> Status {
    Status::new(
        Code::AlreadyExists,
        format!(
            "machine name {name:?} is taken: another machine's VM has it in this cluster; one name is one VM"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alicloud::identity::OWNER_TAG;
    use alicloud::{InstanceStatus, Tag};
    use domain::machine::Machine;

    /// An instance as DescribeInstances lists it: id, `CreationTime`, and the owner tag if any.
    fn instance(id: &str, created: Option<&str>, owner: Option<&str>) -> Instance {
        Instance {
            instance_id: id.into(),
            instance_name: "m-1".into(),
            host_name: None,
            status: InstanceStatus::Running,
            region_id: None,
            zone_id: None,
            instance_type: None,
            image_id: None,
            creation_time: created.map(str::to_owned),
            start_time: None,
            private_ip_addresses: Vec::new(),
            public_ip_addresses: Vec::new(),
            vpc_id: None,
            v_switch_id: None,
            network_interfaces: Vec::new(),
            tags: owner
                .map(|o| vec![Tag::new(OWNER_TAG, o)])
                .unwrap_or_default(),
            key_pair_name: None,
            spot_strategy: None,
            operation_locks: Vec::new(),
        }
    }

    fn owner(uid: &str) -> Owner {
        let mut m = Machine::default();
        m.metadata.uid = uid.into();
        Owner::of(&m).unwrap()
    }

    const T0: Option<&str> = Some("2024-05-01T10:00Z");
    const T1: Option<&str> = Some("2024-05-01T10:01Z");

    #[test]
    fn nothing_named_is_free_and_one_of_mine_is_mine() {
        let me = owner("a");
        assert_eq!(decide(&[], &me, "default").outcome, Outcome::Free);
        let v = decide(&[instance("i-1", T0, Some("a"))], &me, "default");
        assert_eq!(v.outcome, Outcome::Adopt(0));
        assert!(v.release.is_empty());
    }

    #[test]
    fn the_earliest_instance_keeps_the_name_and_the_smallest_id_breaks_ties() {
        let seen = [
            instance("i-3", T0, Some("b")),
            instance("i-1", T1, Some("a")),
            instance("i-2", T0, Some("c")),
        ];
        // i-2 and i-3 were made in the same minute, before i-1: i-2 (c) keeps the name.
        let v = decide(&seen, &owner("a"), "default");
        assert_eq!(v.outcome, Outcome::Taken(2));
        assert_eq!(v.release, ["i-1"]);
        let v = decide(&seen, &owner("b"), "default");
        assert_eq!(v.outcome, Outcome::Taken(2));
        assert_eq!(v.release, ["i-3"]);
        let v = decide(&seen, &owner("c"), "default");
        assert_eq!(v.outcome, Outcome::Adopt(2));
        assert!(v.release.is_empty());
        // Someone else entirely releases nothing and is told who owns the name.
        let v = decide(&seen, &owner(""), "default");
        assert_eq!(v.outcome, Outcome::Taken(2));
        assert!(v.release.is_empty());
    }

    #[test]
    fn every_replica_reaches_the_same_verdict_whatever_the_listing_order() {
        let mut seen = vec![
            instance("i-40", T1, Some("x")),
            instance("i-07", T0, Some("")),
            instance("i-19", T0, Some("y")),
            instance("i-99", None, Some("z")),
        ];
        for _ in 0..seen.len() {
            seen.rotate_left(1);
            let kept: Vec<&str> = ["x", "", "y", "z"]
                .iter()
                .map(|uid| match decide(&seen, &owner(uid), "default").outcome {
                    Outcome::Adopt(n) | Outcome::Taken(n) => seen[n].instance_id.as_str(),
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(kept, ["i-07"; 4]);
        }
    }

    #[test]
    fn an_instance_without_a_creation_time_never_wins_over_one_with() {
        let seen = [
            instance("i-1", None, Some("a")),
            instance("i-2", T1, Some("b")),
        ];
        assert_eq!(
            decide(&seen, &owner("b"), "default").outcome,
            Outcome::Adopt(1)
        );
        assert_eq!(decide(&seen, &owner("a"), "default").release, ["i-1"]);
    }

    #[test]
    fn my_own_duplicates_are_released_and_the_earliest_kept() {
        let seen = [
            instance("i-5", T0, Some("a")),
            instance("i-4", T0, Some("a")),
        ];
        let v = decide(&seen, &owner("a"), "default");
        assert_eq!(v.outcome, Outcome::Adopt(1));
        assert_eq!(v.release, ["i-5"]);
    }

    #[test]
    fn instances_without_an_owner_are_adopted_alone_and_never_released() {
        let me = owner("a");
        let v = decide(&[instance("i-1", T0, None)], &me, "default");
        assert_eq!(v.outcome, Outcome::Adopt(0));
        // An unowned instance made first keeps the name; my later one goes.
        let v = decide(
            &[instance("i-1", T0, None), instance("i-2", T1, Some("a"))],
            &me,
            "default",
        );
        assert_eq!(v.outcome, Outcome::Adopt(0));
        assert_eq!(v.release, ["i-2"]);
        // Two unowned: no pick, nothing released (they are nobody's to release).
        let v = decide(
            &[instance("i-1", T0, None), instance("i-2", T0, None)],
            &me,
            "default",
        );
        assert_eq!(
            v.outcome,
            Outcome::Ambiguous(vec!["i-1".into(), "i-2".into()])
        );
        assert!(v.release.is_empty());
    }

    /// `instance` stamped with a namespace.
    fn in_ns(mut i: Instance, namespace: &str) -> Instance {
        i.tags.push(Tag::new(NAMESPACE_STAMP, namespace));
        i
    }

    #[test]
    fn another_namespaces_instance_is_never_mine_whatever_its_owner_tag() {
        // Tenant b sends tenant a's UID: a's instance is not there for b (neither adopted nor a
        // clash that would tell b it exists); the ClientToken from a's UID, used by a with other
        // tags, is what refuses b a VM then (`token_use`).
        let seen = [in_ns(instance("i-1", T0, Some("a")), "team-a")];
        let v = decide(&seen, &owner("a"), "team-b");
        assert_eq!(v.outcome, Outcome::Free);
        assert!(v.release.is_empty());
        // Nor released when it lost the race to b's own instance.
        let seen = [
            in_ns(instance("i-2", T1, Some("a")), "team-a"),
            in_ns(instance("i-1", T0, Some("a")), "team-b"),
        ];
        let v = decide(&seen, &owner("a"), "team-b");
        assert_eq!(v.outcome, Outcome::Adopt(1));
        assert!(v.release.is_empty(), "{v:?}");
        // An instance without a stamp is `default`'s.
        let v = decide(&[instance("i-1", T0, Some("a"))], &owner("a"), "team-b");
        assert_eq!(v.outcome, Outcome::Free);
        let v = decide(&[instance("i-1", T0, None)], &owner("a"), "default");
        assert_eq!(v.outcome, Outcome::Adopt(0));
        assert!(belongs_to(
            &in_ns(instance("i-1", T0, Some("a")), "team-a"),
            &owner("a"),
            "team-a"
        ));
        assert!(!belongs_to(
            &in_ns(instance("i-1", T0, Some("a")), "team-a"),
            &owner("a"),
            "team-b"
        ));
        assert!(!belongs_to(
            &instance("i-1", T0, None),
            &owner("a"),
            "team-b"
        ));
    }

    #[test]
    fn a_taken_name_says_nothing_of_the_other_machine() {
        let e = taken("worker-1");
        assert_eq!(e.code, Code::AlreadyExists);
        assert!(e.message.contains("\"worker-1\" is taken"), "{e:?}");
        assert!(
            !e.message.contains("uid") && !e.message.contains("i-"),
            "{e:?}"
        );
    }

    #[test]
    fn a_lookup_by_name_takes_only_the_callers_or_unowned_instances() {
        assert!(belongs_to(
            &instance("i-1", T0, Some("a")),
            &owner("a"),
            "default"
        ));
        assert!(belongs_to(
            &instance("i-1", T0, None),
            &owner("a"),
            "default"
        ));
        assert!(!belongs_to(
            &instance("i-1", T0, Some("b")),
            &owner("a"),
            "default"
        ));
        assert!(!belongs_to(
            &instance("i-1", T0, Some("")),
            &owner("a"),
            "default"
        ));
        assert!(belongs_to(
            &instance("i-1", T0, Some("")),
            &owner(""),
            "default"
        ));
    }
}
