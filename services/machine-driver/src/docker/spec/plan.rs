//! The plan: everything CreateMachine needs, checked, and the Engine's create request made from
//! it.
//!
//! [`ProviderSpec::plan`] runs every rule ([`super::rules`]) and allowance
//! ([`super::allowances`]) in the order the answer lists them, and only a spec that passes them
//! all becomes a [`Plan`]. Apart so the path from a checked spec to the container's settings
//! (labels, limits, capabilities, restart policy) reads in one place, and nothing unchecked can
//! reach the Engine.

use std::collections::{BTreeMap, HashMap};

use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountType, RestartPolicy, RestartPolicyNameEnum,
};
use domain::Status;

use super::decode::{Bootstrap, MountSpec, ProviderSpec};
use super::rules::{ImageRef, parse_image};
use super::scope::Scope;
use super::{CAPABILITIES, LABEL_RECORDS, SECURITY_OPTIONS, SPEC};
use crate::docker::settings::{EngineSite, Settings};
use crate::provider::Violations;

/// Whether a missing image may be pulled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pull {
    /// Never: a missing image is FailedPrecondition.
    Never,
    /// Pull when the Engine does not have it.
    IfNotPresent,
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

impl ProviderSpec {
    /// Every rule, for CreateMachine. An Engine on [`EngineSite::ThisHost`] has its mount paths
    /// also checked with their symbolic links followed.
    pub fn plan(&self, settings: &Settings, engine: EngineSite) -> Result<Plan, Status> {
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
        let pull = self.check_pull(settings, image.as_ref(), &mut v);
        self.check_process(&mut v);
        self.check_labels(&mut v);
        let network = self.check_network(settings, &mut v);
        // Limits: what the class asks for, or the operator's ceiling when it asks for none; asking
        // above the ceiling is refused (a class may lower a limit, never raise it).
        let nano_cpus = self.check_cpus(settings, &mut v);
        let memory = self.check_memory(settings, &mut v);
        let pids = self.check_pids(settings, &mut v);
        self.check_privileged(settings, &mut v);
        let mounts = self.check_mounts(settings, engine, &mut v);
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
