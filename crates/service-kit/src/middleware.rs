//! The one middleware stack, applied by [`crate::app::ServiceApp`] (and by the gateway to its own
//! routes), so every service answers, logs, measures and refuses the same way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use domain::Code;
use http_body_util::BodyExt;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tracing::Instrument;

use crate::config::{HttpConfig, SecretString};
use crate::error::{ApiError, PROBLEM_JSON};
use crate::{metrics, request_id, telemetry};

/// Paths that answer without the internal credential: probes and scrapes.
pub fn is_public_path(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics")
}

/// What the stack needs to know about its service.
struct Settings {
    service: &'static str,
    timeout: Duration,
    internal_token: Option<SecretString>,
}

/// Wraps `router` in the stack, outermost first: request id → trace → metrics → problem+json for bare
/// errors → internal credential → timeout → panic → body limit.
///
/// The first six steps are one middleware function ([`stack`]) rather than six layers: each axum
/// layer boxes and polls its own future on every request, which showed up in the gateway's profile.
pub fn apply(router: Router, service: &'static str, config: &HttpConfig) -> Router {
    let settings = Arc::new(Settings {
        service,
        timeout: config.request_timeout,
        internal_token: config.internal_token.clone(),
    });
    // Layers added later wrap the ones added earlier, so this reads innermost first.
    router
        .layer(DefaultBodyLimit::max(config.body_limit))
        .layer(RequestBodyLimitLayer::new(config.body_limit))
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(from_fn_with_state(settings, stack))
}

/// Request id, trace span, metrics, problem+json, internal credential and timeout, in that order.
async fn stack(
    State(settings): State<Arc<Settings>>,
    mut request: Request,
    next: Next,
) -> Response {
    let (id, id_header) = request_id::take_or_make(&mut request);
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let method = request.method().clone();
    let probe = is_public_path(request.uri().path());
    let span = telemetry::request_span(settings.service, &request, &route, &id);
    let started = Instant::now();
    let answer = async move {
        let response = match refuse_without_internal_token(&settings.internal_token, &request) {
            Some(refusal) => refusal,
            None => match tokio::time::timeout(settings.timeout, next.run(request)).await {
                Ok(response) => response,
                Err(_) => ApiError::from_code(
                    Code::DeadlineExceeded,
                    format!(
                        "the request took longer than the service's limit of {:?}",
                        settings.timeout
                    ),
                )
                .into_response(),
            },
        };
        let response = into_problem(response).await;
        let elapsed = started.elapsed();
        metrics::record(settings.service, &method, &route, &response, elapsed);
        telemetry::log_answer(probe, response.status().as_u16(), elapsed);
        response
    };
    let mut response = request_id::scope(id, answer.instrument(span)).await;
    response
        .headers_mut()
        .insert(request_id::X_REQUEST_ID.clone(), id_header);
    response
}

fn panic_response(_payload: Box<dyn std::any::Any + Send + 'static>) -> Response {
    // The payload may hold anything, secrets included: it is neither logged nor answered.
    tracing::error!("handler panicked");
    ApiError::from_code(
        Code::Internal,
        "internal error: the handler panicked; the request id finds it in the log",
    )
    .into_response()
}

/// The refusal for a call without the internal credential, when one is configured.
fn refuse_without_internal_token(
    token: &Option<SecretString>,
    request: &Request,
) -> Option<Response> {
    let token = token.as_ref()?;
    if is_public_path(request.uri().path()) {
        return None;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        Some(p) if token.ct_eq(p.as_bytes()) => None,
        _ => Some(
            ApiError::from_code(
                Code::Unauthenticated,
                "this service requires the internal credential; call it through the gateway",
            )
            .into_response(),
        ),
    }
}

/// Turns error answers that are not problem+json yet (axum's 404/405, the body limit's 413) into
/// problem+json, keeping their HTTP status.
async fn into_problem(response: Response) -> Response {
    let status = response.status();
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(PROBLEM_JSON.as_bytes()));
    if status.as_u16() < 400 || is_problem {
        return response;
    }
    let code = match status {
        StatusCode::METHOD_NOT_ALLOWED
        | StatusCode::PAYLOAD_TOO_LARGE
        | StatusCode::UNSUPPORTED_MEDIA_TYPE => Code::InvalidArgument,
        StatusCode::REQUEST_TIMEOUT => Code::DeadlineExceeded,
        other => Code::from_http_status(other.as_u16()),
    };
    let detail = if status.is_server_error() {
        "internal error; the request id finds the details in the service's log".to_string()
    } else {
        let body = http_body_util::Limited::new(response.into_body(), 4096)
            .collect()
            .await;
        let text = body
            .map(|b| String::from_utf8_lossy(&b.to_bytes()).trim().to_string())
            .unwrap_or_default();
        match (status, text.is_empty()) {
            (StatusCode::NOT_FOUND, true) => "no route matches this path".to_string(),
            (StatusCode::METHOD_NOT_ALLOWED, true) => {
                "this route does not accept this method".to_string()
            }
            (StatusCode::PAYLOAD_TOO_LARGE, _) => {
                "body: larger than the service's limit".to_string()
            }
            (_, true) => status.canonical_reason().unwrap_or("error").to_string(),
            (_, false) => text,
        }
    };
    ApiError::from_code(code, detail)
        .with_http_status(status)
        .into_response()
}
