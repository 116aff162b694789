//! The objects the machine controller stores and reconciles: secrets, machine classes, machines,
//! machine sets and machine deployments, shaped as Kubernetes objects (`apiVersion: berth.io/v1`,
//! `kind`, `metadata`, `spec`, `status`) with MCM's field names where MCM has the concept
//! (`spec.class.name`, `spec.replicas`, `spec.selector.matchLabels`, `spec.template`,
//! `providerSpec`, `secretRef`).
//!
//! A machine class is [`crate::MachineClass`] itself (MCM's class has no `spec`: its fields sit at
//! the top), so a stored class goes to the driver unchanged. The other kinds are here, with the
//! rules a write must meet ([`Kind::check_write`]); the controller answers a broken rule with the
//! [`Status`] these return, which names the field.
//!
//! # Layout
//! This file holds what every kind shares: the API version, the list metadata, the finalizers,
//! labels and limits the controller puts on objects, and [`Kind`] with the write checks common to
//! all kinds. Each family of objects has its own file, with its own rules:
//! - `secret`: [`SecretResource`], whose values are write-only.
//! - `class`: [`check_class`], the rules of a machine class write that need no driver.
//! - `machine`: [`MachineResource`], its phase and status.
//! - `template`: the selector and template a machine set or deployment makes machines from.
//! - `machine_set`: [`MachineSet`].
//! - `rollout`: [`DeploymentStrategy`] and the maxSurge/maxUnavailable arithmetic of a roll.
//! - `deployment`: [`MachineDeployment`].

use std::collections::BTreeMap;
use std::fmt;

use crate::code::Status;
use crate::machine::ObjectMeta;
use crate::names::{validate_dns1123_label, validate_labels};

mod class;
mod deployment;
mod machine;
mod machine_set;
mod rollout;
mod secret;
mod template;

pub use class::check_class;
pub use deployment::{MachineDeployment, MachineDeploymentSpec, MachineDeploymentStatus};
pub use machine::{
    LastOperation, MachinePhase, MachineResource, MachineStatus, OperationState, OperationType,
};
pub use machine_set::{MachineSet, MachineSetSpec, MachineSetStatus};
pub use rollout::{DeploymentStrategy, IntOrPercent, RollingUpdate, StrategyType};
pub use secret::SecretResource;
pub use template::{LabelSelector, MachineTemplate, TemplateMeta};

/// The API version of every stored object.
pub const API_VERSION: &str = "berth.io/v1";

/// A list's `metadata`: the version a watch of the same list resumes from, so nothing between the
/// list and the watch is missed.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ListMeta {
    /// The version the list was read at (digits, as a string).
    pub resource_version: String,
}

/// The finalizer the controller puts on every machine: the machine's row stays until its VM or
/// container is deleted, so a deletion is never forgotten half-done.
pub const MACHINE_FINALIZER: &str = "berth.io/machine";

/// The finalizer on machine sets and deployments: the object stays until what it owns is gone.
pub const OWNER_FINALIZER: &str = "berth.io/owned";

/// The annotation that keeps a machine from every controller action that would delete it (MCM
/// #1146): a scale-down picks another, a failed one is kept. A person's own DELETE still deletes it.
pub const PRESERVE_ANNOTATION: &str = "berth.io/preserve";

/// The label a machine deployment puts on the machine set (and its machines) made for one
/// template, valued with the template's hash.
pub const TEMPLATE_HASH_LABEL: &str = "berth.io/template-hash";

/// The most bytes a secret's values may hold together (Kubernetes' limit for a Secret).
pub const MAX_SECRET_BYTES: usize = 1024 * 1024;

/// The most bytes an object's annotations may hold together (Kubernetes' limit).
pub const MAX_ANNOTATION_BYTES: usize = 256 * 1024;

/// The longest machine-deployment name: its sets are `<name>-<10 hex>`, their machines
/// `<set>-<5 characters>`, and a machine's name must stay a DNS-1123 label (it names the VM).
pub const MAX_DEPLOYMENT_NAME_LEN: usize = 63 - 11 - 6;
/// The longest machine-set name (its machines are `<set>-<5 characters>`).
pub const MAX_SET_NAME_LEN: usize = 63 - 6;

/// A kind of stored object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Cloud credentials, write-only.
    Secret,
    /// A provider, its spec and its secret.
    MachineClass,
    /// One VM or container.
    Machine,
    /// N machines of one template.
    MachineSet,
    /// Machine sets rolled from one template to the next.
    MachineDeployment,
}

impl Kind {
    /// Every kind, in the order `apply` makes them (what a kind refers to comes first).
    pub const ALL: [Kind; 5] = [
        Kind::Secret,
        Kind::MachineClass,
        Kind::MachineDeployment,
        Kind::MachineSet,
        Kind::Machine,
    ];

    /// The kind's name, as `kind:` says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Secret => "Secret",
            Kind::MachineClass => "MachineClass",
            Kind::Machine => "Machine",
            Kind::MachineSet => "MachineSet",
            Kind::MachineDeployment => "MachineDeployment",
        }
    }

    /// The path segment of its routes (`/v1/namespaces/{ns}/<plural>`).
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Secret => "secrets",
            Kind::MachineClass => "machineclasses",
            Kind::Machine => "machines",
            Kind::MachineSet => "machinesets",
            Kind::MachineDeployment => "machinedeployments",
        }
    }

    /// The kind a route's path segment names.
    pub fn from_plural(plural: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.plural() == plural)
    }

    /// The kind `kind:` names (exactly, as Kubernetes matches it).
    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The longest name an object of this kind may have.
    pub fn max_name_len(self) -> usize {
        match self {
            Kind::MachineDeployment => MAX_DEPLOYMENT_NAME_LEN,
            Kind::MachineSet => MAX_SET_NAME_LEN,
            _ => 63,
        }
    }

    /// The checks every write of an object of this kind must pass that need nothing but the body:
    /// `apiVersion` and `kind` (absent or right), the name (a DNS-1123 label of at most
    /// [`Kind::max_name_len`]), the namespace (absent or the path's), labels and annotations. The
    /// kind's own rules are its type's `check`.
    pub fn check_write(
        self,
        meta: &ObjectMeta,
        api_version: &str,
        kind: &str,
        namespace: &str,
    ) -> Result<(), Status> {
        if !api_version.is_empty() && api_version != API_VERSION {
            return Err(Status::invalid(
                "apiVersion",
                format!("must be {API_VERSION} (or absent)"),
            ));
        }
        if !kind.is_empty() && kind != self.as_str() {
            return Err(Status::invalid(
                "kind",
                format!("must be {} on this route (or absent)", self.as_str()),
            ));
        }
        validate_dns1123_label("metadata.name", &meta.name)?;
        if meta.name.len() > self.max_name_len() {
            return Err(Status::invalid(
                "metadata.name",
                format!(
                    "a {} name is at most {} characters (the names of what it makes must stay DNS-1123 labels)",
                    self.as_str(),
                    self.max_name_len()
                ),
            ));
        }
        if !meta.namespace.is_empty() && meta.namespace != namespace {
            return Err(Status::invalid(
                "metadata.namespace",
                "must be the namespace of the route (or absent)",
            ));
        }
        validate_labels("metadata.labels", &meta.labels)?;
        check_annotations("metadata.annotations", &meta.annotations)?;
        Ok(())
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn check_annotations(field: &str, annotations: &BTreeMap<String, String>) -> Result<(), Status> {
    let mut total = 0usize;
    for (key, value) in annotations {
        crate::names::validate_label_key(&format!("{field} key"), key)?;
        total = total.saturating_add(key.len() + value.len());
    }
    if total > MAX_ANNOTATION_BYTES {
        return Err(Status::invalid(
            field,
            format!("keys and values together are at most {MAX_ANNOTATION_BYTES} bytes"),
        ));
    }
    Ok(())
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::Code;
    use crate::machine::MachineClass;

    fn template(labels: &[(&str, &str)], class: &str) -> MachineTemplate {
        let mut t = MachineTemplate::default();
        t.metadata.labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        t.spec.class.name = class.into();
        t
    }

    fn set(replicas: u32) -> MachineSet {
        let mut s = MachineSet::default();
        s.metadata.name = "workers".into();
        s.spec.replicas = replicas;
        s.spec
            .selector
            .match_labels
            .insert("pool".into(), "a".into());
        s.spec.template = template(&[("pool", "a")], "small");
        s
    }

    #[test]
    fn kinds_round_trip_their_names_and_routes() {
        for kind in Kind::ALL {
            assert_eq!(Kind::parse(kind.as_str()), Some(kind));
            assert_eq!(Kind::from_plural(kind.plural()), Some(kind));
        }
        assert_eq!(Kind::from_plural("machine"), None);
        assert_eq!(Kind::parse("machine"), None);
    }

    #[test]
    fn a_write_names_the_broken_field() {
        let mut meta = ObjectMeta {
            name: "w".into(),
            ..ObjectMeta::default()
        };
        Kind::Machine.check_write(&meta, "", "", "ns").unwrap();
        Kind::Machine
            .check_write(&meta, API_VERSION, "Machine", "ns")
            .unwrap();
        let e = Kind::Machine
            .check_write(&meta, "v1", "", "ns")
            .unwrap_err();
        assert!(e.message.starts_with("apiVersion:"), "{e}");
        let e = Kind::Machine
            .check_write(&meta, "", "MachineSet", "ns")
            .unwrap_err();
        assert!(e.message.starts_with("kind:"), "{e}");
        meta.namespace = "other".into();
        let e = Kind::Machine.check_write(&meta, "", "", "ns").unwrap_err();
        assert!(e.message.starts_with("metadata.namespace:"), "{e}");
        meta.namespace = String::new();
        meta.name = "a".repeat(50);
        Kind::MachineSet.check_write(&meta, "", "", "ns").unwrap();
        let e = Kind::MachineDeployment
            .check_write(&meta, "", "", "ns")
            .unwrap_err();
        assert!(e.message.contains("at most 46"), "{e}");
        meta.name = "Bad_Name".into();
        assert_eq!(
            Kind::Machine
                .check_write(&meta, "", "", "ns")
                .unwrap_err()
                .code,
            Code::InvalidArgument
        );
    }

    #[test]
    fn a_secret_write_carries_values_and_a_read_prints_none() {
        let mut s = SecretResource::default();
        let e = s.check().unwrap_err();
        assert!(e.message.starts_with("data:"), "{e}");
        s.string_data
            .insert("accessKeySecret".into(), "very-secret".into());
        s.check().unwrap();
        assert!(!format!("{s:?}").contains("very-secret"));
        s.string_data.insert("bad key".into(), "x".into());
        assert!(
            s.check()
                .unwrap_err()
                .message
                .starts_with("stringData key:")
        );
        let refused = serde_json::from_value::<SecretResource>(
            serde_json::json!({"data": {"k": "not base64!"}}),
        );
        assert!(refused.is_err());
    }

    #[test]
    fn a_class_uses_only_secrets_beside_it() {
        let mut c = MachineClass {
            provider: "Docker".into(),
            ..MachineClass::default()
        };
        c.metadata.namespace = "team-a".into();
        assert!(
            check_class(&c)
                .unwrap_err()
                .message
                .starts_with("providerSpec:")
        );
        c.provider_spec = serde_json::json!({"image": "busybox"});
        assert!(
            check_class(&c)
                .unwrap_err()
                .message
                .starts_with("secretRef.name:")
        );
        c.secret_ref = Some(crate::machine::SecretReference {
            name: "creds".into(),
            namespace: "team-b".into(),
        });
        let e = check_class(&c).unwrap_err();
        assert!(e.message.starts_with("secretRef.namespace:"), "{e}");
        c.secret_ref.as_mut().unwrap().namespace = "team-a".into();
        check_class(&c).unwrap();
        c.provider = String::new();
        assert!(
            check_class(&c)
                .unwrap_err()
                .message
                .starts_with("provider:")
        );
    }

    #[test]
    fn a_machine_cannot_name_its_own_vm() {
        let mut m = MachineResource::default();
        m.spec.class.name = "small".into();
        m.check().unwrap();
        m.spec.provider_id = "cn-shanghai.i-other".into();
        assert!(
            m.check()
                .unwrap_err()
                .message
                .starts_with("spec.providerID:")
        );
        m.spec.provider_id = String::new();
        m.spec.class.kind = "AlicloudMachineClass".into();
        assert!(
            m.check()
                .unwrap_err()
                .message
                .starts_with("spec.class.kind:")
        );
        assert!(!m.preserved());
        m.metadata
            .annotations
            .insert(PRESERVE_ANNOTATION.into(), "true".into());
        assert!(m.preserved());
    }

    #[test]
    fn a_set_selects_what_it_makes_within_the_ceiling() {
        set(3).check(10).unwrap();
        let e = set(11).check(10).unwrap_err();
        assert_eq!(e.code, Code::FailedPrecondition);
        assert!(e.message.contains("BERTH_CONTROLLER_MAX_REPLICAS"), "{e}");
        let mut s = set(1);
        s.spec.template.metadata.labels.clear();
        let e = s.check(10).unwrap_err();
        assert!(
            e.message.starts_with("spec.template.metadata.labels:"),
            "{e}"
        );
        let mut s = set(1);
        s.spec.selector.match_labels.clear();
        assert!(
            s.check(10)
                .unwrap_err()
                .message
                .starts_with("spec.selector.matchLabels:")
        );
        let mut s = set(1);
        s.spec.template.spec.class.name = String::new();
        assert!(
            s.check(10)
                .unwrap_err()
                .message
                .starts_with("spec.template.spec.class.name:")
        );
    }

    #[test]
    fn surge_and_unavailable_resolve_as_kubernetes_rounds_them() {
        let p = |s: &str| IntOrPercent::Percent(s.into());
        assert_eq!(p("25%").resolve(10, true), 3);
        assert_eq!(p("25%").resolve(10, false), 2);
        assert_eq!(IntOrPercent::Int(4).resolve(10, false), 4);
        let strategy = DeploymentStrategy {
            strategy_type: StrategyType::RollingUpdate,
            rolling_update: Some(RollingUpdate {
                max_surge: IntOrPercent::Int(0),
                max_unavailable: p("10%"),
            }),
        };
        // 10% of 5 rounds down to 0: with no surge either, one may be unavailable.
        assert_eq!(strategy.bounds(5), (0, 1));
        assert_eq!(DeploymentStrategy::default().bounds(5), (1, 0));
        let mut d = MachineDeployment::default();
        d.spec.replicas = 2;
        d.spec.selector = set(1).spec.selector;
        d.spec.template = set(1).spec.template;
        d.check(10).unwrap();
        for bad in ["101%", "%", "ten%", "5"] {
            d.spec.strategy.rolling_update = Some(RollingUpdate {
                max_surge: p(bad),
                max_unavailable: IntOrPercent::Int(0),
            });
            let e = d.check(10).unwrap_err();
            assert!(
                e.message
                    .starts_with("spec.strategy.rollingUpdate.maxSurge:"),
                "{bad}: {e}"
            );
        }
        let parsed: DeploymentStrategy = serde_json::from_value(serde_json::json!(
            {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 1}}
        ))
        .unwrap();
        assert_eq!(parsed.bounds(4), (2, 1));
        // Kubernetes' refusals: no bounds at all as written, or bounds for a Recreate.
        for (surge, unavailable) in [
            (IntOrPercent::Int(0), p("0%")),
            (p("0%"), IntOrPercent::Int(0)),
        ] {
            d.spec.strategy.rolling_update = Some(RollingUpdate {
                max_surge: surge,
                max_unavailable: unavailable,
            });
            let e = d.check(10).unwrap_err();
            assert_eq!(
                e.message,
                "spec.strategy.rollingUpdate.maxUnavailable: may not be 0 when maxSurge is 0: the roll could never begin"
            );
        }
        d.spec.strategy = DeploymentStrategy {
            strategy_type: StrategyType::Recreate,
            rolling_update: Some(RollingUpdate::default()),
        };
        let e = d.check(10).unwrap_err();
        assert!(
            e.message
                .starts_with("spec.strategy.rollingUpdate: may not be given"),
            "{e}"
        );
        // A bad number says the rule, not serde's "did not match any variant".
        for bad in [
            serde_json::json!(-1),
            serde_json::json!(1.5),
            serde_json::json!(true),
        ] {
            let e = serde_json::from_value::<RollingUpdate>(serde_json::json!({"maxSurge": bad}))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("a whole number or a percentage from 0% to 100%")
                    && !e.contains("variant")
                    && !e.contains("expected must"),
                "{bad}: {e}"
            );
        }
        let round_trip: RollingUpdate =
            serde_json::from_value(serde_json::json!({"maxSurge": 2, "maxUnavailable": "25%"}))
                .unwrap();
        assert_eq!(round_trip.max_surge, IntOrPercent::Int(2));
        assert_eq!(round_trip.max_unavailable, p("25%"));
    }
}
