//! The `Status` object of every refusal, as the API server writes it, and the answer a handler's
//! result becomes. Apart because every handler refuses this one way, and the shape is what a
//! Kubernetes client parses.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A `Status` answer, as the API server writes every refusal.
pub(crate) fn failure(
    code: StatusCode,
    reason: &str,
    message: String,
    details: Option<Value>,
) -> Response {
    let mut status = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    if let Some(details) = details {
        status["details"] = details;
    }
    (code, axum::Json(status)).into_response()
}

pub(crate) type Refusal = (StatusCode, Value);

pub(crate) fn refusal(
    code: StatusCode,
    reason: &str,
    message: String,
    name: Option<&str>,
) -> Refusal {
    let mut status = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    if let Some(name) = name {
        status["details"] = json!({"name": name, "kind": "persistentvolumeclaims"});
    }
    (code, status)
}

pub(crate) fn answer(result: Result<Value, Refusal>) -> Response {
    match result {
        Ok(body) => (StatusCode::OK, axum::Json(body)).into_response(),
        Err((code, status)) => (code, axum::Json(status)).into_response(),
    }
}

pub(crate) fn not_found(name: &str) -> Refusal {
    refusal(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("persistentvolumeclaims {name:?} not found"),
        Some(name),
    )
}
