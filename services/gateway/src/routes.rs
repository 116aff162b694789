//! Which upstream serves a path, which scope a call needs, and the route template it is counted under.
//!
//! Routing is by exact method and path template (`ROUTES`): every route of the three services, and
//! nothing else. Reads need the `:read` scope of their family and writes the `:write` one. A path with
//! a dot-segment or an encoded slash is refused before routing ([`check_path`]).

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
    /// machine-controller.
    MachineController,
}

impl UpstreamId {
    /// Every upstream.
    pub const ALL: [UpstreamId; 4] = [
        UpstreamId::MachineDriver,
        UpstreamId::Registry,
        UpstreamId::StorageOps,
        UpstreamId::MachineController,
    ];

    /// Its position in [`UpstreamId::ALL`], which is how per-upstream state is laid out.
    pub fn index(self) -> usize {
        match self {
            UpstreamId::MachineDriver => 0,
            UpstreamId::Registry => 1,
            UpstreamId::StorageOps => 2,
            UpstreamId::MachineController => 3,
        }
    }

    /// The service's name.
    pub fn name(self) -> &'static str {
        match self {
            UpstreamId::MachineDriver => "machine-driver",
            UpstreamId::Registry => "orchestrator-registry",
            UpstreamId::StorageOps => "storage-ops",
            UpstreamId::MachineController => "machine-controller",
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
    /// Create, change and delete volumes.
    VolumesWrite,
    /// Read orchestrators, kinds, detection.
    OrchestratorsRead,
    /// Register and deregister orchestrators.
    OrchestratorsWrite,
    /// Read the gateway's `/metrics`. Its counts are every namespace's together, so only a
    /// cluster-wide token may carry it ([`Scope::needs_cluster_wide`]).
    MetricsRead,
    /// Everything.
    Admin,
}

impl Scope {
    /// Every scope.
    pub const ALL: [Scope; 8] = [
        Scope::MachinesRead,
        Scope::MachinesWrite,
        Scope::VolumesRead,
        Scope::VolumesWrite,
        Scope::OrchestratorsRead,
        Scope::OrchestratorsWrite,
        Scope::MetricsRead,
        Scope::Admin,
    ];

    /// Every scope's name, comma-separated, for usage texts and refusals.
    pub fn names() -> String {
        Scope::ALL.map(Scope::as_str).join(", ")
    }

    /// Whether a token with this scope must act in every namespace: what it reads is not one
    /// namespace's.
    pub fn needs_cluster_wide(self) -> bool {
        matches!(self, Scope::MetricsRead | Scope::Admin)
    }

    /// The scope's name as written in tokens files.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::MachinesRead => "machines:read",
            Scope::MachinesWrite => "machines:write",
            Scope::VolumesRead => "volumes:read",
            Scope::VolumesWrite => "volumes:write",
            Scope::OrchestratorsRead => "orchestrators:read",
            Scope::OrchestratorsWrite => "orchestrators:write",
            Scope::MetricsRead => "metrics:read",
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

/// What the gateway makes of a request's method and path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Classified {
    /// A route of an upstream.
    Route(RouteInfo),
    /// A route of an upstream, but not with this method: 405 with these methods in `Allow`.
    MethodNotAllowed {
        /// The route template.
        template: &'static str,
        /// The methods it takes, as `Allow` lists them.
        allow: &'static str,
    },
    /// A path no upstream serves (the gateway's own routes, or nothing).
    NotProxied,
    /// A path refused before routing ([`check_path`]), with the rule it broke.
    Refused(&'static str),
}

/// One route the gateway forwards.
struct Route {
    /// The path template: a segment in braces matches one non-empty segment.
    template: &'static str,
    upstream: UpstreamId,
    /// The methods it takes and the scope each needs. A GET route also takes HEAD, as the services
    /// (axum) do.
    methods: &'static [(Method, Scope)],
    /// The `Allow` header of its 405.
    allow: &'static str,
}

const fn route(
    template: &'static str,
    upstream: UpstreamId,
    methods: &'static [(Method, Scope)],
    allow: &'static str,
) -> Route {
    Route {
        template,
        upstream,
        methods,
        allow,
    }
}

/// A machine controller collection: list (and watch) to read, POST to make.
const fn stored_collection(template: &'static str) -> Route {
    route(
        template,
        UpstreamId::MachineController,
        &[
            (Method::GET, Scope::MachinesRead),
            (Method::POST, Scope::MachinesWrite),
        ],
        "GET, HEAD, POST",
    )
}

/// One machine controller object: read, replace, patch, delete.
const fn stored_object(template: &'static str) -> Route {
    route(
        template,
        UpstreamId::MachineController,
        &[
            (Method::GET, Scope::MachinesRead),
            (Method::PUT, Scope::MachinesWrite),
            (Method::PATCH, Scope::MachinesWrite),
            (Method::DELETE, Scope::MachinesWrite),
        ],
        "GET, HEAD, PUT, PATCH, DELETE",
    )
}

/// Every route the gateway forwards. The driver's `:status`, `:list`, `volume-ids` and
/// `machineclasses:check` are POSTs that only read, so they need `machines:read`. The machine
/// controller's objects (secrets and classes among them) are read with `machines:read` and written
/// with `machines:write`: a secret's values never come back out.
const ROUTES: &[Route] = {
    use Scope::*;
    use UpstreamId::*;
    const POST: &str = "POST";
    const GET: &str = "GET, HEAD";
    &[
        route(
            "/v1/machines:create",
            MachineDriver,
            &[(Method::POST, MachinesWrite)],
            POST,
        ),
        route(
            "/v1/machines:initialize",
            MachineDriver,
            &[(Method::POST, MachinesWrite)],
            POST,
        ),
        route(
            "/v1/machines:delete",
            MachineDriver,
            &[(Method::POST, MachinesWrite)],
            POST,
        ),
        route(
            "/v1/machines:status",
            MachineDriver,
            &[(Method::POST, MachinesRead)],
            POST,
        ),
        route(
            "/v1/machines:list",
            MachineDriver,
            &[(Method::POST, MachinesRead)],
            POST,
        ),
        route(
            "/v1/volume-ids",
            MachineDriver,
            &[(Method::POST, MachinesRead)],
            POST,
        ),
        route(
            "/v1/providers",
            MachineDriver,
            &[(Method::GET, MachinesRead)],
            GET,
        ),
        route(
            "/v1/machineclasses:check",
            MachineDriver,
            &[(Method::POST, MachinesRead)],
            POST,
        ),
        stored_collection("/v1/namespaces/{namespace}/secrets"),
        stored_object("/v1/namespaces/{namespace}/secrets/{name}"),
        stored_collection("/v1/namespaces/{namespace}/machineclasses"),
        stored_object("/v1/namespaces/{namespace}/machineclasses/{name}"),
        stored_collection("/v1/namespaces/{namespace}/machines"),
        stored_object("/v1/namespaces/{namespace}/machines/{name}"),
        stored_collection("/v1/namespaces/{namespace}/machinesets"),
        stored_object("/v1/namespaces/{namespace}/machinesets/{name}"),
        stored_collection("/v1/namespaces/{namespace}/machinedeployments"),
        stored_object("/v1/namespaces/{namespace}/machinedeployments/{name}"),
        route(
            "/v1/kinds",
            Registry,
            &[(Method::GET, OrchestratorsRead)],
            GET,
        ),
        route(
            "/v1/orchestrators",
            Registry,
            &[(Method::GET, OrchestratorsRead)],
            GET,
        ),
        route(
            "/v1/orchestrators:detect",
            Registry,
            &[(Method::GET, OrchestratorsRead)],
            GET,
        ),
        route(
            "/v1/orchestrators:default",
            Registry,
            &[(Method::GET, OrchestratorsRead)],
            GET,
        ),
        route(
            "/v1/orchestrators/{name}",
            Registry,
            &[
                (Method::GET, OrchestratorsRead),
                (Method::PUT, OrchestratorsWrite),
                (Method::DELETE, OrchestratorsWrite),
            ],
            "GET, HEAD, PUT, DELETE",
        ),
        route(
            "/v1/volumes",
            StorageOps,
            &[(Method::GET, VolumesRead), (Method::POST, VolumesWrite)],
            "GET, HEAD, POST",
        ),
        route(
            "/v1/volumes/{namespace}/{name}",
            StorageOps,
            &[
                (Method::GET, VolumesRead),
                (Method::PATCH, VolumesWrite),
                (Method::DELETE, VolumesWrite),
            ],
            "GET, HEAD, PATCH, DELETE",
        ),
        route(
            "/v1/volumes/{namespace}/{name}/stats",
            StorageOps,
            &[(Method::GET, VolumesRead)],
            GET,
        ),
        route(
            "/v1/orphans",
            StorageOps,
            &[(Method::GET, VolumesRead)],
            GET,
        ),
    ]
};

/// Whether `path` matches `template` segment by segment.
fn matches(template: &str, path: &str) -> bool {
    let mut wanted = template.split('/');
    let mut given = path.split('/');
    loop {
        match (wanted.next(), given.next()) {
            (None, None) => return true,
            (Some(w), Some(g)) if w.starts_with('{') => {
                if g.is_empty() {
                    return false;
                }
            }
            (Some(w), Some(g)) if w == g => {}
            _ => return false,
        }
    }
}

/// Classifies a request by exact method and path template. The path must have passed
/// [`check_path`] first.
pub fn classify(method: &Method, path: &str) -> Classified {
    if !path.starts_with("/v1/") {
        return Classified::NotProxied;
    }
    for route in ROUTES {
        if !matches(route.template, path) {
            continue;
        }
        let wanted = if *method == Method::HEAD {
            &Method::GET
        } else {
            method
        };
        return match route.methods.iter().find(|(m, _)| m == wanted) {
            Some((_, scope)) => Classified::Route(RouteInfo {
                upstream: route.upstream,
                scope: *scope,
                template: route.template,
            }),
            None => Classified::MethodNotAllowed {
                template: route.template,
                allow: route.allow,
            },
        };
    }
    Classified::NotProxied
}

/// Why a path is refused before routing: a dot-segment, an empty segment, or an encoded slash,
/// backslash or dot. The services and any proxy behind them could each read such a path differently
/// from the gateway (`/v1/volume-ids/../machines:create`), so the gateway forwards none of them.
pub fn check_path(path: &str) -> Result<(), &'static str> {
    if path.len() > 1
        && path
            .split('/')
            .skip(1)
            .any(|segment| matches!(segment, "" | "." | ".."))
    {
        return Err("path: must not contain empty, `.` or `..` segments");
    }
    let lower = path.as_bytes();
    for window in lower.windows(3) {
        if window[0] == b'%'
            && matches!(
                (window[1], window[2].to_ascii_lowercase()),
                (b'2', b'f') | (b'5', b'c') | (b'2', b'e')
            )
        {
            return Err("path: must not contain an encoded `/`, `\\` or `.`");
        }
    }
    if path.contains('\\') {
        return Err("path: must not contain `\\`");
    }
    Ok(())
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
                Method::PATCH,
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
            let Classified::Route(r) = classify(&method, path) else {
                panic!("{method} {path}")
            };
            assert_eq!((r.upstream, r.scope), (upstream, scope), "{method} {path}");
        }
        assert!(matches!(
            classify(&Method::GET, "/v1/volumes/ns/v"),
            Classified::Route(RouteInfo {
                template: "/v1/volumes/{namespace}/{name}",
                ..
            })
        ));
        for path in [
            "/v1/secrets",
            "/v2/volumes",
            "/v1/volumesx",
            "/v1/volume-ids/x",
            "/v1/volume-ids/x/y",
            "/v1/providersx",
            "/v1/providers/",
            "/v1/volumes/ns",
            "/v1/volumes/ns/v/stats/x",
            "/v1/volumes//v",
            "/v1/machines",
            "/v1/machines:destroy",
        ] {
            assert_eq!(
                classify(&Method::GET, path),
                Classified::NotProxied,
                "{path}"
            );
        }
        assert_eq!(
            classify(&Method::GET, "/v1/volume-ids"),
            Classified::MethodNotAllowed {
                template: "/v1/volume-ids",
                allow: "POST"
            }
        );
        assert!(matches!(
            classify(&Method::from_bytes(b"PURGE").unwrap(), "/v1/kinds"),
            Classified::MethodNotAllowed { .. }
        ));
        for path in [
            "/v1/volume-ids/../machines:create",
            "/v1/./kinds",
            "/v1/volumes/ns/..",
            "/v1/volumes/ns/.",
            "/v1//kinds",
            "/v1/volumes/ns%2Fx/v",
            "/v1/volumes/ns%2fx/v",
            "/v1/volumes/%2e%2e/v",
            "/v1/volumes/a%5Cb/v",
            "/v1/volumes/a\\b/v",
        ] {
            assert!(check_path(path).is_err(), "{path}");
        }
        for path in [
            "/",
            "/v1/volumes/ns/v",
            "/v1/orchestrators:detect",
            "/healthz",
        ] {
            assert!(check_path(path).is_ok(), "{path}");
        }
        for (position, id) in UpstreamId::ALL.into_iter().enumerate() {
            assert_eq!(id.index(), position, "{id:?}");
        }
    }
}
