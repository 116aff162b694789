//! The checks every request's path and body pass before a handler acts, and how a stored object
//! is answered: apart because reads and writes both use them, and each is a rule of its own.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use domain::resources::Kind;
use domain::{Status, names};
use serde_json::Value;
use service_kit::ApiError;
use service_kit::extract::Json;

use crate::store::Stored;

pub(super) fn check_namespace(namespace: &str) -> Result<(), ApiError> {
    names::validate_dns1123_label("namespace", namespace).map_err(ApiError::new)
}

pub(super) fn check_name(name: &str) -> Result<(), ApiError> {
    names::validate_dns1123_label("name", name).map_err(ApiError::new)
}

pub(super) fn not_found(kind: Kind, namespace: &str, name: &str) -> ApiError {
    ApiError::new(Status::not_found(format!(
        "{kind} {name:?} not found in namespace {namespace:?}"
    )))
}

/// A write that names another tenant's namespace (a create, or a PUT that may create), refused
/// before anything there is read: the caller named the namespace, so saying it may not act there
/// tells it nothing new, while a check of the body against what the namespace holds (does its
/// class exist? its secret?) would answer that question, and open the secret to do it. Reads of
/// one object there are answered as a missing one is (`not_found`), as storage-ops answers them.
pub(super) fn refuse_foreign_namespace(
    caller: &service_kit::tenancy::Caller,
    namespace: &str,
) -> Result<(), ApiError> {
    if caller.allows(namespace) {
        return Ok(());
    }
    Err(ApiError::new(Status::new(
        domain::Code::PermissionDenied,
        format!("namespace: the token may not act in namespace {namespace:?}"),
    )))
}

pub(super) fn answer(status: StatusCode, stored: &Stored) -> Response {
    let mut response = (status, Json(stored.body.clone())).into_response();
    if let Ok(tag) = HeaderValue::from_str(&format!("\"{}\"", stored.resource_version)) {
        response.headers_mut().insert(header::ETAG, tag);
    }
    response
}

/// What every write's body must be before anything reads into it: a JSON object whose
/// `metadata`, when present, is an object too.
pub(super) fn check_shape(body: &Value) -> Result<(), ApiError> {
    if !body.is_object() {
        return Err(ApiError::new(Status::invalid(
            "body",
            "must be a JSON object",
        )));
    }
    match body.get("metadata") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err(ApiError::new(Status::invalid(
            "metadata",
            "must be an object",
        ))),
    }
}
