//! The machine-driver over real HTTP against the ECS emulator over real HTTP: the scenario
//! suite, MCM's own Alicloud provider scenarios (docs/design.md, “MCM's own Alicloud scenarios”),
//! the negative paths of the AWS provider that apply here, 200 concurrent creates under injected
//! faults, and a TRACE-level log capture that must never show a secret.
//!
//! Each test spawns its own emulator (instant lifecycle) and its own driver on port 0, so tests run
//! in parallel without sharing state. Backoffs are a few milliseconds, so retries cost little.
//!
//! # Layout
//! - `support`: the emulator and a driver on port 0, the MCM objects the tests send, one helper per call.
//! - `service`: the service itself: standard routes, providers, malformed bodies.
//! - `validation`: spec fields and secret keys (the AWS provider's negative paths that apply here).
//! - `create`: CreateMachine (MCM alicloud: "should create machine successfully"; spi request building).
//! - `status`: GetMachineStatus.
//! - `delete`: DeleteMachine.
//! - `list`: ListMachines.
//! - `initialize`: InitializeMachine.
//! - `volumes`: GetVolumeIDs (MCM alicloud: "should get volume IDs successfully").
//! - `scale`: scale under faults.
//! - `races`: one name is one VM: creates racing across two driver processes.
//! - `urls`: URLs built from caller input: region and providerID never choose where the driver connects.
//! - `secrets`: no secret in logs.
//! - `tenancy`: two namespaces' callers on every route, the machine quota, a ClientToken series that
//!   never runs out.

mod create;
mod delete;
mod initialize;
mod list;
mod races;
mod scale;
mod secrets;
mod service;
mod status;
mod support;
mod tenancy;
mod urls;
mod validation;
mod volumes;
