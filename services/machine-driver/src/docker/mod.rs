//! The `Docker` provider: a machine is a container, as in Cluster API's Docker provider (CAPD) and
//! Gardener's local provider, so machine lifecycles can be exercised without a cloud.
//!
//! - The container is named after the machine (also its host name, which becomes the node name) and
//!   labelled with the class's cluster and role and the machine's name and UID (`berth.io/*`).
//!   CreateMachine adopts the container carrying the machine's UID; a create that loses the race for
//!   the name finds the winner's container with the same labels and adopts it too, so however many
//!   identical calls race, one container is made. A name held by another machine is AlreadyExists.
//! - The secret's `userData` is written into the container at `/var/lib/berth/user-data` before it
//!   starts, through the Engine's archive API (no shell needed in the image). With `bootstrap: exec`
//!   it is then executed once with `docker exec`: the exec's id is recorded before the exec starts,
//!   and its exit code once it has finished, so no later call runs it again and every call can tell
//!   where it got to. GetMachineStatus answers Uninitialized (17) until it has completed;
//!   InitializeMachine runs one that is still pending and waits for it.
//! - Nothing a machine writes is control data: the machine is root in its container and may write
//!   anything there. So the bootstrap's records are not files in the container (as they were) but
//!   two Docker volumes the driver creates and never mounts, `berth-bootstrap-<container id>` (label
//!   `berth.io/bootstrap-exec`) and `...-exit` (label `berth.io/bootstrap-exit`): only the driver
//!   writes them, they outlive a driver or Engine restart (the Engine forgets execs), and creating
//!   one is atomic (a second create answers the first volume, so the first recorded exec wins).
//!   Every id that goes into an Engine path is checked to be 64 hex digits first, an exec is
//!   believed only if the Engine says it belongs to the container, and the one read from a
//!   container left (an earlier driver's exit-code file, for containers it made) is stat-checked
//!   and bounded to a few bytes.
//! - Every lookup is scoped to the class's cluster and role labels and to the machine's name (and
//!   UID when given); a providerID only says where to look (`docker:///<name>`): a container it
//!   names for another machine, role or namespace is answered as a missing one.
//! - The Engine copies an image's labels onto its containers, so an image carrying a key under a
//!   reserved prefix (`com.docker.*`, `berth.io/*` but the labels the driver sets over it) is
//!   refused (412) rather than trusted; the driver reads no label it did not set itself.
//! - The Engine is the one the secret's `dockerHost` names, if the operator allows it
//!   ([`settings::Settings`]), else `DOCKER_HOST`, else the local socket. An Engine that does not answer
//!   is Unavailable; its other refusals keep their meaning (a missing image is FailedPrecondition
//!   naming it; nothing is pulled unless the class says `pull: IfNotPresent`).
//!
//! Bootstraps of one container are serialised within a driver process; two driver replicas sharing
//! an Engine could still both start a pending bootstrap of the same container in the same instant
//! (as two CAPD controllers could), which is why the driver runs as one replica.
//!
//! # Layout
//! - [`settings`]: what the operator allows (Engines, host directories, registries, privileges).
//! - [`spec`]: the provider spec, its validation, and the names of labels, files and provider ids.
//! - [`archive`]: the one-file tar archives the Engine's archive API speaks.
//! - this file: [`Docker`], the provider's state (its Engine clients and locks).
//! - `driver`: the [`Provider`](crate::provider::Provider) implementation, one call from request
//!   to answer each.
//! - `engine`: connecting to an Engine, and what its errors mean ([`EngineError`]).
//! - `container`: a container as the driver reads it, and the confined lookups that find one.
//! - `create`: CreateMachine's checks, the create or adoption, and the start.
//! - `image`: the image's labels, and pulling it when allowed.
//! - `mounts`: why machines' host directories may not nest, checked against the neighbours.
//! - `bootstrap`: the user data, and running it once ([`BootstrapState`]).
//! - `records`: the bootstrap's records (driver-only volumes) and the state read from them.

pub mod archive;
pub mod settings;
pub mod spec;

mod bootstrap;
mod container;
mod create;
mod driver;
mod engine;
mod image;
mod mounts;
mod records;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bollard::Docker as Engine;
use tokio::sync::OnceCell;

use settings::Settings;

pub use bootstrap::BootstrapState;
pub use engine::EngineError;

/// The provider's name (`MachineClass.provider`).
pub const NAME: &str = "Docker";

/// The Docker provider plugin.
pub struct Docker {
    settings: Settings,
    operation_timeout: Duration,
    /// One connected client per Engine address, made on first use.
    engines: Mutex<HashMap<String, Arc<OnceCell<Engine>>>>,
    /// One lock per container whose bootstrap is being looked after.
    bootstrap_locks: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
    /// Held from the check of a container's mounts against every other machine's
    /// ([`Docker::check_neighbours`]) until the Engine has made or started it, so two creates or
    /// starts cannot both pass the check before either container shows.
    mount_gate: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Docker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Docker")
            .field("settings", &self.settings)
            .field("operation_timeout", &self.operation_timeout)
            .finish_non_exhaustive()
    }
}

impl Docker {
    /// A provider with these operator settings; `operation_timeout` bounds each driver call.
    pub fn new(settings: Settings, operation_timeout: Duration) -> Self {
        Docker {
            settings,
            operation_timeout,
            engines: Mutex::default(),
            bootstrap_locks: Mutex::default(),
            mount_gate: tokio::sync::Mutex::default(),
        }
    }
}

#[cfg(test)]
mod tests;
