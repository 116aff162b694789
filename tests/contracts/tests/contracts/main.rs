//! Every consumer→provider pair, checked from both sides: one module per pair, each with a
//! `consumer_*` test (the real consumer against a Pact mock; writes the pact and compares it with
//! the committed one) and a `provider_*` test (the committed pact replayed against the real
//! provider on port 0). One test binary, so the Pact libraries are linked once.
//!
//! - `alicloud_ecs`: the Alicloud client → ECS (the emulator);
//! - `clients_gateway`: the `client` crate and the `berth` CLI → gateway;
//! - `controller_driver`: machine-controller → machine-driver;
//! - `gateway_services`: gateway → machine-driver, orchestrator-registry, storage-ops,
//!   machine-controller;
//! - `storage_ops_kubernetes`: storage-ops → the Kubernetes API (`kube-standin`);
//! - `storage_ops_registry`: storage-ops → orchestrator-registry.

mod alicloud_ecs;
mod clients_gateway;
mod controller_driver;
mod gateway_services;
mod storage_ops_kubernetes;
mod storage_ops_registry;
