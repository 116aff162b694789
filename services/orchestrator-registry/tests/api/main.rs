//! The orchestrator-registry over real HTTP: every route, every error, concurrency of the default flag,
//! restarts on the same database file, and detection from an injected environment.
//!
//! # Layout
//! - `support`: spawn_app and one helper per endpoint.
//! - `routes`: the standard routes, the OpenAPI document, and the kinds with their config schemas.
//! - `registrations`: register, get, has, list and deregister: idempotency, versions, unknown names.
//! - `bad_input`: bad input: a 400 problem+json naming the field; the operator's allow-lists.
//! - `default_flag`: the default flag: one default, even under concurrent switches.
//! - `persistence`: restarts and kills on the same database file.
//! - `detection`: detection from an injected environment, and the first start's default.
//! - `watch`: `watch=true` on the list: events, the default moving, resume, 410 after a restart.

mod bad_input;
mod default_flag;
mod detection;
mod persistence;
mod registrations;
mod routes;
mod support;
mod watch;
