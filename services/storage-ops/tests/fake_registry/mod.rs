//! A stand-in for the orchestrator registry: the part of its API storage-ops calls (get one, get
//! the default, list), plus registration, in memory, in the registry's wire format.
//!
//! storage-ops' own tests and benchmark use it so that the crate does not link the registry
//! service: they test storage-ops against the registry's contract (the typed client's requests and
//! the domain's types), not the registry itself. Registrations are normalised by the kind's own
//! rules ([`domain::OrchestratorKind::validate_config`], as the registry does), but not held to the
//! operator's limits: checking those again is exactly what storage-ops must do itself. Tests of both
//! services together live in the workspace's `tests/` crate.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use domain::orchestrator::{OrchestratorList, RegisterOrchestrator};
use domain::{Orchestrator, Status};
use service_kit::ApiError;

type Registrations = Arc<Mutex<BTreeMap<String, Orchestrator>>>;

/// Serves a fake registry on `127.0.0.1:0` for as long as the test's runtime runs; its base URL.
pub(crate) async fn spawn() -> String {
    let router = Router::new()
        .route(
            "/readyz",
            get(|| async { axum::Json(serde_json::json!({"status": "ready"})) }),
        )
        .route("/v1/orchestrators", get(list))
        .route("/v1/orchestrators:default", get(default_one))
        .route("/v1/orchestrators/{name}", get(get_one).put(register))
        .with_state(Registrations::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(service_kit::serve(router, listener, std::future::pending()));
    url
}

fn not_registered(name: &str) -> ApiError {
    ApiError::new(Status::not_found(format!(
        "'{name}' is not a registered orchestration provider"
    )))
}

async fn get_one(
    State(registrations): State<Registrations>,
    Path(name): Path<String>,
) -> Result<axum::Json<Orchestrator>, ApiError> {
    let found = registrations.lock().unwrap().get(&name).cloned();
    found.map(axum::Json).ok_or_else(|| not_registered(&name))
}

async fn default_one(
    State(registrations): State<Registrations>,
) -> Result<axum::Json<Orchestrator>, ApiError> {
    let found = registrations
        .lock()
        .unwrap()
        .values()
        .find(|o| o.default)
        .cloned();
    found
        .map(axum::Json)
        .ok_or_else(|| ApiError::new(Status::not_found("no orchestrator is the default")))
}

async fn list(State(registrations): State<Registrations>) -> axum::Json<OrchestratorList> {
    let items = registrations.lock().unwrap().values().cloned().collect();
    axum::Json(OrchestratorList {
        metadata: None,
        items,
    })
}

async fn register(
    State(registrations): State<Registrations>,
    Path(name): Path<String>,
    axum::Json(body): axum::Json<RegisterOrchestrator>,
) -> Result<Response, ApiError> {
    let config = body.kind.validate_config(body.config.as_ref())?;
    let mut registrations = registrations.lock().unwrap();
    let previous = registrations.get(&name).cloned();
    let default = body
        .default
        .unwrap_or_else(|| previous.as_ref().is_some_and(|o| o.default));
    if default {
        for other in registrations.values_mut() {
            other.default = false;
        }
    }
    let orchestrator = Orchestrator {
        name: name.clone(),
        kind: body.kind,
        label: body.label.unwrap_or_default(),
        region: body.region.unwrap_or_default(),
        config,
        storage_ops: body.kind.supports_storage_ops(),
        default,
        resource_version: previous.as_ref().map_or(1, |o| o.resource_version + 1),
    };
    registrations.insert(name, orchestrator.clone());
    let status = if previous.is_some() {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, axum::Json(orchestrator)).into_response())
}
