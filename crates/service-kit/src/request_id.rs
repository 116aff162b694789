//! `x-request-id`: taken from the caller or generated, echoed on the answer, and carried in a
//! task-local so error bodies, log lines and outgoing calls of the same request all name it.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};

/// The header.
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

tokio::task_local! {
    // Kept as the header value it travels as: every request needs the header, while the text is
    // only wanted for the rare error body or log line, and a clone shares the bytes.
    static REQUEST_ID: HeaderValue;
}

/// The id of the request this task is serving, if any.
pub fn current() -> Option<String> {
    current_header().and_then(|v| v.to_str().ok().map(str::to_string))
}

/// The id of the request this task is serving, as a header value for an outgoing call.
pub fn current_header() -> Option<HeaderValue> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// Runs `fut` as part of the request whose `x-request-id` is `id`.
pub(crate) async fn scope<F: std::future::Future>(id: HeaderValue, fut: F) -> F::Output {
    REQUEST_ID.scope(id, fut).await
}

/// A caller's id is kept only if it is short, printable ASCII: it ends up in logs and headers.
fn acceptable(value: &HeaderValue) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty() && bytes.len() <= 128 && bytes.iter().all(u8::is_ascii_graphic)
}

/// A new id: a random UUID in its 32-digit form, written without the formatting machinery. The
/// digits are owned by one shared allocation, so the clones the request, its answer and its
/// task-local take cost no further one.
fn make() -> HeaderValue {
    let mut text = [0u8; uuid::fmt::Simple::LENGTH];
    uuid::Uuid::new_v4().simple().encode_lower(&mut text);
    HeaderValue::from_maybe_shared(bytes::Bytes::from_owner(text))
        .expect("hex digits are a valid header value")
}

/// Fixes the request's id before anything else runs: the caller's, when acceptable, else a new one.
/// The request's header is set to it; the value is returned for the answer's header and the
/// task-local.
pub(crate) fn take_or_make(request: &mut Request) -> HeaderValue {
    if let Some(value) = request.headers().get(&X_REQUEST_ID)
        && acceptable(value)
    {
        return value.clone();
    }
    let value = make();
    request
        .headers_mut()
        .insert(X_REQUEST_ID.clone(), value.clone());
    value
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
    match current_header() {
        Some(id) => tokio::spawn(REQUEST_ID.scope(id, fut).instrument(span)),
        None => tokio::spawn(fut.instrument(span)),
    }
}
