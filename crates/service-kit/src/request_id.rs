//! `x-request-id`: taken from the caller or generated, echoed on the answer, and carried in a
//! task-local so error bodies, log lines and outgoing calls of the same request all name it.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};

/// The header.
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

tokio::task_local! {
    static REQUEST_ID: String;
}

/// The id of the request this task is serving, if any.
pub fn current() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// Runs `fut` as part of the request `id` (for work spawned off a request).
pub async fn scope<F: std::future::Future>(id: String, fut: F) -> F::Output {
    REQUEST_ID.scope(id, fut).await
}

/// A caller's id is kept only if it is short, printable ASCII: it ends up in logs and headers.
fn acceptable(value: &HeaderValue) -> Option<String> {
    let s = value.to_str().ok()?;
    (!s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_graphic()))
        .then(|| s.to_string())
}

/// Fixes the request's id before anything else runs: the caller's, when acceptable, else a new one.
/// The request's header is set to it; the value is returned for the answer's header.
pub(crate) fn take_or_make(request: &mut Request) -> (String, HeaderValue) {
    let id = request
        .headers()
        .get(&X_REQUEST_ID)
        .and_then(acceptable)
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    let value = HeaderValue::from_str(&id).expect("request ids are printable ASCII");
    request
        .headers_mut()
        .insert(X_REQUEST_ID.clone(), value.clone());
    (id, value)
}

/// Spawns `fut` as part of the current request: it keeps the request's id (for logs, errors and
/// outgoing calls) and runs inside the current span (so its outgoing calls continue the same trace).
/// Use it for work that must finish even if the caller goes away, such as a create that has reached
/// its backend.
pub fn spawn_in_request<F>(fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    use tracing::Instrument;
    let span = tracing::Span::current();
    match current() {
        Some(id) => tokio::spawn(REQUEST_ID.scope(id, fut).instrument(span)),
        None => tokio::spawn(fut.instrument(span)),
    }
}
