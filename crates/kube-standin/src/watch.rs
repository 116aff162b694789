//! A watch of a namespace's claims, streamed as the API server streams one. Apart because it is the
//! one long-lived answer: it follows the cluster's changes long after its handler returned, and its
//! rules (where it starts, when it is 410 Gone, when it ends) are its own.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::claims::labels_of;
use crate::cluster::{Shared, WATCH_LOG, lock};
use crate::faults::authorize;
use crate::routes::ListQuery;
use crate::status::failure;

/// What a watch has still to send, and where it is in the changes.
struct Watching {
    shared: Shared,
    namespace: String,
    selector: domain::Selector,
    /// The newest change already looked at.
    after: u64,
    lines: std::collections::VecDeque<Value>,
    newest: tokio::sync::watch::Receiver<u64>,
    until: tokio::time::Instant,
}

/// A watch of a namespace's claims, as the API server streams one: a JSON event a line, `ADDED` for
/// every matching claim first when no resourceVersion (or `0`) is given, then every change after it
/// until `timeoutSeconds` (default 300). A resourceVersion older than the changes kept is 410 Gone.
pub(crate) fn watch_claims(shared: Shared, namespace: String, query: ListQuery) -> Response {
    let start = {
        let c = lock(&shared);
        if let Err((code, status)) =
            authorize(&c, "watch", "persistentvolumeclaims", &namespace, None)
        {
            return (code, axum::Json(status)).into_response();
        }
        let selector: domain::Selector = match query.label_selector.as_deref().unwrap_or("").parse()
        {
            Ok(s) => s,
            Err(e) => {
                let e: domain::Status = e;
                return failure(StatusCode::BAD_REQUEST, "BadRequest", e.message, None);
            }
        };
        let from: Option<u64> = match query.resource_version.as_deref() {
            None | Some("" | "0") => None,
            Some(v) => match v.parse() {
                Ok(v) => Some(v),
                Err(_) => {
                    return failure(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        format!("resourceVersion {v:?} is not a resource version"),
                        None,
                    );
                }
            },
        };
        let mut lines = std::collections::VecDeque::new();
        let after = match from {
            None => {
                for ((ns, _), claim) in &c.claims {
                    if ns == &namespace && selector.matches(&labels_of(claim)) {
                        lines.push_back(json!({"type": "ADDED", "object": claim}));
                    }
                }
                c.resource_version
            }
            Some(v) => {
                let oldest = c
                    .changes
                    .front()
                    .map_or(c.resource_version, |ch| ch.version);
                if c.changes.len() >= WATCH_LOG && v + 1 < oldest {
                    return failure(
                        StatusCode::GONE,
                        "Expired",
                        format!("too old resource version: {v} ({oldest})"),
                        None,
                    );
                }
                v
            }
        };
        let Some(newest) = c.newest.as_ref().map(|n| n.subscribe()) else {
            return failure(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                "no watch".into(),
                None,
            );
        };
        let seconds = query.timeout_seconds.unwrap_or(300).min(3600);
        Watching {
            shared: shared.clone(),
            namespace,
            selector,
            after,
            lines,
            newest,
            until: tokio::time::Instant::now() + std::time::Duration::from_secs(seconds),
        }
    };
    let stream = futures::stream::unfold(start, |mut w| async move {
        loop {
            if let Some(event) = w.lines.pop_front() {
                let mut line = serde_json::to_vec(&event).unwrap_or_default();
                line.push(b'\n');
                return Some((
                    Ok::<_, std::convert::Infallible>(bytes::Bytes::from(line)),
                    w,
                ));
            }
            {
                let c = lock(&w.shared);
                for change in c.changes.iter().filter(|ch| ch.version > w.after) {
                    if change.namespace == w.namespace
                        && w.selector.matches(&labels_of(&change.object))
                    {
                        w.lines
                            .push_back(json!({"type": change.kind, "object": change.object}));
                    }
                }
                w.after = w.after.max(c.changes.back().map_or(0, |ch| ch.version));
            }
            if !w.lines.is_empty() {
                continue;
            }
            tokio::select! {
                changed = w.newest.changed() => if changed.is_err() { return None; },
                () = tokio::time::sleep_until(w.until) => return None,
            }
        }
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        axum::body::Body::from_stream(stream),
    )
        .into_response()
}
