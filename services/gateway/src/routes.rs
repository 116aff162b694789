//! Which upstream serves a path, which scope a call needs, and the route template it is counted under.
//!
//! Routing is by the first path segment after `/v1/` (DESIGN.md): `machines`, `volume-ids`, `providers`
//! → machine-driver; `orchestrators`, `kinds` → registry; `volumes`, `orphans` → storage-ops. Reads
//! need the `:read` scope of their family and writes the `:write` one; the driver's `:status`, `:list`
//! and `volume-ids` are POSTs that only read, so they need `machines:read`.

use std::fmt;

use axum::http::Method;

/// An upstream service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpstreamId {
    /// machine-driver.
    MachineDriver,
    /// orchestrator-registry.
    Registry,
    /// storage-ops.
    StorageOps,
}

impl UpstreamId {
    /// Every upstream.
    pub const ALL: [UpstreamId; 3] = [
        UpstreamId::MachineDriver,
        UpstreamId::Registry,
        UpstreamId::StorageOps,
    ];

    /// Its position in [`UpstreamId::ALL`], which is how per-upstream state is laid out.
    pub fn index(self) -> usize {
        match self {
            UpstreamId::MachineDriver => 0,
            UpstreamId::Registry => 1,
            UpstreamId::StorageOps => 2,
        }
    }

    /// The service's name.
    pub fn name(self) -> &'static str {
        match self {
            UpstreamId::MachineDriver => "machine-driver",
            UpstreamId::Registry => "orchestrator-registry",
            UpstreamId::StorageOps => "storage-ops",
        }
    }
}

/// A permission a token can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// Read machines (status, list, volume ids, providers).
    MachinesRead,
    /// Create, initialise, delete machines.
    MachinesWrite,
    /// Read volumes, stats, orphans.
    VolumesRead,
    /// Create and delete volumes.
    VolumesWrite,
    /// Read orchestrators, kinds, detection.
    OrchestratorsRead,
    /// Register and deregister orchestrators.
    OrchestratorsWrite,
    /// Everything.
    Admin,
}

impl Scope {
    /// Every scope.
    pub const ALL: [Scope; 7] = [
        Scope::MachinesRead,
        Scope::MachinesWrite,
        Scope::VolumesRead,
        Scope::VolumesWrite,
        Scope::OrchestratorsRead,
        Scope::OrchestratorsWrite,
        Scope::Admin,
    ];

    /// The scope's name as written in tokens files.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::MachinesRead => "machines:read",
            Scope::MachinesWrite => "machines:write",
            Scope::VolumesRead => "volumes:read",
            Scope::VolumesWrite => "volumes:write",
            Scope::OrchestratorsRead => "orchestrators:read",
            Scope::OrchestratorsWrite => "orchestrators:write",
            Scope::Admin => "admin",
        }
    }

    /// The scope with this name.
    pub fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a request goes and what it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteInfo {
    /// The upstream.
    pub upstream: UpstreamId,
    /// The scope required.
    pub scope: Scope,
    /// The route template, for metrics (never the raw path).
    pub template: &'static str,
}

fn is_read(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Classifies a request; `None` when no upstream serves the path.
pub fn classify(method: &Method, path: &str) -> Option<RouteInfo> {
    let rest = path.strip_prefix("/v1/")?;
    // Byte scans rather than `split`: this runs on every proxied call, and `/` and `:` are ASCII,
    // so the cuts fall on character boundaries.
    let bytes = rest.as_bytes();
    let first = &rest[..bytes.iter().position(|&b| b == b'/').unwrap_or(rest.len())];
    let (family, verb) = match first.as_bytes().iter().position(|&b| b == b':') {
        Some(at) => (&first[..at], Some(&first[at + 1..])),
        None => (first, None),
    };
    let depth = 1 + bytes.iter().filter(|&&b| b == b'/').count();
    let route = |upstream, scope, template| {
        Some(RouteInfo {
            upstream,
            scope,
            template,
        })
    };
    match family {
        "machines" => {
            let (scope, template) = match (verb, depth) {
                (Some("create"), 1) => (Scope::MachinesWrite, "/v1/machines:create"),
                (Some("initialize"), 1) => (Scope::MachinesWrite, "/v1/machines:initialize"),
                (Some("delete"), 1) => (Scope::MachinesWrite, "/v1/machines:delete"),
                (Some("status"), 1) => (Scope::MachinesRead, "/v1/machines:status"),
                (Some("list"), 1) => (Scope::MachinesRead, "/v1/machines:list"),
                _ if is_read(method) => (Scope::MachinesRead, "/v1/machines*"),
                _ => (Scope::MachinesWrite, "/v1/machines*"),
            };
            route(UpstreamId::MachineDriver, scope, template)
        }
        "volume-ids" => route(
            UpstreamId::MachineDriver,
            Scope::MachinesRead,
            "/v1/volume-ids",
        ),
        "providers" => route(
            UpstreamId::MachineDriver,
            Scope::MachinesRead,
            "/v1/providers",
        ),
        "orchestrators" | "kinds" => {
            let scope = if is_read(method) {
                Scope::OrchestratorsRead
            } else {
                Scope::OrchestratorsWrite
            };
            let template = match (family, verb, depth) {
                ("kinds", None, 1) => "/v1/kinds",
                ("orchestrators", None, 1) => "/v1/orchestrators",
                ("orchestrators", Some("detect"), 1) => "/v1/orchestrators:detect",
                ("orchestrators", Some("default"), 1) => "/v1/orchestrators:default",
                ("orchestrators", None, 2) => "/v1/orchestrators/{name}",
                _ => "/v1/orchestrators*",
            };
            route(UpstreamId::Registry, scope, template)
        }
        "volumes" | "orphans" => {
            let scope = if is_read(method) {
                Scope::VolumesRead
            } else {
                Scope::VolumesWrite
            };
            let stats = rest.ends_with("/stats");
            let template = match (family, depth) {
                ("orphans", 1) => "/v1/orphans",
                ("volumes", 1) => "/v1/volumes",
                ("volumes", 3) => "/v1/volumes/{namespace}/{name}",
                ("volumes", 4) if stats => "/v1/volumes/{namespace}/{name}/stats",
                _ => "/v1/volumes*",
            };
            route(UpstreamId::StorageOps, scope, template)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_go_to_the_designed_upstream_with_the_right_scope() {
        let cases = [
            (
                Method::POST,
                "/v1/machines:create",
                UpstreamId::MachineDriver,
                Scope::MachinesWrite,
            ),
            (
                Method::POST,
                "/v1/machines:status",
                UpstreamId::MachineDriver,
                Scope::MachinesRead,
            ),
            (
                Method::POST,
                "/v1/machines:list",
                UpstreamId::MachineDriver,
                Scope::MachinesRead,
            ),
            (
                Method::POST,
                "/v1/machines:delete",
                UpstreamId::MachineDriver,
                Scope::MachinesWrite,
            ),
            (
                Method::POST,
                "/v1/machines:initialize",
                UpstreamId::MachineDriver,
                Scope::MachinesWrite,
            ),
            (
                Method::POST,
                "/v1/volume-ids",
                UpstreamId::MachineDriver,
                Scope::MachinesRead,
            ),
            (
                Method::GET,
                "/v1/providers",
                UpstreamId::MachineDriver,
                Scope::MachinesRead,
            ),
            (
                Method::GET,
                "/v1/orchestrators",
                UpstreamId::Registry,
                Scope::OrchestratorsRead,
            ),
            (
                Method::PUT,
                "/v1/orchestrators/a",
                UpstreamId::Registry,
                Scope::OrchestratorsWrite,
            ),
            (
                Method::HEAD,
                "/v1/orchestrators/a",
                UpstreamId::Registry,
                Scope::OrchestratorsRead,
            ),
            (
                Method::DELETE,
                "/v1/orchestrators/a",
                UpstreamId::Registry,
                Scope::OrchestratorsWrite,
            ),
            (
                Method::GET,
                "/v1/orchestrators:detect",
                UpstreamId::Registry,
                Scope::OrchestratorsRead,
            ),
            (
                Method::GET,
                "/v1/kinds",
                UpstreamId::Registry,
                Scope::OrchestratorsRead,
            ),
            (
                Method::POST,
                "/v1/volumes",
                UpstreamId::StorageOps,
                Scope::VolumesWrite,
            ),
            (
                Method::GET,
                "/v1/volumes",
                UpstreamId::StorageOps,
                Scope::VolumesRead,
            ),
            (
                Method::GET,
                "/v1/volumes/ns/v",
                UpstreamId::StorageOps,
                Scope::VolumesRead,
            ),
            (
                Method::DELETE,
                "/v1/volumes/ns/v",
                UpstreamId::StorageOps,
                Scope::VolumesWrite,
            ),
            (
                Method::GET,
                "/v1/volumes/ns/v/stats",
                UpstreamId::StorageOps,
                Scope::VolumesRead,
            ),
            (
                Method::GET,
                "/v1/orphans",
                UpstreamId::StorageOps,
                Scope::VolumesRead,
            ),
        ];
        for (method, path, upstream, scope) in cases {
            let r = classify(&method, path).unwrap_or_else(|| panic!("{method} {path}"));
            assert_eq!((r.upstream, r.scope), (upstream, scope), "{method} {path}");
        }
        assert_eq!(
            classify(&Method::GET, "/v1/volumes/ns/v").unwrap().template,
            "/v1/volumes/{namespace}/{name}"
        );
        assert!(classify(&Method::GET, "/v1/secrets").is_none());
        assert!(classify(&Method::GET, "/v2/volumes").is_none());
        assert!(classify(&Method::GET, "/v1/volumesx").is_none());
        for (position, id) in UpstreamId::ALL.into_iter().enumerate() {
            assert_eq!(id.index(), position, "{id:?}");
        }
    }
}
