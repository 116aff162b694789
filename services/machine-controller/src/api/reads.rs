//! The handlers that only read (list, get) and what a caller may see: apart from the writes
//! because they change nothing, and a list may turn into a watch.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use domain::resources::{API_VERSION, Kind};
use serde_json::{Value, json};
use service_kit::ApiError;
use service_kit::extract::Json;
use service_kit::tenancy::Caller;

use super::checks::{answer, check_name, check_namespace, not_found};
use super::{AppState, ListQuery};
use crate::store::Stored;

pub(crate) async fn list(
    state: AppState,
    caller: Caller,
    draining: service_kit::watch::Draining,
    kind: Kind,
    namespace: String,
    query: ListQuery,
) -> Result<Response, ApiError> {
    check_namespace(&namespace)?;
    service_kit::watch::check_timeout(query.timeout_seconds)?;
    // Spelled right or refused, watch or not, as the document's pattern says.
    service_kit::watch::parse_resource_version(query.resource_version.as_deref())?;
    let selector: domain::Selector = query
        .label_selector
        .as_deref()
        .unwrap_or_default()
        .parse()
        .map_err(ApiError::new)?;
    if query.watch.unwrap_or(false) {
        let _ = query.allow_watch_bookmarks;
        return crate::stream::watch(&state, &caller, draining, kind, namespace, selector, query)
            .await;
    }
    let (objects, version) = if caller.allows(&namespace) {
        state.writer.store.list(kind, Some(&namespace)).await?
    } else {
        // Another namespace's objects are answered as if there were none.
        (Vec::new(), 0)
    };
    let items: Vec<Value> = objects
        .into_iter()
        .filter(|o| selector.matches(&labels_of(&o.body)))
        .map(|o| o.body)
        .collect();
    Ok(Json(json!({
        "apiVersion": API_VERSION,
        "kind": format!("{kind}List"),
        "metadata": {"resourceVersion": version.to_string()},
        "items": items,
    }))
    .into_response())
}

/// An object's labels.
pub(crate) fn labels_of(body: &Value) -> domain::Labels {
    serde_json::from_value(body["metadata"]["labels"].clone()).unwrap_or_default()
}

pub(super) async fn visible(
    state: &AppState,
    caller: &Caller,
    kind: Kind,
    namespace: &str,
    name: &str,
) -> Result<Stored, ApiError> {
    check_namespace(namespace)?;
    check_name(name)?;
    if !caller.allows(namespace) {
        return Err(not_found(kind, namespace, name));
    }
    state
        .writer
        .store
        .get(kind, namespace, name)
        .await?
        .ok_or_else(|| not_found(kind, namespace, name))
}

pub(crate) async fn get(
    state: AppState,
    caller: Caller,
    kind: Kind,
    namespace: String,
    name: String,
) -> Result<Response, ApiError> {
    let stored = visible(&state, &caller, kind, &namespace, &name).await?;
    Ok(answer(StatusCode::OK, &stored))
}
