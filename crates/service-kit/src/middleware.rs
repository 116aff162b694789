//! The one middleware stack, applied by [`crate::app::ServiceApp`] (and by the gateway to its own
//! routes), so every service answers, logs, measures and refuses the same way.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, HttpBody as _};
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
use crate::{metrics, request_id, telemetry, tenancy};

/// The detail of every 413, whichever step noticed the body was too large.
pub const BODY_TOO_LARGE: &str = "body: larger than the service's limit";

/// Paths that answer without the internal credential: probes, scrapes and the service's own OpenAPI
/// document. The document describes routes, not data, and under `berth up` the credential is random
/// and never shown, so without this nobody could read a service's document directly.
pub fn is_public_path(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics" | "/openapi.json")
}

/// The stack's steps for one service: what it is called, how long a request may take, and the
/// internal credential it requires. [`apply`] runs them as an axum middleware; a server that does not
/// go through axum (the gateway's proxy engine) runs them with [`Stack::handle`], so both ways answer,
/// log, measure and refuse alike.
pub struct Stack {
    service: &'static str,
    timeout: Duration,
    body_limit: usize,
    internal_token: Option<SecretString>,
    /// Whether this stack writes the audit line of mutating calls: a service's does; the gateway's
    /// does not, since the service it forwards to writes it, naming the object.
    audits: bool,
}

impl Stack {
    /// The stack of `service` with `config`'s timeout, body limit and internal credential.
    pub fn new(service: &'static str, config: &HttpConfig) -> Arc<Self> {
        Arc::new(Stack {
            service,
            timeout: config.request_timeout,
            body_limit: config.body_limit,
            internal_token: config.internal_token.clone(),
            audits: true,
        })
    }

    /// The stack of a server that forwards its mutating calls to a service, which audits them: the
    /// gateway's.
    pub fn forwarding(service: &'static str, config: &HttpConfig) -> Arc<Self> {
        Arc::new(Stack {
            service,
            timeout: config.request_timeout,
            body_limit: config.body_limit,
            internal_token: config.internal_token.clone(),
            audits: false,
        })
    }

    /// Every step for a request served outside axum: those of [`Stack::run`] but the timeout, plus the
    /// two axum gets from layers, panic catching and the body limit (a declared length over it is
    /// refused at once; a streamed body is cut off where it crosses it). `route` is the template the
    /// request is logged and counted under.
    ///
    /// `inner` must bound its own time. The one server outside axum is the gateway's engine, whose
    /// forwarder gives each upstream its own, shorter limit; a second timer on every call would only
    /// cost (each is registered in and removed from the runtime's timer wheel).
    pub fn handle<'a, F, Fut>(
        &'a self,
        request: Request,
        route: &'a str,
        inner: F,
    ) -> impl Future<Output = Response> + 'a
    where
        F: FnOnce(Request) -> Fut + 'a,
        Fut: Future<Output = Response> + 'a,
    {
        use futures::FutureExt;
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let limit = self.body_limit;
        self.steps(request, route, None, move |request| async move {
            if declared.is_some_and(|n| n > limit as u64) {
                return ApiError::from_code(Code::InvalidArgument, BODY_TOO_LARGE)
                    .with_http_status(StatusCode::PAYLOAD_TOO_LARGE)
                    .into_response();
            }
            // A body already known to be empty (a GET's) needs no counting.
            let request = if request.body().is_end_stream() {
                request
            } else {
                request.map(|body| Body::new(http_body_util::Limited::new(body, limit)))
            };
            match std::panic::AssertUnwindSafe(inner(request))
                .catch_unwind()
                .await
            {
                Ok(response) => response,
                Err(payload) => panic_response(payload),
            }
        })
    }

    /// Request id, trace span, metrics, problem+json, internal credential and timeout, in that order,
    /// around `inner`.
    pub fn run<'a, F, Fut>(
        &'a self,
        request: Request,
        route: &'a str,
        inner: F,
    ) -> impl Future<Output = Response> + 'a
    where
        F: FnOnce(Request) -> Fut + 'a,
        Fut: Future<Output = Response> + 'a,
    {
        self.steps(request, route, Some(self.timeout), inner)
    }

    /// The steps of [`Stack::run`], with the timeout only when `timeout` is given.
    ///
    /// `handle`, `run` and this are plain functions returning the one future that does the work,
    /// not `async fn`s awaiting each other: each such layer would copy the request, and the future
    /// it awaits, once more per call (measured in the gateway's profile as `memmove`).
    fn steps<'a, F, Fut>(
        &'a self,
        mut request: Request,
        route: &'a str,
        timeout: Option<Duration>,
        inner: F,
    ) -> impl Future<Output = Response> + 'a
    where
        F: FnOnce(Request) -> Fut + 'a,
        Fut: Future<Output = Response> + 'a,
    {
        let id = request_id::take_or_make(&mut request);
        let method = request.method().clone();
        let probe = is_public_path(request.uri().path());
        let span = telemetry::request_span(self.service, &request, route, &id);
        let started = Instant::now();
        let audit = if self.audits {
            tenancy::Audit::begin(&mut request, route)
        } else {
            None
        };
        let answer = async move {
            let response = match refuse_without_internal_token(&self.internal_token, &request) {
                Some(refusal) => refusal,
                // Boxed: a future is moved whole at every level that awaits it, so the handler's
                // (kilobytes, with a proxy call in it) would otherwise be copied several times per
                // request. One allocation costs less, as bench/gateway.sh showed.
                None => match timeout {
                    None => Box::pin(inner(request)).await,
                    Some(limit) => {
                        match tokio::time::timeout(limit, Box::pin(inner(request))).await {
                            Ok(response) => response,
                            Err(_) => ApiError::from_code(
                                Code::DeadlineExceeded,
                                format!(
                                    "the request took longer than the service's limit of {limit:?}"
                                ),
                            )
                            .into_response(),
                        }
                    }
                },
            };
            let response = if needs_problem(&response) {
                // Rare, and a large future (it may read the body): kept out of every request's.
                Box::pin(into_problem(response)).await
            } else {
                response
            };
            let elapsed = started.elapsed();
            metrics::record(self.service, &method, route, &response, elapsed);
            telemetry::log_answer(probe, response.status().as_u16(), elapsed);
            if let Some(audit) = audit {
                audit.finish(&method, route, response.status().as_u16());
            }
            response
        };
        // Boxed for the same reason as the handler: the whole stack's state stays in one place
        // instead of being copied into every future that awaits this one.
        let scoped = request_id::scope(id.clone(), Box::pin(answer).instrument(span));
        async move {
            let mut response = scoped.await;
            response
                .headers_mut()
                .insert(request_id::X_REQUEST_ID.clone(), id);
            response
        }
    }
}

/// Wraps `router` in the stack, outermost first: request id → trace → metrics → problem+json for bare
/// errors → internal credential → timeout → panic → body limit.
///
/// The first six steps are one middleware function ([`Stack::run`]) rather than six layers: each
/// axum layer boxes and polls its own future on every request, which showed up in the gateway's
/// profile.
pub fn apply(router: Router, service: &'static str, config: &HttpConfig) -> Router {
    let stack = Stack::new(service, config);
    // Layers added later wrap the ones added earlier, so this reads innermost first.
    router
        .layer(DefaultBodyLimit::max(config.body_limit))
        .layer(RequestBodyLimitLayer::new(config.body_limit))
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(from_fn_with_state(stack, run_in_axum))
}

async fn run_in_axum(State(stack): State<Arc<Stack>>, request: Request, next: Next) -> Response {
    // A clone of the matched path shares its text: no copy of the route per request.
    let matched = request.extensions().get::<MatchedPath>().cloned();
    let route = matched.as_ref().map_or("unmatched", MatchedPath::as_str);
    stack.run(request, route, |request| next.run(request)).await
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
            ApiError::from_code(Code::Unauthenticated, INTERNAL_CREDENTIAL_REQUIRED)
                .into_response(),
        ),
    }
}

/// What a service answers (401) to a call without the internal credential (a wire message: in
/// `domain`, so the CLI can recognise it without linking the kit).
pub use domain::problem::INTERNAL_CREDENTIAL_REQUIRED;

/// Whether `response` is an error answer that is not problem+json yet.
fn needs_problem(response: &Response) -> bool {
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(PROBLEM_JSON.as_bytes()));
    response.status().as_u16() >= 400 && !is_problem
}

/// Turns error answers that are not problem+json yet (axum's 404/405, the body limit's 413) into
/// problem+json, keeping their HTTP status.
async fn into_problem(response: Response) -> Response {
    let status = response.status();
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
            (StatusCode::PAYLOAD_TOO_LARGE, _) => BODY_TOO_LARGE.to_string(),
            (_, true) => status.canonical_reason().unwrap_or("error").to_string(),
            (_, false) => text,
        }
    };
    ApiError::from_code(code, detail)
        .with_http_status(status)
        .into_response()
}
