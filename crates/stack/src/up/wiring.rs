//! What each service is told of the others: the variables naming where the services it calls
//! answer (and, for the gateway, its tokens file). Apart because `berth up` (every service in one
//! process) and the suites' process stack (`berth_tests::processes`, one process a service) wire a
//! stack alike, from this one table.

use std::path::Path;

/// Where each service a caller may call answers, as base URLs.
#[derive(Debug, Clone)]
pub struct ServiceUrls {
    /// The orchestrator registry.
    pub registry: String,
    /// Storage ops.
    pub storage_ops: String,
    /// The machine driver.
    pub machine_driver: String,
    /// The machine controller.
    pub machine_controller: String,
    /// The ECS API the machine driver's Alicloud provider calls (the emulator, in a stack).
    pub ecs: String,
}

/// A service that calls others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// The gateway: every service behind it.
    Gateway,
    /// Storage ops: the registry.
    StorageOps,
    /// The machine driver: ECS.
    MachineDriver,
    /// The machine controller: the machine driver.
    MachineController,
}

impl Caller {
    /// Every service that calls another.
    pub const ALL: [Caller; 4] = [
        Caller::Gateway,
        Caller::StorageOps,
        Caller::MachineDriver,
        Caller::MachineController,
    ];
}

/// The variables that tell `caller` where the services it calls answer.
pub fn wiring(
    caller: Caller,
    urls: &ServiceUrls,
    tokens_file: &Path,
) -> Vec<(&'static str, String)> {
    match caller {
        Caller::Gateway => vec![
            (
                gateway::env_vars::TOKENS_FILE,
                tokens_file.display().to_string(),
            ),
            (gateway::env_vars::REGISTRY_URL, urls.registry.clone()),
            (gateway::env_vars::STORAGE_OPS_URL, urls.storage_ops.clone()),
            (
                gateway::env_vars::MACHINE_DRIVER_URL,
                urls.machine_driver.clone(),
            ),
            (
                gateway::env_vars::MACHINE_CONTROLLER_URL,
                urls.machine_controller.clone(),
            ),
        ],
        Caller::StorageOps => vec![(storage_ops::env_vars::REGISTRY_URL, urls.registry.clone())],
        Caller::MachineDriver => vec![("BERTH_ALICLOUD_ENDPOINT", urls.ecs.clone())],
        Caller::MachineController => vec![(
            machine_controller::env_vars::MACHINE_DRIVER_URL,
            urls.machine_driver.clone(),
        )],
    }
}
