//! The HTTP API: for each kind, `GET`/`POST /v1/namespaces/{namespace}/{plural}` and `GET`, `PUT`,
//! `PATCH` (JSON merge patch), `DELETE` on `.../{name}`, with Kubernetes' semantics; a list with
//! `watch=true` streams changes ([`crate::stream`]).
//!
//! The handlers are written once, over the kind; `kind_routes!` (in `kinds`) stamps out each
//! kind's documented operations, which only name the kind and its schema.
//!
//! Layout: this file holds what the handlers share (the state, a list's query) and the router;
//! `checks` the checks every request's path and body pass and how an object is answered;
//! `reads` list, get and what a read may see; `writes` create, replace, patch and delete;
//! `kinds` the documented operations of each kind; `examples` the document's examples.

use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::objects::Writer;

mod checks;
mod examples;
mod kinds;
mod reads;
mod writes;

pub(crate) use examples::document_examples;
use kinds::{classes, deployments, machines, secrets, sets};
pub(crate) use reads::labels_of;

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    /// Writes, checks and the store.
    pub writer: Writer,
    /// The operator's limits on watches, and the permits of the open ones.
    pub watch: service_kit::watch::WatchLimits,
}

/// The query of a list.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only objects whose labels match (`a=b,c!=d,e in (f,g)`).
    pub(crate) label_selector: Option<String>,
    /// Stream changes (newline-delimited JSON events) instead of answering a list.
    pub(crate) watch: Option<bool>,
    /// With `watch`: the version to stream changes after (the list's `metadata.resourceVersion`);
    /// absent or `0`, every current object is sent as ADDED first. Too old: 410.
    #[param(pattern = "^(0|[1-9][0-9]{0,19})?$")]
    pub(crate) resource_version: Option<String>,
    /// With `watch`: how long to stream, in seconds (at most 1800, the default).
    #[param(minimum = 1, maximum = 1800)]
    pub(crate) timeout_seconds: Option<u64>,
    /// Accepted for Kubernetes clients; BOOKMARK heartbeats are always sent.
    pub(crate) allow_watch_bookmarks: Option<bool>,
}

/// The API routes, with their OpenAPI descriptions.
pub fn routes(state: AppState) -> OpenApiRouter {
    OpenApiRouter::new()
        .routes(routes!(secrets::list, secrets::create))
        .routes(routes!(
            secrets::get,
            secrets::put,
            secrets::patch,
            secrets::delete
        ))
        .routes(routes!(classes::list, classes::create))
        .routes(routes!(
            classes::get,
            classes::put,
            classes::patch,
            classes::delete
        ))
        .routes(routes!(machines::list, machines::create))
        .routes(routes!(
            machines::get,
            machines::put,
            machines::patch,
            machines::delete
        ))
        .routes(routes!(sets::list, sets::create))
        .routes(routes!(sets::get, sets::put, sets::patch, sets::delete))
        .routes(routes!(deployments::list, deployments::create))
        .routes(routes!(
            deployments::get,
            deployments::put,
            deployments::patch,
            deployments::delete
        ))
        .with_state(state)
}
