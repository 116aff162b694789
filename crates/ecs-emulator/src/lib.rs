//! A wire-compatible stand-in for Alibaba Cloud ECS, what LocalStack and moto are for AWS.
//!
//! It speaks the ECS RPC protocol (API version `2014-05-26`) on `/`: parameters in the query or a
//! form body, signature V1 (`Signature`, HMAC-SHA1) or V3 (`Authorization: ACS3-HMAC-SHA256 ...`)
//! checked against configured access keys, timestamp skew and nonce replay refused with ECS's own
//! error codes, and JSON answers in ECS's shapes. So Berth's `alicloud` client, or Alibaba's SDKs,
//! pointed at it run unchanged. Instances move Pending → Starting → Running (and Stopping → Stopped)
//! after configurable delays; each comes with a system disk, its data disks and a primary network
//! interface, tagged like the instance.
//!
//! By default the account lives in memory. With [`Config::state_dir`], [`Emulator::open`] keeps it
//! in that directory, written crash-safely after every change, so a restarted emulator still has
//! its instances (ids, statuses, tags), disks, network interfaces and ClientTokens; with
//! [`stored_access_key`] the access key it accepts is kept there too.
//!
//! For tests it injects faults (throttling with `x-ratelimit-*` headers, 5xx answers, latency,
//! `OperationDenied.NoStock` per zone, resources leaked on delete, a status pinned on an instance)
//! and exposes its state, either through [`Emulator`]'s methods in-process or the unauthenticated
//! admin endpoints under `/_emulator/` (bind it to loopback):
//!
//! | route | does |
//! |---|---|
//! | `GET /_emulator/state` | instances, disks and network interfaces, in ECS's JSON shapes; how many ClientTokens and nonces are held |
//! | `POST /_emulator/reset` | forgets every resource, client token and nonce; faults and lifecycle back to the start config |
//! | `GET`/`PUT /_emulator/faults` | read / replace [`Faults`] (camelCase JSON) |
//! | `GET`/`PUT /_emulator/lifecycle` | read / replace [`Lifecycle`] delays |
//! | `POST /_emulator/seed` | create many instances at once ([`Seed`]), for list benchmarks |
//! | `PUT /_emulator/instances/{id}/status` | `{"status":"Pending"}`: set and pin an instance's status |
//! | `DELETE /_emulator/instances/{id}/pin` | let a pinned instance move on |
//! | `GET /_emulator/stats` | calls by action, throttled, 5xx and rejected counts |
//! | `GET /healthz` | liveness |
//!
//! # Layout
//! - [`config`]: [`Config`], [`AccessKey`], [`Lifecycle`], [`Faults`].
//! - `auth`: V1/V3 signature verification, skew and nonce checks.
//! - `wire`: parameter decoding, RFC 3986 encoding, ECS error answers.
//! - `state`: the account's resources in ordered maps, ids, lifecycle, filters.
//! - `actions`: the ECS actions ([`ACTIONS`]), one module per resource (instances, disks, network
//!   interfaces, regions) beside parameter reading, tags and seeding ([`Seed`]).
//! - [`persist`]: the state directory: crash-safe writes, loading, the stored access key.
//! - `emulator`: [`Emulator`], its account, admin methods and [`AdminError`], what an admin change
//!   fails with; [`Stats`]; the handling of one ECS call.
//! - `http`: [`router`] and its handlers: ECS on `/`, the admin API, `/metrics`.
//! - `request`: decoding and authenticating one call ([`authenticate_request`]).

mod actions;
mod auth;
pub mod cli;
pub mod config;
mod emulator;
mod http;
pub mod persist;
mod request;
mod state;
mod wire;

pub use actions::{ACTIONS, Seed, SeedError};
pub use config::{AccessKey, Config, Faults, FaultsError, Lifecycle};
pub use emulator::{AdminError, Emulator, Stats};
pub use http::router;
pub use persist::{StateError, stored_access_key};
pub use request::authenticate_request;

#[cfg(test)]
mod tests;
