//! Every consumer→provider pair, checked from both sides: one module per pair, each with a
//! `consumer_*` test (the real consumer against a Pact mock; writes the pact and compares it with
//! the committed one) and a `provider_*` test (the committed pact replayed against the real
//! provider on port 0). One test binary, so the Pact libraries are linked once.

mod alicloud_ecs;
mod clients_gateway;
mod gateway_services;
mod storage_ops_kubernetes;
mod storage_ops_registry;
