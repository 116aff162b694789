//! The document's description of what the Docker provider accepts: the spec's rules as JSON Schema,
//! so a request a generator makes from the document is one the driver takes, or one only this
//! driver's settings refuse (412). The spec's tests hold each pattern to its validator. Every call
//! decodes the whole spec (unknown fields refused) and checks its tags, bootstrap and grace period;
//! CreateMachine checks the rest ([`ProviderSpec::plan`](super::ProviderSpec::plan)).
//!
//! Apart because it is a second statement of the rules, for the HTTP API's document, and
//! changes with them: each pattern here stands for a validator in the other files, and the
//! spec's tests hold the two together.

use serde_json::{Value, json};

use super::decode::MAX_STOP_GRACE;
use super::request::{MAX_MACHINE_NAME, MAX_UID_LEN};
use super::rules::{
    MAX_ARG_CHARS, MAX_ENV_VALUE_CHARS, MAX_INFO_CHARS, MAX_LABEL_VALUE_CHARS, MAX_TAG_KEY_CHARS,
    MAX_TAG_VALUE_CHARS, MAX_TAGS,
};
use super::{
    CLUSTER_TAG, PROVIDER_ID_PREFIX, RESERVED_LABEL_PREFIXES, ROLE_TAG, SECRET_DOCKER_HOST,
    SECRET_USER_DATA,
};
use crate::docker::settings::{MAX_PIDS, MIN_PIDS};
use crate::provider::CheckedFor;
use domain::orchestrator::{BASE_PATH_PATTERN, DOCKER_HOST_PATTERN};

/// A DNS-1123 label, unanchored.
const LABEL: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
/// A DNS-1123 subdomain, unanchored.
const SUBDOMAIN: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
/// A path component of an image name.
const COMPONENT: &str = "[a-z0-9]([a-z0-9._-]*[a-z0-9])?";
/// The first of several components when no registry is named: without a `.` (the Engine would
/// read one with a `.` as a registry host).
const FIRST_COMPONENT: &str = "[a-z0-9]([a-z0-9_-]*[a-z0-9])?";
/// A registry host: `localhost`, a dotted name, or a name with a port.
const REGISTRY: &str = "(localhost|[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+|[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}))";
/// A tag and a digest.
const TAG_AND_DIGEST: &str = "(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@(sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128}))?";
/// The container paths a mount may not take: the state directory, inside it or above it, and
/// the Engine's own `/proc`, `/sys` and `/dev` (the driver also reads `.` components).
pub const RESERVED_CONTAINER_PATH: &str =
    "^/+(var/*|var/+lib/*|var/+lib/+berth(/.*)?|proc/*|sys/*|dev/*)$";
/// No control character (C0, DEL or C1), as [`super::rules::has_control`] says.
pub const NO_CONTROL: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$";
/// An environment variable's name ([`super::rules::is_env_name`]).
pub const ENV_NAME: &str = "^[A-Za-z_][A-Za-z0-9_]*$";
/// A Docker network's name ([`crate::docker::settings::is_network_name`]), or none.
pub const NETWORK: &str = "^([a-zA-Z0-9][a-zA-Z0-9_.-]*)?$";
/// A memory limit of at least 6Mi in mebibytes or gibibytes: the forms a request can rely on
/// (the driver takes any quantity of at least 6Mi).
pub const MEMORY: &str = "^(([6-9]|[1-9][0-9]{1,6})Mi|[1-9][0-9]{0,5}Gi)$";
/// Standard base64, padded, the last character's unused bits zero (as the driver decodes it).
pub const BASE64: &str = crate::alicloud::spec::schema::BASE64;

/// An image reference ([`super::parse_image`]): `[registry/]name[:tag][@digest]`, a little
/// narrower (a port is 1 to 65535 without leading zeros).
pub fn image_pattern() -> String {
    format!(
        "^({REGISTRY}/{COMPONENT}(/{COMPONENT})*|{FIRST_COMPONENT}(/{COMPONENT})+|{COMPONENT}){TAG_AND_DIGEST}$"
    )
}

/// `machine.spec.providerID` of a container: `docker:///<container name>`, or none; the name
/// is `[<namespace>_]<machine>` ([`super::container_name`]).
pub fn provider_id_pattern() -> String {
    format!("^(|{PROVIDER_ID_PREFIX}({LABEL}_)?{SUBDOMAIN})$")
}

/// A tag key starting with `prefix`, then a name of 1 to 253 characters without control ones.
/// A scope key: the cluster's name a DNS-1123 subdomain (its length, at most
/// [`super::scope::MAX_SCOPE_NAME`], the driver checks), the role's a DNS-1123 label.
fn scope_key(prefix: &str) -> String {
    let name = if prefix == CLUSTER_TAG {
        domain::schema::DNS1123_SUBDOMAIN
    } else {
        domain::schema::DNS1123_LABEL
    };
    format!("^{}{}", prefix.replace('.', "\\."), &name[1..])
}

fn scope_prefix(prefix: &str) -> String {
    format!("^{}", prefix.replace('.', "\\."))
}

/// `tags`: exactly one `kubernetes.io/cluster/<cluster>` key and one `kubernetes.io/role/<role>`
/// (a schema can say "at least one, and every such key well-formed"; the description says one).
fn tags() -> Value {
    let well_formed = |prefix: &str| json!({"anyOf": [{"not": {"pattern": scope_prefix(prefix)}}, {"pattern": scope_key(prefix)}]});
    let present = |prefix: &str| json!({"not": {"propertyNames": {"not": {"pattern": scope_prefix(prefix)}}}});
    json!({
        "type": "object",
        "description": "Exactly one key kubernetes.io/cluster/<cluster> and one kubernetes.io/role/<role>: they scope which containers the class may see and touch.",
        "additionalProperties": {"type": "string"},
        "propertyNames": {"allOf": [well_formed(CLUSTER_TAG), well_formed(ROLE_TAG)]},
        "allOf": [present(CLUSTER_TAG), present(ROLE_TAG)]
    })
}

/// `machineClass.providerSpec`.
pub fn provider_spec(checked_for: CheckedFor) -> Value {
    let strings = || json!({"type": "array", "items": {"type": "string"}});
    let string_map = || json!({"type": "object", "additionalProperties": {"type": "string"}});
    let mount = json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "hostPath": {"type": "string"},
            "containerPath": {"type": "string"},
            "readOnly": {"type": "boolean"}
        }
    });
    let mut spec = json!({
        "type": "object",
        "description": "Berth's Docker provider spec; unknown fields are refused.",
        "additionalProperties": false,
        "required": ["tags"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "image": {"type": "string"},
            "pull": {"type": "string"},
            "command": strings(),
            "args": strings(),
            "env": string_map(),
            "labels": string_map(),
            "network": {"type": "string"},
            "cpus": {"type": ["number", "null"]},
            "memory": {"type": ["string", "null"]},
            "pids": {"type": ["integer", "null"]},
            "privileged": {"type": "boolean", "description": "Needs BERTH_DOCKER_ALLOW_PRIVILEGED (else 412)"},
            "mounts": {"type": "array", "items": mount},
            "tags": tags(),
            "bootstrap": {"type": "string", "enum": ["", "none", "exec"], "description": "none (the default) or exec: run the user data once with docker exec"},
            "stopGracePeriodSeconds": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_STOP_GRACE}
        }
    });
    if checked_for != CheckedFor::Create {
        return spec;
    }
    let text =
        |max: usize, pattern: &str| json!({"type": "string", "maxLength": max, "pattern": pattern});
    let p = &mut spec["properties"];
    p["image"] = json!({"type": "string", "maxLength": 512, "pattern": image_pattern()});
    p["pull"] = json!({"type": "string", "enum": ["", "Never", "IfNotPresent"], "description": "Never (the default: a missing image is 412) or IfNotPresent (from a registry BERTH_DOCKER_REGISTRIES allows, else 412)"});
    // `items` holds for the entries after `prefixItems`, so the first entry says it all again.
    let mut first = text(MAX_ARG_CHARS, NO_CONTROL);
    first["minLength"] = json!(1);
    p["command"] = json!({
        "type": "array",
        "maxItems": 256,
        "items": text(MAX_ARG_CHARS, NO_CONTROL),
        "prefixItems": [first]
    });
    p["args"] = json!({"type": "array", "maxItems": 256, "items": text(MAX_ARG_CHARS, NO_CONTROL)});
    p["env"] = json!({
        "type": "object",
        "maxProperties": 256,
        "propertyNames": {"type": "string", "maxLength": 256, "pattern": ENV_NAME},
        "additionalProperties": text(MAX_ENV_VALUE_CHARS, NO_CONTROL)
    });
    p["labels"] = json!({
        "type": "object",
        "maxProperties": 64,
        "propertyNames": {
            "type": "string",
            "maxLength": 317,
            "pattern": domain::schema::LABEL_KEY,
            "not": {"pattern": format!(
                "^({})",
                RESERVED_LABEL_PREFIXES
                    .iter()
                    .map(|p| p.replace('.', "\\."))
                    .collect::<Vec<_>>()
                    .join("|")
            )}
        },
        "additionalProperties": text(MAX_LABEL_VALUE_CHARS, NO_CONTROL)
    });
    p["network"] =
        json!({"type": "string", "maxLength": 128, "pattern": NETWORK, "not": {"const": "host"}});
    for info in ["apiVersion", "kind"] {
        p[info] = text(MAX_INFO_CHARS, NO_CONTROL);
    }
    p["tags"]["maxProperties"] = json!(MAX_TAGS);
    p["tags"]["additionalProperties"] = text(MAX_TAG_VALUE_CHARS, NO_CONTROL);
    p["tags"]["propertyNames"]["maxLength"] = json!(MAX_TAG_KEY_CHARS);
    p["tags"]["propertyNames"]["minLength"] = json!(1);
    p["tags"]["propertyNames"]["pattern"] = json!(NO_CONTROL);
    p["cpus"] = json!({"type": ["number", "null"], "minimum": 0.01, "maximum": 1024});
    p["memory"] = json!({"type": ["string", "null"], "pattern": MEMORY, "description": "At most BERTH_DOCKER_MEMORY (default 512Mi, else 412), which is also the limit when none is given"});
    p["cpus"]["description"] = json!(
        "At most BERTH_DOCKER_CPUS (default 1, else 412), which is also the limit when none is given"
    );
    p["pids"] = json!({"type": ["integer", "null"], "minimum": MIN_PIDS, "maximum": MAX_PIDS, "description": "The most processes; at most BERTH_DOCKER_PIDS (default 256, else 412), which is also the limit when none is given"});
    p["network"]["description"] = json!(
        "A network BERTH_DOCKER_NETWORKS allows (default: bridge, the Engine's default, which a class naming none joins; else 412)"
    );
    p["mounts"] = json!({
        "type": "array",
        "maxItems": 32,
        "description": "Host directories BERTH_DOCKER_MOUNT_PATHS allows (else 412), each at its own containerPath",
        "items": {
            "type": "object",
            "additionalProperties": false,
            "required": ["hostPath", "containerPath"],
            "properties": {
                "hostPath": {"type": "string", "maxLength": 4096, "pattern": BASE_PATH_PATTERN},
                "containerPath": {
                    "type": "string",
                    "maxLength": 4096,
                    "pattern": BASE_PATH_PATTERN,
                    "not": {"pattern": RESERVED_CONTAINER_PATH}
                },
                "readOnly": {"type": "boolean"}
            }
        }
    });
    spec["required"] = json!(["tags", "image"]);
    spec
}

/// `secret`: the Engine (`dockerHost`, plain; BERTH_DOCKER_HOSTS says which may be named, else
/// 412) and the user data.
pub fn secret() -> Value {
    json!({
        "type": "object",
        "properties": {
            "stringData": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "properties": {
                    SECRET_DOCKER_HOST: {
                        "type": "string",
                        "maxLength": 4096,
                        "description": "The Engine, unix:///path or tcp://host:port; empty for the driver's default",
                        "anyOf": [{"const": ""}, {"pattern": DOCKER_HOST_PATTERN}]
                    },
                    SECRET_USER_DATA: {"type": "string"}
                }
            },
            "data": {
                "type": "object",
                "description": "Base64-encoded values, every one checked (as Kubernetes does) even where stringData wins; this document gives dockerHost in stringData only",
                "additionalProperties": {"type": "string", "pattern": BASE64},
                "properties": {SECRET_USER_DATA: {"type": "string", "pattern": BASE64}}
            }
        },
        // stringData wins: data's dockerHost is read only when stringData has none, and then
        // this document gives it only empty (the driver's default Engine).
        "if": {"not": {"required": ["stringData"], "properties": {"stringData": {"required": [SECRET_DOCKER_HOST]}}}},
        "then": {"properties": {"data": {"properties": {SECRET_DOCKER_HOST: {"const": ""}}}}}
    })
}

/// With `bootstrap: exec`, the user data is required and starts with `#!` (`IyE` in base64).
/// CreateMachine and InitializeMachine read it.
pub fn exec_needs_a_script() -> Value {
    json!({
        "if": {
            "required": ["machineClass"],
            "properties": {"machineClass": {
                "required": ["providerSpec"],
                "properties": {"providerSpec": {"required": ["bootstrap"], "properties": {"bootstrap": {"const": "exec"}}}}
            }}
        },
        "then": {
            "required": ["secret"],
            "properties": {"secret": {"anyOf": [
                {"required": ["stringData"], "properties": {"stringData": {"required": [SECRET_USER_DATA], "properties": {SECRET_USER_DATA: {"pattern": "^#!"}}}}},
                {
                    "required": ["data"],
                    "properties": {
                        "data": {"required": [SECRET_USER_DATA], "properties": {SECRET_USER_DATA: {"pattern": "^IyE"}}},
                        "stringData": {"not": {"required": [SECRET_USER_DATA]}}
                    }
                }
            ]}}
        }
    })
}

/// `machine`: its name (a DNS-1123 subdomain of 2 to 63 characters, the container's host
/// name), UID and, for the calls that look a container up, providerID.
pub fn machine(checked_for: CheckedFor) -> Value {
    let mut machine = json!({
        "required": ["metadata"],
        "properties": {
            "metadata": {
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "pattern": domain::schema::DNS1123_SUBDOMAIN, "minLength": 2, "maxLength": MAX_MACHINE_NAME},
                    "uid": {"type": "string", "pattern": "^[A-Za-z0-9._-]*$", "maxLength": MAX_UID_LEN}
                }
            }
        }
    });
    if checked_for == CheckedFor::Lookup {
        machine["properties"]["spec"] = json!({"properties": {"providerID": {
            "type": "string",
            "pattern": provider_id_pattern(),
            "maxLength": PROVIDER_ID_PREFIX.len() + MAX_MACHINE_NAME
        }}});
    }
    machine
}
