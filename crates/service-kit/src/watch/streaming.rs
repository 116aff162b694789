//! The streamed answer to a watch: what was asked for first, then the live changes, a BOOKMARK
//! whenever the stream is quiet, an ERROR to a watcher the feed outran, and the end at the deadline
//! or the server's drain. Apart because it is the one part that runs for as long as a watch is
//! open.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{OwnedSemaphorePermit, broadcast};
use tokio::time::Instant;

use super::{Change, Filter, Started, WatchLimits};

/// Cancelled when the server a request came in by starts to drain (the kit's server puts it in
/// every request's extensions): a watch then ends, as Kubernetes' API server ends its watches at
/// shutdown, and its client watches again.
#[derive(Debug, Clone, Default)]
pub struct Draining(pub tokio_util::sync::CancellationToken);

/// A handler takes the drain of the server its request came in by (one never cancelled when it
/// came in by another: a test's router called directly).
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Draining {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<Draining>()
            .cloned()
            .unwrap_or_default())
    }
}

/// What a watch streams, as its service decided it.
pub struct Watch<K> {
    /// The drain of the server the request came in by.
    pub draining: Draining,
    /// Where it starts.
    pub started: Started<K>,
    /// The scope it follows: the versions its BOOKMARKs carry are this scope's.
    pub scope: String,
    /// Which changes of the scope belong in this stream (its kinds and labels).
    pub filter: Filter<K>,
    /// The kind its BOOKMARKs name.
    pub kind: &'static str,
    /// How long it streams (`timeoutSeconds`, already checked).
    pub timeout_seconds: Option<u64>,
}

fn line(event: &str, object: &Value) -> Bytes {
    let mut text = json!({"type": event, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

/// The streamed answer to `watch`, holding `permit` for as long as it streams.
pub fn stream<K: Send + Sync + 'static>(
    watch: Watch<K>,
    limits: &WatchLimits,
    permit: OwnedSemaphorePermit,
) -> Response {
    let Watch {
        draining,
        started:
            Started {
                subscription,
                after,
                initial,
                visible,
            },
        scope,
        filter,
        kind,
        timeout_seconds,
    } = watch;
    let limit = timeout_seconds.map_or(limits.max_duration, |s| {
        Duration::from_secs(s).min(limits.max_duration)
    });
    let mut pending: VecDeque<Bytes> = if visible {
        initial.iter().map(|o| line("ADDED", o)).collect()
    } else {
        VecDeque::new()
    };
    if visible {
        pending.extend(
            subscription
                .backlog
                .iter()
                .filter(|c| c.scope == scope)
                .filter_map(|c| Some(line(filter.event(c)?, &c.object))),
        );
    }
    let latest = match subscription.backlog.last() {
        Some(c) if visible => c.resource_version,
        _ => after,
    };
    let streaming = Streaming {
        pending,
        live: subscription.live,
        scope,
        filter,
        visible,
        kind,
        latest,
        deadline: Instant::now() + limit,
        heartbeat: limits.heartbeat,
        last_sent: Instant::now(),
        draining: Box::pin(draining.0.cancelled_owned()),
        done: false,
        _permit: permit,
    };
    let body = futures::stream::unfold(streaming, |mut s| async move {
        let next = s.next().await?;
        Some((Ok::<_, std::convert::Infallible>(next), s))
    });
    (
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

struct Streaming<K> {
    pending: VecDeque<Bytes>,
    live: broadcast::Receiver<Arc<Change<K>>>,
    scope: String,
    filter: Filter<K>,
    visible: bool,
    kind: &'static str,
    latest: u64,
    deadline: Instant,
    heartbeat: Duration,
    /// When the stream last sent a line: a BOOKMARK follows a heartbeat of its own silence, never
    /// of the feed's (other scopes' changes must not tell a watcher when they happen).
    last_sent: Instant,
    draining: std::pin::Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    done: bool,
    _permit: OwnedSemaphorePermit,
}

impl<K> Streaming<K> {
    async fn next(&mut self) -> Option<Bytes> {
        let next = self.next_line().await;
        self.last_sent = Instant::now();
        next
    }

    async fn next_line(&mut self) -> Option<Bytes> {
        if let Some(line) = self.pending.pop_front() {
            return Some(line);
        }
        if self.done {
            return None;
        }
        loop {
            let quiet_until = self.last_sent + self.heartbeat;
            tokio::select! {
                () = self.draining.as_mut() => return None,
                received = self.live.recv() => match received {
                    // Another scope's versions are another sequence (and another tenant's), and a
                    // scope the caller may not see tells it nothing, its versions neither.
                    Ok(change) if self.visible && change.scope == self.scope => {
                        self.latest = self.latest.max(change.resource_version);
                        if let Some(event) = self.filter.event(&change) {
                            return Some(line(event, &change.object));
                        }
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => {
                        // Kubernetes' answer to a watcher the feed outran: an ERROR event, then
                        // the end; the client lists again.
                        self.done = true;
                        return Some(line("ERROR", &json!({
                            "apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 410,
                            "reason": "Expired",
                            "message": "the watch fell too far behind the changes; list again and watch from the list's version",
                        })));
                    }
                    Err(RecvError::Closed) => return None,
                },
                () = tokio::time::sleep_until(quiet_until.min(self.deadline)) => {
                    if Instant::now() >= self.deadline {
                        return None;
                    }
                    return Some(line("BOOKMARK", &json!({
                        "apiVersion": domain::resources::API_VERSION,
                        "kind": self.kind,
                        "metadata": {"resourceVersion": self.latest.to_string()},
                    })));
                }
            }
        }
    }
}
