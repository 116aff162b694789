//! Consumer-driven contracts between Berth's parts, as Pact files (dev-only; no service links it).
//!
//! Each consumer→provider pair is checked from both sides. The *consumer* test runs the real consumer
//! (the gateway, storage-ops, the machine controller, the typed client, the CLI, the Alicloud
//! client) against a Pact mock server that answers only what the consumer is stated to rely on: the
//! requests it sends, and the answer fields it reads, as matchers rather than literal values. The
//! mock server fails the test on any request the pact does not describe, and writes the pact when
//! every interaction happened.
//! The freshly written pact must equal the committed one under `pacts/` ([`pactfile::check`]), so a
//! consumer that starts relying on something new cannot do so silently: the test fails and prints
//! the command that refreshes the file. The *provider* test replays every committed pact against the
//! real provider, spawned in this process on port 0, with provider states set through the
//! provider's own API ([`verify::verify`]); a state may hand values back (the `providerID` of the
//! VM it made), which the interaction's request takes through a provider-state generator.
//!
//! The pairs (consumer → provider: its module under `tests/contracts/`):
//! - gateway → machine-driver, orchestrator-registry, storage-ops, machine-controller:
//!   `gateway_services`;
//! - storage-ops → orchestrator-registry: `storage_ops_registry`;
//! - storage-ops → the Kubernetes API (`kube-standin`): `storage_ops_kubernetes`;
//! - machine-controller → machine-driver (the class check, and every driver call of its
//!   reconcilers and orphan collector): `controller_driver`;
//! - the `client` crate and the `berth` CLI → gateway: `clients_gateway`;
//! - `alicloud` → ECS (the emulator): `alicloud_ecs`.
//!
//! No broker: pacts are files, and `PACT_DO_NOT_TRACK=true` (set for every cargo command by the
//! workspace's `.cargo/config.toml`, and checked by [`pactfile::no_tracking`]) keeps the Pact
//! libraries from reporting usage over the network.
//!
//! # Layout
//! - [`pactfile`]: where pacts live, the check of a fresh pact against the committed one, and
//!   reading a committed pact for the outside-facts checks.
//! - [`verify`]: replaying a pact against a running provider, with provider states set by a
//!   closure and an optional request filter.
//! - [`ecs`]: the ECS pair's outside facts: a V1 signer written from Alibaba's documentation and
//!   held to its published example, the request filter that re-signs replayed requests with the
//!   emulator's key, and the official SDK's answer field names.
//! - [`spawn`]: the real services on port 0, one at a time, as providers or as consumers (the
//!   machine controller also without its reconcile loop, for a test that runs its steps).
//!
//! The tests themselves are in `tests/contracts/main.rs`, one module per pair.

pub mod ecs;
pub mod pactfile;
pub mod spawn;
pub mod verify;
