//! storage-ops over real HTTP, against a fake orchestrator registry served in-process
//! (`fake_registry`: the registry's API, in memory), temporary databases and base paths, and (where
//! one answers) the Docker Engine. Tests of storage-ops together with the real registry are in the
//! workspace's `tests/tests/storage_with_registry.rs`.
//!
//! Docker tests skip with a printed reason when no Engine answers, and fail instead when
//! `BERTH_REQUIRE_DOCKER=1`. Every Docker volume a test makes carries the test's own namespace label
//! and is removed when the test ends, even when it fails.
//!
//! # Layout
//! - `support`: the shared helpers: the fake registry and storage-ops in-process on port 0, clients, profiles,
//!   and reading answers.
//! - `routes`: the standard routes, the OpenAPI document, and query parameters no route declares.
//! - `add`: AddStorage: idempotency, concurrent adds, bad input, capacities.
//! - `orchestrators`: the registry and the operator's allow-lists: orchestrators that cannot serve, a registry
//!   that is down or hung, what a 5xx may name.
//! - `read`: ListStorage pages and their signed continue tokens, and stats.
//! - `reconcile`: the reconciler: failed volumes, retained objects, orphans, rows a crash left half-done.
//! - `docker`: the Docker backend against a real Engine (skipped with a reason when none answers).
//! - `crash`: the built binary killed mid-flight: no acknowledged change lost, no orphan left.
//! - `tenancy`: callers scoped to namespaces, and the per-namespace quotas.
//! - `watch`: `watch=true` on a namespace's list: events, resume, 410 after a restart, tenants.

mod add;
mod crash;
mod docker;
#[path = "../fake_registry/mod.rs"]
mod fake_registry;
mod kubernetes;
mod orchestrators;
mod patch;
mod read;
mod reconcile;
mod routes;
mod support;
mod tenancy;
mod watch;
