//! A stand-in for the Kubernetes API server, for tests: small, and strict where Berth could be wrong.
//!
//! No API server can run where Berth is built and tested (no server binaries, no image registry),
//! so, as the ECS emulator stands in for ECS, this serves what storage-ops' `kubernetes` backend
//! uses, following the Kubernetes API conventions: PersistentVolumeClaims in namespaces (create,
//! get, list with label selectors and `limit`/`continue`, JSON merge patch, delete with
//! preconditions and the `kubernetes.io/pvc-protection` finalizer), events (list by field
//! selector), a `resourceVersion` on every write, and the `Status` object of every refusal (404
//! NotFound, 409 AlreadyExists and Conflict, 403 Forbidden for RBAC and ResourceQuota, 422
//! Invalid, 400 BadRequest for a field the type does not have, as `fieldValidation=Strict` does).
//!
//! What the cluster's controllers do, the test does, through [`StandIn`]: bind a claim (the PV
//! controller), lose it, record an event, mark a claim in use by a pod, delete one behind Berth's
//! back; and the faults: a required bearer token, verbs RBAC refuses, a quota, a hung server.
//!
//! # Layout
//! - `standin`: [`StandIn`], the running server and what a test does through it.
//! - `faults`: [`Faults`] and [`Quota`], and where every call meets them (the gate, RBAC).
//! - `cluster`: the stored state (namespaces, claims, events, the changes watches follow).
//! - `routes`: the router, discovery, and the query every list takes.
//! - `claims`: the PersistentVolumeClaim handlers: list, get, create, delete, merge patch.
//! - `validation`: the checks the API server makes of a claim.
//! - `watch`: a watch of a namespace's claims.
//! - `events`: the events list, by field selector.
//! - `status`: the `Status` object of every refusal.

mod claims;
mod cluster;
mod events;
mod faults;
mod routes;
mod standin;
mod status;
mod validation;
mod watch;

pub use faults::{Faults, Quota, USER};
pub use standin::StandIn;
