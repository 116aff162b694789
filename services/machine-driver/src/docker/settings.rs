//! What the operator allows the Docker provider: which Engines, host directories, registries and
//! privileges a machine class may ask for.
//!
//! A machine class is written by callers, so everything in it that reaches outside the container (an
//! Engine address, a host directory, a registry to pull from, privileged mode) is checked against
//! these settings. The defaults allow only what is safe on a shared host: the local Engine, no host
//! directories, pulls from Docker Hub only when a class asks for them, no privileged containers.

use std::collections::BTreeSet;
use std::path::Path;

use domain::orchestrator::{DEFAULT_DOCKER_HOST, normalize_base_path, validate_docker_host};
use domain::{Code, Status};
use service_kit::Env;
use service_kit::config::{ConfigError, UnusableDockerHost};

use crate::env_vars::{
    DOCKER_ALLOW_PRIVILEGED, DOCKER_CPUS, DOCKER_ENDPOINTS, DOCKER_HOST, DOCKER_INSTANCE,
    DOCKER_MEMORY, DOCKER_MOUNT_PATHS, DOCKER_NETWORKS, DOCKER_PIDS, DOCKER_REGISTRIES,
};

/// The default memory ceiling.
pub const DEFAULT_MEMORY: u64 = 512 * 1024 * 1024;
/// The default CPU ceiling, in billionths of a CPU.
pub const DEFAULT_NANO_CPUS: i64 = 1_000_000_000;
/// The default pids ceiling.
pub const DEFAULT_PIDS: i64 = 256;
/// The Engine's default network: where a container goes when it names none.
pub const DEFAULT_NETWORK: &str = "bridge";
/// The fewest processes a machine may be limited to: its init, the bootstrap and what that starts.
pub const MIN_PIDS: i64 = 8;
/// The Engine refuses containers with less memory than this.
pub const MIN_MEMORY: u64 = 6 * 1024 * 1024;
/// The largest CPU count accepted anywhere (a ceiling or a class's ask).
pub const MAX_CPUS: f64 = 1024.0;
/// The largest pids limit accepted anywhere.
pub const MAX_PIDS: i64 = 4_194_304;

/// The registry of an image reference without one.
pub const DOCKER_HUB: &str = "docker.io";

/// Where the Engine that would mount a host path runs, which decides how much of the path can be
/// checked: on this host (a `unix://` socket) the path itself is looked at, its symbolic links
/// followed; an Engine elsewhere sees another file system, so only the path's text is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineSite {
    /// The Engine runs on this host.
    ThisHost,
    /// The Engine runs on another host.
    Elsewhere,
}

impl EngineSite {
    /// Where the Engine at `address` runs.
    pub fn of(address: &str) -> EngineSite {
        if address.starts_with("unix://") {
            EngineSite::ThisHost
        } else {
            EngineSite::Elsewhere
        }
    }
}

/// The rule a mount's host path broke ([`Settings::admit_host_path`]); its text completes a
/// sentence that starts with the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostPathRefusal {
    /// Not an absolute, normalisable path (the domain's words).
    #[error("{0}")]
    NotAPath(String),
    /// The operator allows no mounts.
    #[error("no host directory may be mounted: the operator allows them with {DOCKER_MOUNT_PATHS}")]
    NoneAllowed,
    /// Outside every allowed root.
    #[error("{0:?} is outside the host directories {DOCKER_MOUNT_PATHS} allows")]
    Outside(String),
    /// Inside a root by its text, but a component below the root is a symbolic link (which may lead
    /// anywhere now, or later).
    #[error(
        "{0:?} leads through a symbolic link below the host directories {DOCKER_MOUNT_PATHS} allows: a mount must not pass through one"
    )]
    LinksOutside(String),
    /// It no longer exists (the Engine would make it, or refuse).
    #[error("{0:?} does not exist on the Engine's host")]
    Missing(String),
    /// Inside an allowed root, but not in the machine's namespace's directory under it.
    #[error(
        "{path:?} is outside namespace {namespace}'s host directories: a machine mounts only from <root>/{namespace} under each of the roots {DOCKER_MOUNT_PATHS} allows"
    )]
    OtherNamespace {
        /// The host path.
        path: String,
        /// The machine's namespace.
        namespace: String,
    },
}

/// The Docker provider's operator settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The Engine used when a class's secret names none (`DOCKER_HOST`, else the local socket), or
    /// why `DOCKER_HOST` cannot be used. That is not fatal: the variable is usually set for the
    /// Docker CLI (an `ssh://` Engine, say), and the driver's other providers must still start.
    pub default_host: Result<String, UnusableDockerHost>,
    /// Engine addresses a secret may name besides [`Settings::default_host`].
    pub allowed_hosts: BTreeSet<String>,
    /// Host directories mounts may come from, normalised (`/a/b`, no trailing slash).
    pub mount_roots: Vec<String>,
    /// Whether privileged containers are allowed.
    pub allow_privileged: bool,
    /// Registries a pull may use.
    pub pull_registries: BTreeSet<String>,
    /// The most memory a machine may have, in bytes (and its limit when its class names none).
    pub memory: u64,
    /// The most CPU a machine may have, in billionths of a CPU (and its limit when its class names
    /// none).
    pub nano_cpus: i64,
    /// The most processes a machine may run (and its limit when its class names none).
    pub pids: i64,
    /// The Docker networks a class may name (a class naming none joins [`DEFAULT_NETWORK`], which
    /// must be here too).
    pub networks: BTreeSet<String>,
    /// The stack the machines belong to ([`DOCKER_INSTANCE`]), if any.
    pub instance: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            default_host: Ok(DEFAULT_DOCKER_HOST.to_owned()),
            allowed_hosts: BTreeSet::from([DEFAULT_DOCKER_HOST.to_owned()]),
            mount_roots: Vec::new(),
            allow_privileged: false,
            pull_registries: BTreeSet::from([DOCKER_HUB.to_owned()]),
            memory: DEFAULT_MEMORY,
            nano_cpus: DEFAULT_NANO_CPUS,
            pids: DEFAULT_PIDS,
            networks: BTreeSet::from([DEFAULT_NETWORK.to_owned()]),
            instance: None,
        }
    }
}

/// The comma-separated entries of a variable, trimmed, empty ones dropped.
fn entries<'e>(env: &'e Env, var: &str) -> Option<Vec<&'e str>> {
    env.get(var).map(|v| {
        v.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect()
    })
}

fn config_error(env: &Env, var: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        var: var.to_owned(),
        value: env.get(var).unwrap_or_default().to_owned(),
        problem: problem.into(),
    }
}

/// A registry host as an allow-list holds it: lower case, Docker Hub's aliases folded into
/// [`DOCKER_HUB`].
pub fn canonical_registry(host: &str) -> String {
    let host = host.to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            DOCKER_HUB.to_owned()
        }
        _ => host,
    }
}

/// Whether `text` is a registry host: `name[:port]`, the name made of letters, digits, `.` and `-`.
pub fn is_registry_host(text: &str) -> bool {
    let (host, port) = match text.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (text, None),
    };
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|part| {
            !part.is_empty()
                && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
        && port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0))
}

impl Settings {
    /// Reads the settings from `DOCKER_HOST` and the `BERTH_DOCKER_*` variables.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let mut s = Settings::default();
        if let Some(host) = env.get(DOCKER_HOST) {
            s.default_host = validate_docker_host(DOCKER_HOST, host).map_err(|_| {
                UnusableDockerHost::new(format!(
                    "{DOCKER_HOST} is not an Engine address the machine driver can use (unix:///path or tcp://host:port)"
                ))
            });
        }
        if let Some(hosts) = entries(env, DOCKER_ENDPOINTS) {
            s.allowed_hosts = hosts
                .into_iter()
                .map(|h| {
                    validate_docker_host(DOCKER_ENDPOINTS, h).map_err(|e| {
                        config_error(env, DOCKER_ENDPOINTS, format!("an entry {}", e.message))
                    })
                })
                .collect::<Result<_, _>>()?;
        }
        if let Some(roots) = entries(env, DOCKER_MOUNT_PATHS) {
            s.mount_roots = roots
                .into_iter()
                .map(|r| {
                    normalize_base_path(DOCKER_MOUNT_PATHS, r).map_err(|e| {
                        config_error(env, DOCKER_MOUNT_PATHS, format!("an entry {}", e.message))
                    })
                })
                .collect::<Result<_, _>>()?;
            // Roots that nest would give one directory two namespace layouts: `<outer>/team-a/x`
            // is also `<inner>/x` when the inner root is `<outer>/team-a`, so namespace x's
            // machines could write where team-a's read (a break-it finding).
            for (i, a) in s.mount_roots.iter().enumerate() {
                for b in &s.mount_roots[i + 1..] {
                    if is_within(a, b) || is_within(b, a) {
                        return Err(config_error(
                            env,
                            DOCKER_MOUNT_PATHS,
                            format!(
                                "entries {a:?} and {b:?} nest: each root holds one directory per namespace, so roots must lie apart"
                            ),
                        ));
                    }
                }
            }
        }
        if let Some(v) = env.get(DOCKER_ALLOW_PRIVILEGED) {
            s.allow_privileged = match v.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => true,
                "false" | "0" | "no" => false,
                _ => {
                    return Err(config_error(
                        env,
                        DOCKER_ALLOW_PRIVILEGED,
                        "must be true or false",
                    ));
                }
            };
        }
        if let Some(registries) = entries(env, DOCKER_REGISTRIES) {
            s.pull_registries = registries
                .into_iter()
                .map(|r| {
                    if is_registry_host(r) {
                        Ok(canonical_registry(r))
                    } else {
                        Err(config_error(
                            env,
                            DOCKER_REGISTRIES,
                            "an entry is not a registry host (name or name:port)",
                        ))
                    }
                })
                .collect::<Result<_, _>>()?;
        }
        if let Some(v) = env.get(DOCKER_MEMORY) {
            s.memory = domain::Quantity::parse_field(DOCKER_MEMORY, v)
                .ok()
                .map(domain::Quantity::bytes)
                .filter(|b| *b >= MIN_MEMORY && i64::try_from(*b).is_ok())
                .ok_or_else(|| {
                    config_error(
                        env,
                        DOCKER_MEMORY,
                        "must be a quantity of at least 6Mi, like 512Mi",
                    )
                })?;
        }
        if let Some(v) = env.get(DOCKER_CPUS) {
            s.nano_cpus = v
                .trim()
                .parse::<f64>()
                .ok()
                .and_then(nano_cpus)
                .ok_or_else(|| {
                    config_error(
                        env,
                        DOCKER_CPUS,
                        "must be a number of CPUs between 0.01 and 1024",
                    )
                })?;
        }
        if let Some(v) = env.get(DOCKER_PIDS) {
            s.pids = v
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|p| (MIN_PIDS..=MAX_PIDS).contains(p))
                .ok_or_else(|| {
                    config_error(
                        env,
                        DOCKER_PIDS,
                        format!("must be a whole number between {MIN_PIDS} and {MAX_PIDS}"),
                    )
                })?;
        }
        if let Some(networks) = entries(env, DOCKER_NETWORKS) {
            s.networks = networks
                .into_iter()
                .map(|n| {
                    if is_network_name(n) && n != "host" {
                        Ok(n.to_owned())
                    } else {
                        Err(config_error(
                            env,
                            DOCKER_NETWORKS,
                            "an entry is not a Docker network name (letters, digits, '_', '.', '-'; not host)",
                        ))
                    }
                })
                .collect::<Result<_, _>>()?;
        }
        if let Some(instance) = env.get(DOCKER_INSTANCE) {
            domain::names::validate_dns1123_label(DOCKER_INSTANCE, instance).map_err(|e| {
                // The error names the setting already: say the rule once.
                let rule = e
                    .message
                    .trim_start_matches(DOCKER_INSTANCE)
                    .trim_start_matches(": ");
                config_error(env, DOCKER_INSTANCE, rule.to_owned())
            })?;
            s.instance = Some(instance.to_owned());
        }
        Ok(s)
    }

    /// The Engine a request goes to: `secret.data[dockerHost]` when set, else the default. A named
    /// Engine must be well-formed and allowed; the value is never echoed (it comes from a secret).
    pub fn engine_for(&self, named: Option<&str>) -> Result<String, Status> {
        const FIELD: &str = "secret.data[dockerHost]";
        let Some(text) = named.filter(|t| !t.is_empty()) else {
            return self.default_host.clone().map_err(|why| {
                Status::new(
                    Code::FailedPrecondition,
                    format!("{why}; the operator must fix it, or the class's secret name an allowed Engine in {FIELD}"),
                )
            });
        };
        let host = validate_docker_host(FIELD, text).map_err(|_| {
            Status::invalid(
                FIELD,
                "must be unix:///absolute/socket/path or tcp://host:port",
            )
        })?;
        if self.default_host.as_ref() == Ok(&host) || self.allowed_hosts.contains(&host) {
            Ok(host)
        } else {
            // Well-formed, but this driver's operator does not allow it: a precondition on where
            // the request was sent, not a malformed request.
            Err(Status::new(
                Code::FailedPrecondition,
                format!(
                    "{FIELD}: names a Docker Engine this driver may not use; the operator allows Engine addresses with {DOCKER_ENDPOINTS}"
                ),
            ))
        }
    }

    /// Checks a mount's host path: normalised, inside one of the allowed roots, and, where the path
    /// can be seen from here (an Engine on [`EngineSite::ThisHost`]), still inside one once
    /// symbolic links are followed, so a link planted under an allowed root cannot reach out of it.
    /// `Err` is the rule that failed, for the caller to prefix with the field.
    pub fn admit_host_path(
        &self,
        text: &str,
        engine: EngineSite,
    ) -> Result<String, HostPathRefusal> {
        let path = normalize_base_path("hostPath", text).map_err(|e| {
            HostPathRefusal::NotAPath(
                e.message
                    .strip_prefix("hostPath: ")
                    .unwrap_or(&e.message)
                    .to_owned(),
            )
        })?;
        if self.mount_roots.is_empty() {
            return Err(HostPathRefusal::NoneAllowed);
        }
        let inside = |p: &str, roots: &[String]| roots.iter().any(|r| is_within(p, r));
        if !inside(&path, &self.mount_roots) {
            return Err(HostPathRefusal::Outside(path));
        }
        if engine == EngineSite::ThisHost && std::fs::symlink_metadata(&path).is_ok() {
            self.no_links_below_root(&path)?;
        }
        Ok(path)
    }

    /// Checks that an admitted host path (see [`Settings::admit_host_path`]) lies in `namespace`'s
    /// own directory under its root, `<root>/<namespace>`: so no namespace's machine can mount
    /// another's data, and the checks between one machine's mounts and another's (a writable mount
    /// holding another's source) only ever meet machines of the same namespace, whose refusals then
    /// tell nothing of any other.
    pub fn confine_to_namespace(&self, path: &str, namespace: &str) -> Result<(), HostPathRefusal> {
        let own = self
            .mount_roots
            .iter()
            .any(|root| is_within(path, &format!("{}/{namespace}", root.trim_end_matches('/'))));
        if own {
            Ok(())
        } else {
            Err(HostPathRefusal::OtherNamespace {
                path: path.to_owned(),
                namespace: namespace.to_owned(),
            })
        }
    }

    /// Checks, again, a mount source the driver gave a container, before the container is started:
    /// between two starts the machine (or another one with a writable mount above it) may have
    /// replaced a directory on the way with a symbolic link, which the Engine would follow. Inside
    /// an allowed root by its text, and, when the Engine is on [`EngineSite::ThisHost`],
    /// existing and without a symbolic link anywhere below the root.
    pub fn recheck_mount(&self, source: &str, engine: EngineSite) -> Result<(), HostPathRefusal> {
        let path = self.admit_host_path(source, EngineSite::Elsewhere)?;
        if engine == EngineSite::ThisHost {
            if std::fs::symlink_metadata(&path).is_err() {
                return Err(HostPathRefusal::Missing(path));
            }
            self.no_links_below_root(&path)?;
        }
        Ok(())
    }

    /// `path` (normalised, inside a root by its text) resolves to exactly the root's real location
    /// followed by the rest of its text: no component below the root is a symbolic link (links above
    /// it, the operator's, are fine).
    fn no_links_below_root(&self, path: &str) -> Result<(), HostPathRefusal> {
        let links = || HostPathRefusal::LinksOutside(path.to_owned());
        let real = std::fs::canonicalize(Path::new(path)).map_err(|_| links())?;
        let ok = self
            .mount_roots
            .iter()
            .filter(|r| is_within(path, r))
            .any(|root| {
                let rest = path[root.len()..].trim_start_matches('/');
                std::fs::canonicalize(root).is_ok_and(|real_root| {
                    let expected = if rest.is_empty() {
                        real_root
                    } else {
                        real_root.join(rest)
                    };
                    expected == real
                })
            });
        if ok { Ok(()) } else { Err(links()) }
    }

    /// Whether a pull may use `registry`.
    pub fn may_pull_from(&self, registry: &str) -> bool {
        self.pull_registries.contains(&canonical_registry(registry))
    }
}

/// A CPU count as billionths of a CPU, if it is between 0.01 and [`MAX_CPUS`].
pub fn nano_cpus(cpus: f64) -> Option<i64> {
    (cpus.is_finite() && (0.01..=MAX_CPUS).contains(&cpus)).then(|| (cpus * 1e9).round() as i64)
}

/// A CPU count in billionths, as a person writes it (`1`, `0.5`).
pub fn cpus_text(nano: i64) -> String {
    let text = format!("{:.9}", nano as f64 / 1e9);
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Whether `name` is a Docker network name (`[a-zA-Z0-9][a-zA-Z0-9_.-]*`, at most 128 characters).
pub fn is_network_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Whether normalised path `p` is `root` or below it (whole components only: `/srv/a` is not inside
/// `/srv/ab`).
pub fn is_within(p: &str, root: &str) -> bool {
    p == root
        || p.strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/') || root == "/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_allow_the_local_engine_and_nothing_else() {
        let s = Settings::from_env(&Env::default()).unwrap();
        assert_eq!(s, Settings::default());
        assert_eq!(s.engine_for(None).unwrap(), DEFAULT_DOCKER_HOST);
        assert_eq!(
            s.engine_for(Some("unix:///var/run/./docker.sock")).unwrap(),
            DEFAULT_DOCKER_HOST
        );
        let e = s.engine_for(Some("tcp://10.1.2.3:2375")).unwrap_err();
        assert_eq!(e.code, Code::FailedPrecondition);
        assert_eq!(
            e.message,
            "secret.data[dockerHost]: names a Docker Engine this driver may not use; the operator allows Engine addresses with BERTH_DOCKER_ENDPOINTS"
        );
        let e = s.engine_for(Some("http://10.1.2.3:2375/x")).unwrap_err();
        assert!(!e.message.contains("10.1.2.3"), "{e}");
        assert!(s.admit_host_path("/srv", EngineSite::Elsewhere).is_err());
        assert!(!s.allow_privileged);
        assert!(s.may_pull_from("index.docker.io"));
        assert!(!s.may_pull_from("ghcr.io"));
    }

    #[test]
    fn variables_set_the_allow_lists() {
        let env = Env::default()
            .with(DOCKER_HOST, "tcp://engine:2375")
            .with(DOCKER_ENDPOINTS, " unix:///run/docker.sock, tcp://b:2376 ,")
            .with(DOCKER_MOUNT_PATHS, "/srv/berth/, /data")
            .with(DOCKER_ALLOW_PRIVILEGED, "TRUE")
            .with(DOCKER_REGISTRIES, "ghcr.io,localhost:5000");
        let s = Settings::from_env(&env).unwrap();
        assert_eq!(s.default_host.as_deref(), Ok("tcp://engine:2375"));
        assert_eq!(s.engine_for(None).unwrap(), "tcp://engine:2375");
        assert_eq!(s.engine_for(Some("tcp://b:2376")).unwrap(), "tcp://b:2376");
        assert!(s.engine_for(Some(DEFAULT_DOCKER_HOST)).is_err());
        assert_eq!(s.mount_roots, ["/srv/berth", "/data"]);
        // Roots that nest are refused: each holds one directory per namespace.
        for nested in ["/srv/berth,/srv/berth/team-a", "/data/x,/data", "/a,/a/"] {
            let e =
                Settings::from_env(&Env::default().with(DOCKER_MOUNT_PATHS, nested)).unwrap_err();
            assert!(e.to_string().contains("nest"), "{nested}: {e}");
        }
        assert!(s.allow_privileged);
        assert!(s.may_pull_from("localhost:5000"));
        assert!(!s.may_pull_from("docker.io"));
        for (var, value) in [
            (DOCKER_ENDPOINTS, "tcp://ok:1,nope"),
            (DOCKER_MOUNT_PATHS, "relative/dir"),
            (DOCKER_MOUNT_PATHS, "/"),
            (DOCKER_ALLOW_PRIVILEGED, "maybe"),
            (DOCKER_REGISTRIES, "bad/registry"),
        ] {
            let e = Settings::from_env(&Env::default().with(var, value)).unwrap_err();
            assert_eq!(e.var, var, "{value}");
        }
    }

    #[test]
    fn an_unusable_docker_host_fails_docker_calls_not_the_start() {
        let env = Env::default().with(DOCKER_HOST, "ssh://me@build-box");
        let s = Settings::from_env(&env).unwrap();
        let e = s.engine_for(None).unwrap_err();
        assert_eq!(e.code, Code::FailedPrecondition);
        assert!(
            e.message
                .starts_with("DOCKER_HOST is not an Engine address"),
            "{e}"
        );
        assert!(!e.message.contains("build-box"), "{e}");
        // An Engine the secret names (and the operator allows) still works.
        assert_eq!(
            s.engine_for(Some(DEFAULT_DOCKER_HOST)).unwrap(),
            DEFAULT_DOCKER_HOST
        );
    }

    #[test]
    fn host_paths_stay_inside_the_allowed_roots() {
        let dir = std::env::temp_dir().join(format!("berth-mounts-{}", std::process::id()));
        let root = dir.join("allowed");
        std::fs::create_dir_all(root.join("data")).unwrap();
        let link = root.join("escape");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/etc", &link).unwrap();
        let s = Settings {
            mount_roots: vec![root.display().to_string()],
            ..Settings::default()
        };
        let r = root.display().to_string();
        assert_eq!(
            s.admit_host_path(&format!("{r}/./data/"), EngineSite::ThisHost)
                .unwrap(),
            format!("{r}/data")
        );
        assert_eq!(s.admit_host_path(&r, EngineSite::ThisHost).unwrap(), r);
        let e = s
            .admit_host_path(&format!("{r}/../secret"), EngineSite::ThisHost)
            .unwrap_err();
        assert!(matches!(e, HostPathRefusal::NotAPath(_)), "{e}");
        assert!(e.to_string().contains(".."), "{e}");
        let e = s.admit_host_path("/etc", EngineSite::ThisHost).unwrap_err();
        assert_eq!(e, HostPathRefusal::Outside("/etc".into()));
        assert!(
            e.to_string()
                .contains("outside the host directories BERTH_DOCKER_MOUNT_PATHS allows"),
            "{e}"
        );
        assert!(
            s.admit_host_path(&format!("{r}-sibling"), EngineSite::ThisHost)
                .is_err()
        );
        let e = s
            .admit_host_path(&format!("{r}/escape"), EngineSite::ThisHost)
            .unwrap_err();
        assert!(matches!(e, HostPathRefusal::LinksOutside(_)), "{e}");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        // A link that stays inside the root is refused too: what it points at can change.
        let inner = root.join("inner");
        let _ = std::fs::remove_file(&inner);
        std::os::unix::fs::symlink(root.join("data"), &inner).unwrap();
        let e = s
            .admit_host_path(&format!("{r}/inner"), EngineSite::ThisHost)
            .unwrap_err();
        assert!(matches!(e, HostPathRefusal::LinksOutside(_)), "{e}");
        // At a restart: the same rules, and the path must still exist.
        s.recheck_mount(&format!("{r}/data"), EngineSite::ThisHost)
            .unwrap();
        assert!(matches!(
            s.recheck_mount(&format!("{r}/escape/passwd"), EngineSite::ThisHost),
            Err(HostPathRefusal::LinksOutside(_))
        ));
        assert!(matches!(
            s.recheck_mount(&format!("{r}/gone"), EngineSite::ThisHost),
            Err(HostPathRefusal::Missing(_))
        ));
        assert!(s.recheck_mount("/etc", EngineSite::ThisHost).is_err());
        assert!(
            s.recheck_mount(&format!("{r}/gone"), EngineSite::Elsewhere)
                .is_ok()
        );
        // Without a local view of the Engine's host, the lexical rule is all there is.
        assert!(
            s.admit_host_path(&format!("{r}/escape"), EngineSite::Elsewhere)
                .is_ok()
        );
        assert!(
            s.admit_host_path("relative", EngineSite::Elsewhere)
                .is_err()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn registry_hosts_have_a_grammar() {
        for ok in [
            "docker.io",
            "localhost:5000",
            "r-1.example.com",
            "10.0.0.1:443",
        ] {
            assert!(is_registry_host(ok), "{ok}");
        }
        for bad in ["", "a/b", "-x.io", "x.io:0", "x.io:port", "a..b", "a b"] {
            assert!(!is_registry_host(bad), "{bad}");
        }
        assert!(is_within("/a/b", "/a"));
        assert!(!is_within("/ab", "/a"));
    }
}
