//! Watch: a list route with `watch=true` answers a stream of newline-delimited JSON events,
//! `{"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK"|"ERROR", "object": …}`, with Kubernetes'
//! semantics.
//!
//! - `resourceVersion=N` streams the changes after N; absent or `0`, every current object comes
//!   first as ADDED. N older than the feed keeps is answered 410 before the stream starts; a
//!   watcher so slow the feed passed it gets an ERROR event with code 410 and the stream ends.
//! - A BOOKMARK carrying the latest version is sent whenever the stream was quiet for the
//!   heartbeat, so proxies keep it open and a client resumes from there.
//! - The stream ends after `timeoutSeconds`, cut to the operator's `BERTH_WATCH_MAX_DURATION`
//!   (30 minutes unless lower); a client watches again from the last version it saw.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use domain::resources::{API_VERSION, Kind};
use domain::{Code, Status};
use serde_json::{Value, json};
use service_kit::ApiError;
use service_kit::tenancy::Caller;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use crate::api::{AppState, labels_of};
use crate::watch::Change;

/// The longest a watch streams, and the default of `BERTH_WATCH_MAX_DURATION`.
pub const MAX_WATCH: Duration = Duration::from_secs(1800);

/// What a watch streams: the kind and namespace, and a selector on labels.
struct Filter {
    kind: Kind,
    namespace: String,
    selector: domain::Selector,
}

impl Filter {
    fn admits(&self, change: &Change) -> bool {
        change.kind == self.kind
            && change.namespace == self.namespace
            && self.selector.matches(&labels_of(&change.object))
    }
}

fn line(event: &str, object: &Value) -> Bytes {
    let mut text = json!({"type": event, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

fn bookmark(kind: Kind, version: u64) -> Bytes {
    line(
        "BOOKMARK",
        &json!({"apiVersion": API_VERSION, "kind": kind.as_str(), "metadata": {"resourceVersion": version.to_string()}}),
    )
}

fn gone(oldest: u64) -> ApiError {
    ApiError::new(Status::new(
        Code::OutOfRange,
        format!("resourceVersion: too old; the oldest a watch can resume from is {oldest}: list again and watch from the list's version"),
    ))
    .with_http_status(StatusCode::GONE)
}

/// Starts a watch of `kind` in `namespace` (see the module's words).
pub async fn watch(
    state: &AppState,
    caller: &Caller,
    kind: Kind,
    namespace: String,
    selector: domain::Selector,
    resource_version: Option<String>,
    timeout_seconds: Option<u64>,
) -> Result<Response, ApiError> {
    let from = match resource_version.as_deref() {
        None | Some("" | "0") => None,
        Some(text) => Some(text.parse::<u64>().map_err(|_| {
            ApiError::new(Status::invalid(
                "resourceVersion",
                "must be a version a list or an event answered (digits)",
            ))
        })?),
    };
    // The list checked timeoutSeconds (1 to 1800); the operator's ceiling cuts it here.
    let limit = timeout_seconds.map_or(state.watch_max, |s| {
        Duration::from_secs(s).min(state.watch_max)
    });
    let permit = state.watches.clone().try_acquire_owned().map_err(|_| {
        ApiError::from_code(
            Code::ResourceExhausted,
            "too many watches are open on the machine controller; retry shortly",
        )
        .with_retry_after(Duration::from_secs(5))
    })?;
    let filter = Filter {
        kind,
        namespace,
        selector,
    };
    let store = &state.writer.store;
    // What a watch without a version starts with: every current object, then what follows.
    let (initial, after) = match from {
        Some(v) => (Vec::new(), v),
        None if caller.allows(&filter.namespace) => {
            let (objects, version) = store.list(kind, Some(&filter.namespace)).await?;
            let added = objects
                .into_iter()
                .filter(|o| filter.selector.matches(&labels_of(&o.body)))
                .map(|o| line("ADDED", &o.body))
                .collect();
            (added, version)
        }
        None => (Vec::new(), 0),
    };
    let subscription = store.feed().subscribe(after).map_err(|g| gone(g.oldest))?;
    // Another namespace's objects are answered as if there were none: the stream stays open and
    // says nothing but bookmarks.
    let visible = caller.allows(&filter.namespace);
    let mut pending: VecDeque<Bytes> = initial.into();
    if visible {
        pending.extend(
            subscription
                .backlog
                .iter()
                .filter(|c| filter.admits(c))
                .map(|c| line(c.event.as_str(), &c.object)),
        );
    }
    let latest = subscription
        .backlog
        .last()
        .map_or(after, |c| c.resource_version);
    let deadline = Instant::now() + limit;
    let state_of_stream = Streaming {
        pending,
        live: subscription.live,
        filter,
        visible,
        latest,
        deadline,
        heartbeat: state.heartbeat,
        done: false,
        _permit: Arc::new(permit),
    };
    let stream = futures::stream::unfold(state_of_stream, |mut s| async move {
        let next = s.next().await?;
        Some((Ok::<_, std::convert::Infallible>(next), s))
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

struct Streaming {
    pending: VecDeque<Bytes>,
    live: tokio::sync::broadcast::Receiver<Arc<Change>>,
    filter: Filter,
    visible: bool,
    latest: u64,
    deadline: Instant,
    heartbeat: Duration,
    done: bool,
    _permit: Arc<tokio::sync::OwnedSemaphorePermit>,
}

impl Streaming {
    async fn next(&mut self) -> Option<Bytes> {
        if let Some(line) = self.pending.pop_front() {
            return Some(line);
        }
        if self.done {
            return None;
        }
        loop {
            let quiet_until = Instant::now() + self.heartbeat;
            tokio::select! {
                received = self.live.recv() => match received {
                    Ok(change) => {
                        self.latest = self.latest.max(change.resource_version);
                        if self.visible && self.filter.admits(&change) {
                            return Some(line(change.event.as_str(), &change.object));
                        }
                    }
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
                    return Some(bookmark(self.filter.kind, self.latest));
                }
            }
        }
    }
}
