//! The spec as a class writes it, decoded, and the three things every call checks in it.
//!
//! Every driver call decodes the whole spec (an unknown field is refused) and reads its bootstrap
//! mode and grace period, even calls that create nothing; only CreateMachine goes on to the rest
//! ([`ProviderSpec::plan`]). Keeping the decoded shape apart from the rules that plan a container
//! keeps that split visible: what is here is what a status or delete call depends on.

use std::collections::BTreeMap;

use domain::Status;
use serde::Deserialize;

use super::SPEC;

/// The longest grace period a deletion gives a container to stop.
pub(super) const MAX_STOP_GRACE: u32 = 300;
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

impl ProviderSpec {
    /// Decodes the raw spec; a field of the wrong type is an InvalidArgument naming it and what was
    /// expected, never the value.
    pub fn decode(raw: &serde_json::Value) -> Result<Self, Status> {
        crate::provider::decode_spec(raw, SPEC, "the Docker provider spec (image, tags, ...)")
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
}
