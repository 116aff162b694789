//! The Docker provider spec (`MachineClass.providerSpec` with `provider: Docker`), its validation,
//! and the names the driver gives containers, labels and files.
//!
//! Unlike the Alicloud spec (MCM's Go type, whose decoder ignores unknown fields), this spec is
//! Berth's own, so an unknown field is refused: a misspelt `privilegd: true` or `mount:` must not
//! silently create a different machine than the one asked for.
//!
//! A spec flows one way: decoded ([`ProviderSpec::decode`]), scoped (its tags say which containers
//! the class may see), and, for CreateMachine only, planned: every rule and allowance checked, one
//! answer naming every field that broke one, and the [`Plan`] turned into the Engine's create
//! request.
//!
//! # Layout
//! - this file: the names the driver gives containers, labels, files, records and provider ids,
//!   which the provider and the spec share.
//! - `decode`: [`ProviderSpec`] as a class writes it, and what every call checks in it (bootstrap,
//!   grace period).
//! - `scope`: [`Scope`], the cluster and role from the tags, and the labels that confine lookups.
//! - `rules`: what a field must be on any driver (bounds, grammar, the image reference): 400s.
//! - `allowances`: what this operator lets a class have (registries, networks, ceilings,
//!   privileges, host directories): 412s.
//! - `plan`: [`Plan`], the checked spec, and the container create request made from it.
//! - `request`: the machine's name, UID and providerID, and the secret's user data.
//! - [`schema`]: the same rules as JSON Schema, for the HTTP API's document.

mod allowances;
mod decode;
mod plan;
mod request;
mod rules;
pub mod schema;
mod scope;

use std::collections::HashMap;

pub use decode::{Bootstrap, DEFAULT_STOP_GRACE, MountSpec, ProviderSpec};
pub use plan::{Plan, Pull};
pub use request::{
    MAX_USER_DATA, check_class_name, check_names, check_provider_id, container_name,
    decode_provider_id, machine_name, machine_uid, provider_id, user_data,
};
pub use rules::{ImageRef, ImageRefError, is_volume_name, parse_image};
pub use scope::{CLUSTER_TAG, ROLE_TAG, Scope};

/// Where the spec sits in a request body; every field error starts with it.
pub const SPEC: &str = "machineClass.providerSpec";

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

#[cfg(test)]
mod tests;
