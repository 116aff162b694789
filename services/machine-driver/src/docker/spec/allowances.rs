//! What the operator lets a class have: the registries it may pull from, the networks it may
//! join, the ceilings on CPUs, memory and processes, privileges, and host directories. A request
//! asking for more is a 412 naming the setting.
//!
//! Apart because these depend on the driver's [`Settings`], not on the spec alone: each check
//! here takes them, and a limit the class leaves out is the operator's ceiling. A field's grammar
//! is still checked here where it cannot be told from its allowance (a network's name, a mount's
//! paths), so each field is read in one place.

use domain::Quantity;
use domain::orchestrator::normalize_base_path;

use super::decode::{MountSpec, ProviderSpec};
use super::plan::Pull;
use super::rules::ImageRef;
use super::{SPEC, STATE_DIR};
use crate::docker::settings::{
    DEFAULT_NETWORK, EngineSite, HostPathRefusal, MAX_PIDS, MIN_MEMORY, MIN_PIDS, Settings,
    cpus_text, is_network_name, is_within, nano_cpus,
};
use crate::env_vars::{
    DOCKER_ALLOW_PRIVILEGED, DOCKER_CPUS, DOCKER_MEMORY, DOCKER_NETWORKS, DOCKER_PIDS,
    DOCKER_REGISTRIES,
};
use crate::provider::Violations;

/// Container paths the Engine mounts itself; a mount there fails only when the container starts.
const ENGINE_PATHS: [&str; 3] = ["/proc", "/sys", "/dev"];

/// The longest `memory` text, in characters.
const MAX_MEMORY_CHARS: usize = 32;
/// The longest mount path, in characters.
const MAX_PATH_CHARS: usize = 4096;

impl ProviderSpec {
    /// `pull`, and whether the operator allows pulling from the image's registry.
    pub(super) fn check_pull(
        &self,
        settings: &Settings,
        image: Option<&ImageRef>,
        v: &mut Violations,
    ) -> Pull {
        let pull = match self.pull.as_str() {
            "" | "Never" => Pull::Never,
            "IfNotPresent" => Pull::IfNotPresent,
            _ => {
                v.add("pull", "must be Never or IfNotPresent");
                Pull::Never
            }
        };
        if let (Pull::IfNotPresent, Some(image)) = (pull, image)
            && !settings.may_pull_from(&image.registry)
        {
            v.not_allowed(
                "pull",
                format!(
                    "IfNotPresent would pull from registry {:?}, which the operator does not allow ({DOCKER_REGISTRIES})",
                    image.registry
                ),
            );
        }
        pull
    }

    /// `network`: a Docker network's name, and one the operator lets machines join.
    pub(super) fn check_network(&self, settings: &Settings, v: &mut Violations) -> Option<String> {
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
                    "{joined:?} is not a network the operator allows machines to join ({DOCKER_NETWORKS}: {})",
                    settings.networks.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            );
        }
        network
    }

    /// `cpus`, in billionths of a CPU.
    pub(super) fn check_cpus(&self, settings: &Settings, v: &mut Violations) -> i64 {
        match self.cpus {
            None => settings.nano_cpus,
            Some(c) => match nano_cpus(c) {
                Some(n) if n > settings.nano_cpus => {
                    v.not_allowed(
                        "cpus",
                        format!(
                            "must be at most {}, the operator's ceiling ({DOCKER_CPUS})",
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
        }
    }

    /// `memory`, in bytes.
    pub(super) fn check_memory(&self, settings: &Settings, v: &mut Violations) -> i64 {
        let memory_ceiling = i64::try_from(settings.memory).unwrap_or(i64::MAX);
        match &self.memory {
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
                            "must be at most {}, the operator's ceiling ({DOCKER_MEMORY})",
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
        }
    }

    /// `pids`: the most processes.
    pub(super) fn check_pids(&self, settings: &Settings, v: &mut Violations) -> i64 {
        match self.pids {
            None => settings.pids,
            Some(p) if !(MIN_PIDS..=MAX_PIDS).contains(&p) => {
                v.add("pids", format!("must be between {MIN_PIDS} and {MAX_PIDS}"));
                settings.pids
            }
            Some(p) if p > settings.pids => {
                v.not_allowed(
                    "pids",
                    format!(
                        "must be at most {}, the operator's ceiling ({DOCKER_PIDS})",
                        settings.pids
                    ),
                );
                settings.pids
            }
            Some(p) => p,
        }
    }

    /// `privileged`, which only the operator can allow.
    pub(super) fn check_privileged(&self, settings: &Settings, v: &mut Violations) {
        if self.privileged && !settings.allow_privileged {
            v.not_allowed(
                "privileged",
                format!(
                    "privileged containers are not allowed by the operator ({DOCKER_ALLOW_PRIVILEGED})"
                ),
            );
        }
    }

    /// `mounts`: each host path inside a root the operator allows, each container path one
    /// the driver and the Engine leave free, and no writable mount around another.
    pub(super) fn check_mounts(
        &self,
        settings: &Settings,
        engine: EngineSite,
        v: &mut Violations,
    ) -> Vec<MountSpec> {
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
            let host = match settings.admit_host_path(&m.host_path, engine) {
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
                if !m.read_only && engine == EngineSite::Elsewhere {
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
        mounts
    }
}
