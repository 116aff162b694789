//! Each kind's documented operations, stamped out by [`kind_routes!`]: apart because they are
//! the OpenAPI annotations alone, each a line handing its kind to the shared handlers.

use axum::extract::State;
use axum::response::Response;
use domain::resources::Kind;
use serde_json::Value;
use service_kit::ApiError;
use service_kit::extract::{Json, Path, Query};
use service_kit::tenancy::Caller;

use super::reads::{get, list};
use super::writes::{create, delete, patch, put};
use super::{AppState, ListQuery};

/// One kind's documented operations, each a line that hands the kind to the shared handler.
macro_rules! kind_routes {
    ($module:ident, $kind:expr, $schema:ty, $tag:tt, $singular:tt, $collection:tt, $item:tt) => {
        pub(crate) mod $module {
            use super::*;

            #[doc = concat!("Lists the namespace's ", $tag, "; with `watch=true`, streams their changes.")]
            #[utoipa::path(get, path = $collection, tag = $tag, operation_id = concat!("listNamespaced", $singular),
                params(("namespace" = String, Path, description = "The namespace, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63), ListQuery),
                responses(
                    (status = 200, description = "The list (`items`, `metadata.resourceVersion`), or with watch=true a stream of newline-delimited events `{type, object}`", content((Value = "application/json"), (Value = "application/x-ndjson"))),
                    (status = 400, description = "A bad namespace, selector or resourceVersion (code 3)", body = service_kit::error::Problem),
                    (status = 410, description = "watch: the resourceVersion is older than the changes kept; list again (code 11)", body = service_kit::error::Problem),
                    (status = 429, description = "watch: too many watches open (code 8)", body = service_kit::error::Problem),
                ))]
            pub(crate) async fn list(State(state): State<AppState>, caller: Caller, draining: service_kit::watch::Draining, Path(namespace): Path<String>, Query(query): Query<ListQuery>) -> Result<Response, ApiError> {
                super::list(state, caller, draining, $kind, namespace, query).await
            }

            #[doc = concat!("Makes one of the namespace's ", $tag, ".")]
            #[utoipa::path(post, path = $collection, tag = $tag, operation_id = concat!("createNamespaced", $singular),
                params(("namespace" = String, Path, description = "The namespace, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63)),
                request_body = $schema,
                responses(
                    (status = 201, description = "Made", body = $schema),
                    (status = 400, description = "A bad field (code 3), named", body = service_kit::error::Problem),
                    (status = 403, description = "The caller may not act in the namespace (code 7), answered before anything there is read", body = service_kit::error::Problem),
                    (status = 409, description = "The name is taken (code 6)", body = service_kit::error::Problem),
                    (status = 412, description = "What it refers to is missing, or the operator's ceilings refuse it (code 9)", body = service_kit::error::Problem),
                ))]
            pub(crate) async fn create(State(state): State<AppState>, caller: Caller, Path(namespace): Path<String>, Json(raw): Json<Value>) -> Result<Response, ApiError> {
                super::create(state, caller, $kind, namespace, raw).await
            }

            #[doc = concat!("Reads one of the namespace's ", $tag, ".")]
            #[utoipa::path(get, path = $item, tag = $tag, operation_id = concat!("readNamespaced", $singular),
                params(("namespace" = String, Path, description = "The namespace, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63), ("name" = String, Path, description = "The name, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63)),
                responses(
                    (status = 200, description = "The object", body = $schema),
                    (status = 404, description = "No such object (code 5)", body = service_kit::error::Problem),
                ))]
            pub(crate) async fn get(State(state): State<AppState>, caller: Caller, Path((namespace, name)): Path<(String, String)>) -> Result<Response, ApiError> {
                super::get(state, caller, $kind, namespace, name).await
            }

            #[doc = concat!("Replaces (or makes) one of the namespace's ", $tag, "; `metadata.resourceVersion`, when sent, must be the current one.")]
            #[utoipa::path(put, path = $item, tag = $tag, operation_id = concat!("replaceNamespaced", $singular),
                params(("namespace" = String, Path, description = "The namespace, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63), ("name" = String, Path, description = "The name, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63)),
                request_body = $schema,
                responses(
                    (status = 200, description = "Replaced", body = $schema),
                    (status = 201, description = "Made", body = $schema),
                    (status = 400, description = "A bad field (code 3), named", body = service_kit::error::Problem),
                    (status = 403, description = "The caller may not act in the namespace (code 7), answered before anything there is read", body = service_kit::error::Problem),
                    (status = 404, description = "No such object to replace at that resourceVersion (code 5)", body = service_kit::error::Problem),
                    (status = 409, description = "resourceVersion is not the current one (code 10)", body = service_kit::error::Problem),
                    (status = 412, description = "It is being deleted, or what it refers to is missing (code 9)", body = service_kit::error::Problem),
                ))]
            pub(crate) async fn put(State(state): State<AppState>, caller: Caller, Path((namespace, name)): Path<(String, String)>, Json(raw): Json<Value>) -> Result<Response, ApiError> {
                super::put(state, caller, $kind, namespace, name, raw).await
            }

            #[doc = concat!("Changes one of the namespace's ", $tag, " by a JSON merge patch (RFC 7386).")]
            #[utoipa::path(patch, path = $item, tag = $tag, operation_id = concat!("patchNamespaced", $singular),
                params(("namespace" = String, Path, description = "The namespace, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63), ("name" = String, Path, description = "The name, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63)),
                request_body(content = Value, content_type = "application/merge-patch+json"),
                responses(
                    (status = 200, description = "Changed", body = $schema),
                    (status = 400, description = "A bad field (code 3), named", body = service_kit::error::Problem),
                    (status = 404, description = "No such object (code 5)", body = service_kit::error::Problem),
                    (status = 409, description = "metadata.resourceVersion in the patch is not the current one (code 10)", body = service_kit::error::Problem),
                    (status = 412, description = "It is being deleted, or what it refers to is missing (code 9)", body = service_kit::error::Problem),
                ))]
            pub(crate) async fn patch(State(state): State<AppState>, caller: Caller, Path((namespace, name)): Path<(String, String)>, Json(raw): Json<Value>) -> Result<Response, ApiError> {
                super::patch(state, caller, $kind, namespace, name, raw).await
            }

            #[doc = concat!("Deletes one of the namespace's ", $tag, ": at once, or once its finalizers are done (its VM deleted, what it owns gone).")]
            #[utoipa::path(delete, path = $item, tag = $tag, operation_id = concat!("deleteNamespaced", $singular),
                params(("namespace" = String, Path, description = "The namespace, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63), ("name" = String, Path, description = "The name, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63)),
                responses(
                    (status = 200, description = "Deleted, or marked (metadata.deletionTimestamp) until its finalizers are done", body = $schema),
                    (status = 404, description = "No such object (code 5)", body = service_kit::error::Problem),
                    (status = 412, description = "Something still uses it (code 9), named", body = service_kit::error::Problem),
                ))]
            pub(crate) async fn delete(State(state): State<AppState>, caller: Caller, Path((namespace, name)): Path<(String, String)>) -> Result<Response, ApiError> {
                super::delete(state, caller, $kind, namespace, name).await
            }
        }
    };
}

kind_routes!(
    secrets,
    Kind::Secret,
    domain::resources::SecretResource,
    "secrets",
    "Secret",
    "/v1/namespaces/{namespace}/secrets",
    "/v1/namespaces/{namespace}/secrets/{name}"
);
kind_routes!(
    classes,
    Kind::MachineClass,
    domain::MachineClass,
    "machineclasses",
    "MachineClass",
    "/v1/namespaces/{namespace}/machineclasses",
    "/v1/namespaces/{namespace}/machineclasses/{name}"
);
kind_routes!(
    machines,
    Kind::Machine,
    domain::resources::MachineResource,
    "machines",
    "Machine",
    "/v1/namespaces/{namespace}/machines",
    "/v1/namespaces/{namespace}/machines/{name}"
);
kind_routes!(
    sets,
    Kind::MachineSet,
    domain::resources::MachineSet,
    "machinesets",
    "MachineSet",
    "/v1/namespaces/{namespace}/machinesets",
    "/v1/namespaces/{namespace}/machinesets/{name}"
);
kind_routes!(
    deployments,
    Kind::MachineDeployment,
    domain::resources::MachineDeployment,
    "machinedeployments",
    "MachineDeployment",
    "/v1/namespaces/{namespace}/machinedeployments",
    "/v1/namespaces/{namespace}/machinedeployments/{name}"
);
