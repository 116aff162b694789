//! `/docs`: the merged OpenAPI document as a page a person can browse and try operations from. Its
//! three files are compiled into the gateway, so it needs no CDN and works offline; it is not an
//! operation of the API itself, so it is left out of the document.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use utoipa_axum::router::OpenApiRouter;

const INDEX: &str = include_str!("docs/index.html");
const SCRIPT: &str = include_str!("docs/app.js");
const STYLE: &str = include_str!("docs/style.css");

/// The page's routes.
pub(crate) fn routes() -> OpenApiRouter {
    OpenApiRouter::new()
        .route(
            "/docs",
            get(|| async { asset(INDEX, "text/html; charset=utf-8") }),
        )
        .route(
            "/docs/app.js",
            get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/docs/style.css",
            get(|| async { asset(STYLE, "text/css; charset=utf-8") }),
        )
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Only the gateway's own files and calls: a page that handles tokens loads nothing from elsewhere.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}
