//! The routes the stand-in serves, discovery as kubectl reads it, and the query every list takes.
//! Apart because it is the map from the API's paths to the handlers, read on its own to see what
//! the stand-in serves.

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::routing::get;
use serde_json::{Value, json};

use crate::claims::{delete_claim, get_claim, list_claims, patch_claim, post_claim};
use crate::cluster::Shared;
use crate::events::list_events;
use crate::faults::gate;
use crate::status::failure;

pub(crate) fn router(cluster: Shared) -> Router {
    let claims = "/api/v1/namespaces/{namespace}/persistentvolumeclaims";
    Router::new()
        .route(claims, get(list_claims).post(post_claim))
        .route(
            &format!("{claims}/{{name}}"),
            get(get_claim).delete(delete_claim).patch(patch_claim),
        )
        .route("/api/v1/namespaces/{namespace}/events", get(list_events))
        // Discovery, as kubectl reads it before its first call.
        .route(
            "/api",
            get(|| async { axum::Json(json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})) }),
        )
        .route(
            "/apis",
            get(|| async { axum::Json(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []})) }),
        )
        .route("/api/v1", get(|| async { axum::Json(resources()) }))
        .route(
            "/version",
            get(|| async {
                axum::Json(json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-standin", "platform": "linux/amd64"}))
            }),
        )
        .fallback(|request: Request| async move {
            failure(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!(
                    "the server could not find the requested resource ({})",
                    request.uri().path()
                ),
                None,
            )
        })
        .layer(axum::middleware::from_fn_with_state(cluster.clone(), gate))
        .with_state(cluster)
}

/// The core group's resources the stand-in serves.
fn resources() -> Value {
    json!({
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            {"name": "persistentvolumeclaims", "singularName": "persistentvolumeclaim", "namespaced": true,
             "kind": "PersistentVolumeClaim", "verbs": ["create", "delete", "get", "list", "patch", "watch"],
             "shortNames": ["pvc"]},
            {"name": "events", "singularName": "event", "namespaced": true, "kind": "Event",
             "verbs": ["get", "list"], "shortNames": ["ev"]},
        ],
    })
}

#[derive(serde::Deserialize)]
pub(crate) struct ListQuery {
    #[serde(rename = "labelSelector")]
    pub(crate) label_selector: Option<String>,
    #[serde(rename = "fieldSelector")]
    pub(crate) field_selector: Option<String>,
    pub(crate) limit: Option<usize>,
    #[serde(rename = "continue")]
    pub(crate) continue_token: Option<String>,
    pub(crate) watch: Option<bool>,
    #[serde(rename = "resourceVersion")]
    pub(crate) resource_version: Option<String>,
    #[serde(rename = "timeoutSeconds")]
    pub(crate) timeout_seconds: Option<u64>,
}
