//! What the machine controller keeps (machines, machine sets and deployments, classes, secrets):
//! `get` (and `machine get`), `delete`, `scale` and `rollout status` (`apply -f` is [`crate::apply`]), kubectl's habits
//! over the controller's API. `--watch` and `rollout status` follow the server's watch, resuming
//! from the last version seen (a bookmark's, when quiet) whenever a stream ends.
//!
//! # Layout
//! This file holds how a command line names an object (kind, name, namespace) and the readers of
//! an object's fields that every verb uses; the verbs are in files of their own:
//! - `table`: a kind's table and the rows of its objects, listed or as watch events.
//! - `get`: `get` (and `machine get`), once or with `--watch`.
//! - `follow`: following the server's watch, resuming where a stream ended.
//! - `change`: `delete` and `scale`.
//! - `rollout`: `rollout status`, and when a deployment's roll is done.

use domain::resources::Kind;
use serde_json::Value;

use super::CliError;
use crate::args::ObjectRef;

mod change;
mod follow;
mod get;
mod rollout;
mod table;

pub use change::{delete, scale};
pub use get::get;
pub use rollout::rollout_status;

/// The kind a command line names: kubectl's singular, plural and short names.
pub fn kind_named(text: &str) -> Option<Kind> {
    Some(match text.to_ascii_lowercase().as_str() {
        "secret" | "secrets" => Kind::Secret,
        "machineclass" | "machineclasses" | "mcc" => Kind::MachineClass,
        "machine" | "machines" | "mach" => Kind::Machine,
        "machineset" | "machinesets" | "ms" => Kind::MachineSet,
        "machinedeployment" | "machinedeployments" | "md" => Kind::MachineDeployment,
        _ => return None,
    })
}

/// `kind/name` as `-o name` and the messages say it.
fn lower(kind: Kind) -> String {
    kind.as_str().to_ascii_lowercase()
}

fn namespace_of(namespace: Option<&String>) -> String {
    namespace
        .cloned()
        .unwrap_or_else(|| domain::volume::DEFAULT_NAMESPACE.to_string())
}

/// The kind, name and namespace an [`ObjectRef`] names.
fn resolve(object: &ObjectRef) -> Result<(Kind, String, String), CliError> {
    let (kind_text, name) = match (object.target.split_once('/'), &object.name) {
        (Some(_), Some(_)) => {
            return Err(CliError::Usage(format!(
                "{:?} names the object already; give `KIND/NAME` or `KIND NAME`, not both",
                object.target
            )));
        }
        (Some((k, n)), None) => (k.to_string(), n.to_string()),
        (None, Some(n)) => (object.target.clone(), n.clone()),
        (None, None) => {
            return Err(CliError::Usage(format!(
                "which {}? give `KIND/NAME` or `KIND NAME`",
                object.target
            )));
        }
    };
    if name.is_empty() || name.contains([',', '/']) || name == "." || name == ".." {
        return Err(CliError::Usage(format!(
            "{name:?} is not a name: `KIND/NAME` (or `KIND NAME`) names one object"
        )));
    }
    let kind = kind_named(&kind_text).ok_or_else(|| {
        CliError::Usage(format!(
            "{kind_text:?} is not a kind the machine controller keeps: machine, machineset (ms), machinedeployment (md), machineclass (mcc), secret"
        ))
    })?;
    Ok((kind, name, namespace_of(object.namespace.as_ref())))
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn number(value: &Value, pointer: &str) -> u64 {
    value.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_names_one_object() {
        let object = |target: &str, name: Option<&str>| ObjectRef {
            target: target.to_string(),
            name: name.map(str::to_string),
            namespace: None,
        };
        assert!(resolve(&object("md/workers", None)).is_ok());
        for (target, name) in [
            ("md/a,ms/b", None),
            ("md/a/b", None),
            ("machine", Some("..")),
            ("md", Some("x,y")),
        ] {
            assert!(
                matches!(resolve(&object(target, name)), Err(CliError::Usage(_))),
                "{target} {name:?}"
            );
        }
    }

    #[test]
    fn kinds_are_named_as_kubectl_names_them() {
        assert_eq!(kind_named("md"), Some(Kind::MachineDeployment));
        assert_eq!(kind_named("MachineSets"), Some(Kind::MachineSet));
        assert_eq!(kind_named("mcc"), Some(Kind::MachineClass));
        assert_eq!(kind_named("pods"), None);
    }
}
