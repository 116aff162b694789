//! The cluster and role a class's machines belong to, read from its tags, and the labels that
//! confine every lookup to them.
//!
//! Apart because the scope is what keeps one class (or tenant, or stack) from seeing or touching
//! another's containers: it is checked by every call, before anything else of the spec, and both
//! the labels a container is made with and the filters it is looked up by come from here, so
//! they cannot drift apart.

use std::collections::HashMap;

use domain::{Status, names};

use super::decode::ProviderSpec;
use super::rules::has_control;
use super::{LABEL_CLUSTER, LABEL_INSTANCE, LABEL_MACHINE, LABEL_ROLE, LABEL_UID, SPEC};
use crate::provider::Violations;

/// Tag keys starting with this name the cluster (`kubernetes.io/cluster/<cluster>`).
pub const CLUSTER_TAG: &str = "kubernetes.io/cluster/";
/// Tag keys starting with this name the role (`kubernetes.io/role/<role>`).
pub const ROLE_TAG: &str = "kubernetes.io/role/";

/// The longest cluster or role name a tag may give, in characters.
pub(super) const MAX_SCOPE_NAME: usize = 253;

/// The cluster and role a class's machines belong to; every lookup is limited to them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// From the `kubernetes.io/cluster/<cluster>` tag.
    pub cluster: String,
    /// From the `kubernetes.io/role/<role>` tag.
    pub role: String,
    /// The stack, from the operator's settings (never from the class): containers of another
    /// stack, or of none when this one has one, are not this scope's.
    pub instance: Option<String>,
}

impl ProviderSpec {
    /// The cluster and role from the tags: what every method needs to scope its lookups.
    pub fn scope(&self) -> Result<Scope, Status> {
        let mut v = Violations::under(SPEC);
        let scope = self.check_scope(&mut v);
        v.into_result()?;
        Ok(scope.expect("a scope when there is no violation"))
    }

    pub(super) fn check_scope(&self, v: &mut Violations) -> Option<Scope> {
        let one = |prefix: &str, v: &mut Violations| -> Option<String> {
            let found: Vec<&str> = self
                .tags
                .keys()
                .filter_map(|k| k.strip_prefix(prefix))
                .collect();
            // Names go into label filters (`key=value`) and messages: Kubernetes' own grammar
            // keeps separators, spaces and paths out (a cluster is a subdomain, a role a label).
            let grammar = |name: &str| {
                if prefix == CLUSTER_TAG {
                    names::validate_dns1123_subdomain("", name, MAX_SCOPE_NAME).is_ok()
                } else {
                    names::validate_dns1123_label("", name).is_ok()
                }
            };
            match found.as_slice() {
                [one] if grammar(one) => Some((*one).to_owned()),
                [one]
                    if !one.is_empty()
                        && one.chars().count() <= MAX_SCOPE_NAME
                        && !has_control(one) =>
                {
                    v.add(
                        "tags",
                        if prefix == CLUSTER_TAG {
                            format!("the <name> of {prefix}<name> must be a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', at most {MAX_SCOPE_NAME} characters)")
                        } else {
                            format!("the <name> of {prefix}<name> must be a DNS-1123 label (lower-case letters, digits and '-', at most 63 characters)")
                        },
                    );
                    None
                }
                [] | [_] => {
                    v.add(
                        "tags",
                        format!("must hold one key {prefix}<name>: it scopes which containers the class may see and touch"),
                    );
                    None
                }
                _ => {
                    v.add("tags", format!("must hold exactly one key {prefix}<name>"));
                    None
                }
            }
        };
        let cluster = one(CLUSTER_TAG, v);
        let role = one(ROLE_TAG, v);
        Some(Scope {
            cluster: cluster?,
            role: role?,
            instance: None,
        })
    }
}

impl Scope {
    /// The labels every container of this scope carries, for `machine` (name and UID).
    pub fn labels(&self, machine: &str, uid: &str) -> HashMap<String, String> {
        let mut labels = HashMap::from([
            (LABEL_CLUSTER.to_owned(), self.cluster.clone()),
            (LABEL_ROLE.to_owned(), self.role.clone()),
            (LABEL_MACHINE.to_owned(), machine.to_owned()),
            (LABEL_UID.to_owned(), uid.to_owned()),
        ]);
        if let Some(instance) = &self.instance {
            labels.insert(LABEL_INSTANCE.to_owned(), instance.clone());
        }
        labels
    }

    /// The Engine's label filters that find this scope's containers (the instance's among them,
    /// when it has one; [`Scope::holds`] still decides, since no filter says "without a label").
    pub fn label_filters(&self) -> Vec<String> {
        let mut filters = vec![format!("{LABEL_CLUSTER}={}", self.cluster)];
        if let Some(instance) = &self.instance {
            filters.push(format!("{LABEL_INSTANCE}={instance}"));
        }
        filters
    }

    /// Whether a container's labels put it in this scope's cluster, and in its stack.
    pub fn holds(&self, labels: &HashMap<String, String>) -> bool {
        labels.get(LABEL_CLUSTER) == Some(&self.cluster)
            && labels.get(LABEL_INSTANCE) == self.instance.as_ref()
    }
}
