//! The HTTP API (docs/design.md, “Machine driver API”): one handler per driver method, each
//! documented in the OpenAPI document by its `#[utoipa::path]`.
//!
//! Every error answer is problem+json carrying `machineCodesError`, the exact
//! `machine codes error: code = [..] message = [..]` string MCM parses, including the answers to
//! bodies that do not decode.
//!
//! Layout: this file holds the handlers' state and the router; `machines` the calls on one
//! machine's VM (create, initialise, delete) and ListMachines; `status` GetMachineStatus and its
//! Uninitialized answer; `driver` the calls about the driver itself (volume ids, class checks,
//! providers); `checks` what every call checks of its request; `metrics` the calls' metrics;
//! `openapi` the document's request schemas, links and examples.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::provider::Providers;

mod checks;
mod driver;
mod machines;
mod metrics;
mod openapi;
mod status;

pub use metrics::{METRIC_DURATION, METRIC_REQUESTS};
pub(crate) use openapi::document_links;
pub use status::StatusProblem;

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The provider plugins, by name.
    pub providers: Providers,
    /// The most machines one namespace may have (`BERTH_QUOTA_MACHINES`); `None`: no limit.
    pub quota_machines: Option<u64>,
    /// One lock per namespace that CreateMachine holds from counting the namespace's machines to
    /// making the new one, so this process's creates cannot race past the quota together.
    create_locks: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

impl AppState {
    /// The handlers' state over these providers, with this machine quota.
    pub fn new(providers: Providers, quota_machines: Option<u64>) -> Self {
        AppState {
            providers,
            quota_machines,
            create_locks: Arc::default(),
        }
    }

    /// The create lock of `namespace`. Entries no create holds are dropped on the way, so the map
    /// holds only namespaces with a create in flight.
    fn create_lock(&self, namespace: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .create_locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        locks.entry(namespace.to_owned()).or_default().clone()
    }
}

/// The API routes, with their OpenAPI descriptions.
pub fn routes(state: AppState) -> OpenApiRouter {
    OpenApiRouter::new()
        .routes(routes!(machines::create_machine))
        .routes(routes!(machines::initialize_machine))
        .routes(routes!(machines::delete_machine))
        .routes(routes!(status::get_machine_status))
        .routes(routes!(machines::list_machines))
        .routes(routes!(driver::get_volume_ids))
        .routes(routes!(driver::list_providers))
        .routes(routes!(driver::check_machine_class))
        .with_state(state)
}
