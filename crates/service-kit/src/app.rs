//! Assembling a service: its API routes plus the routes every service has, inside the one stack.

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use domain::Code;
use utoipa::openapi::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use crate::config::HttpConfig;
use crate::error::{ApiError, Problem};
use crate::extract::Json;
use crate::health::{Check, Readiness};
use crate::middleware;

/// A service being assembled: name, API routes, readiness checks and HTTP settings.
pub struct ServiceApp {
    name: &'static str,
    api: OpenApiRouter,
    readiness: Readiness,
    http: HttpConfig,
    openapi_route: Option<MethodRouter>,
    metric_prefixes: &'static [&'static str],
    document_edits: Option<fn(&mut serde_json::Value)>,
}

impl ServiceApp {
    /// A service named `name` (used in metrics, traces and the OpenAPI title) serving `api`.
    pub fn new(name: &'static str, api: OpenApiRouter) -> Self {
        ServiceApp {
            name,
            api,
            readiness: Readiness::default(),
            http: HttpConfig::default(),
            openapi_route: None,
            metric_prefixes: &[],
            document_edits: None,
        }
    }

    /// Adds a readiness check to `/readyz`.
    pub fn readiness(mut self, check: Check) -> Self {
        self.readiness = self.readiness.with(check);
        self
    }

    /// Sets the timeout, body limit and internal credential.
    pub fn http_config(mut self, http: HttpConfig) -> Self {
        self.http = http;
        self
    }

    /// Serves `/openapi.json` with `route` instead of the document generated from this service's routes
    /// (the gateway serves the merged document of its upstreams).
    pub fn openapi_route(mut self, route: MethodRouter) -> Self {
        self.openapi_route = Some(route);
        self
    }

    /// Edits the finished document (after [`crate::openapi::complete`]) with what annotations cannot
    /// say, such as the `links` from a create to the read and delete of what it made.
    pub fn document_edits(mut self, edit: fn(&mut serde_json::Value)) -> Self {
        self.document_edits = Some(edit);
        self
    }

    /// Names the metrics (by prefix, such as `berth_gateway_`) its `/metrics` page serves besides its
    /// own HTTP series.
    pub fn metric_prefixes(mut self, prefixes: &'static [&'static str]) -> Self {
        self.metric_prefixes = prefixes;
        self
    }

    /// The service's OpenAPI document, as `/openapi.json` serves it.
    pub fn openapi(name: &str, mut doc: OpenApi) -> OpenApi {
        doc.info.title = format!("berth {name}");
        doc.info.version = env!("CARGO_PKG_VERSION").to_string();
        // utoipa fills these from its own package metadata when the caller gives none.
        doc.info.contact = None;
        doc.info.license = None;
        doc.info.description = Some(format!(
            "The {name} service of Berth. Every non-2xx answer is application/problem+json (schema Problem), with `code` the MCM machine code."
        ));
        crate::query::document_refusals(&mut doc);
        let components = doc.components.get_or_insert_with(Default::default);
        components.schemas.insert(
            "Problem".to_string(),
            <Problem as utoipa::PartialSchema>::schema(),
        );
        doc
    }

    /// The document `/openapi.json` serves: [`ServiceApp::openapi`], completed with the stack's own
    /// answers ([`crate::openapi::complete`]) and then `edits`.
    pub fn served_document(
        name: &str,
        doc: OpenApi,
        edits: Option<fn(&mut serde_json::Value)>,
    ) -> serde_json::Value {
        let mut doc = serde_json::to_value(Self::openapi(name, doc)).unwrap_or_default();
        crate::openapi::complete(&mut doc);
        if let Some(edit) = edits {
            edit(&mut doc);
        }
        doc
    }

    /// The finished router.
    pub fn into_router(self) -> Router {
        let (api, doc) = self.api.split_for_parts();
        let declared = std::sync::Arc::new(crate::query::DeclaredQuery::from_openapi(&doc));
        let doc = std::sync::Arc::new(Self::served_document(self.name, doc, self.document_edits));
        let readiness = self.readiness;
        let (name, metric_prefixes) = (self.name, self.metric_prefixes);
        let router = api
            .route(
                "/healthz",
                get(|| async { Json(serde_json::json!({"status": "ok"})) }),
            )
            .route(
                "/readyz",
                get(move || {
                    let readiness = readiness.clone();
                    async move { ready(readiness).await }
                }),
            )
            .route(
                "/metrics",
                get(move || async move { metrics_text(name, metric_prefixes) }),
            )
            .route(
                "/openapi.json",
                self.openapi_route
                    .unwrap_or_else(|| get(move || async move { Json(doc.as_ref().clone()) })),
            )
            // Every route, standard ones included, takes only the query parameters it declares.
            .route_layer(axum::middleware::from_fn_with_state(
                declared,
                crate::query::refuse_undeclared,
            ));
        middleware::apply(router, self.name, &self.http)
    }
}

async fn ready(readiness: Readiness) -> Response {
    let failures = readiness.failures().await;
    if failures.is_empty() {
        Json(serde_json::json!({"status": "ready"})).into_response()
    } else {
        ApiError::from_code(
            Code::Unavailable,
            format!("not ready: {}", failures.join("; ")),
        )
        .into_response()
    }
}

fn metrics_text(service: &'static str, prefixes: &'static [&'static str]) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        crate::metrics::render_for(service, prefixes) + &crate::process_metrics::page(service),
    )
        .into_response()
}
