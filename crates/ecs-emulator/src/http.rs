//! The emulator's HTTP front: [`router`], with ECS on `/`, the admin API under `/_emulator/`,
//! `/metrics` and `/healthz`; each handler a thin call into [`Emulator`].
//!
//! Apart from [`Emulator`] because it is only the wire: routes, bodies and status codes, ECS's
//! error shape on `/` and the kit's problem+json for the admin API. What a call does is not here.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::emulator::lock;
use crate::wire::EcsError;
use crate::{AdminError, Emulator, Faults, Lifecycle, Seed, actions};

/// The emulator's HTTP router: ECS on `/` (GET and POST), admin under `/_emulator/`, `/healthz`.
pub fn router(emulator: Emulator) -> Router {
    Router::new()
        .route("/", get(ecs).post(ecs))
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .route("/_emulator/state", get(admin_state))
        .route("/_emulator/reset", post(admin_reset))
        .route("/_emulator/faults", get(admin_faults).put(admin_set_faults))
        .route(
            "/_emulator/lifecycle",
            get(admin_lifecycle).put(admin_set_lifecycle),
        )
        .route("/_emulator/seed", post(admin_seed))
        .route("/_emulator/instances/{id}/status", put(admin_pin))
        .route("/_emulator/instances/{id}/pin", delete(admin_unpin))
        .route("/_emulator/stats", get(admin_stats))
        .with_state(emulator)
}

async fn ecs(
    State(emu): State<Emulator>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request_id = uuid::Uuid::new_v4().to_string().to_uppercase();
    let latency = emu.faults().latency_ms;
    if latency > 0 {
        tokio::time::sleep(Duration::from_millis(latency)).await;
    }
    match emu.handle(&method, &uri, &headers, &body) {
        Ok((mut answer, snapshot)) => {
            if let Some(snapshot) = snapshot
                && let Err(e) = snapshot.save_off_runtime().await
            {
                // The change stands in memory but is not durable: say so as ECS says "retry".
                tracing::error!(error = %e, "the account could not be written");
                return EcsError::new(
                    500,
                    "InternalError",
                    "The request processing has failed due to some unknown error, exception or failure.",
                )
                .into_response(&request_id);
            }
            answer["RequestId"] = Value::String(request_id);
            axum::Json(answer).into_response()
        }
        Err(e) => {
            tracing::debug!(code = %e.code, status = e.status.as_u16(), "ECS error answer");
            e.into_response(&request_id)
        }
    }
}

/// An admin refusal, answered as every Berth service answers one: the kit's problem+json (the
/// ECS API on `/` keeps ECS's own error shape, which is what it emulates). One error type on the
/// wire for everything that is Berth's.
fn admin_error(code: service_kit::error::Code, message: impl Into<String>) -> Response {
    service_kit::ApiError::from_code(code, message).into_response()
}

/// A body that is not the admin endpoint's JSON (400).
fn admin_bad_body(e: &serde_json::Error) -> Response {
    admin_error(
        service_kit::error::Code::InvalidArgument,
        format!("body: {e}"),
    )
}

/// An admin change that was refused (400), named an instance that is not there (404), or could not
/// be written to the state directory (500, the cause logged, not answered).
fn admin_failure(e: AdminError) -> Response {
    use service_kit::error::Code;
    match e {
        AdminError::NoInstance(_) => admin_error(Code::NotFound, e.to_string()),
        AdminError::Save(_) => service_kit::ApiError::internal(e).into_response(),
        AdminError::UnknownStatus(_) | AdminError::Seed(_) | AdminError::Faults(_) => {
            admin_error(Code::InvalidArgument, e.to_string())
        }
    }
}

async fn admin_state(State(emu): State<Emulator>) -> Response {
    axum::Json(emu.snapshot()).into_response()
}

async fn admin_reset(State(emu): State<Emulator>) -> Response {
    emu.reset();
    StatusCode::NO_CONTENT.into_response()
}

async fn admin_faults(State(emu): State<Emulator>) -> Response {
    axum::Json(emu.faults()).into_response()
}

async fn admin_set_faults(State(emu): State<Emulator>, body: Bytes) -> Response {
    let faults: Faults = match serde_json::from_slice(&body) {
        Ok(f) => f,
        Err(e) => return admin_bad_body(&e),
    };
    match emu.set_faults(faults) {
        Ok(()) => axum::Json(emu.faults()).into_response(),
        Err(e) => admin_failure(e),
    }
}

async fn admin_lifecycle(State(emu): State<Emulator>) -> Response {
    axum::Json(emu.lifecycle()).into_response()
}

async fn admin_set_lifecycle(State(emu): State<Emulator>, body: Bytes) -> Response {
    match serde_json::from_slice::<Lifecycle>(&body) {
        Ok(l) => {
            emu.set_lifecycle(l);
            axum::Json(l).into_response()
        }
        Err(e) => admin_bad_body(&e),
    }
}

async fn admin_seed(State(emu): State<Emulator>, body: Bytes) -> Response {
    let seed: Seed = match serde_json::from_slice(&body) {
        Ok(s) => s,
        Err(e) => return admin_bad_body(&e),
    };
    match emu.seed(&seed) {
        Ok(ids) => axum::Json(json!({
            "created": ids.len(),
            "firstInstanceId": ids.first(),
            "lastInstanceId": ids.last(),
        }))
        .into_response(),
        Err(e) => admin_failure(e),
    }
}

#[derive(Deserialize)]
struct PinBody {
    status: String,
}

async fn admin_pin(State(emu): State<Emulator>, Path(id): Path<String>, body: Bytes) -> Response {
    let pin: PinBody = match serde_json::from_slice(&body) {
        Ok(p) => p,
        Err(e) => return admin_bad_body(&e),
    };
    match emu.pin_status(&id, &pin.status) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => admin_failure(e),
    }
}

async fn admin_unpin(State(emu): State<Emulator>, Path(id): Path<String>) -> Response {
    match emu.unpin(&id) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => admin_failure(e),
    }
}

/// The emulator's Prometheus page: calls by action (an action it does not implement is `other`, so
/// no caller's string becomes a label), the faults it injected, the requests it refused, the
/// instances it holds, then the process series every Berth program serves.
async fn metrics(State(emu): State<Emulator>) -> Response {
    use std::fmt::Write as _;
    let stats = emu.stats();
    let instances = lock(&emu.inner.state).instances.len();
    let mut calls: BTreeMap<&str, u64> = BTreeMap::new();
    for (action, n) in &stats.calls {
        let label = actions::ACTIONS
            .iter()
            .find(|a| **a == action.as_str())
            .copied()
            .unwrap_or("other");
        *calls.entry(label).or_default() += n;
    }
    let mut page = String::from(
        "# HELP ecs_emulator_calls_total Authenticated ECS calls by action, failed ones included.\n# TYPE ecs_emulator_calls_total counter\n",
    );
    for (action, n) in calls {
        let _ = writeln!(page, "ecs_emulator_calls_total{{action=\"{action}\"}} {n}");
    }
    for (name, help, value) in [
        (
            "ecs_emulator_throttled_total",
            "Calls answered Throttling by fault injection.",
            stats.throttled,
        ),
        (
            "ecs_emulator_server_errors_total",
            "Calls answered 5xx by fault injection.",
            stats.server_errors,
        ),
        (
            "ecs_emulator_rejected_total",
            "Requests refused before an action (signature, key, timestamp, nonce).",
            stats.rejected,
        ),
    ] {
        let _ = writeln!(
            page,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
        );
    }
    let _ = writeln!(
        page,
        "# HELP ecs_emulator_instances Instances the emulated account holds.\n# TYPE ecs_emulator_instances gauge\necs_emulator_instances {instances}"
    );
    page.push_str(&service_kit::process_metrics::page("ecs-emulator"));
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        page,
    )
        .into_response()
}

async fn admin_stats(State(emu): State<Emulator>) -> Response {
    axum::Json(emu.stats()).into_response()
}
