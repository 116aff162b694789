//! The Docker provider spec (`MachineClass.providerSpec` with `provider: Docker`), its validation,
//! and the names the driver gives containers, labels and files.
//!
//! Unlike the Alicloud spec (MCM's Go type, whose decoder ignores unknown fields), this spec is
//! Berth's own, so an unknown field is refused: a misspelt `privilegd: true` or `mount:` must not
//! silently create a different machine than the one asked for.

use std::collections::{BTreeMap, HashMap};

use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountType, RestartPolicy, RestartPolicyNameEnum,
};
use domain::machine::{Machine, MachineClass, MachineRequest, Secret};
use domain::orchestrator::normalize_base_path;
use domain::{Quantity, Status, names};
use serde::Deserialize;

use super::settings::{
    DEFAULT_NETWORK, DOCKER_HUB, ENV_ALLOW_PRIVILEGED, ENV_CPUS, ENV_MEMORY, ENV_NETWORKS,
    ENV_PIDS, ENV_REGISTRIES, HostPathRefusal, MAX_PIDS, MIN_MEMORY, MIN_PIDS, Settings, cpus_text,
    is_network_name, is_registry_host, is_within, nano_cpus,
};
use crate::provider::Violations;

/// Where the spec sits in a request body; every field error starts with it.
pub const SPEC: &str = "machineClass.providerSpec";

/// Tag keys starting with this name the cluster (`kubernetes.io/cluster/<cluster>`).
pub const CLUSTER_TAG: &str = "kubernetes.io/cluster/";
/// Tag keys starting with this name the role (`kubernetes.io/role/<role>`).
pub const ROLE_TAG: &str = "kubernetes.io/role/";

/// Container label: the cluster of the class (from its `kubernetes.io/cluster/...` tag).
pub const LABEL_CLUSTER: &str = "berth.io/cluster";
/// Container label: the role of the class (from its `kubernetes.io/role/...` tag).
pub const LABEL_ROLE: &str = "berth.io/role";
/// Container label: the stack the driver that made it serves (`BERTH_DOCKER_INSTANCE`), when it has
/// one. Not copied from an image (it is under the reserved prefix and not among the labels the
/// driver overwrites), so no image can move a container into or out of a stack.
pub const LABEL_INSTANCE: &str = "berth.io/instance";
/// Container label: the machine's name.
pub const LABEL_MACHINE: &str = "berth.io/machine";
/// Container label: the machine's UID (empty for a machine without one); CreateMachine adopts the
/// container carrying it instead of making a second.
pub const LABEL_UID: &str = "berth.io/machine-uid";
/// Label keys under this prefix are the driver's; a class may not set them.
pub const RESERVED_LABEL_PREFIX: &str = "berth.io/";
/// Label keys under these prefixes are reserved too: Docker's own (`com.docker.*`: Compose, Swarm and
/// Desktop read them as instructions) besides the driver's.
pub const RESERVED_LABEL_PREFIXES: [&str; 2] = [RESERVED_LABEL_PREFIX, "com.docker."];

/// The reserved prefix `key` falls under, if any ([`RESERVED_LABEL_PREFIXES`]), read without case
/// (label keys are compared by tools that fold case, and `Berth.io/x` only looks different), the
/// bare prefix (`berth.io`, `com.docker`) included.
pub fn reserved_prefix(key: &str) -> Option<&'static str> {
    let key = key.to_ascii_lowercase();
    RESERVED_LABEL_PREFIXES
        .into_iter()
        .find(|p| key.starts_with(p) || key == p.trim_end_matches(['/', '.']))
}

/// The first label of an image (sorted by key) under a reserved prefix that the driver does not
/// overwrite when it creates a container: the Engine copies an image's labels onto its containers,
/// and neither the driver nor the Docker tools may take one of those from whoever built the image.
/// The driver's own labels (scope, machine, UID, namespace, records) are set at create over
/// whatever the image says, so they are harmless.
pub fn foreign_image_label(labels: &HashMap<String, String>) -> Option<&str> {
    let overwritten = [
        LABEL_CLUSTER,
        LABEL_ROLE,
        LABEL_MACHINE,
        LABEL_UID,
        LABEL_RECORDS,
        crate::provider::NAMESPACE_STAMP,
    ];
    let mut keys: Vec<&str> = labels.keys().map(String::as_str).collect();
    keys.sort_unstable();
    keys.into_iter()
        .find(|k| reserved_prefix(k).is_some() && !overwritten.contains(k))
}

/// The capabilities a machine keeps: every other is dropped (`CapDrop: ALL`). What a root init and a
/// bootstrap need to own, change and serve files and run programs as other users; not NET_RAW
/// (forged packets on the shared bridge), MKNOD, SYS_CHROOT, AUDIT_WRITE, SETFCAP or SETPCAP, which
/// Docker grants by default and a machine has no use for.
pub const CAPABILITIES: [&str; 8] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "NET_BIND_SERVICE",
    "SETGID",
    "SETUID",
];
/// Security options every machine gets: no process in it gains privileges through set-user-id
/// programs or file capabilities.
pub const SECURITY_OPTIONS: [&str; 1] = ["no-new-privileges:true"];

/// A container's provider id is this followed by the container's name.
pub const PROVIDER_ID_PREFIX: &str = "docker:///";
/// The CSI driver name whose `volumeHandle` GetVolumeIDs reports as a Docker volume name.
pub const VOLUME_CSI_DRIVER: &str = "docker.berth.io";

/// The secret key holding the Engine address (optional).
pub const SECRET_DOCKER_HOST: &str = "dockerHost";
/// The secret key holding the user data.
pub const SECRET_USER_DATA: &str = "userData";

/// The directory in the container where the driver keeps the user data and the bootstrap's state.
pub const STATE_DIR: &str = "/var/lib/berth";
/// Container paths the Engine mounts itself; a mount there fails only when the container starts.
const ENGINE_PATHS: [&str; 3] = ["/proc", "/sys", "/dev"];
/// Where the user data is written in the container.
pub const USER_DATA_PATH: &str = "/var/lib/berth/user-data";
/// Where drivers before the bootstrap records ([`LABEL_RECORDS`]) wrote the bootstrap's exit code,
/// inside the container (read bounded, as a number, for their containers only).
pub const LEGACY_EXIT_PATH: &str = "/var/lib/berth/bootstrap.exit";

/// Container label: set on every container this driver makes; its bootstrap is recorded in Docker
/// volumes the driver creates ([`bootstrap_record`]), never in files inside the container. A
/// container without it was made by an earlier driver.
pub const LABEL_RECORDS: &str = "berth.io/bootstrap-records";
/// Volume label: the container a bootstrap record belongs to.
pub const LABEL_RECORD_OF: &str = "berth.io/bootstrap-of";
/// Volume label: the exec the bootstrap runs as (on the "started" record).
pub const LABEL_RECORD_EXEC: &str = "berth.io/bootstrap-exec";
/// Volume label: the bootstrap's exit code (on the "exited" record).
pub const LABEL_RECORD_EXIT: &str = "berth.io/bootstrap-exit";

/// Whether `id` is a Docker object id as the Engine makes them (64 lower-case hex digits): the only
/// shape an id may have before it goes into an Engine API path.
pub fn is_engine_id(id: &str) -> bool {
    id.len() == 64
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Which of a bootstrap's two records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// Made (with the exec id) before the exec starts: a second run is never made.
    Started,
    /// Made (with the exit code) once it has finished.
    Exited,
}

/// The name of the volume recording a bootstrap step of container `id` (a checked Engine id).
pub fn bootstrap_record(id: &str, record: Record) -> String {
    match record {
        Record::Started => format!("berth-bootstrap-{id}"),
        Record::Exited => format!("berth-bootstrap-{id}-exit"),
    }
}

/// The longest machine name: a container's host name is at most 63 characters.
const MAX_MACHINE_NAME: usize = 63;
/// The longest machine UID accepted (Kubernetes UIDs have 36 characters).
const MAX_UID_LEN: usize = 128;
/// The largest user data accepted.
pub const MAX_USER_DATA: usize = 1024 * 1024;
/// The longest cluster or role name a tag may give, in characters.
const MAX_SCOPE_NAME: usize = 253;
/// The longest `command` or `args` entry, in characters.
const MAX_ARG_CHARS: usize = 4096;
/// The longest `env` value, in characters.
const MAX_ENV_VALUE_CHARS: usize = 32 * 1024;
/// The longest `labels` value, in characters.
const MAX_LABEL_VALUE_CHARS: usize = 1024;
/// The longest informational text (`apiVersion`, `kind`), in characters.
const MAX_INFO_CHARS: usize = 256;
/// The most `tags` entries.
const MAX_TAGS: usize = 64;
/// The longest tag key, in characters (a label key: a 253-character prefix, '/', a 63-character name).
const MAX_TAG_KEY_CHARS: usize = 317;
/// The longest tag value, in characters.
const MAX_TAG_VALUE_CHARS: usize = 1024;
/// The longest `memory` text, in characters.
const MAX_MEMORY_CHARS: usize = 32;
/// The longest mount path, in characters.
const MAX_PATH_CHARS: usize = 4096;
/// The longest grace period a deletion gives a container to stop.
const MAX_STOP_GRACE: u32 = 300;
/// The grace period when the spec gives none (Docker's own default).
pub const DEFAULT_STOP_GRACE: u32 = 10;

/// One of `mounts`: a host directory bound into the container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MountSpec {
    /// `hostPath`: must be inside a directory `BERTH_DOCKER_MOUNT_PATHS` allows.
    pub host_path: String,
    /// `containerPath`: where it appears in the container.
    pub container_path: String,
    /// `readOnly`.
    pub read_only: bool,
}

/// The Docker provider spec.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ProviderSpec {
    /// `apiVersion` (informational).
    pub api_version: String,
    /// `kind` (informational).
    pub kind: String,
    /// `image`: the image reference (required).
    pub image: String,
    /// `pull`: `Never` (the default: a missing image is an error) or `IfNotPresent`.
    pub pull: String,
    /// `command`: replaces the image's entrypoint.
    pub command: Vec<String>,
    /// `args`: replaces the image's command.
    pub args: Vec<String>,
    /// `env`: environment variables.
    pub env: BTreeMap<String, String>,
    /// `labels`: extra container labels.
    pub labels: BTreeMap<String, String>,
    /// `network`: the Docker network to attach to (default: the Engine's default bridge).
    pub network: String,
    /// `cpus`: CPU limit, in CPUs (`1.5`; at most `BERTH_DOCKER_CPUS`, its default).
    pub cpus: Option<f64>,
    /// `memory`: memory limit, a quantity (`512Mi`; at most `BERTH_DOCKER_MEMORY`, its default).
    pub memory: Option<String>,
    /// `pids`: the most processes the machine may run (at most `BERTH_DOCKER_PIDS`, its default).
    #[serde(deserialize_with = "crate::provider::optional_whole")]
    pub pids: Option<i64>,
    /// `privileged` (default false; needs `BERTH_DOCKER_ALLOW_PRIVILEGED`).
    pub privileged: bool,
    /// `mounts`: host directories to bind.
    pub mounts: Vec<MountSpec>,
    /// `tags`: must hold a `kubernetes.io/cluster/<cluster>` and a `kubernetes.io/role/<role>` key.
    pub tags: BTreeMap<String, String>,
    /// `bootstrap`: `none` (default) or `exec` (run the user data once with `docker exec`).
    pub bootstrap: String,
    /// `stopGracePeriodSeconds`: how long DeleteMachine lets the container stop before killing it.
    #[serde(deserialize_with = "crate::provider::optional_whole")]
    pub stop_grace_period_seconds: Option<u32>,
}

/// Whether and how the user data is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bootstrap {
    /// The user data is written, and the image does what it likes with it.
    None,
    /// The user data is executed once, as root, with `docker exec`.
    Exec,
}

/// Whether a missing image may be pulled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pull {
    /// Never: a missing image is FailedPrecondition.
    Never,
    /// Pull when the Engine does not have it.
    IfNotPresent,
}

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

/// A checked image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// As written.
    pub reference: String,
    /// The registry it comes from (`docker.io` when it names none).
    pub registry: String,
}

/// Everything CreateMachine needs, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The image.
    pub image: ImageRef,
    /// Whether to pull it when missing.
    pub pull: Pull,
    /// Entrypoint override.
    pub command: Vec<String>,
    /// Command override.
    pub args: Vec<String>,
    /// `NAME=value` pairs.
    pub env: Vec<String>,
    /// The class's own labels.
    pub labels: BTreeMap<String, String>,
    /// The network, if any.
    pub network: Option<String>,
    /// CPU limit in billionths of a CPU.
    pub nano_cpus: i64,
    /// Memory limit in bytes.
    pub memory: i64,
    /// Process limit.
    pub pids: i64,
    /// Privileged mode.
    pub privileged: bool,
    /// Bind mounts (host path checked).
    pub mounts: Vec<MountSpec>,
    /// The cluster and role.
    pub scope: Scope,
    /// The bootstrap mode.
    pub bootstrap: Bootstrap,
    /// Stop grace period, seconds.
    pub stop_grace: u32,
}

/// Whether `s` has a control character (NUL, newline, ...), which no Engine field here may hold.
fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

/// Why a text is not an image reference ([`parse_image`]); the text completes a sentence that
/// starts with the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ImageRefError {
    /// Empty.
    #[error("is required")]
    Required,
    /// Not of the form the Engine reads.
    #[error(
        "must be an image reference: [registry/]name[:tag][@sha256:<64 hex digits>] (or sha384, sha512), the name in lower-case letters, digits, '.', '_', '-' and '/'"
    )]
    Malformed,
}

/// Parses and checks an image reference: `[registry/]path[:tag][@digest]`, as the Engine reads it.
pub fn parse_image(text: &str) -> Result<ImageRef, ImageRefError> {
    const RULE: ImageRefError = ImageRefError::Malformed;
    if text.is_empty() {
        return Err(ImageRefError::Required);
    }
    if text.len() > 512 || has_control(text) {
        return Err(RULE);
    }
    let (rest, digest) = match text.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (text, None),
    };
    if let Some(d) = digest {
        // The digests the Engine verifies (OCI's registered algorithms): anything else it refuses
        // only when the container is made, which would read as the Engine's fault.
        let ok = d.split_once(':').is_some_and(|(algo, hex)| {
            let len = match algo {
                "sha256" => 64,
                "sha384" => 96,
                "sha512" => 128,
                _ => return false,
            };
            hex.len() == len
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        });
        if !ok {
            return Err(RULE);
        }
    }
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (path, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(tag) = tag {
        let ok = !tag.is_empty()
            && tag.len() <= 128
            && tag
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
            && !tag.starts_with(['.', '-']);
        if !ok {
            return Err(RULE);
        }
    }
    let mut parts: Vec<&str> = path.split('/').collect();
    let registry = if parts.len() > 1 && (parts[0].contains(['.', ':']) || parts[0] == "localhost")
    {
        let host = parts.remove(0);
        if !is_registry_host(host) {
            return Err(RULE);
        }
        host.to_ascii_lowercase()
    } else {
        DOCKER_HUB.to_owned()
    };
    let component_ok = |c: &str| {
        !c.is_empty()
            && c.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
            })
            && c.as_bytes()[0].is_ascii_alphanumeric()
            && c.as_bytes()[c.len() - 1].is_ascii_alphanumeric()
    };
    if !parts.iter().all(|c| component_ok(c)) {
        return Err(RULE);
    }
    Ok(ImageRef {
        reference: text.to_owned(),
        registry,
    })
}

/// Whether `name` is an environment variable name (`[A-Za-z_][A-Za-z0-9_]*`).
fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Whether `name` is a Docker volume name.
pub fn is_volume_name(name: &str) -> bool {
    name.len() >= 2
        && name.len() <= 255
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

impl ProviderSpec {
    /// Decodes the raw spec; a field of the wrong type is an InvalidArgument naming it and what was
    /// expected, never the value.
    pub fn decode(raw: &serde_json::Value) -> Result<Self, Status> {
        crate::provider::decode_spec(raw, SPEC, "the Docker provider spec (image, tags, ...)")
    }

    /// The cluster and role from the tags: what every method needs to scope its lookups.
    pub fn scope(&self) -> Result<Scope, Status> {
        let mut v = Violations::under(SPEC);
        let scope = self.check_scope(&mut v);
        v.into_result()?;
        Ok(scope.expect("a scope when there is no violation"))
    }

    fn check_scope(&self, v: &mut Violations) -> Option<Scope> {
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

    /// Bounds and grammar of the free texts no other rule covers: the informational fields and the
    /// tags (a value is never echoed: it may be 100,000 characters).
    fn check_free_text(&self, v: &mut Violations) {
        for (field, text) in [("apiVersion", &self.api_version), ("kind", &self.kind)] {
            if text.chars().count() > MAX_INFO_CHARS || has_control(text) {
                v.add(
                    field,
                    format!(
                        "must be at most {MAX_INFO_CHARS} characters without control characters"
                    ),
                );
            }
        }
        if self.tags.len() > MAX_TAGS {
            v.add("tags", format!("must have at most {MAX_TAGS} entries"));
        }
        for (key, value) in &self.tags {
            if key.chars().count() > MAX_TAG_KEY_CHARS || key.is_empty() || has_control(key) {
                v.add(
                    "tags",
                    format!("a key must be 1 to {MAX_TAG_KEY_CHARS} characters without control characters"),
                );
            } else if value.chars().count() > MAX_TAG_VALUE_CHARS || has_control(value) {
                v.add(
                    &format!("tags[{key}]"),
                    format!("must be at most {MAX_TAG_VALUE_CHARS} characters without control characters"),
                );
            }
        }
    }

    /// The bootstrap mode.
    pub fn bootstrap(&self) -> Result<Bootstrap, Status> {
        match self.bootstrap.as_str() {
            "" | "none" => Ok(Bootstrap::None),
            "exec" => Ok(Bootstrap::Exec),
            _ => Err(Status::invalid(
                &format!("{SPEC}.bootstrap"),
                "must be none or exec",
            )),
        }
    }

    /// The grace period a deletion gives the container.
    pub fn stop_grace(&self) -> Result<u32, Status> {
        match self.stop_grace_period_seconds {
            None => Ok(DEFAULT_STOP_GRACE),
            Some(s) if s <= MAX_STOP_GRACE => Ok(s),
            Some(_) => Err(Status::invalid(
                &format!("{SPEC}.stopGracePeriodSeconds"),
                format!("must be at most {MAX_STOP_GRACE}"),
            )),
        }
    }

    /// Every rule, for CreateMachine. `resolve_locally`: the Engine runs on this host, so mount
    /// paths can also be checked with their symbolic links followed.
    pub fn plan(&self, settings: &Settings, resolve_locally: bool) -> Result<Plan, Status> {
        let mut v = Violations::under(SPEC);
        let scope = self.check_scope(&mut v);
        self.check_free_text(&mut v);
        let image = match parse_image(&self.image) {
            Ok(i) => Some(i),
            Err(rule) => {
                v.add("image", rule);
                None
            }
        };
        let pull = match self.pull.as_str() {
            "" | "Never" => Pull::Never,
            "IfNotPresent" => Pull::IfNotPresent,
            _ => {
                v.add("pull", "must be Never or IfNotPresent");
                Pull::Never
            }
        };
        if let (Pull::IfNotPresent, Some(image)) = (pull, &image)
            && !settings.may_pull_from(&image.registry)
        {
            v.not_allowed(
                "pull",
                format!(
                    "IfNotPresent would pull from registry {:?}, which the operator does not allow ({ENV_REGISTRIES})",
                    image.registry
                ),
            );
        }
        // Berth's own limits, in characters (what a document's maxLength counts).
        for (field, list) in [("command", &self.command), ("args", &self.args)] {
            if list.len() > 256 {
                v.add(field, "must have at most 256 entries");
            }
            for (i, s) in list.iter().enumerate() {
                if s.chars().count() > MAX_ARG_CHARS || has_control(s) {
                    v.add(
                        &format!("{field}[{i}]"),
                        "must be at most 4096 characters without control characters (C0, DEL or C1)",
                    );
                }
            }
        }
        if self.command.first().is_some_and(String::is_empty) {
            v.add("command[0]", "must not be empty");
        }
        if self.env.len() > 256 {
            v.add("env", "must have at most 256 entries");
        }
        for (name, value) in &self.env {
            if name.chars().count() > 256 {
                v.add(
                    "env",
                    "a variable name is longer than 256 characters; at most 256",
                );
            } else if !is_env_name(name) {
                v.add(
                    "env",
                    format!("{name:?} is not a variable name: letters, digits and '_', not starting with a digit"),
                );
            }
            if value.chars().count() > MAX_ENV_VALUE_CHARS || has_control(value) {
                v.add(
                    &format!("env[{name}]"),
                    "must be at most 32768 characters without control characters (C0, DEL or C1)",
                );
            }
        }
        if self.labels.len() > 64 {
            v.add("labels", "must have at most 64 entries");
        }
        for (key, value) in &self.labels {
            if key.chars().count() > MAX_TAG_KEY_CHARS {
                v.add(
                    "labels",
                    format!("a key is longer than {MAX_TAG_KEY_CHARS} characters; at most {MAX_TAG_KEY_CHARS}"),
                );
                continue;
            }
            if let Err(e) = names::validate_label_key("labels key", key) {
                v.add("labels", e.message.trim_start_matches("labels key: "));
            } else if let Some(prefix) = reserved_prefix(key) {
                v.add(
                    &format!("labels[{key}]"),
                    if prefix == RESERVED_LABEL_PREFIX {
                        format!("keys under {RESERVED_LABEL_PREFIX} are the driver's own")
                    } else {
                        format!("keys under {prefix} are reserved: the Docker tools read them as instructions")
                    },
                );
            }
            if value.chars().count() > MAX_LABEL_VALUE_CHARS || has_control(value) {
                v.add(
                    &format!("labels[{key}]"),
                    "must be at most 1024 characters without control characters",
                );
            }
        }
        let network = match self.network.as_str() {
            "" => None,
            "host" => {
                v.add(
                    "network",
                    "host would share the Engine host's network namespace; name a Docker network",
                );
                None
            }
            n if is_network_name(n) => Some(n.to_owned()),
            _ => {
                v.add(
                    "network",
                    "must be a Docker network name of at most 128 letters, digits, '_', '.' and '-'",
                );
                None
            }
        };
        // A class naming none joins the Engine's default network, which the operator must allow
        // like any other.
        let joined = network.as_deref().unwrap_or(DEFAULT_NETWORK);
        if (network.is_some() || self.network.is_empty()) && !settings.networks.contains(joined) {
            v.not_allowed(
                "network",
                format!(
                    "{joined:?} is not a network the operator allows machines to join ({ENV_NETWORKS}: {})",
                    settings.networks.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            );
        }
        // Limits: what the class asks for, or the operator's ceiling when it asks for none; asking
        // above the ceiling is refused (a class may lower a limit, never raise it).
        let nano_cpus = match self.cpus {
            None => settings.nano_cpus,
            Some(c) => match nano_cpus(c) {
                Some(n) if n > settings.nano_cpus => {
                    v.not_allowed(
                        "cpus",
                        format!(
                            "must be at most {}, the operator's ceiling ({ENV_CPUS})",
                            cpus_text(settings.nano_cpus)
                        ),
                    );
                    settings.nano_cpus
                }
                Some(n) => n,
                None => {
                    v.add("cpus", "must be between 0.01 and 1024");
                    settings.nano_cpus
                }
            },
        };
        let memory_ceiling = i64::try_from(settings.memory).unwrap_or(i64::MAX);
        let memory = match &self.memory {
            None => memory_ceiling,
            Some(text) if text.chars().count() > MAX_MEMORY_CHARS => {
                v.add(
                    "memory",
                    format!(
                        "must be at most {MAX_MEMORY_CHARS} characters (a quantity, like 512Mi)"
                    ),
                );
                memory_ceiling
            }
            Some(text) => match Quantity::parse_field(&format!("{SPEC}.memory"), text) {
                Ok(q) if q.bytes() < MIN_MEMORY => {
                    v.add("memory", "must be at least 6Mi (the Engine's minimum)");
                    memory_ceiling
                }
                Ok(q) if q.bytes() > settings.memory => {
                    v.not_allowed(
                        "memory",
                        format!(
                            "must be at most {}, the operator's ceiling ({ENV_MEMORY})",
                            Quantity::from_bytes(settings.memory)
                        ),
                    );
                    memory_ceiling
                }
                Ok(q) => i64::try_from(q.bytes()).unwrap_or(memory_ceiling),
                Err(e) => {
                    v.add_worded(e.message);
                    memory_ceiling
                }
            },
        };
        let pids = match self.pids {
            None => settings.pids,
            Some(p) if !(MIN_PIDS..=MAX_PIDS).contains(&p) => {
                v.add("pids", format!("must be between {MIN_PIDS} and {MAX_PIDS}"));
                settings.pids
            }
            Some(p) if p > settings.pids => {
                v.not_allowed(
                    "pids",
                    format!(
                        "must be at most {}, the operator's ceiling ({ENV_PIDS})",
                        settings.pids
                    ),
                );
                settings.pids
            }
            Some(p) => p,
        };
        if self.privileged && !settings.allow_privileged {
            v.not_allowed(
                "privileged",
                format!(
                    "privileged containers are not allowed by the operator ({ENV_ALLOW_PRIVILEGED})"
                ),
            );
        }
        if self.mounts.len() > 32 {
            v.add("mounts", "must have at most 32 entries");
        }
        let mut mounts = Vec::new();
        let mut targets = std::collections::BTreeSet::new();
        for (i, m) in self.mounts.iter().enumerate() {
            let mut too_long = false;
            for (field, path) in [
                ("hostPath", &m.host_path),
                ("containerPath", &m.container_path),
            ] {
                if path.chars().count() > MAX_PATH_CHARS {
                    v.add(
                        &format!("mounts[{i}].{field}"),
                        format!("must be at most {MAX_PATH_CHARS} characters"),
                    );
                    too_long = true;
                }
            }
            if too_long {
                continue;
            }
            let host = match settings.admit_host_path(&m.host_path, resolve_locally) {
                Ok(p) => Some(p),
                Err(rule @ HostPathRefusal::NotAPath(_)) => {
                    v.add(&format!("mounts[{i}].hostPath"), rule);
                    None
                }
                Err(rule) => {
                    v.not_allowed(&format!("mounts[{i}].hostPath"), rule);
                    None
                }
            };
            let field = format!("mounts[{i}].containerPath");
            let target = match normalize_base_path(&field, &m.container_path) {
                // At the state directory, inside it, or at one of its ancestors (`/var/lib`,
                // `/var`, `/`): each puts the secret user data into a host directory.
                Ok(p) if is_within(&p, STATE_DIR) || is_within(STATE_DIR, &p) => {
                    v.add(
                        &field,
                        format!(
                            "must not be {STATE_DIR}, inside it or above it: the driver keeps the user data there"
                        ),
                    );
                    None
                }
                // The Engine makes these itself and refuses a mount there only when it starts the
                // container (a 500, after the container was created).
                Ok(p) if ENGINE_PATHS.contains(&p.as_str()) => {
                    v.add(
                        &field,
                        format!("must not be {p}: the Docker Engine provides it"),
                    );
                    None
                }
                Ok(p) if !targets.insert(p.clone()) => {
                    v.add(&field, format!("{p:?} is mounted twice"));
                    None
                }
                Ok(p) => Some(p),
                Err(e) => {
                    v.add_worded(format!("{SPEC}.{}", e.message));
                    None
                }
            };
            if let (Some(host_path), Some(container_path)) = (host, target) {
                if !m.read_only && !resolve_locally {
                    v.not_allowed(
                        &format!("mounts[{i}].readOnly"),
                        "a writable mount needs the Docker Engine on the driver's host (a unix:// socket): only there can the driver check, before every start, that no symbolic link has been planted on the way",
                    );
                }
                mounts.push(MountSpec {
                    host_path,
                    container_path,
                    read_only: m.read_only,
                });
            }
        }
        // A machine must not be able to rewrite, through a writable mount, the way to another of its
        // mounts' sources.
        for (i, outer) in mounts.iter().enumerate() {
            if outer.read_only {
                continue;
            }
            if let Some(inner) = mounts.iter().find(|m| {
                m.host_path != outer.host_path && is_within(&m.host_path, &outer.host_path)
            }) {
                v.add(
                    &format!("mounts[{i}].hostPath"),
                    format!(
                        "is writable and holds another mount's hostPath {:?}: the machine could replace the way to it with a symbolic link; mount that one read-only from a separate directory, or this one read-only",
                        inner.host_path
                    ),
                );
            }
        }
        let bootstrap = self.bootstrap().map_err(|e| v.add_worded(e.message)).ok();
        let stop_grace = self.stop_grace().map_err(|e| v.add_worded(e.message)).ok();
        v.into_result()?;
        Ok(Plan {
            image: image.expect("checked"),
            pull,
            command: self.command.clone(),
            args: self.args.clone(),
            env: self.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            labels: self.labels.clone(),
            network,
            nano_cpus,
            memory,
            pids,
            privileged: self.privileged,
            mounts,
            scope: Scope {
                instance: settings.instance.clone(),
                ..scope.expect("checked")
            },
            bootstrap: bootstrap.expect("checked"),
            stop_grace: stop_grace.expect("checked"),
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

impl Plan {
    /// Who restarts the container when it stops. A machine without mounts comes back after the
    /// Engine restarts, as a VM after its host reboots (`unless-stopped`: it stays down once
    /// DeleteMachine has stopped it). A machine with host directories is started by the driver
    /// only (`no`): the Engine follows whatever symbolic link a machine planted on the way to a
    /// mount source while it ran, and would restart it into a host directory outside the allowed
    /// roots; the driver checks every source again first (CreateMachine and InitializeMachine
    /// start a stopped machine). The Engine offers no hook to check before its own restarts, and
    /// no mount option stops it following a link in the source path itself.
    pub fn restart_policy(&self) -> RestartPolicyNameEnum {
        if self.mounts.is_empty() {
            RestartPolicyNameEnum::UNLESS_STOPPED
        } else {
            RestartPolicyNameEnum::NO
        }
    }

    /// The Engine's create request for machine `name` (UID `uid`).
    pub fn container(&self, name: &str, uid: &str) -> ContainerCreateBody {
        let mut labels: HashMap<String, String> = self
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        labels.extend(self.scope.labels(name, uid));
        labels.insert(LABEL_RECORDS.to_owned(), "volumes".to_owned());
        let some = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
        ContainerCreateBody {
            hostname: Some(name.to_owned()),
            image: Some(self.image.reference.clone()),
            entrypoint: some(&self.command),
            cmd: some(&self.args),
            env: some(&self.env),
            labels: Some(labels),
            stop_timeout: Some(i64::from(self.stop_grace)),
            host_config: Some(HostConfig {
                nano_cpus: Some(self.nano_cpus),
                memory: Some(self.memory),
                // The same as `memory`: no swap on top of it.
                memory_swap: Some(self.memory),
                pids_limit: Some(self.pids),
                cap_drop: Some(vec!["ALL".to_owned()]),
                cap_add: Some(CAPABILITIES.iter().map(|c| (*c).to_owned()).collect()),
                security_opt: Some(SECURITY_OPTIONS.iter().map(|o| (*o).to_owned()).collect()),
                privileged: Some(self.privileged),
                network_mode: self.network.clone(),
                mounts: (!self.mounts.is_empty()).then(|| {
                    self.mounts
                        .iter()
                        .map(|m| Mount {
                            typ: Some(MountType::BIND),
                            source: Some(m.host_path.clone()),
                            target: Some(m.container_path.clone()),
                            read_only: Some(m.read_only),
                            ..Mount::default()
                        })
                        .collect()
                }),
                restart_policy: Some(RestartPolicy {
                    name: Some(self.restart_policy()),
                    maximum_retry_count: None,
                }),
                ..HostConfig::default()
            }),
            ..ContainerCreateBody::default()
        }
    }
}

/// The machine's name, which is also its container's name and host name: a DNS-1123 subdomain of 2
/// to 63 characters.
pub fn machine_name(machine: &Machine) -> Result<String, Status> {
    let name = machine.metadata.name.as_str();
    let field = "machine.metadata.name";
    names::validate_dns1123_subdomain(field, name, MAX_MACHINE_NAME)?;
    if name.len() < 2 {
        return Err(Status::invalid(
            field,
            "must be at least 2 characters (a Docker container name)",
        ));
    }
    Ok(name.to_owned())
}

/// The request's other names: the machine's namespace (empty: `default`) a DNS-1123 label, the
/// class's name (possibly empty) a DNS-1123 subdomain. Both reach labels, logs and messages.
pub fn check_names(req: &MachineRequest) -> Result<(), Status> {
    let namespace = req.machine.metadata.namespace.as_str();
    if !namespace.is_empty() {
        names::validate_dns1123_label("machine.metadata.namespace", namespace)?;
    }
    check_class_name(&req.machine_class)
}

/// The class's name (possibly empty): a DNS-1123 subdomain of at most 253 characters.
pub fn check_class_name(class: &MachineClass) -> Result<(), Status> {
    let name = class.metadata.name.as_str();
    if name.is_empty() {
        return Ok(());
    }
    names::validate_dns1123_subdomain("machineClass.metadata.name", name, 253)
}

/// The machine's UID (possibly empty): at most 128 ASCII letters, digits, `-`, `_` and `.`.
pub fn machine_uid(machine: &Machine) -> Result<String, Status> {
    let uid = machine.metadata.uid.as_str();
    let ok = uid.len() <= MAX_UID_LEN
        && uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !ok {
        return Err(Status::invalid(
            "machine.metadata.uid",
            format!(
                "must be at most {MAX_UID_LEN} ASCII letters, digits, '-', '_' or '.' (a Kubernetes UID)"
            ),
        ));
    }
    Ok(uid.to_owned())
}

/// The provider id of the container named `name`.
pub fn provider_id(name: &str) -> String {
    format!("{PROVIDER_ID_PREFIX}{name}")
}

/// The name of a machine's container: the machine's name in the `default` namespace (as it was
/// before namespaces), `<namespace>_<machine>` in any other. Two namespaces may then hold machines of
/// the same name, and neither learns of the other's through a name the Engine refuses as taken.
/// A driver serving a stack (`instance`) names `<namespace>_<machine>_<instance>`, so two stacks on
/// one Engine may hold the same machine too. `_` is in no namespace, machine name or instance, so
/// the three forms never name the same container.
pub fn container_name(namespace: &str, machine: &str, instance: Option<&str>) -> String {
    match instance {
        Some(instance) => format!("{namespace}_{machine}_{instance}"),
        None if namespace == service_kit::tenancy::DEFAULT_NAMESPACE => machine.to_owned(),
        None => format!("{namespace}_{machine}"),
    }
}

/// Whether `name` is a container name [`container_name`] makes.
fn is_container_name(name: &str) -> bool {
    const FIELD: &str = "machine.spec.providerID";
    let parts: Vec<&str> = name.split('_').collect();
    let (namespace, machine, instance) = match parts.as_slice() {
        [machine] => (None, *machine, None),
        [namespace, machine] => (Some(*namespace), *machine, None),
        [namespace, machine, instance] => (Some(*namespace), *machine, Some(*instance)),
        _ => return false,
    };
    let label = |text: &str| names::validate_dns1123_label(FIELD, text).is_ok();
    namespace.is_none_or(label)
        && instance.is_none_or(label)
        && names::validate_dns1123_subdomain(FIELD, machine, MAX_MACHINE_NAME).is_ok()
}

/// The container name a provider id names.
pub fn decode_provider_id(provider_id: &str) -> Result<&str, Status> {
    const FIELD: &str = "machine.spec.providerID";
    provider_id
        .strip_prefix(PROVIDER_ID_PREFIX)
        .filter(|name| is_container_name(name))
        .ok_or_else(|| {
            Status::invalid(
                FIELD,
                format!("is not of the form {PROVIDER_ID_PREFIX}<container name>"),
            )
        })
}

/// A machine's providerID, when it has one, names a container ([`decode_provider_id`]).
pub fn check_provider_id(machine: &Machine) -> Result<(), Status> {
    let provider_id = machine.spec.provider_id.as_str();
    if !provider_id.is_empty() {
        decode_provider_id(provider_id)?;
    }
    Ok(())
}

/// The user data to write into the container. With `bootstrap: exec` it is required and must be a
/// program the kernel can run: a script starting with `#!` (the container may have no shell to
/// interpret anything else).
pub fn user_data(secret: &Secret, bootstrap: Bootstrap) -> Result<Option<Vec<u8>>, Status> {
    const FIELD: &str = "secret.data[userData]";
    let data = secret.get(SECRET_USER_DATA)?.filter(|d| !d.is_empty());
    match (&data, bootstrap) {
        (Some(d), _) if d.len() > MAX_USER_DATA => Err(Status::invalid(
            FIELD,
            format!("is {} bytes; at most {MAX_USER_DATA}", d.len()),
        )),
        (None, Bootstrap::Exec) => Err(Status::invalid(
            FIELD,
            format!("is required when {SPEC}.bootstrap is exec"),
        )),
        (Some(d), Bootstrap::Exec) if !d.starts_with(b"#!") => Err(Status::invalid(
            FIELD,
            format!(
                "must start with #! (an interpreter line) when {SPEC}.bootstrap is exec: it is executed as a program"
            ),
        )),
        _ => Ok(data),
    }
}

/// The document's description of what the Docker provider accepts: the rules above as JSON Schema,
/// so a request a generator makes from the document is one the driver takes, or one only this
/// driver's settings refuse (412). The tests below hold each pattern to its validator. Every call
/// decodes the whole spec (unknown fields refused) and checks its tags, bootstrap and grace period;
/// CreateMachine checks the rest ([`ProviderSpec::plan`]).
pub mod schema {
    use serde_json::{Value, json};

    use super::{
        CLUSTER_TAG, MAX_ARG_CHARS, MAX_ENV_VALUE_CHARS, MAX_LABEL_VALUE_CHARS, MAX_MACHINE_NAME,
        MAX_PIDS, MAX_STOP_GRACE, MAX_UID_LEN, MIN_PIDS, PROVIDER_ID_PREFIX, ROLE_TAG,
        SECRET_DOCKER_HOST, SECRET_USER_DATA,
    };
    use super::{
        MAX_INFO_CHARS, MAX_TAG_KEY_CHARS, MAX_TAG_VALUE_CHARS, MAX_TAGS, RESERVED_LABEL_PREFIXES,
    };
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
    /// No control character (C0, DEL or C1), as [`super::has_control`] says.
    pub const NO_CONTROL: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$";
    /// An environment variable's name ([`super::is_env_name`]).
    pub const ENV_NAME: &str = "^[A-Za-z_][A-Za-z0-9_]*$";
    /// A Docker network's name ([`super::is_network_name`]), or none.
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
    /// [`super::MAX_SCOPE_NAME`], the driver checks), the role's a DNS-1123 label.
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
    pub fn provider_spec(for_create: bool) -> Value {
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
        if !for_create {
            return spec;
        }
        let text = |max: usize, pattern: &str| json!({"type": "string", "maxLength": max, "pattern": pattern});
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
        p["args"] =
            json!({"type": "array", "maxItems": 256, "items": text(MAX_ARG_CHARS, NO_CONTROL)});
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
        p["network"] = json!({"type": "string", "maxLength": 128, "pattern": NETWORK, "not": {"const": "host"}});
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
    pub fn machine(with_provider_id: bool) -> Value {
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
        if with_provider_id {
            machine["properties"]["spec"] = json!({"properties": {"providerID": {
                "type": "string",
                "pattern": provider_id_pattern(),
                "maxLength": PROVIDER_ID_PREFIX.len() + MAX_MACHINE_NAME
            }}});
        }
        machine
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::Code;
    use serde_json::{Value, json};

    fn spec(extra: serde_json::Value) -> serde_json::Value {
        let mut base = json!({
            "image": "berth/machine:1",
            "tags": {"kubernetes.io/cluster/demo": "1", "kubernetes.io/role/worker": "1"}
        });
        for (k, v) in extra.as_object().unwrap() {
            base[k] = v.clone();
        }
        base
    }

    fn plan(extra: serde_json::Value) -> Result<Plan, Status> {
        ProviderSpec::decode(&spec(extra))?.plan(&Settings::default(), false)
    }

    fn refused(extra: serde_json::Value) -> String {
        plan(extra).unwrap_err().message
    }

    #[test]
    fn a_minimal_spec_plans_a_plain_container() {
        let p = plan(json!({})).unwrap();
        assert_eq!(p.image.reference, "berth/machine:1");
        assert_eq!(p.image.registry, "docker.io");
        assert_eq!(p.pull, Pull::Never);
        assert_eq!(p.bootstrap, Bootstrap::None);
        assert_eq!(p.stop_grace, DEFAULT_STOP_GRACE);
        assert_eq!(
            p.scope,
            Scope {
                cluster: "demo".into(),
                role: "worker".into(),
                instance: None,
            }
        );
        let body = p.container("m-1", "u-1");
        let labels = body.labels.unwrap();
        assert_eq!(labels[LABEL_CLUSTER], "demo");
        assert_eq!(labels[LABEL_ROLE], "worker");
        assert_eq!(labels[LABEL_MACHINE], "m-1");
        assert_eq!(labels[LABEL_UID], "u-1");
        assert_eq!(body.hostname.as_deref(), Some("m-1"));
        let host = body.host_config.unwrap();
        assert_eq!(host.privileged, Some(false));
        assert!(host.mounts.is_none());
        assert!(body.entrypoint.is_none() && body.cmd.is_none());
        // A class that names no limits gets the operator's ceilings, and never the Engine's
        // defaults: every capability dropped but a few, no new privileges, no swap.
        assert_eq!(host.memory, Some(512 << 20));
        assert_eq!(host.memory_swap, Some(512 << 20));
        assert_eq!(host.nano_cpus, Some(1_000_000_000));
        assert_eq!(host.pids_limit, Some(256));
        assert_eq!(host.cap_drop.unwrap(), ["ALL"]);
        let caps = host.cap_add.unwrap();
        assert!(
            !caps.iter().any(|c| c == "NET_RAW" || c == "MKNOD"),
            "{caps:?}"
        );
        assert_eq!(host.security_opt.unwrap(), ["no-new-privileges:true"]);
        assert_eq!(host.network_mode, None);
        assert_eq!(labels[LABEL_RECORDS], "volumes");
    }

    #[test]
    fn a_class_may_lower_the_operators_ceilings_never_raise_them() {
        let settings = Settings::default();
        let p = |extra: Value| {
            ProviderSpec::decode(&spec(extra))
                .unwrap()
                .plan(&settings, false)
        };
        let low = p(json!({"cpus": 0.25, "memory": "64Mi", "pids": 32})).unwrap();
        assert_eq!(
            (low.nano_cpus, low.memory, low.pids),
            (250_000_000, 64 << 20, 32)
        );
        for (extra, want) in [
            (
                json!({"cpus": 2}),
                "machineClass.providerSpec.cpus: must be at most 1, the operator's ceiling (BERTH_DOCKER_CPUS)",
            ),
            (
                json!({"memory": "513Mi"}),
                "machineClass.providerSpec.memory: must be at most 512Mi, the operator's ceiling (BERTH_DOCKER_MEMORY)",
            ),
            (
                json!({"pids": 257}),
                "machineClass.providerSpec.pids: must be at most 256, the operator's ceiling (BERTH_DOCKER_PIDS)",
            ),
            (
                json!({"network": "kind"}),
                "machineClass.providerSpec.network: \"kind\" is not a network the operator allows machines to join (BERTH_DOCKER_NETWORKS: bridge)",
            ),
        ] {
            let e = p(extra.clone()).unwrap_err();
            assert_eq!(e.code, Code::FailedPrecondition, "{extra}");
            assert_eq!(e.message, want, "{extra}");
        }
        let e = p(json!({"pids": 2})).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument);
        assert!(e.message.contains("pids: must be between 8 and"), "{e:?}");
        // Raised by the operator, the class may ask for more; without `bridge` on the list, a class
        // naming no network is refused too.
        let raised = Settings {
            nano_cpus: 4_000_000_000,
            memory: 2 << 30,
            pids: 1024,
            networks: ["kind".to_owned()].into(),
            ..Settings::default()
        };
        let p = |extra: Value| {
            ProviderSpec::decode(&spec(extra))
                .unwrap()
                .plan(&raised, false)
        };
        let high = p(json!({"cpus": 2, "memory": "1Gi", "pids": 1000, "network": "kind"})).unwrap();
        assert_eq!(
            (high.nano_cpus, high.memory, high.pids),
            (2_000_000_000, 1 << 30, 1000)
        );
        let e = p(json!({})).unwrap_err();
        assert!(e.message.contains("\"bridge\" is not a network"), "{e:?}");
    }

    #[test]
    fn every_free_string_has_a_bound_and_a_huge_one_is_a_400_naming_field_and_bound() {
        let huge = "x".repeat(100_000);
        let huge_path = format!("/{huge}");
        for (extra, field, bound) in [
            (json!({"image": huge}), "image", "image reference"),
            (json!({"pull": huge}), "pull", "Never or IfNotPresent"),
            (json!({"command": [huge]}), "command[0]", "4096"),
            (json!({"args": [huge]}), "args[0]", "4096"),
            (json!({"env": {"A": huge}}), "env[A]", "32768"),
            (json!({"env": {huge.clone(): "v"}}), "env", "256"),
            (json!({"labels": {"a": huge}}), "labels[a]", "1024"),
            (json!({"labels": {huge.clone(): "v"}}), "labels", "317"),
            (json!({"network": huge}), "network", "128"),
            (json!({"memory": huge}), "memory", "32"),
            (json!({"apiVersion": huge}), "apiVersion", "256"),
            (json!({"kind": huge}), "kind", "256"),
            (json!({"bootstrap": huge}), "bootstrap", "none or exec"),
            (
                json!({"mounts": [{"hostPath": huge_path, "containerPath": "/d"}]}),
                "mounts[0].hostPath",
                "4096",
            ),
            (
                json!({"mounts": [{"hostPath": "/d", "containerPath": huge}]}),
                "mounts[0].containerPath",
                "4096",
            ),
        ] {
            let mut raw = spec(json!({}));
            for (k, v) in extra.as_object().unwrap() {
                raw[k] = v.clone();
            }
            let e = ProviderSpec::decode(&raw)
                .unwrap()
                .plan(&Settings::default(), false)
                .unwrap_err();
            assert_eq!(
                e.code,
                Code::InvalidArgument,
                "{field}: {}",
                &e.message[..200.min(e.message.len())]
            );
            assert!(
                e.message
                    .contains(&format!("machineClass.providerSpec.{field}: ")),
                "{field}: {}",
                &e.message[..200.min(e.message.len())]
            );
            assert!(e.message.contains(bound), "{field}: {}", e.message);
            assert!(
                e.message.len() < 2000,
                "{field}: the answer echoes the value"
            );
        }
        // Tags: a huge value, or a huge key, of a tag besides the scope's.
        let mut raw = spec(json!({}));
        raw["tags"]["note"] = json!(huge);
        let e = ProviderSpec::decode(&raw)
            .unwrap()
            .plan(&Settings::default(), false)
            .unwrap_err();
        assert!(
            e.message
                .contains("machineClass.providerSpec.tags[note]: must be at most 1024"),
            "{e:?}"
        );
        let mut raw = spec(json!({}));
        raw["tags"][huge.as_str()] = json!("1");
        let e = ProviderSpec::decode(&raw)
            .unwrap()
            .plan(&Settings::default(), false)
            .unwrap_err();
        assert!(
            e.message
                .contains("machineClass.providerSpec.tags: a key must be 1 to 317"),
            "{e:?}"
        );
        assert!(e.message.len() < 2000);
    }

    #[test]
    fn every_field_reaches_the_container() {
        let dir = std::env::temp_dir();
        let root = dir.display().to_string();
        let settings = Settings {
            mount_roots: vec![root.clone()],
            allow_privileged: true,
            nano_cpus: 2_000_000_000,
            networks: ["kind".to_owned()].into(),
            ..Settings::default()
        };
        let p = ProviderSpec::decode(&spec(json!({
            "command": ["/sbin/init"], "args": ["--log", "x"],
            "env": {"A_B": "1"}, "labels": {"team": "infra"}, "network": "kind",
            "cpus": 1.5, "memory": "512Mi", "pids": 100, "privileged": true,
            "mounts": [{"hostPath": format!("{root}/x"), "containerPath": "/data/", "readOnly": true}],
            "bootstrap": "exec", "stopGracePeriodSeconds": 2, "pull": "IfNotPresent"
        })))
        .unwrap()
        .plan(&settings, false)
        .unwrap();
        let body = p.container("m-1", "");
        assert_eq!(body.entrypoint.unwrap(), ["/sbin/init"]);
        assert_eq!(body.cmd.unwrap(), ["--log", "x"]);
        assert_eq!(body.env.unwrap(), ["A_B=1"]);
        assert_eq!(body.labels.unwrap()["team"], "infra");
        assert_eq!(body.stop_timeout, Some(2));
        let host = body.host_config.unwrap();
        assert_eq!(host.nano_cpus, Some(1_500_000_000));
        assert_eq!(host.memory, Some(512 << 20));
        assert_eq!(host.pids_limit, Some(100));
        assert_eq!(host.privileged, Some(true));
        assert_eq!(host.network_mode.as_deref(), Some("kind"));
        let m = &host.mounts.unwrap()[0];
        assert_eq!(m.source.as_deref(), Some(format!("{root}/x").as_str()));
        assert_eq!(m.target.as_deref(), Some("/data"));
        assert_eq!(m.read_only, Some(true));
        assert_eq!(p.bootstrap, Bootstrap::Exec);
        assert_eq!(p.pull, Pull::IfNotPresent);
    }

    #[test]
    fn each_rule_names_its_field() {
        let cases = [
            (
                json!({"image": ""}),
                "machineClass.providerSpec.image: is required",
            ),
            (
                json!({"image": "Upper/Case"}),
                "machineClass.providerSpec.image: must be an image reference",
            ),
            (
                json!({"image": "x:"}),
                "machineClass.providerSpec.image: must be an image reference",
            ),
            (
                json!({"pull": "Always"}),
                "machineClass.providerSpec.pull: must be Never or IfNotPresent",
            ),
            (
                json!({"image": "ghcr.io/a/b:1", "pull": "IfNotPresent"}),
                "machineClass.providerSpec.pull: IfNotPresent would pull from registry \"ghcr.io\", which the operator does not allow (BERTH_DOCKER_REGISTRIES)",
            ),
            (
                json!({"command": [""]}),
                "machineClass.providerSpec.command[0]: must not be empty",
            ),
            (
                json!({"args": ["a\u{0}b"]}),
                "machineClass.providerSpec.args[0]: must be at most 4096 characters without control characters (C0, DEL or C1)",
            ),
            (
                json!({"env": {"1X": "v"}}),
                "machineClass.providerSpec.env: \"1X\" is not a variable name",
            ),
            (
                json!({"labels": {"berth.io/machine": "x"}}),
                "machineClass.providerSpec.labels[berth.io/machine]: keys under berth.io/ are the driver's own",
            ),
            (
                json!({"labels": {"com.docker.compose.project": "x"}}),
                "machineClass.providerSpec.labels[com.docker.compose.project]: keys under com.docker. are reserved",
            ),
            (
                json!({"labels": {"berth.io": "x"}}),
                "machineClass.providerSpec.labels[berth.io]: keys under berth.io/ are the driver's own",
            ),
            (
                json!({"labels": {"COM.Docker.compose.project": "x"}}),
                "machineClass.providerSpec.labels[COM.Docker.compose.project]: keys under com.docker. are reserved",
            ),
            (
                json!({"labels": {"com.docker": "x"}}),
                "machineClass.providerSpec.labels[com.docker]: keys under com.docker. are reserved",
            ),
            (
                json!({"labels": {"a b": "x"}}),
                "machineClass.providerSpec.labels: \"a b\" is not a valid label key",
            ),
            (
                json!({"network": "host"}),
                "machineClass.providerSpec.network: host would share",
            ),
            (
                json!({"network": "container:x"}),
                "machineClass.providerSpec.network: must be a Docker network name",
            ),
            (
                json!({"cpus": 0}),
                "machineClass.providerSpec.cpus: must be between 0.01 and 1024",
            ),
            (
                json!({"memory": "1Ki"}),
                "machineClass.providerSpec.memory: must be at least 6Mi",
            ),
            (
                json!({"memory": "lots"}),
                "machineClass.providerSpec.memory: \"lots\" is not a quantity",
            ),
            (
                json!({"privileged": true}),
                "machineClass.providerSpec.privileged: privileged containers are not allowed by the operator (BERTH_DOCKER_ALLOW_PRIVILEGED)",
            ),
            (
                json!({"mounts": [{"hostPath": "/etc", "containerPath": "/etc"}]}),
                "machineClass.providerSpec.mounts[0].hostPath: no host directory may be mounted: the operator allows them with BERTH_DOCKER_MOUNT_PATHS",
            ),
            (
                json!({"mounts": [{"hostPath": "/x", "containerPath": "/var/lib/berth"}]}),
                "machineClass.providerSpec.mounts[0].containerPath: must not be /var/lib/berth, inside it or above it: the driver keeps the user data there",
            ),
            (
                json!({"mounts": [{"hostPath": "/x", "containerPath": "/var/lib/berth/x"}]}),
                "machineClass.providerSpec.mounts[0].containerPath: must not be /var/lib/berth, inside it or above it: the driver keeps the user data there",
            ),
            (
                json!({"mounts": [{"hostPath": "/x", "containerPath": "/var/lib"}]}),
                "machineClass.providerSpec.mounts[0].containerPath: must not be /var/lib/berth, inside it or above it: the driver keeps the user data there",
            ),
            (
                json!({"mounts": [{"hostPath": "/x", "containerPath": "/var/"}]}),
                "machineClass.providerSpec.mounts[0].containerPath: must not be /var/lib/berth, inside it or above it: the driver keeps the user data there",
            ),
            (
                json!({"mounts": [{"hostPath": "/x", "containerPath": "/proc"}]}),
                "machineClass.providerSpec.mounts[0].containerPath: must not be /proc: the Docker Engine provides it",
            ),
            (
                json!({"mounts": [{"hostPath": "/x", "containerPath": "/sys"}]}),
                "machineClass.providerSpec.mounts[0].containerPath: must not be /sys: the Docker Engine provides it",
            ),
            (
                json!({"mounts": [{"hostPath": "/x", "containerPath": "/dev/"}]}),
                "machineClass.providerSpec.mounts[0].containerPath: must not be /dev: the Docker Engine provides it",
            ),
            (
                json!({"mounts": [{"hostPath": "/x", "containerPath": "rel"}]}),
                "machineClass.providerSpec.mounts[0].containerPath: \"rel\" must be an absolute path",
            ),
            (
                json!({"bootstrap": "cloud-init"}),
                "machineClass.providerSpec.bootstrap: must be none or exec",
            ),
            (
                json!({"stopGracePeriodSeconds": 301}),
                "machineClass.providerSpec.stopGracePeriodSeconds: must be at most 300",
            ),
            (
                json!({"tags": {}}),
                "machineClass.providerSpec.tags: must hold one key kubernetes.io/cluster/<name>",
            ),
            (
                json!({"tags": {"kubernetes.io/cluster/a": "1", "kubernetes.io/cluster/b": "1", "kubernetes.io/role/r": "1"}}),
                "machineClass.providerSpec.tags: must hold exactly one key kubernetes.io/cluster/<name>",
            ),
        ];
        for (extra, want) in cases {
            let got = refused(extra.clone());
            assert!(got.contains(want), "{extra}: {got}");
        }
        // One answer names every malformed field; what only the operator's settings refuse waits
        // until the request is well-formed, and is then a FailedPrecondition naming the setting.
        let e = plan(json!({"image": "", "cpus": 9999, "privileged": true})).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument);
        assert_eq!(
            e.message.matches("machineClass.providerSpec.").count(),
            2,
            "{}",
            e.message
        );
        let e = plan(json!({"privileged": true, "pull": "IfNotPresent", "image": "ghcr.io/x/y", "mounts": [{"hostPath": "/etc", "containerPath": "/etc"}]})).unwrap_err();
        assert_eq!(e.code, Code::FailedPrecondition, "{}", e.message);
        assert_eq!(
            e.message.matches("machineClass.providerSpec.").count(),
            3,
            "{}",
            e.message
        );
        let e = plan(json!({"mounts": [{"hostPath": "rel", "containerPath": "/x"}]})).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument, "{}", e.message);
    }

    #[test]
    fn decoding_errors_name_the_field_and_type_never_the_value() {
        let e = ProviderSpec::decode(&spec(json!({"cpus": "hunter2-secretish"}))).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument);
        assert_eq!(
            e.message,
            "machineClass.providerSpec.cpus: invalid type: string, expected f64"
        );
        let e = ProviderSpec::decode(&spec(json!({"stopGracePeriodSeconds": -5}))).unwrap_err();
        assert!(!e.message.contains("-5"), "{}", e.message);
        assert!(
            e.message
                .starts_with("machineClass.providerSpec.stopGracePeriodSeconds: "),
            "{}",
            e.message
        );
        let e = ProviderSpec::decode(&spec(json!({"mounts": [{"hostPath": 7}]}))).unwrap_err();
        assert_eq!(
            e.message,
            "machineClass.providerSpec.mounts[0].hostPath: invalid type: integer, expected a string"
        );
        let e = ProviderSpec::decode(&spec(json!({"privilegd": true}))).unwrap_err();
        assert!(
            e.message.contains("unknown field `privilegd`"),
            "{}",
            e.message
        );
        let e = ProviderSpec::decode(&json!("x")).unwrap_err();
        assert!(
            e.message
                .starts_with("machineClass.providerSpec: must be a JSON object")
        );
    }

    #[test]
    fn image_references_parse_like_the_engine_reads_them() {
        for (text, registry) in [
            ("alpine", "docker.io"),
            ("alpine:3.20", "docker.io"),
            (
                "library/alpine@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "docker.io",
            ),
            ("localhost:5000/berth/m:v1", "localhost:5000"),
            ("ghcr.io/org/img", "ghcr.io"),
            ("kindest/node:v1.31.0", "docker.io"),
        ] {
            assert_eq!(parse_image(text).unwrap().registry, registry, "{text}");
        }
        for bad in [
            "",
            "a b",
            "UPPER",
            "a:",
            "a@sha256:xyz",
            "alpine@foo:0123456789abcdef0123456789abcdef",
            "alpine@sha256:0123456789abcdef0123456789abcdef",
            "alpine@sha256:0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF",
            "-a",
            "a//b",
            "a:b:c/d",
        ] {
            assert!(parse_image(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn control_bytes_scope_grammar_and_request_names_are_400s_naming_the_field() {
        let words = |extra: serde_json::Value| refused(extra);
        for (extra, field) in [
            (json!({"args": ["a\u{7}b"]}), "args[0]"),
            (json!({"command": ["/x", "a\u{9b}b"]}), "command[1]"),
            (json!({"env": {"A": "x\u{7f}"}}), "env[A]"),
        ] {
            let e = words(extra.clone());
            assert!(
                e.contains(&format!(
                    "machineClass.providerSpec.{field}: must be at most"
                )) && e.contains("without control characters"),
                "{extra}: {e}"
            );
            assert!(!e.chars().any(char::is_control), "{e:?}");
        }
        for (path_field, mount) in [
            (
                "containerPath",
                json!({"hostPath": "/x", "containerPath": "/a\u{1}b"}),
            ),
            (
                "hostPath",
                json!({"hostPath": "/x\u{1}", "containerPath": "/a"}),
            ),
        ] {
            let e = words(json!({"mounts": [mount]}));
            assert!(
                e.contains(&format!(
                    "mounts[0].{path_field}: must not contain control characters"
                )),
                "{e}"
            );
            assert!(!e.chars().any(char::is_control), "{e:?}");
        }
        for (tag, rule) in [
            (
                "kubernetes.io/cluster/../..",
                "must be a DNS-1123 subdomain",
            ),
            (
                "kubernetes.io/cluster/a b,c=d",
                "must be a DNS-1123 subdomain",
            ),
            ("kubernetes.io/role/a.b", "must be a DNS-1123 label"),
            ("kubernetes.io/role/A", "must be a DNS-1123 label"),
        ] {
            let mut tags =
                json!({"kubernetes.io/cluster/c1": "1", "kubernetes.io/role/worker": "1"});
            let prefix = [CLUSTER_TAG, ROLE_TAG]
                .into_iter()
                .find(|p| tag.starts_with(p))
                .unwrap();
            let obj = tags.as_object_mut().unwrap();
            obj.retain(|k, _| !k.starts_with(prefix));
            obj.insert(tag.to_owned(), json!("1"));
            let e = ProviderSpec::decode(&json!({"image": "x", "tags": tags}))
                .unwrap()
                .scope()
                .unwrap_err();
            assert!(
                e.message.contains("machineClass.providerSpec.tags") && e.message.contains(rule),
                "{tag}: {e:?}"
            );
        }
        let mut req = MachineRequest::default();
        req.machine.metadata.namespace = "n".repeat(100_000);
        let e = check_names(&req).unwrap_err();
        assert!(
            e.message.starts_with("machine.metadata.namespace: "),
            "{e:?}"
        );
        assert!(e.message.len() < 1000, "{}", e.message.len());
        req.machine.metadata.namespace = "team-a".into();
        req.machine_class.metadata.name = "c".repeat(100_000);
        let e = check_names(&req).unwrap_err();
        assert!(
            e.message.starts_with("machineClass.metadata.name: "),
            "{e:?}"
        );
        assert!(e.message.len() < 1000, "{}", e.message.len());
        req.machine_class.metadata.name = "a b".into();
        assert!(check_names(&req).is_err());
        req.machine_class.metadata.name = "docker-small.v1".into();
        check_names(&req).unwrap();
        req.machine.metadata.namespace.clear();
        check_names(&req).unwrap();
    }

    #[test]
    fn an_images_reserved_labels_are_foreign_unless_the_driver_sets_them() {
        let labels = |keys: &[&str]| -> HashMap<String, String> {
            keys.iter()
                .map(|k| ((*k).to_owned(), "v".to_owned()))
                .collect()
        };
        assert_eq!(
            foreign_image_label(&labels(&[
                "org.opencontainers.image.title",
                LABEL_CLUSTER,
                LABEL_RECORDS,
                "berth.io/namespace"
            ])),
            None
        );
        for key in [
            "com.docker.compose.project",
            "berth.io/bootstrap-exec",
            "Berth.io/cluster",
            "berth.io",
            "COM.DOCKER",
        ] {
            assert_eq!(foreign_image_label(&labels(&[key, "zz.other"])), Some(key));
        }
    }

    #[test]
    fn names_uids_and_provider_ids() {
        let mut m = Machine::default();
        m.metadata.name = "worker-1.pool".into();
        m.metadata.uid = "6a0c5d4e-0b7e".into();
        assert_eq!(machine_name(&m).unwrap(), "worker-1.pool");
        assert_eq!(machine_uid(&m).unwrap(), "6a0c5d4e-0b7e");
        assert_eq!(provider_id("worker-1"), "docker:///worker-1");
        assert_eq!(
            decode_provider_id("docker:///worker-1").unwrap(),
            "worker-1"
        );
        for bad in [
            "docker://worker-1",
            "docker:////worker-1",
            "docker:///",
            "docker:///a/b",
            "w",
        ] {
            let e = decode_provider_id(bad).unwrap_err();
            assert!(e.message.starts_with("machine.spec.providerID: "), "{bad}");
        }
        m.metadata.name = "x".repeat(64);
        assert!(machine_name(&m).is_err());
        m.metadata.name = "a".into();
        assert!(machine_name(&m).is_err());
        m.metadata.uid = "a/b".into();
        assert!(machine_uid(&m).is_err());
    }

    #[test]
    fn user_data_is_required_and_runnable_for_an_exec_bootstrap() {
        let none = Secret::default();
        assert_eq!(user_data(&none, Bootstrap::None).unwrap(), None);
        let e = user_data(&none, Bootstrap::Exec).unwrap_err();
        assert_eq!(
            e.message,
            "secret.data[userData]: is required when machineClass.providerSpec.bootstrap is exec"
        );
        let plain = Secret::from_string_data([("userData", "echo token-abc123")]);
        assert!(user_data(&plain, Bootstrap::None).unwrap().is_some());
        let e = user_data(&plain, Bootstrap::Exec).unwrap_err();
        assert!(e.message.contains("must start with #!"));
        assert!(!e.message.contains("token-abc123"));
        let script = Secret::from_string_data([("userData", "#!/bin/sh\necho hi\n")]);
        assert!(user_data(&script, Bootstrap::Exec).unwrap().is_some());
    }

    /// Each pattern of [`schema`] against the validator it stands for: a value matches exactly when
    /// the driver accepts it, or, where the pattern says it is narrower, only values it accepts.
    mod schema_patterns {
        use super::super::schema::*;
        use super::*;

        fn re(pattern: &str) -> regex::Regex {
            regex::Regex::new(pattern).unwrap()
        }

        #[test]
        fn image_references() {
            let pattern = re(&image_pattern());
            let exact = [
                "alpine",
                "alpine:3.20",
                "library/alpine@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "localhost:5000/berth/m:v1",
                "localhost/x",
                "ghcr.io/org/img",
                "GHCR.io/org/img",
                "kindest/node:v1.31.0",
                "a.b",
                "a.b/c",
                "a_b.c/x",
                "a__b/c-d",
                "my-reg:5000/x",
                "",
                "a b",
                "UPPER",
                "a:",
                "a@sha256:xyz",
                "alpine@foo:0123456789abcdef0123456789abcdef",
                "alpine@sha256:0123456789abcdef0123456789abcdef",
                "a@sha512:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "-a",
                "a//b",
                "a:b:c/d",
                "a:.x",
                "a/b:-x",
                "x:5000",
                "-reg.io/x",
                "reg-.io/x",
                "a.b:0/x",
            ];
            for case in exact {
                assert_eq!(
                    pattern.is_match(case),
                    parse_image(case).is_ok(),
                    "{case:?}"
                );
            }
            // Narrower: ports the validator also reads (leading zeros) are left out.
            assert!(parse_image("reg:05000/x").is_ok() && !pattern.is_match("reg:05000/x"));
            let long = format!("a:{}", "t".repeat(128));
            assert!(pattern.is_match(&long) && parse_image(&long).is_ok());
            let too_long = format!("a:{}", "t".repeat(129));
            assert!(!pattern.is_match(&too_long) && parse_image(&too_long).is_err());
        }

        #[test]
        fn reserved_container_paths() {
            let reserved = re(RESERVED_CONTAINER_PATH);
            for path in [
                "/var",
                "/var/",
                "//var/lib",
                "/var/lib/berth",
                "/var/lib/berth/x",
                "/proc",
                "/sys/",
                "/dev",
                "/data",
                "/var/log",
                "/variable",
                "/proc/x",
                "/devices",
                "/var/lib/berthx",
            ] {
                let refused = plan(json!({"mounts": [{"hostPath": "/x", "containerPath": path}]}))
                    .unwrap_err()
                    .message
                    .contains("containerPath");
                assert_eq!(reserved.is_match(path), refused, "{path}");
            }
        }

        #[test]
        fn names_networks_and_memory() {
            let env = re(ENV_NAME);
            for case in ["A_B", "_x", "a1", "1X", "", "a-b", "ü", "A B"] {
                assert_eq!(env.is_match(case), is_env_name(case), "{case:?}");
            }
            let network = re(NETWORK);
            for case in ["kind", "a_b.c-d", "0", "-x", "a b", "container:x", "ü"] {
                assert_eq!(network.is_match(case), is_network_name(case), "{case:?}");
            }
            let memory = re(MEMORY);
            for case in ["6Mi", "512Mi", "9999999Mi", "1Gi", "999999Gi"] {
                assert!(memory.is_match(case), "{case:?}");
                let q = Quantity::parse_field("m", case).unwrap();
                assert!(
                    q.bytes() >= MIN_MEMORY && i64::try_from(q.bytes()).is_ok(),
                    "{case:?}"
                );
            }
            for case in ["5Mi", "0Gi", "1Ki", "lots", "", "06Mi", "1.5Gi"] {
                assert!(!memory.is_match(case), "{case:?}");
            }
        }

        #[test]
        fn controls_and_provider_ids() {
            let no_control = re(NO_CONTROL);
            for case in [
                "plain",
                "tab\there",
                "nul\0",
                "del\u{7f}",
                "c1\u{85}",
                "ü",
                "",
            ] {
                assert_eq!(no_control.is_match(case), !has_control(case), "{case:?}");
            }
            let pattern = re(&provider_id_pattern());
            for case in [
                "docker:///worker-1",
                "docker:///w",
                "docker://worker-1",
                "docker:////worker-1",
                "docker:///",
                "docker:///a/b",
                "docker:///A",
                "w",
            ] {
                assert_eq!(
                    pattern.is_match(case),
                    decode_provider_id(case).is_ok(),
                    "{case:?}"
                );
            }
        }

        #[test]
        fn scope_tags() {
            for (tags, ok) in [
                (
                    json!({"kubernetes.io/cluster/c": "1", "kubernetes.io/role/r": ""}),
                    true,
                ),
                (
                    json!({"kubernetes.io/cluster/": "1", "kubernetes.io/role/r": "1"}),
                    false,
                ),
                (
                    json!({"kubernetes.io/cluster/c\n": "1", "kubernetes.io/role/r": "1"}),
                    false,
                ),
                (
                    json!({"kubernetes.io/cluster/ü": "1", "kubernetes.io/role/r": "1", "x": "y"}),
                    false,
                ),
                (
                    json!({"kubernetes.io/cluster/c.d-1": "1", "kubernetes.io/role/r-2": "1", "x": "y"}),
                    true,
                ),
                (json!({"kubernetes.io/role/r": "1"}), false),
            ] {
                let spec = ProviderSpec::decode(&json!({"tags": tags})).unwrap();
                assert_eq!(spec.scope().is_ok(), ok, "{tags}");
            }
            let mut tags = serde_json::Map::new();
            let longest = [
                "a".repeat(63),
                "b".repeat(63),
                "c".repeat(63),
                "d".repeat(61),
            ]
            .join(".");
            assert_eq!(longest.len(), 253);
            tags.insert(format!("kubernetes.io/cluster/{longest}"), json!("1"));
            tags.insert("kubernetes.io/role/r".into(), json!("1"));
            let spec = ProviderSpec::decode(&json!({"tags": tags})).unwrap();
            assert!(spec.scope().is_ok());
        }
    }
}
